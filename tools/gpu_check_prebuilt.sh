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
# time from LD_LIBRARY_PATH, the toolkit's lib64 or the system.
#
# GPU_CHECK_GROUPS (comma separated; default all) picks what runs:
#   parity       the tiny models' greedy ids on cuda (with and without CUDA graphs, quantized
#                weights, products without cuBLASLt)
#   mesh         the same split over --devices=2 and 4 (the GPU presented as several, collectives
#                through host memory; on a machine with several GPUs, also over two of them
#                through NCCL), over 2 processes where mpirun is there, and the unit tests of
#                CUDA meshes
#   opencl       the same on the GPU's OpenCL driver (NVIDIA's offers one)
#   mnist, conformance
#   ops          the op harness and CUDA tests (cuda alone, then with OpenCL beside)
#   limits       prism-bench dot and elementwise against the nominal limits
#   bench        prism-bench llm-shapes (the CPU beside) and decode-batch
#   profile      llm-shapes under PRISM_CUDA_PROFILE=1, with cuBLASLt and without
#   torch        bench/llm_shapes_torch.py, PyTorch on the same shapes, where python3 has torch
#                with CUDA (GPU_CHECK_TORCH_ARGS: its arguments, default --compile)
#   smi          `prism smi` on NVML while a `prism llm` runs
#   pjrt         the tiny models on jax's CUDA plugin, from the Python environment
#                PRISM_GPU_PYTHON_ENV (default: the one python3 runs in)
set -u
bin=$(cd "${1:?usage: gpu_check_prebuilt.sh BIN_DIR [DATA_DIR] [LOG]}" && pwd)
data=$(cd "${2:-$(dirname "$0")/..}" && pwd)
log=${3:-gpu_check.log}
groups=",${GPU_CHECK_GROUPS:-parity,mesh,opencl,mnist,conformance,ops,limits,bench,profile,torch,smi,pjrt},"
want() { [[ "$groups" == *",$1,"* ]]; }
plain_library_path=${LD_LIBRARY_PATH:-}  # for python3, which brings its own libraries
for lib in "$bin/lib" "$bin/../lib" "${CUDA_HOME:-/usr/local/cuda}/lib64"; do
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

