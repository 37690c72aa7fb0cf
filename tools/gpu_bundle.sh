#!/usr/bin/env bash
# Packs what tools/gpu_check_prebuilt.sh needs into one folder to copy to a GPU machine that
# has the NVIDIA driver but neither the build's packages nor the CUDA toolkit:
#
#   tools/gpu_bundle.sh BUILD_DIR OUT_DIR     then, there:   OUT_DIR/run.sh
#
# OUT_DIR/bin: prism, prism-unit-tests, prism-bench, prism-conformance; OUT_DIR/bin/lib: every
# shared library they link except glibc's own (libc, libm, ld-linux...), plus NVRTC (~110 MB,
# required) and cuBLASLt (~540 MB, optional) from the toolkit, which are loaded at run time
# so ldd does not list them;
# OUT_DIR/data: models/mnist, the tiny models of tests/data and the PyTorch side of the
# benchmarks (PRISM_BUNDLE_DATA=0 leaves it out, for a GPU machine with a checkout). The
# binaries need a glibc at least as new as the build machine's; libstdc++ and libgcc_s are
# the GPU machine's own (any as new as the build's), so that its other programs keep theirs.
set -eu
build=$(cd "${1:?usage: gpu_bundle.sh BUILD_DIR OUT_DIR}" && pwd)
out=${2:?usage: gpu_bundle.sh BUILD_DIR OUT_DIR}
root=$(cd "$(dirname "$0")/.." && pwd)
cuda_lib=${CUDA_HOME:-/usr/local/cuda}/lib64
mkdir -p "$out/bin/lib" "$out/data/models" "$out/data/tests/data" "$out/tools"
bins=()
for b in prism prism-unit-tests prism-bench prism-conformance; do
  [[ -x "$build/bin/$b" ]] && cp "$build/bin/$b" "$out/bin/" && bins+=("$build/bin/$b")
done
ldd "${bins[@]}" | awk '/=> \// {print $3}' | sort -u |
  grep -v -E '/(libc|libm|libdl|librt|libpthread|libresolv|libstdc\+\+|libgcc_s)\.so|ld-linux' |
  while read -r lib; do cp -L "$lib" "$out/bin/lib/"; done
# PRISM_BUNDLE_NVRTC=0 / PRISM_BUNDLE_CUBLASLT=0 leave them out (where the GPU machine has
# them, or to keep the bundle small: cuBLASLt is optional, products then run in our kernels).
toolkit_libs=()
[[ "${PRISM_BUNDLE_NVRTC:-1}" == 0 ]] || toolkit_libs+=(libnvrtc.so.13 libnvrtc-builtins.so.13.0)
[[ "${PRISM_BUNDLE_CUBLASLT:-1}" == 0 ]] || toolkit_libs+=(libcublasLt.so.13)
for lib in ${toolkit_libs[@]+"${toolkit_libs[@]}"}; do
  [[ -e "$cuda_lib/$lib" ]] && cp -L "$cuda_lib/$lib" "$out/bin/lib/" || echo "note: $cuda_lib/$lib not found"
done
if [[ "${PRISM_BUNDLE_DATA:-1}" != 0 ]]; then
  mkdir -p "$out/data/bench"
  cp -r "$root/models/mnist" "$out/data/models/"
  for family in llama qwen3_5 lfm2; do cp -r "$root/tests/data/$family" "$out/data/tests/data/"; done
  cp "$root"/bench/llm_torch_peer.py "$root"/bench/llm_shapes_torch.py "$out/data/bench/"
fi
cp "$root/tools/gpu_check_prebuilt.sh" "$out/tools/"
cat >"$out/run.sh" <<'RUN'
#!/usr/bin/env bash
here=$(cd "$(dirname "$0")" && pwd)
exec "$here/tools/gpu_check_prebuilt.sh" "$here/bin" "$here/data" "${1:-$here/gpu_check.log}"
RUN
chmod +x "$out/run.sh"
du -sh "$out"
