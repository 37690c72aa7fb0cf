#!/usr/bin/env bash
# `prism quantize` and `prism llm --quantize`: the tiny Llama checkpoints written as GGUF files of
# every type run as the checkpoints they came from (f32, bf16: the same greedy ids; q8_0: the ids
# of the converter's Q8_0 file; q4_0, q4_k: the ids of the checkpoint quantized at load, which
# dequantizes the same blocks), a checkpoint wide enough for Q4_K's 256-element blocks, and one
# clear error line, with no file left behind, for each bad input.
set -u
# Quantized products in f32, the float reference's arithmetic (by default the CPU rounds their
# activations to 8 bits where it has integer kernels): the ids below are the dequantized
# checkpoints'.
export PRISM_CPU_QUANT_ACTIVATIONS=f32
prism="$1"
data="$PRISM_SOURCE_DIR/tests/data/llama"
gguf="${PRISM_GGUF_DIR:?}"
tokenizer="${PRISM_TOKENIZERS_DIR:?}/llama3_1"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fail=0
check() {  # name, expected, actual
  if [[ "$2" != "$3" ]]; then echo "FAIL $1: expected '$2', got '$3'"; fail=1; else echo "ok $1"; fi
}
ids=128000,791,6864,315,9822,374
greedy() { "$prism" llm --model="$1" --prompt-ids=$ids --max-tokens=24 --print-ids --seqlen=64 --dtype=f32 "${@:2}" 2>/dev/null; }
quantize() { "$prism" quantize "$@" 2>"$tmp/quantize.err" || { echo "FAIL quantize $*: $(cat "$tmp/quantize.err")"; fail=1; }; }

for model in tiny-f32 tiny-bf16-tied; do
  want=$(greedy "$data/$model")
  [[ -n "$want" ]] || { echo "FAIL $model: no ids"; fail=1; }
  for type in f32 bf16; do
    quantize "$data/$model" "$tmp/$model-$type.gguf" --type=$type --tokenizer="$tokenizer"
    check "$model $type greedy ids" "$want" "$(greedy "$tmp/$model-$type.gguf")"
  done
  for type in q8_0 q4_0 q4_k; do
    quantize "$data/$model" "$tmp/$model-$type.gguf" --type=$type
    got=$(greedy "$tmp/$model-$type.gguf")
    [[ "$got" =~ ^[0-9]+( [0-9]+){23}$ ]] || { echo "FAIL $model $type runs: '$got'"; fail=1; }
    check "$model $type = quantized at load" "$(greedy "$data/$model" --quantize=$type)" "$got"
  done
done
# The Q8_0 file runs as the Q8_0 values dequantized into a checkpoint (tools/make_tiny_gguf.py).
check "q8_0 = its dequantized checkpoint" "$(greedy "$gguf/tiny-bf16-tied-q8_0-ref")" \
  "$(greedy "$tmp/tiny-bf16-tied-q8_0.gguf")"
# Text in, text out, with the tokenizer and chat template written into the file.
ask() { "$prism" llm --model="$1" --prompt="What is the capital of France?" --max-tokens=8 --seqlen=64 --dtype=f32 2>/dev/null; }
check "text prompt" "$(ask "$gguf/tiny-bf16-tied.gguf")" "$(ask "$tmp/tiny-bf16-tied-bf16.gguf")"
# What falls back where blocks do not fit: tiny-f32's rows of 16 and 48 take no block type.
quantize "$data/tiny-bf16-tied" "$tmp/x.gguf" --type=q4_k
check "q4_k fallback" "wrote $tmp/x.gguf: 6 F32, 15 Q5_0 tensors (2.8 MB), no tokenizer" "$(cat "$tmp/quantize.err")"
# The Q5_0 file runs as the checkpoint quantized to Q4_K at load (which falls back alike).
check "q4_k fallback = quantized at load" "$(greedy "$data/tiny-bf16-tied" --quantize=q4_k)" \
  "$(greedy "$tmp/x.gguf")"
quantize "$data/tiny-f32" "$tmp/x.gguf" --type=q8_0
check "q8_0 fallback" "wrote $tmp/x.gguf: 7 F32, 23 F16 tensors (8.2 MB), no tokenizer" "$(cat "$tmp/quantize.err")"

# A checkpoint whose rows are whole Q4_K blocks (256): every matrix Q4_K.
make_wide() { python3 "$PRISM_SOURCE_DIR/tools/make_wide_llama.py" "$@"; }
make_wide "$tmp/wide"
quantize "$tmp/wide" "$tmp/wide-q4_k.gguf" --type=q4_k
check "wide q4_k types" "wrote $tmp/wide-q4_k.gguf: 3 F32, 9 Q4_K tensors (0.5 MB), no tokenizer" "$(cat "$tmp/quantize.err")"
wide() { "$prism" llm --model="$1" --prompt-ids=1,2,3,4 --max-tokens=12 --print-ids --seqlen=64 --dtype=f32 "${@:2}" 2>/dev/null; }
check "wide q4_k = quantized at load" "$(wide "$tmp/wide" --quantize=q4_k)" "$(wide "$tmp/wide-q4_k.gguf")"
quantize "$tmp/wide" "$tmp/wide-f32.gguf" --type=f32
check "wide f32 greedy ids" "$(wide "$tmp/wide")" "$(wide "$tmp/wide-f32.gguf")"

