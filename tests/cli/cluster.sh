#!/usr/bin/env bash
# prism llm across the processes of a run (docs/cluster.md), started by Open MPI's mpirun on
# this machine: the tiny Llama, Qwen 3.5 and LFM 2 checkpoints' greedy ids as one process
# gives them (one device in each process, or two), speculation, chat turns read by rank 0,
# prism serve, the errors of a mesh that does not fit the run, and the end of a run whose
# rank dies mid-generation or stops answering (mid-answer, or as the run ends).
set -u
prism="$1"
data="$PRISM_SOURCE_DIR/tests/data"
fail=0
check() {  # name, expected, actual
  if [[ "$2" != "$3" ]]; then echo "FAIL $1: expected '$2', got '$3'"; fail=1; else echo "ok $1"; fi
}
# Root may start processes here (tests run as root in containers), more of them than cores.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mpi() {  # processes, command...
  local n="$1"
  shift
  timeout 120 mpirun -n "$n" --oversubscribe "$@"
}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT

for model in llama/tiny-f32 qwen3_5/tiny-bf16-untied qwen3_5/tiny-bf16-tied \
  lfm2/tiny-bf16-untied; do
  args=(llm --model="$data/$model" --prompt-ids=1,2,3,4,5 --print-ids --max-tokens=24 --seqlen=64
    --dtype=f32)
  want=$("$prism" "${args[@]}" 2>/dev/null)
  [[ $(echo "$want" | wc -w) == 24 ]] || { echo "FAIL $model: one process gives '$want'"; fail=1; }
  check "$model: 2 processes" "$want" "$(mpi 2 "$prism" "${args[@]}" 2>/dev/null)"
  check "$model: 4 processes" "$want" "$(mpi 4 "$prism" "${args[@]}" 2>/dev/null)"
  check "$model: 2 processes of 2 devices" "$want" \
    "$(mpi 2 "$prism" "${args[@]}" --devices=4 2>/dev/null)"
done
# Speculative decoding: Qwen 3.5's draft head, and a draft model (a second engine, split as
# the first): the guesses' checks and rewinds run on every process alike.
for guess in "qwen3_5/tiny-bf16-untied --speculate=mtp" \
  "llama/tiny-f32 --speculate=draft --draft-model=$data/llama/tiny-f32"; do
  set -- $guess
  run() { "$@" llm --model="$data/$model" "${extra[@]}" --prompt-ids=1,2,3,4 --print-ids \
    --max-tokens=24 --seqlen=64 --dtype=f32 2>/dev/null; }
  model=$1
  extra=("${@:2}")
  want=$(run "$prism")
  [[ $(echo "$want" | wc -w) == 24 ]] || { echo "FAIL $model ${extra[0]}: '$want'"; fail=1; }
  check "$model ${extra[0]}: 2 processes" "$want" "$(run mpi 2 "$prism")"
done

# bf16, the checkpoint's own dtype: the same bits as 2 devices in one process.
bf16=(llm --model="$data/llama/tiny-bf16-tied" --prompt-ids=1,2,3 --print-ids --max-tokens=24
  --seqlen=64)
want=$(PRISM_CPU_DEVICES=2 "$prism" "${bf16[@]}" --devices=2 2>/dev/null)
[[ $(echo "$want" | wc -w) == 24 ]] || { echo "FAIL bf16 on 2 devices: '$want'"; fail=1; }
check "bf16: 2 processes = 2 devices of one" "$want" "$(mpi 2 "$prism" "${bf16[@]}" 2>/dev/null)"

# Only rank 0 speaks: one answer, one statistics line, one load report.
out=$(mpi 2 "$prism" llm --model="$data/llama/tiny-f32" --prompt-ids=1,2,3 --print-ids \
  --max-tokens=4 --seqlen=64 2>"$tmp/err")
check "one answer" 1 "$(echo "$out" | wc -l)"
check "one statistics line" 1 "$(grep -c '^prefill: ' "$tmp/err")"
check "one load report" 1 "$(grep -c '^loaded .* split over {model=2}' "$tmp/err")"

# Text and chat turns: rank 0 reads standard input and the tokenizer's template; the answers
# are those of one process.
for f in config.json generation_config.json model.safetensors; do
  ln -s "$data/llama/tiny-bf16-tied/$f" "$tmp/$f"
done
for f in tokenizer.json tokenizer_config.json; do
  ln -s "${PRISM_TOKENIZERS_DIR:?}/llama3_1/$f" "$tmp/$f"
done
chat() { printf 'hello\nhow are you\n/reset\nhi\n/exit\n' | "$@" llm --model="$tmp" \
  --max-tokens=3 --dtype=f32 --seqlen=128 2>/dev/null; }
want=$(chat "$prism")
check "chat answers" 3 "$(echo "$want" | wc -l)"
check "chat over 2 processes" "$want" "$(chat mpi 2 "$prism")"

