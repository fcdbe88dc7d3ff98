#!/usr/bin/env bash
# all_reduce_perf across fake hosts (network namespaces, tests/tcp/netns/hosts.sh) joined by
# links limited with a token bucket (tbf), under mpirun with a launch agent, side by side with
# Open MPI's MPI_Allreduce on the same hosts (--compare-mpi). Root only.
# Usage: bench/multihost.sh BUILD_DIR [HOSTS=2] [RANKS_PER_HOST=2] [RATE=10gbit] [ALL_REDUCE_PERF ARGS...]
# The environment (ACCORD_ALGO, ACCORD_SOCKET_NSOCKS, ...) reaches every rank.
set -uo pipefail
build=$(readlink -f "${1:?usage: $0 BUILD_DIR [HOSTS] [RANKS_PER_HOST] [RATE] [ARGS...]}")
nhosts=${2:-2}
per=${3:-2}
rate=${4:-10gbit}
shift $(($# < 4 ? $# : 4))
args=("$@")
[ ${#args[@]} -gt 0 ] || args=(-b 64M -e 64M -n 10 -w 3)
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../tests/tcp/netns/hosts.sh"
netns_check || exit 77
tag="b$(($$ % 10000000))"
agent=$(mktemp /tmp/accord-agent-XXXXXX)
trap 'netns_down "$tag"; rm -f "$agent"' EXIT
# The bucket must hold rate / HZ at least (10 Gbit/s at HZ 250: 5 MB); 8 MB bursts over a
# 50 ms queue still average to the rate over any run of the sizes measured here.
NETNS_BURST=${NETNS_BURST:-8mb} netns_up "$tag" "$nhosts" "$rate" || exit 1
netns_write_agent "$tag" "$agent"
hosts=$(for ((i = 0; i < nhosts; i++)); do printf "%s:%d," "$(netns_addr $i)" "$per"; done)
echo "# $nhosts hosts x $per ranks, tbf $rate on every host link (both ways), $(nproc) cores"
"$here/../tests/tcp/netns/hosts.sh" run "$tag" 0 mpirun --allow-run-as-root --oversubscribe -np $((nhosts * per)) \
  --host "${hosts%,}" --mca plm_rsh_agent "$agent" --mca plm_rsh_no_tree_spawn 1 \
  --mca btl self,vader,tcp --mca btl_tcp_if_include eth0 --mca oob_tcp_if_include eth0 \
  "$build/bench/all_reduce_perf" --compare-mpi --show-plan "${args[@]}"
