#!/usr/bin/env bash
# prism smi on this machine: the table (a CPU row and its cores, within 80 columns), JSON lines
# a parser reads with the fields docs/smi.md gives, and bad options.
set -u
prism="$1"
python="${PRISM_VENV_PYTHON:?}"
fail=0
check() {  # name, expected, actual
  if [[ "$2" != "$3" ]]; then echo "FAIL $1: expected '$2', got '$3'"; fail=1; else echo "ok $1"; fi
}

out=$("$prism" smi --interval=0.1); rc=$?
check "table exit" 0 "$rc"
check "header" "DEVICE NAME UTIL MEMORY GiB TEMP POWER CLOCK" "$(echo "$out" | head -1 | tr -s ' ')"
echo "$out" | grep -q '^cpu:0 ' || { echo "FAIL no cpu row: $out"; fail=1; }
echo "$out" | grep -q '^ *cores  *0:' || { echo "FAIL no cores line: $out"; fail=1; }
long=$(echo "$out" | awk 'length($0) > 80' | wc -l)
check "within 80 columns" 0 "$long"

"$prism" smi --json --count=3 --interval=0.05 >"${TMPDIR:-/tmp}/smi.$$.json"; rc=$?
check "json exit" 0 "$rc"
got=$("$python" - "${TMPDIR:-/tmp}/smi.$$.json" <<'PY'
import json, sys
lines = open(sys.argv[1]).read().splitlines()
keys = {"source", "index", "name", "utilization", "core_utilization", "memory_used_bytes",
        "memory_total_bytes", "temperature_c", "power_w", "clock_mhz", "processes", "errors"}
samples = [json.loads(l) for l in lines]
cpu = [d for s in samples for d in s["devices"] if d["source"] == "cpu"]
ok = (len(samples) == 3 and len(cpu) == 3 and all(set(d) == keys for d in cpu)
      and all(0 <= d["utilization"] <= 1 for d in cpu)
      and all(d["memory_used_bytes"] <= d["memory_total_bytes"] for d in cpu)
      and samples[0]["time"] < samples[1]["time"] < samples[2]["time"])
print("ok" if ok else lines)
PY
)
rm -f "${TMPDIR:-/tmp}/smi.$$.json"
check "json lines" ok "$got"

err=$("$prism" smi --interval=0 2>&1); rc=$?
check "bad interval" "1 prism: error: smi: --interval must be in (0, 3600], got 0" "$rc $err"
err=$("$prism" smi --count=-1 2>&1); rc=$?
check "bad count" "1 prism: error: smi: --count must be >= 0, got -1" "$rc $err"
exit $fail