# prism serve over 2 processes: rank 0 serves, the other follows its batches; concurrent
# greedy requests get what one process gives; SIGTERM to rank 0 ends the run well.
rank_pid() {  # launcher pid, rank: that rank's process
  for p in $(pgrep -P "$1" 2>/dev/null); do
    tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$2" && echo "$p"
  done
}
ended() {  # launcher pid, its rank to kill too, what failed: waits up to 30 s for the run to
  # end (killing both if it has not), and leaves its exit status in rc
  for _ in $(seq 300); do kill -0 "$1" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$1" 2>/dev/null; then
    echo "FAIL $3"; fail=1
    kill -9 "$2" "$1" 2>/dev/null
  fi
  wait "$1"; rc=$?
}
serve_port() {  # stderr file: the port the server says it listens on
  for _ in $(seq 300); do
    port=$(sed -n 's|^prism serve: .* on http://127.0.0.1:\([0-9]*\)/v1$|\1|p' "$1")
    [[ -n "$port" ]] && echo "$port" && return
    sleep 0.1
  done
}
complete() {  # port, prompt
  curl -s "localhost:$1/v1/completions" -H 'Content-Type: application/json' \
    -d "{\"prompt\":\"$2\",\"max_tokens\":8,\"temperature\":0}" >"$tmp/answer.$1.${2// /_}"
}
serve=(serve --model="$tmp" --port=0 --dtype=f32 --seqlen=256 --parallel=4)
"$prism" "${serve[@]}" 2>"$tmp/one.err" &
one=$!
mpirun -n 2 --oversubscribe "$prism" "${serve[@]}" 2>"$tmp/two.err" &
two=$!
p1=$(serve_port "$tmp/one.err") p2=$(serve_port "$tmp/two.err")
for port in $p1 $p2; do
  clients=()
  for prompt in hello "how are you" "tell me more"; do
    complete "$port" "$prompt" &
    clients+=($!)
  done
  wait "${clients[@]}"
done
for prompt in hello "how are you" "tell me more"; do
  # (Which prompt tokens came from the prompt cache depends on the order the three arrive in.)
  strip='s/"created":[0-9]*,//; s/"id":"[^"]*",//; s/"cached_tokens":[0-9]*//'
  a=$(sed "$strip" "$tmp/answer.$p1.${prompt// /_}")
  b=$(sed "$strip" "$tmp/answer.$p2.${prompt// /_}")
  [[ "$a" == *'"text":'* ]] || { echo "FAIL serve '$prompt': $a"; fail=1; }
  check "serve '$prompt' over 2 processes" "$a" "$b"
done
kill -TERM "$one"
kill -TERM "$(rank_pid "$two" 0)"
wait "$two"; rc=$?
check "serve over 2 processes ends well on SIGTERM to rank 0" 0 "$rc"
wait "$one"

# A mesh whose devices do not share out over the processes: the error line (rank 0's, or a
# follower's naming it, whichever ends the run first), a non-zero exit, no wait.
err=$(mpi 2 "$prism" llm --model="$data/llama/tiny-f32" --prompt-ids=1 --print-ids --seqlen=64 \
  --devices=3 2>&1 >/dev/null); rc=$?
[[ $rc != 0 && $rc != 124 ]] || { echo "FAIL devices=3 over 2 processes: exit $rc"; fail=1; }
echo "$err" | grep -Eq "^prism: error: (rank 1 on [^:]*: )?cpu: the mesh \{model=3\} has 3 devices, which do not share out evenly over this run's 2 processes \(give --devices=2 or a multiple\)$" \
  || { echo "FAIL devices=3 over 2 processes: $err"; fail=1; }
err=$(PRISM_OPENCL_DEVICES=2 mpi 2 "$prism" llm --model="$data/llama/tiny-f32" --prompt-ids=1 \
  --print-ids --seqlen=64 --platform=opencl 2>&1 >/dev/null); rc=$?
[[ $rc != 0 && $rc != 124 ]] || { echo "FAIL opencl over 2 processes: exit $rc"; fail=1; }
echo "$err" | grep -q "^prism: error: opencl: a mesh across the processes of a run runs on the cpu and cuda platforms only (docs/cluster.md)$" \
  || { echo "FAIL opencl over 2 processes: $err"; fail=1; }

# A rank that dies while the run answers (or waits for the next turn, standard input held
# open): the run ends within seconds, naming it, never waits.
mkfifo "$tmp/turns"
mpirun -n 2 --oversubscribe "$prism" llm --model="$tmp" --max-tokens=2000 --seqlen=2048 \
  <"$tmp/turns" >/dev/null 2>"$tmp/killed" &
launcher=$!
exec 3>"$tmp/turns"
echo hello >&3
victim=""
for _ in $(seq 100); do  # rank 1's process, once it runs
  victim=$(rank_pid "$launcher" 1)
  [[ -n "$victim" ]] && grep -q "^loaded" "$tmp/killed" && break
  sleep 0.1
