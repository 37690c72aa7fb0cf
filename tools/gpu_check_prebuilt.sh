#!/usr/bin/env bash
# The CUDA checks for binaries built elsewhere, on a machine with an NVIDIA GPU and its driver
# (no toolkit, no network needed):
#
#   tools/gpu_check_prebuilt.sh BIN_DIR [DATA_DIR] [LOG]
#
# BIN_DIR holds prism, prism-unit-tests, prism-bench (and prism-conformance if present), with
# the shared libraries they need in BIN_DIR/lib or BIN_DIR/../lib (put on LD_LIBRARY_PATH).
# DATA_DIR is a checkout of the repository, or a copy of its models/mnist and tests/data/llama
# folders (default: this script's checkout). Every step runs under its own timeout and the
# script goes on after a failure; the log (default gpu_check.log) ends with a summary table.
# The whole run takes a few minutes on one GPU.
#
# tools/gpu_bundle.sh BUILD_DIR OUT_DIR packs the binaries, their libraries and the data for
# this script. Libraries a machine without the build's packages lacks (Debian 12 build):
# libdnnl.so.2 (with libOpenCL.so.1, libgomp.so.1), libfmt.so.9, libutf8proc.so.2,
# libpcre2-8.so.0, libcurl.so.4 with its dependencies (nghttp2, idn2, rtmp, ssh2, psl, krb5,
# ldap, brotli, zstd, gnutls...), libssl.so.3/libcrypto.so.3; Highway is linked statically.
# `ldd BIN_DIR/prism | grep "not found"` lists what is missing. CUDA itself needs only the
# driver (libcuda.so.1); NVRTC (libnvrtc.so.13 with libnvrtc-builtins.so.13.0) and cuBLASLt
# (libcublasLt.so.13, optional: without it products run in our kernels) are loaded at run
# time from LD_LIBRARY_PATH or the system.
set -u
bin=$(cd "${1:?usage: gpu_check_prebuilt.sh BIN_DIR [DATA_DIR] [LOG]}" && pwd)
data=$(cd "${2:-$(dirname "$0")/..}" && pwd)
log=${3:-gpu_check.log}
for lib in "$bin/lib" "$bin/../lib"; do
  [[ -d "$lib" ]] && export LD_LIBRARY_PATH="$(cd "$lib" && pwd)${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
done
: >"$log"
names=() results=() seconds=()

# step NAME TIMEOUT_S COMMAND...: runs it, logs its output, records ok / FAIL (rc) / TIMEOUT.
step() {
  local name=$1 limit=$2
  shift 2
  echo "=== $name: $*" | tee -a "$log"
  local start=$SECONDS
  timeout --kill-after=10 "$limit" "$@" >>"$log" 2>&1
  local rc=$?
  local result="ok"
  if [[ $rc == 124 || $rc == 137 ]]; then result="TIMEOUT (${limit}s)"; elif [[ $rc != 0 ]]; then result="FAIL (rc $rc)"; fi
  names+=("$name") results+=("$result") seconds+=($((SECONDS - start)))
  echo "--- $name: $result in $((SECONDS - start)) s" | tee -a "$log"
}

# parity NAME EXPECTED COMMAND...: the command's stdout must equal EXPECTED.
parity() {
  local name=$1 want=$2
  shift 2
  step "$name" 120 bash -c 'got=$("$@"); echo "expected: $0"; echo "got:      $got"; [[ "$got" == "$0" ]]' "$want" "$@"
}

step "nvidia-smi" 30 nvidia-smi
step "missing libraries" 10 bash -c "! ldd '$bin/prism' '$bin/prism-unit-tests' '$bin/prism-bench' | grep 'not found'"
step "prism info" 60 bash -c "'$bin/prism' info && '$bin/prism' info | grep -q '^  cuda     available'"

# MNIST: the same accuracy on cuda as on the CPU.
mnist=(--eval --weights="$data/models/mnist/mlp.safetensors"
  --images="$data/models/mnist/test-images-idx3-ubyte" --labels="$data/models/mnist/test-labels-idx1-ubyte")
for model in mlp cnn; do
  mnist[1]="--weights=$data/models/mnist/$model.safetensors"
  want=$(timeout 120 "$bin/prism" mnist --model=$model "${mnist[@]}" --platform=cpu 2>/dev/null | grep '^accuracy')
  parity "mnist $model accuracy cuda = cpu" "$want" \
    bash -c '"$@" | grep "^accuracy"' _ "$bin/prism" mnist --model=$model "${mnist[@]}" --platform=cuda
