#!/usr/bin/env bash
# prism quantize's GGUF files against llama.cpp itself (built by scripts/setup.sh --bench into
# third_party/llama.cpp; not available in CI, hence a tool rather than a test):
#   1. llama.cpp loads prism's F32 files of the tiny Llama checkpoints and its greedy ids equal
#      prism's on the checkpoints (bench/llamacpp_peer.cpp drives llama.cpp's C API);
#   2. llama.cpp is given prism's Q8_0 / Q4_0 / Q4_K files too (its ids are printed, not
#      compared: llama.cpp's quantized products quantize the activations as well). On
#      tiny-bf16-tied (head size 8) the llama.cpp built here crashes on every quantized file,
#      tools/make_tiny_gguf.py's converter-made Q8_0 fixture included: noted, not failed;
#   3. prism's Q4_K blocks equal llama-quantize's (--pure Q4_K_S, no importance matrix: ggml's
#      reference quantization) bit for bit, on a checkpoint wide enough for 256-element blocks,
#      and so do its Q5_0 blocks where rows of 32 and 64 make both fall back (tiny-bf16-tied).
# Needs the gguf package for step 3 (.venv, scripts/setup.sh --tools).
#
#   tools/check_quantize_llamacpp.sh [build/bin/prism]
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
prism=${1:-$root/build/bin/prism}
llama=$root/third_party/llama.cpp
tokenizer=$root/build/data/tokenizers/llama3_1
[[ -x $llama/bin/llamacpp-peer && -x $llama/bin/llama-quantize ]] ||
  { echo "check_quantize_llamacpp: llama.cpp is not built (scripts/setup.sh --bench)"; exit 77; }
export LD_LIBRARY_PATH=$llama/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fail=0
ids=128000,791,6864,315,9822,374
peer() { "$llama/bin/llamacpp-peer" "$1" 2 $ids 23 $ids 1 1 $ids 2>/dev/null | sed -n 's/^greedy_long //p' | tr , ' '; }

for model in tiny-f32 tiny-bf16-tied; do
  want=$("$prism" llm --model="$root/tests/data/llama/$model" --prompt-ids=$ids --max-tokens=24 \
    --print-ids --seqlen=64 --dtype=f32 2>/dev/null)
  for type in f32 q8_0 q4_0 q4_k; do
    "$prism" quantize "$root/tests/data/llama/$model" "$tmp/$model-$type.gguf" --type=$type \
      --tokenizer="$tokenizer" 2>/dev/null || { echo "FAIL prism quantize $model $type"; fail=1; continue; }
    got=$(peer "$tmp/$model-$type.gguf")
    if [[ $type != f32 ]]; then
      [[ -n "$got" ]] && echo "ran  $model $type in llama.cpp: $got" ||
        echo "note $model $type: llama.cpp did not run it (see 2. above)"
    elif [[ "$got" == "$want" ]]; then
      echo "ok   $model f32: llama.cpp's greedy ids = prism's ($want)"
    else
      echo "FAIL $model f32: prism '$want', llama.cpp '$got'"; fail=1
    fi
  done
done

python3 "$root/tools/make_wide_llama.py" "$tmp/wide"
"$prism" quantize "$tmp/wide" "$tmp/wide-f32.gguf" --type=f32 2>/dev/null
"$prism" quantize "$tmp/wide" "$tmp/wide-q4_k.gguf" --type=q4_k 2>/dev/null
"$llama/bin/llama-quantize" --pure "$tmp/wide-f32.gguf" "$tmp/wide-llama-q4_k.gguf" Q4_K_S 2 \
  >"$tmp/quantize.log" 2>&1 || { echo "FAIL llama-quantize: $(tail -3 "$tmp/quantize.log")"; fail=1; }
"$llama/bin/llama-quantize" --pure "$tmp/tiny-bf16-tied-f32.gguf" "$tmp/tiny-llama-q4_k.gguf" \
  Q4_K_S 2 >"$tmp/quantize-tiny.log" 2>&1 ||
  { echo "FAIL llama-quantize tiny: $(tail -3 "$tmp/quantize-tiny.log")"; fail=1; }
python=$root/.venv/bin/python
if [[ -x $python ]] && "$python" -c 'import gguf' 2>/dev/null; then
  for pair in "wide-q4_k.gguf wide-llama-q4_k.gguf" "tiny-bf16-tied-q4_k.gguf tiny-llama-q4_k.gguf"; do
    set -- $pair
    "$python" - "$tmp/$1" "$tmp/$2" <<'PY' || fail=1
import sys
import numpy as np
import gguf
ours, theirs = (gguf.GGUFReader(p) for p in sys.argv[1:])
theirs = {t.name: t for t in theirs.tensors}
bad = 0
for t in ours.tensors:
    u = theirs[t.name]
    same = t.tensor_type == u.tensor_type and np.array_equal(
        np.asarray(t.data).view(np.uint8), np.asarray(u.data).view(np.uint8))
    print("%s %-26s %s %s" % ("ok  " if same else "FAIL", t.name, t.tensor_type.name,
                              "= llama-quantize's" if same else "differs from " + u.tensor_type.name))
    bad += not same
sys.exit(1 if bad else 0)
PY
  done
else
  echo "skip Q4_K bytes: the gguf package is not in .venv (scripts/setup.sh --tools)"
fi
exit $fail