done
sleep 0.5
kill -9 "$victim" 2>/dev/null || { echo "FAIL no rank 1 to kill"; fail=1; }
start=$SECONDS
ended "$launcher" "$victim" "the run goes on after rank 1 died"
exec 3>&-
[[ $rc != 0 ]] || { echo "FAIL the run ended well after rank 1 died"; fail=1; }
grep -q "rank 1 .* on node .* exited on signal 9" "$tmp/killed" \
  || { echo "FAIL the end does not name rank 1: $(cat "$tmp/killed")"; fail=1; }
echo "ok rank 1 killed: the run ended in $((SECONDS - start)) s, exit $rc"

# A rank that stops answering without dying (SIGSTOP: as a hung host, or one cut off): the
# process that watches it (rank 0 watches the followers, they watch rank 0) ends the run
# naming it once PRISM_PROCESS_TIMEOUT passes without a word from it, never waits.
for stopped in 1 0; do
  mkfifo "$tmp/turns.$stopped"
  PRISM_PROCESS_TIMEOUT=2 mpirun -n 2 --oversubscribe "$prism" llm --model="$tmp" \
    --max-tokens=2000 --seqlen=2048 <"$tmp/turns.$stopped" >/dev/null 2>"$tmp/stopped" &
  launcher=$!
  exec 3>"$tmp/turns.$stopped"
  echo hello >&3
  victim=""
  for _ in $(seq 100); do
    victim=$(rank_pid "$launcher" "$stopped")
    [[ -n "$victim" ]] && grep -q "^loaded" "$tmp/stopped" && break
    sleep 0.1
  done
  sleep 0.5
  kill -STOP "$victim" 2>/dev/null || { echo "FAIL no rank $stopped to stop"; fail=1; }
  start=$SECONDS
  ended "$launcher" "$victim" "the run goes on after rank $stopped stopped"
  exec 3>&-
  [[ $rc != 0 ]] || { echo "FAIL the run ended well after rank $stopped stopped"; fail=1; }
  grep -Eq "^prism: error: rank $stopped on [^ ]+ has not answered rank $((1 - stopped)) on [^ ]+ for [0-9]+ s" \
    "$tmp/stopped" || { echo "FAIL the end does not name rank $stopped: $(cat "$tmp/stopped")"; fail=1; }
  echo "ok rank $stopped stopped: the run ended in $((SECONDS - start)) s, exit $rc"
  kill -9 "$victim" 2>/dev/null  # where mpirun left it stopped
done

# A rank that stops once the last command is done, as rank 0 ends the run: MPI_Finalize waits
# for every process and the watch is gone by then; rank 0 still leaves once
# PRISM_PROCESS_TIMEOUT passes, saying so.
mkfifo "$tmp/turns.end"
PRISM_PROCESS_TIMEOUT=2 mpirun -n 2 --oversubscribe "$prism" llm --model="$tmp" --max-tokens=3 \
  --dtype=f32 --seqlen=128 <"$tmp/turns.end" >"$tmp/end.out" 2>"$tmp/end.err" &
launcher=$!
exec 3>"$tmp/turns.end"
echo hello >&3
for _ in $(seq 300); do [[ -s "$tmp/end.out" ]] && break; sleep 0.1; done  # the answer
victim=$(rank_pid "$launcher" 1)
kill -STOP "$victim" 2>/dev/null || { echo "FAIL no rank 1 to stop"; fail=1; }
exec 3>&-  # the end of input: rank 0 ends the run
start=$SECONDS
ended "$launcher" "$victim" "rank 0 waits for ever for rank 1 to end the run"
[[ $rc != 0 ]] || { echo "FAIL the run ended well with rank 1 stopped at its end"; fail=1; }
grep -Eq "^prism: error: rank 0 on [^ ]+ waited 2 s for the other processes to end the run" \
  "$tmp/end.err" || { echo "FAIL the end does not say why: $(cat "$tmp/end.err")"; fail=1; }
echo "ok rank 1 stopped at the end: rank 0 left in $((SECONDS - start)) s, exit $rc"
kill -9 "$victim" 2>/dev/null

# A timeout that is not a number of seconds: rank 0's error line, before anything runs.
err=$(PRISM_PROCESS_TIMEOUT=soon mpi 2 "$prism" llm --model="$data/llama/tiny-f32" \
  --prompt-ids=1 --print-ids --seqlen=64 2>&1 >/dev/null); rc=$?
[[ $rc != 0 && $rc != 124 ]] || { echo "FAIL PRISM_PROCESS_TIMEOUT=soon: exit $rc"; fail=1; }
echo "$err" | grep -q "PRISM_PROCESS_TIMEOUT=soon is not a number of seconds" \
  || { echo "FAIL PRISM_PROCESS_TIMEOUT=soon: $err"; fail=1; }
exit $fail
