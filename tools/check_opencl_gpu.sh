#!/usr/bin/env bash
# Checks the OpenCL backend on a machine with a GPU and its vendor's OpenCL driver (NVIDIA,
# AMD or Intel): the platform is found and chosen by `auto`, the ONNX node tests and the op,
# MNIST and Llama parity tests pass on it, and the dot/elementwise benchmarks run.
#   tools/check_opencl_gpu.sh [BUILD_DIR]      (default: build)
set -u
build="${1:-build}"
fail=0
step() { echo "== $*"; "$@" || { echo "FAILED: $*"; fail=1; }; }

step "$build/bin/prism" info
"$build/bin/prism" info | grep -q '^  opencl   available' || { echo "FAILED: opencl unavailable"; exit 1; }
# auto must pick a GPU platform here (opencl, or cuda when that is built too).
step bash -c "\"$build/bin/prism\" mnist --index=3 --platform=auto | grep -E 'on (opencl|cuda)'"
step "$build/bin/prism-conformance" --platform=opencl --min-passed=852
PRISM_EXPECT_PLATFORMS=opencl step "$build/bin/prism-unit-tests" \
  --gtest_filter='Ops*:Composites*:Mnist.SamePredictionsOnEveryPlatform:Llama.SameGreedy*'
step "$build/bin/prism-bench" --platform=opencl dot elementwise
exit $fail
