#!/usr/bin/env bash
# Writes tests/data/gguf/llamacpp_reference.json: what llama.cpp itself computes on the
# llamacpp-small GGUF files (tools/make_tiny_gguf.py writes them into <build>/data/gguf/), for
# tests/unit/llamacpp_reference_test.cpp, which holds prism to it without llama.cpp.
#
# For each file (F32, Q8_0, Q4_0): llama.cpp's 24 greedy ids after the prompt, then, fed the
# prompt and those ids in one batch (teacher-forced on its own ids), the five most likely next
# ids and their logits at each of the 24 steps, and the file's sha256 (the test refuses a file
# that changed). llama.cpp runs through bench/llamacpp_peer.cpp with its defaults (f16 KV cache,
# activations of quantized products rounded to 8 bits) but for the context and the threads.
#
# Needs llama.cpp built (scripts/setup.sh --bench) and the build's fixtures:
#   tools/make_llamacpp_reference.sh [BUILD_DIR]
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
llama=$root/third_party/llama.cpp
[[ -x $llama/bin/llamacpp-peer ]] ||
  { echo "make_llamacpp_reference: llama.cpp is not built (scripts/setup.sh --bench)" >&2; exit 1; }
export LD_LIBRARY_PATH=$llama/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
prompt=1,2,3,4,5,6
steps=24
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
for type in f32 q8_0 q4_0; do
  file=$build/data/gguf/llamacpp-small-$type.gguf
  [[ -f $file ]] || { echo "make_llamacpp_reference: no $file (build first)" >&2; exit 1; }
  # Its own greedy ids first (the forced ids of this run are placeholders), then teacher-forced
  # on them.
  zeros=$(printf '0%.0s,' $(seq $steps)); zeros=${zeros%,}
  ids=$("$llama/bin/llamacpp-peer" "$file" 2 $prompt 1 $prompt $steps 1 "$zeros" |
    sed -n 's/^greedy_short //p')
  "$llama/bin/llamacpp-peer" "$file" 2 $prompt 1 $prompt $steps 1 "$ids" |
    sed -n 's/^forced_top5 //p' >"$tmp/$type.top5"
  echo "$ids" >"$tmp/$type.ids"
  sha256sum "$file" | cut -d' ' -f1 >"$tmp/$type.sha256"
done
version=$(sed -n 's/^version=//p' "$root/scripts/build_llamacpp.sh")
python3 - "$tmp" "$root/tests/data/gguf/llamacpp_reference.json" "$prompt" "$version" <<'PY'
import json
import sys

tmp, out, prompt, version = sys.argv[1:]
models = {}
for t in ("f32", "q8_0", "q4_0"):
    read = lambda ext: open("%s/%s.%s" % (tmp, t, ext)).read().strip()  # noqa: E731
    top5 = [[[int(i), float(l)] for i, l in (x.split(":") for x in step.split("/"))]
            for step in read("top5").split(",")]
    models["llamacpp-small-%s.gguf" % t] = {
        "sha256": read("sha256"),
        "ids": [int(i) for i in read("ids").split(",")],
        "top5": top5,
    }
json.dump({"generator": "tools/make_llamacpp_reference.sh (llama.cpp of llama-cpp-python %s)"
           % version,
           "prompt": [int(i) for i in prompt.split(",")], "models": models},
          open(out, "w"), indent=1)
print("wrote", out)
PY
