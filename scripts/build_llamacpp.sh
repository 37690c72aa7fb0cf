#!/usr/bin/env bash
# Builds llama.cpp, the peer that `prism-bench llm` compares with, from the source carried by
# llama-cpp-python's source distribution on PyPI (vendor/llama.cpp), pinned below by version and
# checksum. CPU only, Release, tuned for this machine (GGML_NATIVE), shared libraries. Installs
# into third_party/llama.cpp/ (ignored by git):
#   bin/   llama-bench, llama-cli, llama-server, llama-quantize, and llamacpp-peer (the
#          benchmark's side, bench/llamacpp_peer.cpp, compiled against llama.h)
#   lib/   libllama, libggml* and the tools' own libraries
#   include/  llama.h and ggml's headers
# Idempotent: a stamp records what was built (version, options, CPU); a second run with the same
# rebuilds only the peer, and that only when its source changed. scripts/setup.sh --bench runs
# it after installing scripts/requirements/bench.txt into .venv (pip downloads the source).
#   scripts/build_llamacpp.sh            LLAMACPP_JOBS=N sets the parallel jobs (default 2)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
version=0.3.36
sdist="llama_cpp_python-$version.tar.gz"
sdist_sha256=832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e
out="$here/third_party/llama.cpp"
jobs="${LLAMACPP_JOBS:-2}"
pip="$here/.venv/bin/pip"
tools=(llama-bench llama-cli llama-server llama-quantize)

options=(
  -DCMAKE_BUILD_TYPE=Release
  -DBUILD_SHARED_LIBS=ON
  -DGGML_NATIVE=ON
  # CPU only
  -DGGML_CUDA=OFF -DGGML_HIP=OFF -DGGML_VULKAN=OFF -DGGML_METAL=OFF -DGGML_OPENCL=OFF
  -DGGML_SYCL=OFF -DGGML_BLAS=OFF -DGGML_RPC=OFF
  # the tools named above and the libraries; nothing fetched from the network (the server's
  # web UI is prebuilt from a download or built with npm: left out), no HTTPS client
  -DLLAMA_BUILD_COMMON=ON -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=ON
  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_APP=OFF
  -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_CURL=OFF
  -DLLAMA_LLGUIDANCE=OFF -DGGML_CCACHE=OFF
  # binaries find the libraries beside them after the copy into bin/ and lib/
  -DCMAKE_BUILD_WITH_INSTALL_RPATH=ON "-DCMAKE_INSTALL_RPATH=\$ORIGIN/../lib"
)
cpu="$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//' || true)"
want="llama-cpp-python $version; ${options[*]}; $cpu"
stamp="$out/.built"

if [[ ! -f "$stamp" || "$(cat "$stamp")" != "$want" ]]; then
  [[ -x "$pip" ]] || { echo "build_llamacpp: no .venv (run scripts/setup.sh first)" >&2; exit 1; }
  mkdir -p "$out/download"
  if [[ ! -f "$out/download/$sdist" ]] ||
     ! echo "$sdist_sha256  $out/download/$sdist" | sha256sum --check --status; then
    echo "build_llamacpp: downloading llama-cpp-python $version's source distribution"
    rm -f "$out/download/$sdist"
    "$pip" download -q --disable-pip-version-check --no-deps --no-binary llama-cpp-python \
      "llama-cpp-python==$version" -d "$out/download"
    echo "$sdist_sha256  $out/download/$sdist" | sha256sum --check --status ||
      { echo "build_llamacpp: $sdist does not have the expected checksum" >&2; exit 1; }
  fi
  echo "build_llamacpp: building llama.cpp (llama-cpp-python $version) with $jobs jobs"
  rm -rf "$out/src" "$out/build" "$out/bin" "$out/lib" "$out/include" "$stamp" "$out/build.log"
  mkdir -p "$out/src"
  tar -xzf "$out/download/$sdist" -C "$out/src" --strip-components=1
  source_dir="$out/src/vendor/llama.cpp"
  [[ -f "$source_dir/include/llama.h" ]] ||
    { echo "build_llamacpp: no vendor/llama.cpp in $sdist" >&2; exit 1; }
  generator=()
  if command -v ninja >/dev/null; then generator=(-G Ninja); fi
  cmake -S "$source_dir" -B "$out/build" "${generator[@]}" "${options[@]}" >"$out/configure.log" 2>&1 ||
    { echo "build_llamacpp: configuring failed, see $out/configure.log" >&2; exit 1; }
  cmake --build "$out/build" -j "$jobs" --target llama "${tools[@]}" >"$out/build.log" 2>&1 ||
    { tail -n 30 "$out/build.log" >&2; echo "build_llamacpp: the build failed, see $out/build.log" >&2; exit 1; }

  mkdir -p "$out/bin" "$out/lib" "$out/include"
  for t in "${tools[@]}"; do cp "$out/build/bin/$t" "$out/bin/"; done
  cp -P "$out/build/bin/"*.so* "$out/lib/"
  cp "$source_dir/include/"*.h "$source_dir/ggml/include/"*.h "$out/include/"
  echo "$want" >"$stamp"
fi

# The benchmark's peer, against the libraries above; rebuilt when its source or they change.
peer_source="$here/bench/llamacpp_peer.cpp"
peer="$out/bin/llamacpp-peer"
if [[ ! -x "$peer" || "$peer_source" -nt "$peer" || "$stamp" -nt "$peer" ]]; then
  echo "build_llamacpp: compiling bench/llamacpp_peer.cpp"
  "${CXX:-c++}" -std=c++17 -O2 -Wall -Wextra -I"$out/include" "$peer_source" -o "$peer" \
    -L"$out/lib" -Wl,-rpath-link,"$out/lib" -Wl,-rpath,'$ORIGIN/../lib' -lllama
fi
