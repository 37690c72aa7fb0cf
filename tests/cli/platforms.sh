#!/usr/bin/env bash
# Choosing a platform from the command line: --platform, PRISM_PLATFORM, auto, and the one-line
# reasons a platform is unavailable.
set -u
prism="$1"
fail=0
check() {  # name, expected, actual
  if [[ "$2" != "$3" ]]; then echo "FAIL $1: expected '$2', got '$3'"; fail=1; else echo "ok $1"; fi
}

info=$("$prism" info)
echo "$info" | grep -q '^  cpu      available, a mesh of up to [0-9]* devices\?$' ||
  { echo "FAIL info: no cpu line"; fail=1; }
got=$(PRISM_CPU_DEVICES=3 "$prism" info | grep '^  cpu ')
check "info: the CPU's mesh" "  cpu      available, a mesh of up to 3 devices" "$got"
# A mesh's devices: each with its CPUs (and, where they lie in one NUMA node, the node).
got=$(PRISM_CPU_DEVICES=2 "$prism" info --devices=2 | sed -n '/^  cpu /,/^  [a-z]/p' |
  grep -c '^    - .*device [01] of {model=2} on CPUs [0-9,]*\( (memory on NUMA node [0-9]*)\)\?, ')
check "info: the devices of a CPU mesh" 2 "$got"
err=$("$prism" info --devices=0 2>&1 >/dev/null); rc=$?
[[ $rc -ne 0 && $(echo "$err" | wc -l) -eq 1 ]] || { echo "FAIL info --devices=0: $rc $err"; fail=1; }
if echo "$info" | grep -q '^  opencl   available'; then
  # PoCL's device is a CPU: auto must not take it.
  if ! clinfo -l 2>/dev/null | grep -qi gpu; then
    got=$("$prism" mnist --index=3 --platform=auto | sed -n 's/^model [a-z]* on \([a-z]*\) .*/\1/p')
    check "auto without a GPU" cpu "$got"
  fi
  got=$(PRISM_PLATFORM=opencl "$prism" mnist --index=3 | sed -n 's/^model [a-z]* on \([a-z]*\) .*/\1/p')
  check "PRISM_PLATFORM" opencl "$got"
  # A platform named is the only one probed: --platform=cpu loads no OpenCL driver (glibc's
  # LD_DEBUG names each library a process loads), where auto loads it to look for a GPU.
  icd=$(ls /etc/OpenCL/vendors/*.icd 2>/dev/null | head -1)
  if [[ -n "$icd" && -z "${OCL_ICD_VENDORS:-}" ]]; then
    driver=$(basename "$(head -1 "$icd")")
    loads() { LD_DEBUG=libs "$prism" mnist --index=3 --platform="$1" 2>&1 >/dev/null |
      grep -cE "(library|file)=[^ ]*$driver"; }
    check "--platform=cpu loads no OpenCL driver ($driver)" 0 "$(loads cpu)"
    [[ $(loads auto) -ge 1 ]] || { echo "FAIL auto: did not load $driver"; fail=1; }
  fi
  # With the ICD loader pointed at no drivers, OpenCL says why it cannot run, in one line.
  err=$(OCL_ICD_VENDORS=/nonexistent "$prism" mnist --platform=opencl 2>&1 >/dev/null); rc=$?
  check "no OpenCL driver" \
    "1 prism: error: platform opencl is not available: no OpenCL platforms (no driver or ICD installed)" \
    "$rc $err"
fi
err=$("$prism" mnist --platform=bogus 2>&1 >/dev/null); rc=$?
check "unknown platform" \
  "1 prism: error: unknown platform 'bogus' (expected cpu, cuda, opencl, xla-cpu, xla-cuda, tpu, neuron, rocm, oneapi, pjrt or auto)" \
  "$rc $err"
# The CPU's SIMD target: shown by info, forced by PRISM_CPU_TARGET, one line for an unknown name
# (which lists the names this binary and CPU have, best first).
echo "$info" | grep -q '^    - .*simd [A-Z0-9_]' || { echo "FAIL info: no simd target"; fail=1; }
err=$(PRISM_CPU_TARGET=bogus "$prism" info 2>&1 >/dev/null); rc=$?
prefix="prism: error: PRISM_CPU_TARGET=bogus: not a SIMD target of this binary on this CPU"
check "unknown SIMD target" "1 $prefix" "$rc ${err%% (expected*}"
lowest=$(echo "$err" | sed -n 's/.*expected one of:.*[ :]\([a-z0-9_+]*\))$/\1/p')
got=$(PRISM_CPU_TARGET="$lowest" "$prism" info | sed -n 's/^    - .*simd \([A-Z0-9_]*\).*/\1/p' | head -1)
check "PRISM_CPU_TARGET=$lowest" "${lowest^^}" "$got"
# The kernels of batched decoding's products: PRISM_CPU_ROWS chooses, one line for a bad name.
err=$(PRISM_CPU_ROWS=bogus "$prism" info 2>&1 >/dev/null); rc=$?
check "bad PRISM_CPU_ROWS" "1 prism: error: PRISM_CPU_ROWS=bogus: expected amx, fma, dpbf16, widen or onednn" "$rc $err"
got=$(PRISM_CPU_ROWS=onednn "$prism" info | grep -c 'batched rows in oneDNN')
check "PRISM_CPU_ROWS=onednn" 1 "$got"
if echo "$info" | grep -q 'simd \(AVX2\|SSE4\|SSSE3\|SSE2\)[,)]'; then  # no AVX-512 at all
  err=$(PRISM_CPU_ROWS=fma "$prism" info 2>&1 >/dev/null); rc=$?
  check "PRISM_CPU_ROWS=fma without AVX-512 BF16" \
    "1 prism: error: PRISM_CPU_ROWS=fma: needs AVX-512 BF16" "$rc $err"
fi
# PRISM_CPU_AMX=0: none of AMX's kernels (nothing in the description names AMX), one line for
# a bad value.
err=$(PRISM_CPU_AMX=2 "$prism" info 2>&1 >/dev/null); rc=$?
check "bad PRISM_CPU_AMX" "1 prism: error: PRISM_CPU_AMX=2: expected 0 or 1" "$rc $err"
got=$(PRISM_CPU_AMX=0 "$prism" info | grep -c 'AMX')
check "PRISM_CPU_AMX=0" 0 "$got"
# How far ahead decoding prefetches blocked bf16 weights: PRISM_CPU_PREFETCH chooses, one line
# for a bad value; shown where the CPU has the blocked kernel (AVX-512 BF16).
err=$(PRISM_CPU_PREFETCH=100 "$prism" info 2>&1 >/dev/null); rc=$?
check "bad PRISM_CPU_PREFETCH" "1 prism: error: PRISM_CPU_PREFETCH=100: expected a number of bytes, a multiple of 64 up to 65536 (0: none)" "$rc $err"
# ... also where the SIMD target has no blocked weights to prefetch.
err=$(PRISM_CPU_TARGET="$lowest" PRISM_CPU_PREFETCH=100 "$prism" info 2>&1 >/dev/null); rc=$?
check "bad PRISM_CPU_PREFETCH, $lowest" "1 prism: error: PRISM_CPU_PREFETCH=100: expected a number of bytes, a multiple of 64 up to 65536 (0: none)" "$rc $err"
got=$(PRISM_CPU_PREFETCH=0 "$prism" info | grep -c 'decoding prefetches')
check "PRISM_CPU_PREFETCH=0" 0 "$got"
if echo "$info" | grep -q 'avx512_bf16'; then
  got=$(PRISM_CPU_PREFETCH=1024 "$prism" info | grep -c 'decoding prefetches 1024 B ahead')
  check "PRISM_CPU_PREFETCH=1024" 1 "$got"
fi
# A prompt's bf16 products: oneDNN's or f32 FMAs (and with AMX, prism's tiles for blocked
# weights), measured once per CPU model and kept in the user's cache; PRISM_CPU_PRODUCTS forces
# one or measures again, one line for a bad value.
err=$(PRISM_CPU_PRODUCTS=bogus "$prism" info 2>&1 >/dev/null); rc=$?
check "bad PRISM_CPU_PRODUCTS" \
  "1 prism: error: PRISM_CPU_PRODUCTS=bogus: expected onednn, fma, amx or measure" "$rc $err"
if out=$(PRISM_CPU_PRODUCTS=amx "$prism" info 2>&1); then
  got=$(echo "$out" | grep -c "blocked and quantized ones on prism's AMX tiles (PRISM_CPU_PRODUCTS)")
  check "PRISM_CPU_PRODUCTS=amx" 1 "$got"
else
  check "PRISM_CPU_PRODUCTS=amx without AMX" \
    "prism: error: PRISM_CPU_PRODUCTS=amx: this CPU (or this process) has no AMX-BF16 tiles" "$out"
fi
if "$prism" info | grep -q 'oneDNN has none here'; then  # before AVX-512: no choice to make
  echo "ok bf16 products on f32 FMAs alone"
  exit $fail
fi
got=$(PRISM_CPU_PRODUCTS=fma "$prism" info | grep -c 'bf16 products on f32 FMAs ([a-z0-9]* kernel; PRISM_CPU_PRODUCTS)')
check "PRISM_CPU_PRODUCTS=fma" 1 "$got"
cache=$(mktemp -d)
trap 'rm -rf "$cache"' EXIT
printf 'another CPU | avx2 | gemm avx2 | oneDNN 2.6.3\tfma\t90.0\t95.5\nnot a line of the cache\n' \
  >"$cache/other"
mkdir -p "$cache/prism" && cp "$cache/other" "$cache/prism/cpu-products"
first=$(XDG_CACHE_HOME="$cache" "$prism" info | grep -o 'bf16 products [^)]*)')
case "$first" in
  *", measured)") echo "ok measured at first use: $first" ;;
  *) echo "FAIL measured at first use: got '$first'"; fail=1 ;;
