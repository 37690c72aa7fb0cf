#!/usr/bin/env bash
# Installs everything prism's build, tests, tools and benchmarks need on Debian 12, from
# Debian's packages and PyPI only. Idempotent: installs only what is missing or out of date.
# Run as root (or with sudo available).
#   scripts/setup.sh          Debian packages + the tests' Python packages (an S3 server)
#   scripts/setup.sh --tools  also what tools/ needs to remake fixtures and references
#                             (PyTorch, transformers, Hugging Face tokenizers)
#   scripts/setup.sh --bench  also the peers `prism-bench` compares with: llama.cpp, built
#                             from the source in llama-cpp-python's source distribution, and
#                             PyTorch and Hugging Face tokenizers (both options may be given)
# Python packages go into a virtual environment of the project's own, .venv/ (ignored by git),
# each purpose from its pinned requirements file in scripts/requirements/.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

packages=(
  # toolchain
  g++ cmake ninja-build pkg-config clang-format make
  # the fuzz targets (make fuzz-smoke): clang with libFuzzer and the sanitizers' runtimes
  clang-15
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
    # prism serve: the HTTP server, and a headless browser for the test of its chat page
  libcpp-httplib-dev chromium
  # the test of prism smi's live view runs it in a terminal multiplexer
  tmux
  # prism smi's vendor sources, built against the vendors' headers (AMD's ROCm SMI, Intel's
  # Level Zero)
  librocm-smi-dev libze-dev
  # runs of several processes (docs/cluster.md): Open MPI's mpirun and library (loaded at run
  # time; nothing is built against it)
  openmpi-bin libopenmpi3
  # op conformance data (ONNX node tests)
  libonnx-testdata
  # tests of tools/ scripts, and the project's virtual environment
  python3 python3-venv python3-dev xz-utils
)
purposes=(tests)
for arg in "$@"; do
  case "$arg" in
    --tools) purposes+=(tools) ;;
    --bench) purposes+=(bench) ;;
    *) echo "setup: unknown option '$arg' (use --tools and/or --bench)" >&2 && exit 2 ;;
  esac
done

sudo_cmd=()
if [[ $(id -u) -ne 0 ]]; then sudo_cmd=(sudo); fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  "${sudo_cmd[@]}" apt-get update -qq
  "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# The virtual environment: made with the machine's python3, each requirements file installed
# once and again only when it changes (a stamp keeps its checksum).
venv="$here/.venv"
if [[ ! -x "$venv/bin/python" ]]; then
  echo "setup: making the virtual environment .venv"
  python3 -m venv "$venv"
fi
for purpose in "${purposes[@]}"; do
  req="$here/scripts/requirements/$purpose.txt"
  stamp="$venv/.installed-$purpose"
  sum="$(sha256sum "$req" | cut -d' ' -f1)"
  if [[ ! -f "$stamp" || "$(cat "$stamp")" != "$sum" ]]; then
    echo "setup: installing the Python packages for $purpose into .venv"
    "$venv/bin/python" -m pip install -q --disable-pip-version-check --no-input -r "$req"
    echo "$sum" >"$stamp"
  fi
done

if [[ " ${purposes[*]} " == *" bench "* ]]; then
  bash "$here/scripts/build_llamacpp.sh"
fi
