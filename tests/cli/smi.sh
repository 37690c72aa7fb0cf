#!/usr/bin/env bash
# prism smi on this machine: the table (a CPU row and its cores, within 80 columns), JSON lines
# a parser reads with the fields docs/smi.md gives, the Prometheus exporter, the live view in
# tmux, and bad options.
set -u
prism="$1"
python="${PRISM_VENV_PYTHON:?}"
fail=0
check() {  # name, expected, actual
  if [[ "$2" != "$3" ]]; then echo "FAIL $1: expected '$2', got '$3'"; fail=1; else echo "ok $1"; fi
}
# What other prism processes publish (tests running beside this one) stays out of the table:
# the live view's 24 rows must show this machine's own.
quiet=$(mktemp -d); trap 'rm -rf "$quiet"' EXIT
export PRISM_ACTIVITY_DIR="$quiet"

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

# The exporter, read by Prometheus's own parser; SIGTERM stops it.
log="${TMPDIR:-/tmp}/smi.$$.log"
"$prism" smi --prometheus=0 --interval=0.1 2>"$log" &
pid=$!
port=""
for _ in $(seq 100); do
  port=$(sed -n 's|.*http://127.0.0.1:\([0-9]*\)/metrics.*|\1|p' "$log")
  [[ -n "$port" ]] && break
  sleep 0.1
done
got=$("$python" - "$port" <<'PY'
import sys, time, urllib.request
from prometheus_client.parser import text_string_to_metric_families
text = urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/metrics").read().decode()
families = {f.name: f for f in text_string_to_metric_families(text)}
want = {"prism_device_info", "prism_device_utilization_ratio", "prism_device_core_utilization_ratio",
        "prism_device_memory_used_bytes", "prism_device_memory_total_bytes",
        "prism_device_read_errors"}
missing = want - set(families)
cpu = {"source": "cpu", "index": "0"}
util = [s for s in families["prism_device_utilization_ratio"].samples if s.labels == cpu]
info = families["prism_device_info"].samples[0]
ok = (not missing and all(f.type == "gauge" for f in families.values()) and len(util) == 1
      and 0 <= util[0].value <= 1 and info.labels["name"] and info.value == 1)
print("ok" if ok else f"missing {missing}: {text}")
PY
)
check "prometheus exporter" ok "$got"
kill -TERM "$pid"; wait "$pid"; rc=$?
check "exporter stops on SIGTERM" 0 "$rc"
rm -f "$log"
err=$("$prism" smi --prometheus=70000 2>&1); rc=$?
check "bad port" "1 prism: error: smi: --prometheus must be a port, 0..65535, got 70000" "$rc $err"

# The live view in tmux (an 80x24 terminal): the screen shows the table and the history, within
# 80 columns; q quits. Into a pipe, one error line.
sock="prism-smi-$$"
tmux -L "$sock" new-session -d -s smi -x 80 -y 24 "$prism smi --watch --interval=0.1"
screen=""
for _ in $(seq 100); do
  screen=$(tmux -L "$sock" capture-pane -p -t smi 2>/dev/null)
  [[ "$screen" == *"over the last"* ]] && break
  sleep 0.1
done
for want in "q quits" "DEVICE" "cpu:0 " "  util " "  memory "; do
  [[ "$screen" == *"$want"* ]] || { echo "FAIL live view has no '$want': $screen"; fail=1; }
done
wide=$(echo "$screen" | "$python" -c 'import sys; print(sum(len(l.rstrip("\n")) > 80 for l in sys.stdin))')
check "live view within 80 columns" 0 "$wide"
tmux -L "$sock" send-keys -t smi q
for _ in $(seq 50); do
  tmux -L "$sock" has-session -t smi 2>/dev/null || break
  sleep 0.1
done
if tmux -L "$sock" has-session -t smi 2>/dev/null; then
  echo "FAIL q did not quit the live view"; fail=1
  tmux -L "$sock" kill-server
else
  echo "ok q quits the live view"
