#!/usr/bin/env bash
# prism llm from the command line: greedy ids for the tiny fixtures, and bad input.
set -u
prism="$1"
data="$PRISM_SOURCE_DIR/tests/data/llama"
fail=0
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
check() {  # name, expected, actual
  if [[ "$2" != "$3" ]]; then echo "FAIL $1: expected '$2', got '$3'"; fail=1; else echo "ok $1"; fi
}

want=$(sed -n 's/.*"greedy_ids": *\[\([^]]*\)\].*/\1/p' <(tr -d '\n ' <"$data/tiny-f32/reference.json") | tr ',' ' ')
got=$("$prism" llm --model="$data/tiny-f32" --prompt-ids=128000,791,6864,315,9822,374 \
  --max-tokens=24 --print-ids --seqlen=64 2>/dev/null)
check "greedy ids" "$want" "$got"
got=$("$prism" llm --model="$data/tiny-f32" --prompt-ids=128000,791,6864,315,9822,374 \
  --max-tokens=24 --print-ids --seqlen=64 --map-weights 2>/dev/null)
check "greedy ids with the weights mapped in place" "$want" "$got"
# Speculative decoding with prompt lookup: the same ids, the guesses counted on the last line.
for k in 1 4 9; do
  got=$("$prism" llm --model="$data/tiny-f32" --prompt-ids=128000,791,6864,315,9822,374 \
    --max-tokens=24 --print-ids --seqlen=64 --speculate=lookup --draft-tokens=$k 2>"$tmp/spec.err")
  check "greedy ids with prompt lookup, $k guesses a step" "$want" "$got"
  grep -q ' · speculation: [0-9]* of [0-9]* guesses kept' "$tmp/spec.err" \
    || { echo "FAIL speculation statistics: $(cat "$tmp/spec.err")"; fail=1; }
done
# A cache that fills up: the same ids up to it, guesses or not.
want_full=$("$prism" llm --model="$data/tiny-f32" --prompt-ids=128000,791,6864,315,9822,374,791,6864 \
  --max-tokens=40 --print-ids --seqlen=20 2>/dev/null)
got=$("$prism" llm --model="$data/tiny-f32" --prompt-ids=128000,791,6864,315,9822,374,791,6864 \
  --max-tokens=40 --print-ids --seqlen=20 --speculate=lookup --draft-tokens=6 2>/dev/null)
check "a full cache with prompt lookup" "$want_full" "$got"
check "a full cache's answer" 13 "$(echo $got | wc -w)"
err=$("$prism" llm --model="$data/tiny-f32" --prompt-ids=1 --speculate=medium 2>&1 >/dev/null); rc=$?
check "bad --speculate" "1 prism: error: llm: --speculate=medium is not one of none, lookup, draft, mtp" "$rc $err"
err=$("$prism" llm --model="$data/tiny-f32" --prompt-ids=1 --print-ids --seqlen=64 --speculate=mtp 2>&1 >/dev/null); rc=$?
check "--speculate=mtp without a head" "1 prism: error: llm: this llama checkpoint has no multi-token prediction head (--speculate=mtp)" "$rc $err"
# Qwen 3.5's own multi-token prediction head: the same greedy ids, in the checkpoint's bf16.
qwen="$PRISM_SOURCE_DIR/tests/data/qwen3_5/tiny-bf16-untied"
want_qwen=$("$prism" llm --model="$qwen" --prompt-ids=151644,872,198,3838,374 --max-tokens=20 \
  --print-ids --seqlen=64 2>/dev/null)
for k in 1 3; do
  got=$("$prism" llm --model="$qwen" --prompt-ids=151644,872,198,3838,374 --max-tokens=20 \
    --print-ids --seqlen=64 --speculate=mtp --draft-tokens=$k 2>"$tmp/spec.err")
  check "greedy ids with the multi-token prediction head, $k guesses a step" "$want_qwen" "$got"
  grep -q ' · speculation: [0-9]* of [0-9]* guesses kept' "$tmp/spec.err" \
    || { echo "FAIL mtp statistics: $(cat "$tmp/spec.err")"; fail=1; }
done
err=$("$prism" llm --model="$data/tiny-f32" --prompt-ids=1 --speculate=draft 2>&1 >/dev/null); rc=$?
check "--speculate=draft alone" "1 prism: error: llm: --speculate=draft needs --draft-model=URI" "$rc $err"
err=$("$prism" llm --model="$data/tiny-f32" --prompt-ids=1 --draft-model="$data/tiny-f32" 2>&1 >/dev/null); rc=$?
check "--draft-model alone" "1 prism: error: llm: --draft-model is for --speculate=draft" "$rc $err"
err=$("$prism" llm --model="$data/../lfm2/tiny-bf16-tied" --prompt-ids=1 --print-ids --seqlen=4096 --speculate=draft \
  --draft-model="$data/tiny-f32" 2>&1 >/dev/null | tail -1); rc=$?
