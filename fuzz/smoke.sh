#!/usr/bin/env bash
# `make fuzz-smoke`: each libFuzzer target for SECONDS from its committed corpus (fuzz/corpus/,
# copied first: what the run finds stays out of the tree), with AddressSanitizer and
# UndefinedBehaviorSanitizer on. Any crash, sanitizer report, leak, timeout (10 s an input) or
# use of more than 2 GB fails it, and the input that did it is kept under BUILD/fuzz/artifacts.
# The run is the same every time: a fixed seed (FUZZ_SEED, default 1) and a fixed number of
# inputs a target (about 15 s of each on 2 cores of an Intel Xeon; SECONDS only caps a slower
# machine), so it fails only where the code changed, not by chance. Long runs for new crashes:
# FUZZ_SEED=0 (random) FUZZ_RUNS=-1 (unbounded) and more seconds; FUZZ_TARGETS="config gguf"
# runs only those (two such runs side by side use two cores).
# Usage: smoke.sh BUILD SECONDS
set -uo pipefail
build="$1"
seconds="$2"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
artifacts="$build/fuzz/artifacts"
mkdir -p "$artifacts"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
failed=0
declare -A runs_of=([safetensors]=150000 [gguf]=40000 [tokenizer]=30000 [jinja]=40000
                    [config]=300000 [s3_listing]=450000 [hf_listing]=300000
                    [serve_request]=300000 [answers]=300000 [json_schema]=100000
                    [tpu_metrics]=600000)
all="safetensors gguf tokenizer jinja config s3_listing hf_listing serve_request answers
     json_schema tpu_metrics"
for target in ${FUZZ_TARGETS:-$all}; do
  if [[ -z "${runs_of[$target]:-}" ]]; then
    echo "smoke.sh: no fuzz target '$target' (targets: $all)" >&2
    exit 2
  fi
  mkdir -p "$work/$target"
  cp "$here/corpus/$target/"* "$work/$target/"
  log="$work/$target.log"
  "$build/fuzz/fuzz_$target" -seed="${FUZZ_SEED:-1}" -runs="${FUZZ_RUNS:-${runs_of[$target]}}" \
    -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
    -print_final_stats=1 -artifact_prefix="$artifacts/$target-" "$work/$target" >"$log" 2>&1
  status=$?
  runs="$(grep -o 'stat::number_of_executed_units: [0-9]*' "$log" | grep -o '[0-9]*$')"
  if [[ $status -ne 0 ]]; then
    echo "FAIL fuzz_$target (exit $status):"
    grep -E "ERROR|SUMMARY|what\(\)|runtime error|Test unit written" "$log" | head -10
    failed=1
  else
    echo "ok fuzz_$target: ${runs:-0} inputs"
  fi
done
exit $failed
