#!/usr/bin/env bash
# prism llm from the command line: greedy ids for the tiny fixtures, and bad input.
set -u
prism="$1"
data="$PRISM_SOURCE_DIR/tests/data/llama"
fail=0
check() {  # name, expected, actual
  if [[ "$2" != "$3" ]]; then echo "FAIL $1: expected '$2', got '$3'"; fail=1; else echo "ok $1"; fi
}

want=$(sed -n 's/.*"greedy_ids": *\[\([^]]*\)\].*/\1/p' <(tr -d '\n ' <"$data/tiny-f32/reference.json") | tr ',' ' ')
got=$("$prism" llm --model="$data/tiny-f32" --prompt-ids=128000,791,6864,315,9822,374 \
  --max-tokens=12 --print-ids --seqlen=64 2>/dev/null)
check "greedy ids" "$want" "$got"

err=$("$prism" llm --model="$data/tiny-f32" --prompt-ids=1,x,3 2>&1 >/dev/null); rc=$?
check "bad ids exit" 1 "$rc"
check "bad ids message" "prism: error: llm: --prompt-ids must be comma-separated token ids, got 'x'" "$err"

err=$("$prism" llm --model="$data/missing" --prompt-ids=1 2>&1 >/dev/null); rc=$?
check "missing model exit" 1 "$rc"
[[ $(echo "$err" | wc -l) == 1 && "$err" == "prism: error: "* ]] || { echo "FAIL missing model: $err"; fail=1; }

err=$("$prism" llm --model="$data/tiny-f32" --prompt-ids=1 --dtype=f16 2>&1 >/dev/null); rc=$?
check "bad dtype" "1 prism: error: llm: --dtype must be f32 or bf16, got f16" "$rc $err"
exit $fail
