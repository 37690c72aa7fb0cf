#!/usr/bin/env bash
# `prism tokenize`, `prism detokenize` and `prism chat-template` on real tokenizers, and their
# errors. Usage: tokenizers.sh path/to/prism (PRISM_TOKENIZERS_DIR names the unpacked tokenizers,
# tests/data/tokenizers/models/).
set -euo pipefail
prism="$1"
llama="${PRISM_TOKENIZERS_DIR:?}/llama3_1"
qwen="$PRISM_TOKENIZERS_DIR/qwen3"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

failures=0
expect_eq() {  # name, actual, expected
  if [[ "$2" != "$3" ]]; then
    printf 'FAIL %s\n  got:      %q\n  expected: %q\n' "$1" "$2" "$3"
    failures=$((failures + 1))
  fi
}
expect_error() {  # name, expected substring of stderr, command...
  local name="$1" pattern="$2"
  shift 2
  local status=0
  "$@" >"$tmp/out" 2>"$tmp/err" || status=$?
  if [[ $status -eq 0 ]]; then
    echo "FAIL $name: exit status 0"
    failures=$((failures + 1))
  elif [[ "$(cat "$tmp/err")" != *"$pattern"* ]]; then
    printf 'FAIL %s\n  stderr:   %s\n  expected: %s\n' "$name" "$(cat "$tmp/err")" "$pattern"
    failures=$((failures + 1))
  elif [[ $(wc -l <"$tmp/err") -ne 1 ]]; then
    echo "FAIL $name: the error should be one line"
    failures=$((failures + 1))
  fi
}

# tokenize: ids on one line; --special adds BOS; text from a file or standard input.
expect_eq "tokenize" "$("$prism" tokenize --tokenizer="$llama" 'This is a test sentence.')" \
  "2028 374 264 1296 11914 13"
expect_eq "tokenize --special" "$("$prism" tokenize --special --tokenizer="$llama" 'Hello world')" \
  "128000 9906 1917"
printf 'Hello world' >"$tmp/text.txt"
expect_eq "tokenize --text-file" "$("$prism" tokenize --tokenizer="$qwen" --text-file="$tmp/text.txt")" \
  "9707 1879"
expect_eq "tokenize stdin" "$(printf '<|im_start|>user' | "$prism" tokenize --tokenizer="$qwen")" \
  "151644 872"

# detokenize prints the text exactly, without a newline.
"$prism" detokenize --tokenizer="$llama" 128000 9906 1917 >"$tmp/text"
expect_eq "detokenize" "$(od -An -c "$tmp/text" | tr -s ' ')" \
  "$(printf '<|begin_of_text|>Hello world' | od -An -c | tr -s ' ')"
expect_eq "detokenize --skip-special" \
  "$("$prism" detokenize --skip-special --tokenizer="$llama" 128000 9906 1917)" "Hello world"

# chat-template prints the prompt exactly.
cat >"$tmp/messages.json" <<'JSON'
[{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi 🦙"}]
JSON
"$prism" chat-template --tokenizer="$qwen" --messages="$tmp/messages.json" \
  --add-generation-prompt --kwargs='{"enable_thinking": false}' >"$tmp/prompt"
printf '<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi 🦙<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n' >"$tmp/expected"
if ! cmp -s "$tmp/prompt" "$tmp/expected"; then
  echo "FAIL chat-template: $(cat "$tmp/prompt")"
  failures=$((failures + 1))
fi
expect_eq "chat-template llama" \
  "$("$prism" chat-template --tokenizer="$llama" --messages="$tmp/messages.json")" \
  "$(printf '<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi 🦙<|eot_id|>')"

# Errors: one line naming the file, line and column; non-zero exit.
mkdir -p "$tmp/bad_json" "$tmp/bad_template" "$tmp/undefined"
printf '{\n  "model": {\n    "type": "BPE",\n    "vocab": {"a": 0,}\n  }\n}\n' >"$tmp/bad_json/tokenizer.json"
expect_error "malformed tokenizer.json" "$tmp/bad_json/tokenizer.json:4:22: malformed JSON" \
  "$prism" tokenize --tokenizer="$tmp/bad_json" x
printf '{"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}, "pre_tokenizer": {"type": "Nope"}}' \
  >"$tmp/bad_json/tokenizer.json"
expect_error "unknown pre-tokenizer" \
  "tokenizer.json:1:78: pre_tokenizer: unsupported pre_tokenizer type \"Nope\"" \
  "$prism" tokenize --tokenizer="$tmp/bad_json" x
printf '{"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}}' >"$tmp/bad_template/tokenizer.json"
cp "$tmp/bad_template/tokenizer.json" "$tmp/undefined/tokenizer.json"
printf '{"chat_template": "{%% for m in messages %%}\\n{{ m.content }\\n{%% endfor %%}"}' \
  >"$tmp/bad_template/tokenizer_config.json"
expect_error "template syntax error" "tokenizer_config.json (chat_template):2:1: template syntax error: this '{{' is never closed" \
  "$prism" chat-template --tokenizer="$tmp/bad_template" --messages="$tmp/messages.json"
printf '{"chat_template": "{%% for m in messages %%}\\n{{ m.content + suffix }}{%% endfor %%}"}' \
  >"$tmp/undefined/tokenizer_config.json"
expect_error "undefined variable" "tokenizer_config.json (chat_template):2:16: undefined variable 'suffix'" \
  "$prism" chat-template --tokenizer="$tmp/undefined" --messages="$tmp/messages.json"
printf '[{"role": "user",\n "content": }]' >"$tmp/bad_messages.json"
expect_error "malformed messages" "bad_messages.json:2:13: malformed JSON" \
  "$prism" chat-template --tokenizer="$qwen" --messages="$tmp/bad_messages.json"
expect_error "unknown id" "token id 999999 is not in the vocabulary" \
  "$prism" detokenize --tokenizer="$llama" 999999
expect_error "missing tokenizer" "no tokenizer.json there" \
  "$prism" tokenize --tokenizer="$tmp/nowhere" x

if ((failures)); then
  echo "$failures failure(s)"
  exit 1
fi
echo "tokenizers: all command-line checks passed"