check "a draft model shorter than --seqlen" "prism: error: llm: the draft model $data/tiny-f32: --seqlen=4096 must be between 1 and the model's 2048 positions" "$err"
# A draft model: the model itself (every guess kept), and another model with the same
# vocabulary (few kept): the same ids either way.
for draft in "$data/tiny-f32" "$data/tiny-bf16-tied"; do
  got=$("$prism" llm --model="$data/tiny-f32" --prompt-ids=128000,791,6864,315,9822,374 \
    --max-tokens=24 --print-ids --seqlen=64 --speculate=draft --draft-model="$draft" 2>"$tmp/spec.err")
  check "greedy ids with the draft model ${draft##*/}" "$want" "$got"
  grep -q ' · speculation: [0-9]* of [0-9]* guesses kept' "$tmp/spec.err" \
    || { echo "FAIL draft model statistics: $(cat "$tmp/spec.err")"; fail=1; }
done
err=$("$prism" llm --model="$data/tiny-f32" --prompt-ids=1 --speculate=lookup --draft-tokens=0 2>&1 >/dev/null); rc=$?
check "bad --draft-tokens" "1 prism: error: llm: --draft-tokens must be between 1 and 32, got 0" "$rc $err"
err=$("$prism" llm --model="$data/tiny-f32" --prompt-ids=1 --frequency-penalty=3 2>&1 >/dev/null); rc=$?
check "bad --frequency-penalty" "1 prism: error: sampler: frequency penalty must be in [-2, 2], got 3" "$rc $err"
# --json-schema: a schema it cannot hold to, a file it cannot read, with --json or --speculate:
# one line, before the model loads.
err=$("$prism" llm --model="$data/tiny-f32" --prompt-ids=1 --json-schema='{"type": "strin"}' 2>&1 >/dev/null); rc=$?
check "bad --json-schema" "1 prism: error: json_schema: at the root: unknown type 'strin' (--json-schema)" "$rc $err"
err=$("$prism" llm --model="$data/tiny-f32" --prompt-ids=1 --json-schema="$tmp/none.json" 2>&1 >/dev/null); rc=$?
check "missing --json-schema file" "1 prism: error: llm: cannot read the --json-schema file $tmp/none.json" "$rc $err"
echo '{"type": "object", "properties": {"a": {"type": "integer", "multipleOf": 2}}}' >"$tmp/schema.json"
err=$("$prism" llm --model="$data/tiny-f32" --prompt-ids=1 --json-schema="$tmp/schema.json" 2>&1 >/dev/null); rc=$?
check "--json-schema file with multipleOf" "1 prism: error: json_schema: at /properties/a: 'multipleOf' is not supported (--json-schema)" "$rc $err"
err=$("$prism" llm --model="$data/tiny-f32" --prompt-ids=1 --json --speculate=lookup 2>&1 >/dev/null); rc=$?
check "--json with --speculate" "1 prism: error: llm: --speculate with --json or --json-schema is not supported" "$rc $err"

# The same ids on every other platform this binary has available (OpenCL on PoCL in CI), chosen
# with --platform and with PRISM_PLATFORM.
for p in $("$prism" info | sed -n 's/^  \([a-z]*\) *available$/\1/p' | grep -v '^cpu$'); do
  got=$("$prism" llm --model="$data/tiny-f32" --prompt-ids=128000,791,6864,315,9822,374 \
    --max-tokens=24 --print-ids --seqlen=64 --platform="$p" 2>/dev/null)
  check "greedy ids on $p" "$want" "$got"
  got=$(PRISM_PLATFORM="$p" "$prism" llm --model="$data/tiny-f32" \
    --prompt-ids=128000,791,6864,315,9822,374 --max-tokens=24 --print-ids --seqlen=64 2>/dev/null)
  check "greedy ids on $p (PRISM_PLATFORM)" "$want" "$got"
done
err=$("$prism" llm --model="$data/tiny-f32" --prompt-ids=1 --print-ids --platform=abacus 2>&1 >/dev/null); rc=$?
check "unknown platform" "1 prism: error: unknown platform 'abacus' (expected cpu, cuda, opencl, xla-cpu, xla-cuda, tpu, neuron, rocm, oneapi, pjrt or auto)" "$rc $err"
err=$("$prism" llm --model="$data/tiny-f32" --prompt-ids=1 --fast-start=maybe 2>&1); rc=$?
check "bad option value" "prism: error: Could not convert: --fast-start = maybe (--help lists the options)" "$err"
[[ $rc -ne 0 ]] || { echo "FAIL bad option value: exit 0"; fail=1; }

err=$("$prism" llm --model="$data/tiny-f32" --prompt-ids=1,x,3 2>&1 >/dev/null); rc=$?
check "bad ids exit" 1 "$rc"
check "bad ids message" "prism: error: llm: --prompt-ids must be comma-separated token ids, got 'x'" "$err"

err=$("$prism" llm --model="$data/missing" --prompt-ids=1 2>&1 >/dev/null); rc=$?
check "missing model exit" 1 "$rc"
[[ $(echo "$err" | wc -l) == 1 && "$err" == "prism: error: "* ]] || { echo "FAIL missing model: $err"; fail=1; }

