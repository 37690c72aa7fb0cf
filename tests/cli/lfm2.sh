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
    --max-tokens=24 --seqlen=64 --dtype=f32 2>/dev/null)
  check "$model greedy ids" "$want" "$got"
done

# Without --dtype a checkpoint computes in its own dtype: bf16 here (config.json's torch_dtype),
# whose greedy ids part from f32's on this checkpoint.
run() { "$prism" llm --model="$data/tiny-bf16-untied" --prompt-ids="$prompt" --print-ids \
  --max-tokens=24 --seqlen=64 "$@" 2>/dev/null; }
check "default dtype = the checkpoint's" "$(run --dtype=bf16)" "$(run)"
[[ "$(run --dtype=bf16)" != "$(run --dtype=f32)" ]] || { echo "FAIL bf16 and f32 agree here"; fail=1; }

err=$("$prism" llm --model="$data/tiny-bf16-tied" --prompt=hi 2>&1 >/dev/null); rc=$?
check "no tokenizer" "1 prism: error: llm: $data/tiny-bf16-tied has no tokenizer.json: use --prompt-ids=... with --print-ids" "$rc $err"

# The tokenizer of LFM's kind (tools/make_lfm2_tokenizer.py) through the commands: the chat
# template renders LFM's turns, and the prompt tokenizes to ids the model runs on. (Text out
# is not checked here: the tiny checkpoints answer with ids beyond this small vocabulary.)
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
for f in config.json generation_config.json model.safetensors; do ln -s "$data/tiny-bf16-tied/$f" "$tmp/$f"; done
for f in tokenizer.json tokenizer_config.json; do ln -s "$data/tokenizer/$f" "$tmp/$f"; done
printf '[{"role":"system","content":"Be brief."},{"role":"user","content":"What is the capital of France?"}]' >"$tmp/messages.json"
"$prism" chat-template --tokenizer="$tmp" --messages="$tmp/messages.json" --add-generation-prompt >"$tmp/prompt.txt"
check "chat template" "$(printf '<|startoftext|><|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n')" "$(cat "$tmp/prompt.txt")"
ids=$("$prism" tokenize --tokenizer="$tmp" --text-file="$tmp/prompt.txt" | tr ' ' ',')
[[ "$ids" == 1,6,* ]] || { echo "FAIL prompt ids: '$ids'"; fail=1; }
got=$("$prism" llm --model="$tmp" --prompt-ids="$ids" --print-ids --max-tokens=6 2>/dev/null | wc -w)
check "answer to the tokenized prompt" 6 "$got"
exit $fail
