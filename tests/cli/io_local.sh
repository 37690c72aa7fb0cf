#!/usr/bin/env bash
# `prism io` on local files: ls, tree, stat, cat, cp, inspect, and one clear error line for a
# corrupt checkpoint.
set -euo pipefail
prism="$1"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

# Writes a safetensors file: $1 path, $2 JSON header, $3 number of data bytes (value 0x01).
write_safetensors() {
  local path="$1" header="$2" data_bytes="$3" len i
  len=${#header}
  {
    for ((i = 0; i < 8; i++)); do printf "\\x$(printf %02x $(((len >> (8 * i)) & 255)))"; done
    printf '%s' "$header"
    head -c "$data_bytes" /dev/zero | tr '\0' '\1'
  } >"$path"
}

fail() { echo "FAIL: $*" >&2; exit 1; }

mkdir -p "$tmp/model/sub"
write_safetensors "$tmp/model/model.safetensors" \
  '{"model.layers.0.w":{"dtype":"BF16","shape":[2,2],"data_offsets":[0,8]},"model.layers.1.w":{"dtype":"F8_E4M3","shape":[4],"data_offsets":[8,12]},"lm_head.weight":{"dtype":"F32","shape":[3],"data_offsets":[12,24]}}' 24
echo hello >"$tmp/model/sub/notes.txt"

out="$("$prism" io inspect "$tmp/model")"
grep -q "3 tensors, 24 B in 1 file (dtypes BF16:1 F32:1 F8_E4M3:1)" <<<"$out" || fail "inspect summary: $out"
grep -q "lm_head.weight .*F32 .*\[3\] .*12 B" <<<"$out" || fail "inspect leaf: $out"
grep -q "model.layers  (2 tensors, 12 B)" <<<"$out" || fail "inspect totals: $out"
"$prism" io inspect --flat "$tmp/model/model.safetensors" | grep -q "^model.layers.1.w .*F8_E4M3 .*\[4\]" ||
  fail "inspect --flat"

"$prism" io ls "$tmp/model" | grep -q "sub/" || fail "ls shows directories"
"$prism" io tree "$tmp/model" | grep -q "notes.txt .*6 B" || fail "tree"
"$prism" io stat "$tmp/model/sub/notes.txt" | grep -q "size: 6 (6 B)" || fail "stat"
[[ "$("$prism" io cat "file://$tmp/model/sub/notes.txt")" == hello ]] || fail "cat"
"$prism" io cp --chunk-size 5 "$tmp/model/model.safetensors" "$tmp/copy.safetensors"
cmp "$tmp/model/model.safetensors" "$tmp/copy.safetensors" || fail "cp"
[[ ! -e "$tmp/copy.safetensors.partial" ]] || fail "cp left a partial file"

"$prism" io cp "$tmp/model" "$tmp/tree-copy" 2>/dev/null
cmp "$tmp/model/sub/notes.txt" "$tmp/tree-copy/sub/notes.txt" || fail "cp of a directory"
cmp "$tmp/model/model.safetensors" "$tmp/tree-copy/model.safetensors" || fail "cp of a directory"

# Corrupt input: one line naming the file and what is wrong, exit code 1.
head -c 100 "$tmp/model/model.safetensors" >"$tmp/truncated.safetensors"
set +e
err="$("$prism" io inspect "$tmp/truncated.safetensors" 2>&1 >/dev/null)"
rc=$?
set -e
[[ $rc -eq 1 ]] || fail "exit code $rc for a truncated file"
[[ "$err" == "prism: error: $tmp/truncated.safetensors: header length "*" is larger than the file (100 bytes)"* ]] ||
  fail "truncated error: $err"
[[ $(wc -l <<<"$err") -eq 1 ]] || fail "error is not one line: $err"
set +e
err="$("$prism" io stat "$tmp/nope" 2>&1)"
set -e
[[ "$err" == "prism: error: $tmp/nope: not found" ]] || fail "missing file: $err"
echo "io_local: ok"