err=$("$prism" llm --model="$data/tiny-f32" --prompt-ids=1 --dtype=f16 2>&1 >/dev/null); rc=$?
check "bad dtype" "1 prism: error: llm: --dtype must be auto, f32 or bf16, got f16" "$rc $err"
# Text in, text out: a model directory with the real Llama 3.1 tokenizer. The answer to a
# --prompt must be what the same conversation gives through the template, ids and detokenize.
tokdir="${PRISM_TOKENIZERS_DIR:?}/llama3_1"
for f in config.json generation_config.json model.safetensors; do ln -s "$data/tiny-bf16-tied/$f" "$tmp/$f"; done
for f in tokenizer.json tokenizer_config.json; do ln -s "$tokdir/$f" "$tmp/$f"; done
printf '[{"role":"system","content":"Be brief."},{"role":"user","content":"What is the capital of France?"}]' >"$tmp/messages.json"
"$prism" chat-template --tokenizer="$tmp" --messages="$tmp/messages.json" --add-generation-prompt >"$tmp/prompt.txt"
ids=$("$prism" tokenize --tokenizer="$tmp" --text-file="$tmp/prompt.txt" | tr ' ' ',')
gen=$("$prism" llm --model="$tmp" --prompt-ids="$ids" --print-ids --max-tokens=6 2>/dev/null)
want=$("$prism" detokenize --tokenizer="$tmp" --skip-special $gen)
got=$("$prism" llm --model="$tmp" --system="Be brief." --prompt="What is the capital of France?" --max-tokens=6 2>/dev/null)
check "text prompt = template + ids + detokenize" "$want" "$got"

# --stop: the answer ends with the token that completes the stop text, which may span tokens.
full=$("$prism" llm --model="$tmp" --prompt=hi --max-tokens=10 2>/dev/null)
stop="${full:3:6}"
cut=$("$prism" llm --model="$tmp" --prompt=hi --max-tokens=10 --stop="$stop" 2>/dev/null)
[[ "$full" == "$cut"* && "$cut" == *"$stop"* && ${#cut} -lt ${#full} ]] \
  || { echo "FAIL stop: '$cut' for stop '$stop' in '$full'"; fail=1; }

# The statistics line after the answer, on a line of its own also where stdout and stderr
# share a pipe.
got=$("$prism" llm --model="$tmp" --prompt=hi --max-tokens=4 2>&1 | tail -1 | grep -c '^prefill: ')
check "the statistics on a line of their own" 1 "$got"

# Chat: turns from standard input, /reset, /exit; the second turn prefills only its new tokens.
out=$(printf 'hello\nhow are you\n/reset\nhi\n/exit\n' | "$prism" llm --model="$tmp" --max-tokens=3 2>"$tmp/chat.err"); rc=$?
check "chat exit" 0 "$rc"
check "chat answers" 3 "$(echo "$out" | wc -l)"
grep -q "^prefill: " "$tmp/chat.err" || { echo "FAIL chat stats: $(cat "$tmp/chat.err")"; fail=1; }
# A turn cut by --max-tokens: its last token was not run when the answer stopped; the next turn
# runs it first, and answers as the whole conversation rendered and fed at once does.
chat=$(printf 'hello\nhow are you\n' | "$prism" llm --model="$tmp" --max-tokens=3 --fast-start=false 2>/dev/null)
printf '[{"role":"user","content":"hello"},{"role":"assistant","content":"%s"},{"role":"user","content":"how are you"}]' \
  "$(echo "$chat" | sed -n 1p | sed 's/["\\]/\\&/g')" >"$tmp/turns.json"
"$prism" chat-template --tokenizer="$tmp" --messages="$tmp/turns.json" --add-generation-prompt >"$tmp/turns.txt"
ids=$("$prism" tokenize --tokenizer="$tmp" --text-file="$tmp/turns.txt" | tr ' ' ',')
gen=$("$prism" llm --model="$tmp" --prompt-ids="$ids" --print-ids --max-tokens=3 --fast-start=false 2>/dev/null)
check "a turn after one cut by --max-tokens" "$("$prism" detokenize --tokenizer="$tmp" --skip-special $gen)" \
  "$(echo "$chat" | sed -n 2p)"
# The same turns with prompt lookup: the same answers (each turn goes on from where the last
# answer's guesses were taken back to).
turns='hello\nhow are you\nhow are you\n/reset\nhi\n/exit\n'
want=$(printf "$turns" | "$prism" llm --model="$tmp" --max-tokens=20 2>/dev/null)
got=$(printf "$turns" | "$prism" llm --model="$tmp" --max-tokens=20 --speculate=lookup 2>"$tmp/chat.err")
check "chat answers with prompt lookup" "$want" "$got"
grep -q ' · speculation: [1-9][0-9]* of' "$tmp/chat.err" \
  || { echo "FAIL chat with prompt lookup kept no guess: $(cat "$tmp/chat.err")"; fail=1; }

# No tokenizer: text needs one; ids work without.
err=$("$prism" llm --model="$data/tiny-f32" --prompt=hi 2>&1 >/dev/null); rc=$?
check "no tokenizer" "1 prism: error: llm: $data/tiny-f32 has no tokenizer.json: use --prompt-ids=... with --print-ids" "$rc $err"
exit $fail