# The tiny Llama, Qwen 3.5 and LFM 2 checkpoints: greedy ids on cuda equal the reference
# implementation's (reference.json: prompt and ids), with CUDA graphs and without. Llama's and
# LFM 2's 24 ids hold in f32 (in bf16 the unit tests check the first 12), Qwen 3.5's in bf16.
ids_of() { sed -n "s/.*\"$2\": *\[\([^]]*\)\].*/\1/p" <(tr -d '\n ' <"$1/reference.json"); }
dtype_of() { [[ "$1" == */qwen3_5/* ]] && echo --dtype=auto || echo --dtype=f32; }
tiny=()
for dir in "$data"/tests/data/{llama,qwen3_5,lfm2}/tiny-*; do [[ -f "$dir/reference.json" ]] && tiny+=("$dir"); done
if want parity; then
  for dir in "${tiny[@]}"; do
    want=$(ids_of "$dir" greedy_ids | tr ',' ' ')
    run=("$bin/prism" llm --model="$dir" --prompt-ids="$(ids_of "$dir" prompt_ids)" --max-tokens=24
      --print-ids --seqlen=64 "$(dtype_of "$dir")" --platform=cuda)
    name="$(basename "$(dirname "$dir")") $(basename "$dir")"
    parity "$name greedy ids" "$want" "${run[@]}"
    parity "$name greedy ids, no graphs" "$want" env PRISM_CUDA_GRAPHS=0 "${run[@]}"
  done
  # Quantized weights kept on the GPU (the kernel IR's dequantize, and products of few rows
  # that read the blocks): the tiny Llama quantized at load gives the CPU's greedy ids, the
  # CPU's products in f32 as the GPU's are.
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
  dir="$data/tests/data/llama/tiny-f32"
  if [[ -f "$dir/reference.json" ]]; then
    parity "llama tiny-f32 greedy ids, no cuBLASLt" "$(ids_of "$dir" greedy_ids | tr ',' ' ')" \
      env PRISM_CUDA_CUBLASLT=0 "$bin/prism" llm --model="$dir" \
      --prompt-ids=128000,791,6864,315,9822,374 --max-tokens=24 --print-ids --seqlen=64 --platform=cuda
  fi
fi

# Tensor parallel on cuda: the reference's greedy ids with the model split over devices.
if want mesh; then
  gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
  for dir in "${tiny[@]}"; do
    want=$(ids_of "$dir" greedy_ids | tr ',' ' ')
    run=("$bin/prism" llm --model="$dir" --prompt-ids="$(ids_of "$dir" prompt_ids)" --max-tokens=24
      --print-ids --seqlen=64 "$(dtype_of "$dir")" --platform=cuda)
    name="$(basename "$(dirname "$dir")") $(basename "$dir")"
    for n in 2 4; do
      parity "$name --devices=$n, one GPU as $n" "$want" env PRISM_CUDA_DEVICES=$n "${run[@]}" --devices=$n
    done
    if ((gpus >= 2)); then parity "$name --devices=2, NCCL" "$want" "${run[@]}" --devices=2; fi
    # Over the processes of a run (docs/cluster.md), where the machine has Open MPI: a GPU
    # each through NCCL where it has two, both on GPU 0 through MPI where it has one.
    if command -v mpirun >/dev/null; then
      mpi=(mpirun -n 2 --oversubscribe)
      ((EUID == 0)) && mpi+=(--allow-run-as-root)
      parity "$name over 2 processes ($( ((gpus >= 2)) && echo NCCL || echo MPI))" "$want" \
        "${mpi[@]}" "${run[@]}"
    fi
  done
  step "cuda mesh unit tests" 300 "$bin/prism-unit-tests" \
    --gtest_filter='TensorParallel.Cuda*:Partition.*:CudaMesh.*' --gtest_brief=1
fi

# The same on prism's OpenCL backend, where the GPU's driver offers OpenCL (NVIDIA's does).
if want opencl; then
  for dir in "${tiny[@]}"; do
    parity "opencl $(basename "$(dirname "$dir")") $(basename "$dir") greedy ids" \
      "$(ids_of "$dir" greedy_ids | tr ',' ' ')" "$bin/prism" llm --model="$dir" \
      --prompt-ids="$(ids_of "$dir" prompt_ids)" --max-tokens=24 --print-ids --seqlen=64 \
      "$(dtype_of "$dir")" --platform=opencl
  done
fi

# MNIST: the same accuracy on cuda as on the CPU.
if want mnist; then
  mnist=(--eval --weights="$data/models/mnist/mlp.safetensors"
    --images="$data/models/mnist/test-images-idx3-ubyte" --labels="$data/models/mnist/test-labels-idx1-ubyte")
  for model in mlp cnn; do
    mnist[1]="--weights=$data/models/mnist/$model.safetensors"
    want=$(timeout 120 "$bin/prism" mnist --model=$model "${mnist[@]}" --platform=cpu 2>/dev/null | grep '^accuracy')
    parity "mnist $model accuracy cuda = cpu" "$want" \
      bash -c '"$@" | grep "^accuracy"' _ "$bin/prism" mnist --model=$model "${mnist[@]}" --platform=cuda
  done
fi

# ONNX conformance on cuda, where the runner can choose a platform.
if ! want conformance; then
  :
elif [[ -x "$bin/prism-conformance" ]] && "$bin/prism-conformance" --help 2>&1 | grep -q -- --platform; then
  step "onnx conformance (cuda)" 300 "$bin/prism-conformance" --platform=cuda
else
  names+=("onnx conformance (cuda)") results+=("skipped (no prism-conformance --platform)") seconds+=(0)
fi

# prism smi reads the GPU through NVML, with a running `prism llm` beside it.
if want smi && [[ ${#tiny[@]} -gt 0 ]]; then
  step "prism smi (NVML) beside prism llm" 60 bash -c '
    PRISM_CUDA_GRAPHS=0 "$0" llm --model="$1" --prompt-ids=1,2,3 --max-tokens=1990 --seqlen=2000 \
      --platform=cuda >/dev/null 2>&1 & pid=$!
    sleep 3
    "$0" smi && "$0" smi --json | head -c 3000; echo
    "$0" smi --json | grep -q "\"source\":\"nvml\""; rc=$?
    kill $pid 2>/dev/null; wait $pid 2>/dev/null; exit $rc' "$bin/prism" "${tiny[0]}"
fi

# The tiny models on jax's CUDA PJRT plugin (prism's xla-cuda platform).
if want pjrt; then
  env_dir=${PRISM_GPU_PYTHON_ENV:-$(python3 -c 'import sys; print(sys.prefix)' 2>/dev/null)}
  step "prism info: xla-cuda" 60 env VIRTUAL_ENV="$env_dir" bash -c \
    '"$0" info; "$0" info | grep -q "^  xla-cuda *available"' "$bin/prism"
  for dir in "${tiny[@]}"; do
    parity "xla-cuda $(basename "$(dirname "$dir")") $(basename "$dir") greedy ids" \
      "$(ids_of "$dir" greedy_ids | tr ',' ' ')" env VIRTUAL_ENV="$env_dir" "$bin/prism" llm \
      --model="$dir" --prompt-ids="$(ids_of "$dir" prompt_ids)" --max-tokens=24 --print-ids \
      --seqlen=64 "$(dtype_of "$dir")" --platform=xla-cuda
  done
fi

# Benchmarks: matrix products and elementwise loops against the device's nominal limits,
# Llama 3.2 1B-shaped steps against the limits measured in the same run, and PyTorch on the
# same shapes and GPU.
if want limits; then
  step "bench dot (cuda)" 180 "$bin/prism-bench" --platform=cuda dot
  step "bench elementwise (cuda)" 120 "$bin/prism-bench" --platform=cuda elementwise
fi
if want bench; then
  step "bench llm-shapes (cuda)" 240 "$bin/prism-bench" --platform=cuda llm-shapes
  step "bench decode-batch (cuda)" 120 "$bin/prism-bench" --platform=cuda decode-batch
fi
if want profile; then
  step "llm-shapes device profile (cuda)" 240 env PRISM_CUDA_PROFILE=1 "$bin/prism-bench" \
    --platform=cuda llm-shapes --beside=0
  step "llm-shapes device profile, products in our kernels" 240 env PRISM_CUDA_PROFILE=1 \
    PRISM_CUDA_CUBLASLT=0 "$bin/prism-bench" --platform=cuda llm-shapes --beside=0
fi
if want torch; then
  if LD_LIBRARY_PATH=$plain_library_path python3 -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null; then
    step "pytorch on llm-shapes (eager, compiled)" 300 env LD_LIBRARY_PATH="$plain_library_path" \
      PYTHONUNBUFFERED=1 python3 "$data/bench/llm_shapes_torch.py" ${GPU_CHECK_TORCH_ARGS---compile}
  else
    names+=("pytorch on llm-shapes") results+=("skipped (no torch with CUDA)") seconds+=(0)
  fi
fi

# Last, as the longest: the unit tests. The op harness compares every available platform
# (cuda here) with the CPU, and the CUDA codegen tests compile every kernel with NVRTC.
# OCL_ICD_VENDORS pointing nowhere hides the OpenCL drivers from the first two (CUDA alone);
# the last compares OpenCL on the GPU too.
ops=(--gtest_filter='Ops.*:Ops/BackendOp.*:Composites.*:EmptyTensor.*:Cuda*:AllDTypes/*')
if want ops; then
  step "op harness + cuda tests" 300 env OCL_ICD_VENDORS=/nonexistent "$bin/prism-unit-tests" \
    "${ops[@]}" --gtest_brief=1
  step "op harness: products in our kernels" 120 env OCL_ICD_VENDORS=/nonexistent \
    PRISM_CUDA_CUBLASLT=0 "$bin/prism-unit-tests" --gtest_filter='Ops/BackendOp.*dot*:Ops.*Dot*' \
    --gtest_brief=1
  step "op harness, opencl beside cuda" 300 "$bin/prism-unit-tests" "${ops[@]}"
fi

{
  echo
  echo "=== summary"
  printf '%-44s %-46s %6s\n' "check" "result" "s"
  for i in "${!names[@]}"; do printf '%-44s %-46s %6s\n' "${names[$i]}" "${results[$i]}" "${seconds[$i]}"; done
} | tee -a "$log"
for r in "${results[@]}"; do [[ "$r" == ok || "$r" == skipped* ]] || exit 1; done
exit 0
