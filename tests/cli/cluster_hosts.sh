#!/usr/bin/env bash
# prism llm across two hosts (docs/cluster.md), made on this machine: two network namespaces
# joined by a veth pair, each with a host name of its own. mpirun runs in the first and
# starts the second's process through an rsh agent that enters its namespace (where a real
# cluster uses ssh); the processes talk over TCP between the two addresses only. Needs root
# (to make namespaces): skipped (77) where they cannot be made.
set -u
prism="$1"
data="$PRISM_SOURCE_DIR/tests/data"
fail=0
check() {  # name, expected, actual
  if [[ "$2" != "$3" ]]; then echo "FAIL $1: expected '$2', got '$3'"; fail=1; else echo "ok $1"; fi
}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

tag="p$$"  # names of this run's namespaces and links (interface names fit 15 characters)
net="10.$((100 + $$ % 100)).$(($$ / 100 % 250)).0"
a_ip="${net%.0}.1" b_ip="${net%.0}.2"
tmp=$(mktemp -d)
cleanup() {
  ip netns del "${tag}a" 2>/dev/null
  ip netns del "${tag}b" 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT
if ! ip netns add "${tag}a" 2>/dev/null; then
  echo "skip: network namespaces cannot be made here (not root?)"
  exit 77
fi
ip netns add "${tag}b"
ip link add "${tag}x" type veth peer name "${tag}y"
ip link set "${tag}x" netns "${tag}a"
ip link set "${tag}y" netns "${tag}b"
for side in "a ${tag}x $a_ip" "b ${tag}y $b_ip"; do
  set -- $side
  ip -n "${tag}$1" addr add "$3/24" dev "$2"
  ip -n "${tag}$1" link set "$2" up
  ip -n "${tag}$1" link set lo up
done

# The rsh agent: the command in the namespace of the host it names, under that host's name.
cat >"$tmp/agent" <<EOF
#!/bin/sh
host="\$1"; shift
case "\$host" in
  $a_ip) side=a ;;
  $b_ip) side=b ;;
  *) echo "agent: no host \$host" >&2; exit 1 ;;
esac
exec ip netns exec "${tag}\$side" unshare --uts sh -c "hostname host-\$side; exec \$*"
EOF
chmod +x "$tmp/agent"
hosts() {  # command...: run by mpirun on host a, one process on each host, TCP between them
  timeout 120 ip netns exec "${tag}a" unshare --uts sh -c 'hostname host-a; exec "$@"' sh \
    mpirun -n 2 --host "$a_ip,$b_ip" --mca plm_rsh_agent "$tmp/agent" --mca btl tcp,self \
    --mca btl_tcp_if_include "$net/24" --mca oob_tcp_if_include "$net/24" "$@"
}

for model in llama/tiny-f32 qwen3_5/tiny-bf16-untied lfm2/tiny-bf16-untied; do
  run() { "$@" llm --model="$data/$model" --prompt-ids=1,2,3,4,5 --print-ids --max-tokens=24 \
    --seqlen=64 --dtype=f32 2>/dev/null; }
  want=$(run "$prism")
  [[ $(echo "$want" | wc -w) == 24 ]] || { echo "FAIL $model: one process gives '$want'"; fail=1; }
  check "$model: 2 hosts" "$want" "$(run hosts "$prism")"
done

# Two devices on each host: groups within a host and across the two.
args=(llm --model="$data/qwen3_5/tiny-bf16-untied" --prompt-ids=1,2,3,4,5 --print-ids
  --max-tokens=24 --seqlen=64 --dtype=f32)
check "qwen3_5: 2 hosts of 2 devices" "$("$prism" "${args[@]}" 2>/dev/null)" \
  "$(hosts "$prism" "${args[@]}" --devices=4 2>/dev/null)"

# The other host's error names it.
err=$(hosts "$prism" llm --model="$data/llama/tiny-f32" --prompt-ids=1 --print-ids --seqlen=64 \
  --devices=3 2>&1 >/dev/null); rc=$?
[[ $rc != 0 && $rc != 124 ]] || { echo "FAIL devices=3 over 2 hosts: exit $rc"; fail=1; }
echo "$err" | grep -q "^prism: error: rank 1 on host-b: cpu: the mesh {model=3} has 3 devices" \
  && echo "ok the other host's error names it" \
  || { echo "FAIL devices=3 over 2 hosts: $err"; fail=1; }
exit $fail