esac
# With AVX-512 BF16 and no AMX, the two kernels of batched rows are measured too, on a line of
# their own.
rows=0
if XDG_CACHE_HOME="$cache" "$prism" info | grep -q 'batched rows on [^(,]* ([0-9]* GFLOP/s a core against [0-9]* on [^,]*, measured before)'; then
  rows=1
  got=$(grep -c ' | rows	\(fma\|dpbf16\)	[0-9.]*	[0-9.]*$' "$cache/prism/cpu-products")
  check "batched rows' line" 1 "$got"
  got=$(XDG_CACHE_HOME="$cache" PRISM_CPU_ROWS= "$prism" info | grep -c 'batched rows on [^(,]* ([0-9]* GFLOP/s .*, measured before)')
  check "an empty PRISM_CPU_ROWS forces nothing" 1 "$got"
fi
# With AMX, whether prism's tiles or oneDNN take blocked weights, on a line of its own too.
tiles=0
if XDG_CACHE_HOME="$cache" "$prism" info | grep -q "blocked [^(,]* ([0-9]* GFLOP/s a core on prism's AMX tiles against [0-9]* in oneDNN, measured before)"; then
  tiles=1
  got=$(grep -c ' | tiles	\(onednn\|amx\)	[0-9.]*	[0-9.]*$' "$cache/prism/cpu-products")
  check "tile products' line" 1 "$got"
fi
lines=$(grep -c . "$cache/prism/cpu-products")
check "the cache keeps other CPUs' lines and drops what it cannot read" $((2 + rows + tiles)) "$lines"
got=$(grep -c "^another CPU | avx2 | gemm avx2 | oneDNN 2.6.3	fma	90.0	95.5\$" "$cache/prism/cpu-products")
check "another CPU's line as it was" 1 "$got"
got=$(XDG_CACHE_HOME="$cache" "$prism" info | grep -o 'bf16 products [^)]*)')
check "measured before" "${first%measured)}measured before)" "$got"
XDG_CACHE_HOME="$cache" PRISM_CPU_PRODUCTS=measure "$prism" info >/dev/null
check "measured again, one line a CPU and kind" $((2 + rows + tiles)) "$(grep -c . "$cache/prism/cpu-products")"
got=$(XDG_CACHE_HOME=/proc/no-such-dir "$prism" info | grep -c 'bf16 products .*, measured)')
check "a cache that cannot be written" 1 "$got"
exit $fail
