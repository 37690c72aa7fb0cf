#!/usr/bin/env bash
# `prism llm` on GGUF files (tools/make_tiny_gguf.py writes them into the build tree): the same
# greedy ids and text as the checkpoints they came from, the tokenizer commands on a .gguf, and
# one clear error line for each broken file.
set -u
# Quantized products in f32, the float reference's arithmetic (by default the CPU rounds their
# activations to 8 bits where it has integer kernels): the ids below are the dequantized
# checkpoints'.
export PRISM_CPU_QUANT_ACTIVATIONS=f32
prism="$1"
data="$PRISM_SOURCE_DIR/tests/data/llama"
gguf="${PRISM_GGUF_DIR:?}"
fail=0
check() {  # name, expected, actual
  if [[ "$2" != "$3" ]]; then echo "FAIL $1: expected '$2', got '$3'"; fail=1; else echo "ok $1"; fi
}
ids=128000,791,6864,315,9822,374
greedy() { "$prism" llm --model="$1" --prompt-ids=$ids --max-tokens=24 --print-ids --seqlen=64 --dtype=f32 "${@:2}" 2>/dev/null; }

check "f32 greedy ids" "$(greedy "$data/tiny-f32")" "$(greedy "$gguf/tiny-f32.gguf")"
check "bf16 tied greedy ids" "$(greedy "$data/tiny-bf16-tied")" "$(greedy "$gguf/tiny-bf16-tied.gguf")"
check "q8_0 greedy ids" "$(greedy "$gguf/tiny-bf16-tied-q8_0-ref")" \
  "$(greedy "$gguf/tiny-bf16-tied-q8_0.gguf")"
check "q8_0 greedy ids in bf16" "$(greedy "$gguf/tiny-bf16-tied-q8_0-ref" --dtype=bf16)" \
  "$(greedy "$gguf/tiny-bf16-tied-q8_0.gguf" --dtype=bf16)"
check "q8_0 greedy ids on 2 devices" "$(greedy "$gguf/tiny-bf16-tied-q8_0.gguf")" \
  "$(PRISM_CPU_DEVICES=2 greedy "$gguf/tiny-bf16-tied-q8_0.gguf" --devices=2)"

# Text in, text out, with the file's own tokenizer and chat template: what the checkpoint
# directory with the Llama 3.1 tokenizer files answers.
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
for f in config.json generation_config.json model.safetensors; do ln -s "$data/tiny-bf16-tied/$f" "$tmp/$f"; done
for f in tokenizer.json tokenizer_config.json; do ln -s "${PRISM_TOKENIZERS_DIR:?}/llama3_1/$f" "$tmp/$f"; done
ask() { "$prism" llm --model="$1" --system="Be brief." --prompt="What is the capital of France?" --max-tokens=8 --seqlen=64 2>/dev/null; }
check "text prompt" "$(ask "$tmp")" "$(ask "$gguf/tiny-bf16-tied.gguf")"

text='Hello <|eot_id|> wörld 12345 😀'
check "tokenize" "$("$prism" tokenize --tokenizer="$tmp" --special "$text")" \
  "$("$prism" tokenize --tokenizer="$gguf/tiny-f32.gguf" --special "$text")"
printf '[{"role":"user","content":"Hi"}]' >"$tmp/messages.json"
check "chat-template" \
  "$("$prism" chat-template --tokenizer="$tmp" --messages="$tmp/messages.json" --add-generation-prompt)" \
  "$("$prism" chat-template --tokenizer="$gguf/tiny-f32.gguf" --messages="$tmp/messages.json" --add-generation-prompt)"
# A SentencePiece tokenizer ("llama", as Llama 2's and Mistral's files have it): the ids
# sentencepiece gives (tests/data/gguf/spm_tokenizer_ref.json), and back (the text after a
# special token got its own dummy prefix, so it decodes with one space more).
spm="$PRISM_SOURCE_DIR/tests/data/gguf/spm_tokenizer.gguf"
check "sentencepiece tokenize" "1 548 437 2 635 504 355" \
  "$("$prism" tokenize --tokenizer="$spm" --special "Hello there</s> and more")"
check "sentencepiece detokenize" "<s> Hello there</s>  and more" \
  "$("$prism" detokenize --tokenizer="$spm" 1 548 437 2 635 504 355)"

# Broken files: exit code 1 and one line naming the file and what is wrong.
expect_error() {  # name, want (a part of the message), command...
  local err rc
  err=$("${@:3}" 2>&1 >/dev/null); rc=$?
  if [[ $rc -ne 1 || $(wc -l <<<"$err") -ne 1 || "$err" != "prism: error: "*"$2"* ]]; then
    echo "FAIL $1: exit $rc, '$err'"; fail=1
  else
    echo "ok $1"
  fi
}
small="a llama of 1 blocks, width 32, 2/1 heads of 16, MLP 64, vocabulary 64"
expect_error "unknown architecture" \
  "$gguf/bad-arch.gguf: general.architecture \"mamba\" is not supported in GGUF files (supported: llama, lfm2, qwen35)" \
  "$prism" llm --model="$gguf/bad-arch.gguf" --prompt-ids=1 --print-ids
expect_error "missing tensor" "$gguf/bad-missing.gguf: no tensor 'blk.0.ffn_up.weight', which $small needs" \
  "$prism" llm --model="$gguf/bad-missing.gguf" --prompt-ids=1 --print-ids
expect_error "wrong shape" \
  "$gguf/bad-shape.gguf: tensor 'blk.0.attn_k.weight' is F32[32, 32] but $small needs [16, 32]" \
  "$prism" llm --model="$gguf/bad-shape.gguf" --prompt-ids=1 --print-ids
expect_error "unknown tokenizer" \
  "$gguf/bad-tokenizer.gguf: tokenizer.ggml.model \"bert\" is not supported (gpt2, byte-level BPE, and llama, SentencePiece BPE, are)" \
  "$prism" llm --model="$gguf/bad-tokenizer.gguf" --prompt=hi
expect_error "unknown pre-tokenizer" \
  "$gguf/bad-pre.gguf: tokenizer.ggml.pre \"mystery-bpe\" is not supported (llama-bpe, lfm2, qwen2, qwen35 are)" \
  "$prism" tokenize --tokenizer="$gguf/bad-pre.gguf" hi
expect_error "unknown activation mode" \
  "cpu: PRISM_CPU_QUANT_ACTIVATIONS must be int8 or f32, not 'int4'" \
  env PRISM_CPU_QUANT_ACTIVATIONS=int4 "$prism" llm --model="$gguf/tiny-bf16-tied-q8_0.gguf" \
  --prompt-ids=1 --print-ids --seqlen=64
# The default activations (8 bits where the CPU has the integer kernels) run the Q8_0 file.
got=$(PRISM_CPU_QUANT_ACTIVATIONS=int8 greedy "$gguf/tiny-bf16-tied-q8_0.gguf")
[[ "$got" =~ ^[0-9]+( [0-9]+){23}$ ]] && echo "ok q8_0 with 8-bit activations" ||
  { echo "FAIL q8_0 with 8-bit activations: '$got'"; fail=1; }
# Ids need no tokenizer: the file with the unknown one still runs on them.
got=$("$prism" llm --model="$gguf/bad-tokenizer.gguf" --prompt-ids=1,2,3 --print-ids --max-tokens=3 --seqlen=64 2>/dev/null)
[[ "$got" =~ ^[0-9]+\ [0-9]+\ [0-9]+$ ]] && echo "ok ids without a tokenizer" ||
  { echo "FAIL ids without a tokenizer: '$got'"; fail=1; }

exit $fail