done

# Tiny Llama: greedy ids on cuda equal the reference implementation's.
for dir in "$data"/tests/data/llama/tiny-*; do
  [[ -f "$dir/reference.json" ]] || continue
  want=$(sed -n 's/.*"greedy_ids": *\[\([^]]*\)\].*/\1/p' <(tr -d '\n ' <"$dir/reference.json") | tr ',' ' ')
  parity "llama $(basename "$dir") greedy ids" "$want" "$bin/prism" llm --model="$dir" \
    --prompt-ids=128000,791,6864,315,9822,374 --max-tokens=24 --print-ids --seqlen=64 --platform=cuda
  parity "llama $(basename "$dir") greedy ids, no graphs" "$want" env PRISM_CUDA_GRAPHS=0 \
    "$bin/prism" llm --model="$dir" --prompt-ids=128000,791,6864,315,9822,374 --max-tokens=24 \
    --print-ids --seqlen=64 --platform=cuda
done

# Quantized weights kept on the GPU (the kernel IR's dequantize, and products of few rows that
# read the blocks): the tiny Llama quantized at load gives the CPU's greedy ids, the CPU's
# products in f32 as the GPU's are.
dir="$data/tests/data/llama/tiny-bf16-tied"
if [[ -d "$dir" ]]; then
  for type in q8_0 q4_0; do
    ids=(--model="$dir" --prompt-ids=128000,791,6864,315,9822,374 --max-tokens=24 --print-ids
      --seqlen=64 --dtype=f32 --quantize=$type)
    want=$(PRISM_CPU_QUANT_ACTIVATIONS=f32 timeout 120 "$bin/prism" llm "${ids[@]}" --platform=cpu 2>/dev/null)
    parity "llama tiny-bf16-tied $type kept on cuda" "$want" "$bin/prism" llm "${ids[@]}" \
      --platform=cuda
  done
fi

# The same with matrix products in our kernels instead of cuBLASLt.
if [[ -f "$data/tests/data/llama/tiny-f32/reference.json" ]]; then
  dir="$data/tests/data/llama/tiny-f32"
  want=$(sed -n 's/.*"greedy_ids": *\[\([^]]*\)\].*/\1/p' <(tr -d '\n ' <"$dir/reference.json") | tr ',' ' ')
  parity "llama tiny-f32 greedy ids, no cuBLASLt" "$want" env PRISM_CUDA_CUBLASLT=0 \
    "$bin/prism" llm --model="$dir" --prompt-ids=128000,791,6864,315,9822,374 --max-tokens=24 \
    --print-ids --seqlen=64 --platform=cuda
fi

# ONNX conformance on cuda, where the runner can choose a platform.
if [[ -x "$bin/prism-conformance" ]] && "$bin/prism-conformance" --help 2>&1 | grep -q -- --platform; then
  step "onnx conformance (cuda)" 300 "$bin/prism-conformance" --platform=cuda
else
  names+=("onnx conformance (cuda)") results+=("skipped (no --platform in prism-conformance)") seconds+=(0)
fi

# Benchmarks: matrix products and elementwise loops against the device's nominal limits, and
# Llama 3.2 1B-shaped decode.
step "bench dot (cuda)" 180 "$bin/prism-bench" --platform=cuda dot
step "bench elementwise (cuda)" 120 "$bin/prism-bench" --platform=cuda elementwise
step "bench llm-shapes (cuda)" 240 "$bin/prism-bench" --platform=cuda llm-shapes

# Last, as the longest: the unit tests. The op harness compares every available platform
# (cuda here) with the CPU, and the CUDA codegen tests compile every kernel with NVRTC.
step "op harness + cuda tests" 300 "$bin/prism-unit-tests" \
  --gtest_filter='Ops.*:Ops/BackendOp.*:Composites.*:EmptyTensor.*:Cuda*:AllDTypes/*' \
  --gtest_brief=1

{
  echo
  echo "=== summary"
  printf '%-44s %-46s %6s\n' "check" "result" "s"
  for i in "${!names[@]}"; do printf '%-44s %-46s %6s\n' "${names[$i]}" "${results[$i]}" "${seconds[$i]}"; done
} | tee -a "$log"
for r in "${results[@]}"; do [[ "$r" == ok || "$r" == skipped* ]] || exit 1; done
exit 0
