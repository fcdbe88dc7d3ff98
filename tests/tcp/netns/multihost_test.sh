#!/usr/bin/env bash
# Every collective across fake hosts (hosts.sh): 2 ranks per host, shared memory inside a
# host, TCP between hosts. Three jobs of multihost_prog:
#   - mpirun on 2 and on 3 hosts: mpirun runs on host 0 (as on a login node of a real
#     cluster) and starts the other hosts' daemons through a launch agent (Open MPI's
#     plm_rsh_agent, in place of ssh) that enters that host's namespaces;
#   - the torchrun-style environment (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT) on 3 hosts,
#     with no MPI at all.
# Before the mpirun jobs, a trivial MPI job across 2 hosts (the probe) must pass.
# Skips (exit 77) unless root with `ip netns`; the mpirun jobs are skipped alone when mpirun or
# MPI support is missing, and for nothing else. Usage: multihost_test.sh PATH/TO/multihost_prog
set -uo pipefail
prog=$(readlink -f "${1:?usage: $0 PATH/TO/multihost_prog}")
here=$(cd "$(dirname "$0")" && pwd)
. "$here/hosts.sh"
netns_check || exit 77

tag="m$(($$ % 10000000))"
agent=$(mktemp /tmp/accord-agent-XXXXXX)
trap 'netns_down "$tag"; rm -f "$agent"' EXIT
failures=0
pass() { echo "ok   - $*"; }
fail() { echo "FAIL - $*"; failures=$((failures + 1)); }

netns_up "$tag" 3 || { echo "FAIL - could not create the hosts"; exit 1; }

netns_write_agent "$tag" "$agent"

# since START_NS: seconds since then, one decimal (no bc: the GPU machine has none)
since() { local ms=$(( ($(date +%s%N) - $1) / 1000000 )); printf '%d.%d' $((ms / 1000)) $((ms % 1000 / 100)); }

# check NAME NHOSTS LOG: every rank printed its summary with 0 failures.
check() {
  local name=$1 nhosts=$2 log=$3 rc=$4 want=$(( $2 * 2 ))
  local good
  good=$(grep -c "checks, 0 failures$" "$log")
  if [ "$rc" = 0 ] && [ "$good" = "$want" ]; then
    pass "$name: $want ranks on $nhosts hosts, $(grep -m1 -o '[0-9]* checks' "$log") each, all exact"
  else
    fail "$name (exit $rc, $good of $want ranks clean):"
    sed 's/^/       /' "$log" | grep -v "^       *pair" | tail -40
  fi
  grep -q "tcp (different hosts" "$log" || fail "$name: the plan shows no TCP pair"
}

# mpirun_hosts N LIMIT_S ARGS...: mpirun on host 0, 2 ranks on each of hosts 0..N-1, the other
# hosts' daemons started through the launch agent.
mpirun_hosts() {
  local n=$1 limit=$2 hosts="" i
  shift 2
  for ((i = 0; i < n; i++)); do hosts+="$(netns_addr $i):2,"; done
  timeout "$limit" "$here/hosts.sh" run "$tag" 0 mpirun --allow-run-as-root --oversubscribe -np $((2 * n)) \
    --host "${hosts%,}" --mca plm_rsh_agent "$agent" --mca plm_rsh_no_tree_spawn 1 \
    --mca btl self,vader,tcp --mca btl_tcp_if_include eth0 --mca oob_tcp_if_include eth0 "$@"
}

# The mpirun jobs skip for two reasons only: no mpirun on PATH, or multihost_prog built without
# MPI (its probe answers in one line, with no MPI_Init). Anything else is a failure: a probe
# that answers otherwise, and the real probe failing, the trivial MPI job "hello" on 2 hosts
# (MPI_Init, a barrier, each rank's host name), which shows that mpirun across the hosts works
# before the collective jobs run (they are left out when it does not, as they would fail alike).
mpirun_jobs=0
probe=$("$prog" probe 2>&1)
probe_rc=$?
if ! command -v mpirun >/dev/null 2>&1; then
  echo "skip - mpirun jobs: no mpirun"
elif [ "$probe_rc" = 0 ] && [ "$probe" = "multihost_prog: built without MPI" ]; then
  echo "skip - mpirun jobs: multihost_prog built without MPI"
