#!/usr/bin/env bash
# prism llm on LFM 2.5 checkpoints without tokenizer files: greedy ids from ids, and the error
# that text input gives.
set -u
prism="$1"
data="$PRISM_SOURCE_DIR/tests/data/lfm2"
fail=0
check() {  # name, expected, actual
  if [[ "$2" != "$3" ]]; then echo "FAIL $1: expected '$2', got '$3'"; fail=1; else echo "ok $1"; fi
}
json_list() {  # file, key: the integers of a one-level list, space-separated
  sed -n "s/.*\"$2\": *\[\([^]]*\)\].*/\1/p" <(tr -d '\n ' <"$1") | tr ',' ' '
}

for model in tiny-bf16-tied tiny-bf16-untied; do
  prompt=$(json_list "$data/$model/reference.json" prompt_ids | tr ' ' ',')
  want=$(json_list "$data/$model/reference.json" greedy_ids)
  got=$("$prism" llm --model="$data/$model" --prompt-ids="$prompt" --print-ids --temperature=0 \
    --max-tokens=24 --seqlen=64 2>/dev/null)
  check "$model greedy ids" "$want" "$got"
done

err=$("$prism" llm --model="$data/tiny-bf16-tied" --prompt=hi 2>&1 >/dev/null); rc=$?
check "no tokenizer" "1 prism: error: llm: $data/tiny-bf16-tied has no tokenizer.json: use --prompt-ids=... with --print-ids" "$rc $err"
exit $fail
