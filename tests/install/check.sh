#!/usr/bin/env bash
# `cmake --install` of the build tree into a fresh prefix, then a program outside the source
# tree built against it twice: with CMake (find_package(prism), prism::prism) and with
# pkg-config (prism.pc). Both must run and compute 1 3 5 7.
# Usage: check.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build="$1"
src="$2"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
prefix="$tmp/prefix"
cmake --install "$build" --prefix "$prefix" >"$tmp/install.log"

want="1 3 5 7 "
fail=0
check() {  # name, output
  local first
  first="$(head -n1 <<<"$2")"
  if [[ "$first" != "$want" ]]; then
    echo "FAIL $1: expected '$want', got '$first'"
    fail=1
  elif ! grep -q "^error: .*no-such-platform" <<<"$2"; then
    echo "FAIL $1: no error line for an unknown platform in: $2"
    fail=1
  else
    echo "ok $1"
  fi
}

# The headers of the backends' kernels are not installed; the public ones are.
[[ -f "$prefix/include/prism/runtime/compile.h" ]] || { echo "FAIL: no headers"; fail=1; }
[[ ! -e "$prefix/include/prism/backends/cpu" ]] || { echo "FAIL: kernel headers installed"; fail=1; }

cmake -S "$src/tests/install/consumer" -B "$tmp/consumer" -DCMAKE_PREFIX_PATH="$prefix" \
  -DCMAKE_BUILD_TYPE=Release >"$tmp/configure.log"
cmake --build "$tmp/consumer" >"$tmp/build.log"
check "find_package(prism)" "$("$tmp/consumer/consumer")"

libdir="$(dirname "$(find "$prefix" -name prism.pc)")"
export PKG_CONFIG_PATH="$libdir"
# shellcheck disable=SC2046
c++ -O1 -o "$tmp/consumer-pc" "$src/tests/install/consumer/main.cpp" \
  $(pkg-config --cflags --libs prism) -Wl,-rpath,"$(pkg-config --variable=libdir prism)"
check "pkg-config prism" "$("$tmp/consumer-pc")"
exit $fail
