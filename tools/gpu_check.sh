#!/usr/bin/env bash
# Everything CUDA on a machine with an NVIDIA GPU and the build's dependencies (scripts/setup.sh
# and the CUDA toolkit's headers): builds with -DPRISM_WITH_CUDA=ON, then runs
# tools/gpu_check_prebuilt.sh on the result (op harness, MNIST and tiny-Llama parity, ONNX
# conformance where the runner takes --platform, benchmarks). About 8 minutes on 16 cores.
#
#   tools/gpu_check.sh [BUILD_DIR] [LOG]
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build-cuda}
log=${2:-gpu_check.log}
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DPRISM_WITH_CUDA=ON || exit 1
cmake --build "$build" -j"$(nproc)" --target prism_cli prism-unit-tests prism-bench prism-conformance || exit 1
exec "$root/tools/gpu_check_prebuilt.sh" "$build/bin" "$root" "$log"