fi
err=$(set -o pipefail; "$prism" smi --watch 2>&1 | cat); rc=$?
check "live view into a pipe" "1 prism: error: smi: --watch needs a terminal (for a pipe: --json or --count)" "$rc $err"

# NVIDIA GPUs through NVML: here a fake library (tests/smi/fake_nvml.cpp) with scripted values;
# without one, the source is listed as absent with why.
if [[ -n "${PRISM_FAKE_NVML:-}" ]]; then
  out=$(PRISM_NVML_LIBRARY="$PRISM_FAKE_NVML" "$prism" smi --interval=0.05)
  echo "$out" | grep -q '^nvml:0  *NVIDIA H200 (fake)  *37% *11.2 / 139.7  *41C  *123.5W  *1980MHz$' ||
    { echo "FAIL nvml row: $out"; fail=1; }
  echo "$out" | grep -q "pid $$ \|pid [0-9]* prism" || { echo "FAIL nvml process: $out"; fail=1; }
  got=$(PRISM_NVML_LIBRARY="$PRISM_FAKE_NVML" FAKE_NVML=init-fails "$prism" smi --interval=0.05 |
    grep '^absent: nvml')
  check "nvml that fails to start" "absent: nvml: nvmlInit failed: Driver Not Loaded" "$got"
fi
got=$(PRISM_NVML_LIBRARY=/nonexistent/libnvidia-ml.so.1 "$prism" smi --json --interval=0.05 |
  "$python" -c 'import json, sys; print([a for a in json.load(sys.stdin)["absent"] if a.startswith("nvml")])')
check "nvml absent" "[\"nvml: /nonexistent/libnvidia-ml.so.1 not found (NVIDIA's driver installs it)\"]" "$got"

# A running prism serve says what it does (prism/smi/activity.h), and smi shows it under the CPU:
# the model, the tokens generated so far; its file goes when the server stops.
act=$(mktemp -d); export PRISM_ACTIVITY_DIR="$act/activity"
"$prism" serve --model="${PRISM_GGUF_DIR:?}/tiny-bf16-tied-q8_0.gguf" --port=0 --seqlen=64 \
  2>"$act/serve.log" &
server=$!
port=""
for _ in $(seq 300); do
  port=$(sed -n 's|^prism serve: .* on http://127.0.0.1:\([0-9]*\)/v1$|\1|p' "$act/serve.log")
  [[ -n "$port" && -f "$PRISM_ACTIVITY_DIR/$server.json" ]] && break
  sleep 0.1
done
"$python" - "$port" <<'PY'
import json, sys, urllib.request
body = json.dumps({"prompt": "hi", "max_tokens": 5, "temperature": 0}).encode()
req = urllib.request.Request("http://127.0.0.1:%s/v1/completions" % sys.argv[1], body,
                             {"Content-Type": "application/json"})
urllib.request.urlopen(req).read()
PY
sleep 1.5  # the server publishes its counts once a second
got=$("$prism" smi --json --interval=0.05 | "$python" -c '
import json, sys
cpu = [d for d in json.load(sys.stdin)["devices"] if d["source"] == "cpu"][0]
mine = [p for p in cpu["processes"] if p["pid"] == int(sys.argv[1])]
print(mine and mine[0]["name"], mine and "tiny-bf16-tied-q8_0.gguf on cpu: 5 tokens" in mine[0]["doing"])' "$server")
check "serve in smi" "prism serve True" "$got"
"$prism" smi --interval=0.05 | grep -q "pid $server prism serve" || { echo "FAIL serve not in the table"; fail=1; }
kill -TERM "$server"; wait "$server"
check "activity removed" "" "$(ls "$PRISM_ACTIVITY_DIR")"
rm -rf "$act"; unset PRISM_ACTIVITY_DIR

err=$("$prism" smi --interval=0 2>&1); rc=$?
check "bad interval" "1 prism: error: smi: --interval must be in (0, 3600], got 0" "$rc $err"
err=$("$prism" smi --count=-1 2>&1); rc=$?
check "bad count" "1 prism: error: smi: --count must be >= 0, got -1" "$rc $err"
exit $fail