# Bad input: exit code 1, one line, and no file (nor temporary file) left.
expect_error() {  # name, want (a part of the message), command...
  local err rc
  err=$("${@:3}" 2>&1 >/dev/null); rc=$?
  if [[ $rc -ne 1 || $(wc -l <<<"$err") -ne 1 || "$err" != "prism: error: "*"$2"* ]]; then
    echo "FAIL $1: exit $rc, '$err'"; fail=1
  else
    echo "ok $1"
  fi
}
mkdir -p "$tmp/bad" && cd "$tmp/bad"
expect_error "unknown type" "quantize: --type=q3_k is not one of f32, f16, bf16, q8_0, q4_0, q4_k" \
  "$prism" quantize "$data/tiny-f32" out.gguf --type=q3_k
expect_error "not a .gguf" "quantize: the output out.bin must be a .gguf file" \
  "$prism" quantize "$data/tiny-f32" out.bin
expect_error "no checkpoint" "$tmp/none/config.json" "$prism" quantize "$tmp/none" out.gguf
make_wide "$tmp/missing" model.layers.0.mlp.up_proj.weight
expect_error "missing tensor" "no tensor 'model.layers.0.mlp.up_proj.weight', which a llama of 1 layers" \
  "$prism" quantize "$tmp/missing" out.gguf
mkdir -p "$tmp/gemma" && sed 's/"llama"/"gemma3"/' "$tmp/wide/config.json" >"$tmp/gemma/config.json"
ln -s "$tmp/wide/model.safetensors" "$tmp/gemma/model.safetensors"
expect_error "unsupported architecture" \
  "has model_type \"gemma3\"; llama, lfm2 and qwen3_5 are written as GGUF" \
  "$prism" quantize "$tmp/gemma" out.gguf
expect_error "unwritable path" "cannot write $tmp/nowhere/out.gguf: No such file or directory" \
  "$prism" quantize "$data/tiny-f32" "$tmp/nowhere/out.gguf" --type=f32
expect_error "no tokenizer.json" "quantize: --tokenizer=$tmp has no tokenizer.json" \
  "$prism" quantize "$data/tiny-f32" out.gguf --tokenizer="$tmp"
left=$(ls -A "$tmp/bad")
check "no file left" "" "$left"
expect_error "llm --quantize unknown" "llm: --quantize=q5_k is not one of q8_0, q4_0, q4_k" \
  "$prism" llm --model="$data/tiny-f32" --prompt-ids=1 --print-ids --quantize=q5_k
expect_error "llm --quantize on GGUF" "llm: --quantize takes a safetensors checkpoint" \
  "$prism" llm --model="$gguf/tiny-f32.gguf" --prompt-ids=1 --print-ids --quantize=q8_0
# LFM 2: the Q8_0 file runs as the checkpoint quantized to Q8_0 at load.
lfm2="$PRISM_SOURCE_DIR/tests/data/lfm2/tiny-bf16-tied"
"$prism" quantize "$lfm2" "$tmp/lfm2-q8_0.gguf" --type=q8_0 2>/dev/null ||
  { echo "FAIL lfm2 quantize"; fail=1; }
run_ids() { "$prism" llm --model="$1" --prompt-ids=1,2,3,10,20 --max-tokens=12 --print-ids --seqlen=64 --dtype=f32 "${@:2}" 2>/dev/null; }
check "lfm2 q8_0 file = quantized at load" "$(run_ids "$lfm2" --quantize=q8_0)" "$(run_ids "$tmp/lfm2-q8_0.gguf")"
# Qwen 3.5 too (its value heads reordered, norms and A_log stored as llama.cpp's converter does).
qwen="$PRISM_SOURCE_DIR/tests/data/qwen3_5/tiny-bf16-tied"
"$prism" quantize "$qwen" "$tmp/qwen-q8_0.gguf" --type=q8_0 2>/dev/null ||
  { echo "FAIL qwen3_5 quantize"; fail=1; }
check "qwen3_5 q8_0 file = quantized at load" "$(run_ids "$qwen" --quantize=q8_0)" "$(run_ids "$tmp/qwen-q8_0.gguf")"

expect_error "llm --keep-quantized unknown" "llm: --keep-quantized=always is not one of auto, yes, no" \
  "$prism" llm --model="$data/tiny-f32" --prompt-ids=1 --print-ids --quantize=q8_0 --keep-quantized=always
# Kept or not, the same weights: the same greedy ids.
check "--keep-quantized=no" "$(greedy "$data/tiny-f32" --quantize=q4_0)" \
  "$(greedy "$data/tiny-f32" --quantize=q4_0 --keep-quantized=no)"

exit $fail
