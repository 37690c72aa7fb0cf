#!/usr/bin/env bash
# `prism io inspect` on GGUF files: metadata (long arrays summarized), tensors as a tree and
# --flat, detection by the magic when the name does not say, and one clear error line for a
# broken file.
set -euo pipefail
prism="$1"
src="${PRISM_SOURCE_DIR:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}"
fixture="$src/tests/data/gguf/quant_types.gguf"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

fail() { echo "FAIL: $*" >&2; exit 1; }

out="$("$prism" io inspect "$fixture")"
grep -q "^$fixture: GGUF v3, 24 tensors, .* (types BF16:1 F16:1 F32:14 Q4_0:1 Q4_1:1 Q4_K:1 Q5_0:1 Q5_1:1 Q5_K:1 Q6_K:1 Q8_0:1), 22 metadata keys, alignment 64$" <<<"$out" ||
  fail "inspect summary: $out"
grep -q '^  general.architecture  *STRING "prism-test"$' <<<"$out" || fail "string metadata: $out"
grep -q '^  test.u32  *UINT32 4000000000$' <<<"$out" || fail "integer metadata: $out"
grep -q '^  tokenizer.ggml.tokens  *ARRAY\[STRING\] of 100: "tok0", "tok1", "tok2", "tok3", ...$' <<<"$out" ||
  fail "long arrays are summarized: $out"
grep -q "q4_k .*Q4_K  *\[2, 512\]  *576 B$" <<<"$out" || fail "tensor leaf: $out"
grep -q "ref .*F32  *\[2, 512\]  *4.00 KiB$" <<<"$out" || fail "a name that is also a prefix: $out"
grep -q "f32_3d .*F32  *\[2, 3, 32\]  *768 B$" <<<"$out" || fail "3-d tensor, outermost first: $out"

flat="$("$prism" io inspect --flat "$fixture")"
[[ $(grep -vc "GGUF v3" <<<"$flat") -eq 24 ]] || fail "--flat: one line per tensor: $flat"
grep -q "^q6_k  *Q6_K  *\[2, 512\]  *840 B$" <<<"$flat" || fail "--flat line: $flat"
grep -q "^metadata:" <<<"$flat" && fail "--flat shows tensors only: $flat"

# Found by its magic under another name.
cp "$fixture" "$tmp/model.bin"
"$prism" io inspect "$tmp/model.bin" | grep -q "GGUF v3, 24 tensors" || fail "detection by magic"

# Broken files: one line naming the file and what is wrong, exit code 1.
expect_error() {
  local path="$1" want="$2" err rc
  set +e
  err="$("$prism" io inspect "$path" 2>&1 >/dev/null)"
  rc=$?
  set -e
  [[ $rc -eq 1 ]] || fail "exit code $rc for $path"
  [[ $(wc -l <<<"$err") -eq 1 ]] || fail "error is not one line: $err"
  [[ "$err" == "prism: error: $path: "*"$want"* ]] || fail "error for $path: $err"
}
for n in 100 1000 3000 20000; do
  head -c $n "$fixture" >"$tmp/cut.gguf"
  expect_error "$tmp/cut.gguf" "truncated"
done
printf 'GGML\3\0\0\0' >"$tmp/magic.gguf"
expect_error "$tmp/magic.gguf" 'not a GGUF file: it starts with bytes 47474d4c, not "GGUF"'
{ printf 'GGUF\1\0\0\0'; head -c 32 /dev/zero; } >"$tmp/v1.gguf"
expect_error "$tmp/v1.gguf" "GGUF version 1 is not supported"
echo "gguf: ok"
