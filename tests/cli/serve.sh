#!/usr/bin/env bash
# prism serve through the official OpenAI client (tests/serve/openai_client_test.py), on the
# tiny Llama checkpoint beside the Llama 3.1 tokenizer and its chat template; its chat page in
# headless Chromium (tests/serve/chat_page_test.py); log-probabilities, penalties and logit
# biases (tests/serve/sampling_test.py, against transformers' logits in the checkpoint's
# reference); structured outputs (tests/serve/structured_test.py, answers checked by the
# jsonschema package); its prompt cache (tests/serve/prompt_cache_test.py); a tiny Qwen 3.5 checkpoint,
# with tools (tests/serve/tools_test.py); speculative decoding (tests/serve/speculate_test.py);
# a Q8_0 GGUF file; bad options.
set -u
prism="$1"
python="${PRISM_VENV_PYTHON:?}"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
for f in config.json generation_config.json model.safetensors; do
  ln -s "$PRISM_SOURCE_DIR/tests/data/llama/tiny-f32/$f" "$tmp/$f"
done
for f in tokenizer.json tokenizer_config.json; do
  ln -s "${PRISM_TOKENIZERS_DIR:?}/llama3_1/$f" "$tmp/$f"
done
fail=0
"$python" "$PRISM_SOURCE_DIR/tests/serve/openai_client_test.py" "$prism" "$tmp" || fail=1
"$python" "$PRISM_SOURCE_DIR/tests/serve/chat_page_test.py" "$prism" "$tmp" || fail=1
"$python" "$PRISM_SOURCE_DIR/tests/serve/sampling_test.py" "$prism" "$tmp" \
  "$PRISM_SOURCE_DIR/tests/data/llama/tiny-f32/reference_hf.json" || fail=1
"$python" "$PRISM_SOURCE_DIR/tests/serve/structured_test.py" "$prism" "$tmp" || fail=1
"$python" "$PRISM_SOURCE_DIR/tests/serve/prompt_cache_test.py" "$prism" "$tmp" --reuses-any-start \
  || fail=1
# Qwen 3.5 (attention beside gated delta rule layers, their states per slot) beside the
# Qwen3 tokenizer.
mkdir "$tmp/qwen3_5"
for f in config.json generation_config.json model.safetensors; do
  ln -s "$PRISM_SOURCE_DIR/tests/data/qwen3_5/tiny-bf16-tied/$f" "$tmp/qwen3_5/$f"
done
for f in tokenizer.json tokenizer_config.json; do
  ln -s "$PRISM_TOKENIZERS_DIR/qwen3/$f" "$tmp/qwen3_5/$f"
done
"$python" "$PRISM_SOURCE_DIR/tests/serve/architecture_test.py" "$prism" "$tmp/qwen3_5" || fail=1
"$python" "$PRISM_SOURCE_DIR/tests/serve/tools_test.py" "$prism" "$tmp/qwen3_5" "$tmp" \
  "$PRISM_SOURCE_DIR/tests/data/tokenizers/qwen3.json" || fail=1
"$python" "$PRISM_SOURCE_DIR/tests/serve/prompt_cache_test.py" "$prism" "$tmp/qwen3_5" || fail=1

# Speculative decoding: prompt lookup, a draft model (the model itself, on Qwen 3.5: its
# states go back when a guess is rejected), and Qwen 3.5's own multi-token prediction head.
"$python" "$PRISM_SOURCE_DIR/tests/serve/speculate_test.py" "$prism" "$tmp" --speculate=lookup || fail=1
"$python" "$PRISM_SOURCE_DIR/tests/serve/speculate_test.py" "$prism" "$tmp/qwen3_5" \
  --speculate=lookup || fail=1
"$python" "$PRISM_SOURCE_DIR/tests/serve/speculate_test.py" "$prism" "$tmp/qwen3_5" \
  --speculate=draft --draft-model="$PRISM_SOURCE_DIR/tests/data/qwen3_5/tiny-bf16-untied" || fail=1
"$python" "$PRISM_SOURCE_DIR/tests/serve/speculate_test.py" "$prism" "$tmp/qwen3_5" \
  --speculate=mtp || fail=1

# A GGUF file (Q8_0, its tokenizer and chat template inside), its matrices kept in their
# blocks: 4 conversations decode together through the quantized products.
"$python" "$PRISM_SOURCE_DIR/tests/serve/architecture_test.py" "$prism" \
  "${PRISM_GGUF_DIR:?}/tiny-bf16-tied-q8_0.gguf" || fail=1

check() {  # name, expected, actual
  if [[ "$2" != "$3" ]]; then echo "FAIL $1: expected '$2', got '$3'"; fail=1; else echo "ok $1"; fi
}
err=$("$prism" serve --model="$tmp" --port=70000 2>&1); rc=$?
check "bad port" "1 prism: error: serve: --port must be 0..65535, got 70000" "$rc $err"
err=$("$prism" serve --model="$PRISM_SOURCE_DIR/tests/data/llama/tiny-f32" 2>&1); rc=$?
check "no tokenizer" "1 prism: error: serve: $PRISM_SOURCE_DIR/tests/data/llama/tiny-f32 has no tokenizer.json" "$rc $err"
err=$("$prism" serve --model="$tmp" --parallel=0 2>&1); rc=$?
check "bad --parallel" "1 prism: error: serve: --parallel must be 1..256, got 0" "$rc $err"
err=$("$prism" serve --model="$tmp" --quantize=q5_k 2>&1); rc=$?
check "bad --quantize" "1 prism: error: serve: --quantize=q5_k is not one of q8_0, q4_0, q4_k" "$rc $err"
err=$("$prism" serve --model="$tmp" --devices=2 --mesh=model:2 2>&1); rc=$?
check "--devices and --mesh" "1 prism: error: serve: give --devices or --mesh, not both" "$rc $err"
err=$("$prism" serve --model="$tmp" --prompt-cache=maybe 2>&1); rc=$?
check "bad --prompt-cache" "1 prism: error: Could not convert: --prompt-cache = maybe (--help lists the options)" "$((rc != 0)) $err"
err=$("$prism" serve --model="$tmp" --speculate=draft 2>&1); rc=$?
check "--speculate=draft alone" "1 prism: error: serve: --speculate=draft needs --draft-model=URI" "$rc $err"
exit $fail
