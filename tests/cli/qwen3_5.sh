#!/usr/bin/env bash
# prism llm on the tiny Qwen 3.5 checkpoints: greedy ids as the reference has them, text in
# and out through the Qwen3 tokenizer and its chat template, a two-turn chat, bad input.
set -u
prism="$1"
data="$PRISM_SOURCE_DIR/tests/data/qwen3_5"
fail=0
check() {  # name, expected, actual
  if [[ "$2" != "$3" ]]; then echo "FAIL $1: expected '$2', got '$3'"; fail=1; else echo "ok $1"; fi
}
field() {  # file, key: a list of ids, space-separated
  sed -n "s/.*\"$2\": *\[\([^]]*\)\].*/\1/p" <(tr -d '\n ' <"$1") | tr ',' ' '
}

for name in tiny-bf16-tied tiny-bf16-untied; do
  ref="$data/$name/reference.json"
  prompt=$(field "$ref" prompt_ids | tr ' ' ',')
  got=$("$prism" llm --model="$data/$name" --prompt-ids="$prompt" --max-tokens=24 --print-ids \
    --seqlen=64 2>/dev/null)
  check "$name greedy ids" "$(field "$ref" greedy_ids)" "$got"
done

# Text in, text out: the checkpoint beside the Qwen3 tokenizer. The answer to a --prompt must
# be what the same conversation gives through the template, ids and detokenize.
tokdir="${PRISM_TOKENIZERS_DIR:?}/qwen3"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
for f in config.json generation_config.json model.safetensors; do
  ln -s "$data/tiny-bf16-tied/$f" "$tmp/$f"
done
for f in tokenizer.json tokenizer_config.json; do ln -s "$tokdir/$f" "$tmp/$f"; done
printf '[{"role":"user","content":"What is the capital of France?"}]' >"$tmp/messages.json"
"$prism" chat-template --tokenizer="$tmp" --messages="$tmp/messages.json" \
  --add-generation-prompt >"$tmp/prompt.txt"
ids=$("$prism" tokenize --tokenizer="$tmp" --text-file="$tmp/prompt.txt" | tr ' ' ',')
gen=$("$prism" llm --model="$tmp" --prompt-ids="$ids" --print-ids --max-tokens=6 2>/dev/null)
want=$("$prism" detokenize --tokenizer="$tmp" --skip-special $gen)
got=$("$prism" llm --model="$tmp" --prompt="What is the capital of France?" --max-tokens=6 \
  2>/dev/null)
check "text prompt = template + ids + detokenize" "$want" "$got"

# Chat: two turns and a reset from standard input; the states carry the conversation.
out=$(printf 'hello\nhow are you\n/reset\nhi\n/exit\n' | "$prism" llm --model="$tmp" \
  --max-tokens=3 2>"$tmp/chat.err"); rc=$?
check "chat exit" 0 "$rc"
check "chat answers" 3 "$(echo "$out" | wc -l)"

# A mixture-of-experts config is refused in one line.
mkdir "$tmp/moe"
ln -s "$data/tiny-bf16-tied/model.safetensors" "$tmp/moe/model.safetensors"
sed 's/"vocab_size"/"num_experts": 8, "vocab_size"/' "$data/tiny-bf16-tied/config.json" \
  >"$tmp/moe/config.json"
err=$("$prism" llm --model="$tmp/moe" --prompt-ids=1 --print-ids 2>&1 >/dev/null); rc=$?
check "moe refused" "1 prism: error: qwen3_5: $tmp/moe/config.json: mixture-of-experts models are not supported" "$rc $err"
exit $fail