elif [ "$probe_rc" = 0 ] && [ "$probe" = "multihost_prog: built with MPI" ]; then
  log=$(mktemp)
  start=$(date +%s%N)
  mpirun_hosts 2 60 "$prog" hello >"$log" 2>&1
  rc=$?
  # one line per rank, ranks 0..3, two on each host
  answers=$(grep -cE "^hello: rank [0-3] of 4 on $tag-h[01]$" "$log")
  ranks=$(grep -oE "^hello: rank [0-3] of 4" "$log" | sort -u | wc -l)
  h0=$(grep -cE " on $tag-h0$" "$log") h1=$(grep -cE " on $tag-h1$" "$log")
  if [ "$rc" = 0 ] && [ "$answers" = 4 ] && [ "$ranks" = 4 ] && [ "$h0" = 2 ] && [ "$h1" = 2 ]; then
    pass "mpirun probe: MPI_Init and a barrier, 4 ranks on 2 hosts, $(since "$start") s"
    mpirun_jobs=1
  else
    fail "mpirun probe: the trivial MPI job across 2 hosts (launch agent $agent) exit $rc, $answers of 4" \
      "ranks answered ($h0 on $tag-h0, $h1 on $tag-h1); the mpirun collective jobs are not run:"
    sed 's/^/       /' "$log" | tail -40
  fi
  rm -f "$log"
else
  fail "multihost_prog probe (exit $probe_rc): '$probe'"
fi
if [ "$mpirun_jobs" = 1 ]; then
  for n in 2 3; do
    log=$(mktemp)
    start=$(date +%s%N)
    mpirun_hosts "$n" 150 "$prog" mpi >"$log" 2>&1
    rc=$?
    check "mpirun (launch agent), $(since "$start") s" "$n" "$log" "$rc"
    [ $n = 2 ] && sed -n '/^plan:/,/^rank/p' "$log" | grep pair | sed 's/^/       /'
    rm -f "$log"
  done
fi

for n in 3; do
  log=$(mktemp)
  start=$(date +%s%N)
  port=$((29500 + RANDOM % 1000))
  pids=()
  for ((r = 0; r < 2 * n; r++)); do
    timeout 150 "$here/hosts.sh" run "$tag" $((r / 2)) env -u OMPI_COMM_WORLD_RANK RANK=$r LOCAL_RANK=$((r % 2)) \
      WORLD_SIZE=$((2 * n)) MASTER_ADDR="$(netns_addr 0)" MASTER_PORT=$port "$prog" env >>"$log" 2>&1 &
    pids+=($!)
  done
  rc=0
  for p in "${pids[@]}"; do wait "$p" || rc=1; done
  check "torchrun-style env, no MPI, $(since "$start") s" "$n" "$log" "$rc"
  rm -f "$log"
done

# GPU buffers across hosts (Note [Device data over TCP]): simulated GPUs (ACCORD_GPU_TOPO, a
# topology fixture, set by meson), 2 hosts of 2 ranks: all-reduce by the library's choice and
# hierarchical (intra-host on the GPU path, inter-host over TCP), then send/recv rings and
# all-to-all in groups that mix the host's GPU route with TCP.
if [ -n "${ACCORD_GPU_TOPO:-}" ]; then
  n=2
  log=$(mktemp)
  start=$(date +%s%N)
  port=$((30500 + RANDOM % 1000))
  pids=()
  for ((r = 0; r < 2 * n; r++)); do
    timeout 150 "$here/hosts.sh" run "$tag" $((r / 2)) env -u OMPI_COMM_WORLD_RANK RANK=$r LOCAL_RANK=$((r % 2)) \
      WORLD_SIZE=$((2 * n)) MASTER_ADDR="$(netns_addr 0)" MASTER_PORT=$port ACCORD_SIM_TOPO="$ACCORD_GPU_TOPO" \
      "$prog" gpu >>"$log" 2>&1 &
    pids+=($!)
  done
  rc=0
  for p in "${pids[@]}"; do wait "$p" || rc=1; done
  good=$(grep -c "checks, 0 failures$" "$log")
  if [ "$rc" = 0 ] && [ "$good" = $((2 * n)) ]; then
    pass "GPU buffers (simulated: all-reduce, hierarchical, send/recv, all-to-all), $((2 * n)) ranks on $n hosts, $(grep -m1 -o "[0-9]* checks" "$log") each, $(since "$start") s, all exact"
  else
    fail "GPU buffers (simulated) (exit $rc, $good of $((2 * n)) ranks clean):"
    tail -40 "$log" | sed 's/^/       /'
  fi
  rm -f "$log"
else
  echo "skip - GPU buffers across hosts: ACCORD_GPU_TOPO is not set"
fi

netns_down "$tag"
trap - EXIT
rm -f "$agent"
[ $failures = 0 ] && echo "multi-host: all jobs passed" || echo "multi-host: $failures check(s) failed"
exit $((failures > 0))
