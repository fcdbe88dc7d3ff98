#!/usr/bin/env bash
# Accord vs Open MPI, 2 ranks (and 4 oversubscribed with --four), float32 sum, out of place:
# REPS runs of `all_reduce_perf --compare-mpi` (each run alternates the two libraries on the
# same buffers, 3 rounds, and reports each one's median), as a Markdown table (bench/README.md)
# with the median run and the worst run side by side. The worst ratio is the smallest
# MPI time / Accord time of any one run (of its medians; and of its paired rounds, the median
# of round k's MPI time / Accord time over k = 1..3, each pair timed back to back): below 1.00,
# Accord lost that run at that size, and the run's three rounds at that size go to stderr
# ("run R lost at SIZE B (medians only): ..."), with each
# round's context switches per call (voluntary/involuntary, the rank with the most), how many
# calls it timed and the machine's steal time meanwhile, to tell a collapse that slept from
# one that lost its core to another task or its vCPU to the host. The table's head names the
# machine: CPU model and the flags that matter here, caches, kernel, Open MPI, commit, date and
# load (bench/machine.sh).
# Usage: bench/compare.sh [BUILD_DIR] [--four | --only-four] [--reps N] [--program NAME] [--busy] [--max SIZE]
#                         [--raw DIR] [--trace FILE]
#   --only-four  4 oversubscribed ranks only
#   --busy     one busy process (a spinning shell) runs beside the ranks for the whole job, at
#              the ranks' own priority (no nice -n -10: a user's trainer does not run under it),
#              and each size is timed for at least 100 ms (all_reduce_perf --min-ms, Note
#              [Timing across scheduler ticks] in harness.cpp): the rank that shares its core
#              loses it for whole 4 ms ticks, and 20 calls of 1 MiB span only three of them
#              (quiet runs: at least 20 ms per size)
#   --max SIZE the largest size (256M by default; a busy run to 256 MiB takes about 4 minutes)
#   --raw DIR  keep every run's output in DIR
#   --trace FILE  sample every CPU's steal time and the ranks' CPUs every 10 ms into FILE
#              (bench/cpu_trace.py); bench/trace_rounds.py FILE DIR/np2.*.txt then matches each
#              round with what the machine did meanwhile (use with --raw DIR)
set -euo pipefail
build=build; nps=(2); reps=10; prog=all_reduce_perf; busy=0; raw=""; max=256M; trace=
while [ $# -gt 0 ]; do
  case $1 in
    --four) nps=(2 4) ;;
    --only-four) nps=(4) ;;
    --reps) reps=$2; shift ;;
    --program) prog=$2; shift ;;
    --busy) busy=1 ;;
    --raw) raw=$2; shift ;;
    --max) max=$2; shift ;;
    --trace) trace=$2; shift ;;
    *) build=$1 ;;
  esac
  shift
done
flags=(--oversubscribe)
[ "$(id -u)" = 0 ] && flags+=(--allow-run-as-root)
# Quiet runs: a high nice priority keeps other work on this 2-core machine from distorting the
# comparison (root only; both libraries run under it in the same job). Not chrt -r: real-time
# tasks are stopped 50 ms of every second once they keep the cores busy (Note [No real-time
# priority], bench/calibrate.sh). Busy runs: no priority, the point is the competition.
rt=(); [ "$(id -u)" = 0 ] && [ "$busy" = 0 ] && rt=(nice -n -10)
# The table's head says under which priority the job ran: started under chrt (bench/README.md,
# "Current results"), the real-time class decides, not nice.
priority="no priority change"
[ ${#rt[@]} -eq 0 ] || priority="nice -n -10"
case $(chrt -p $$ 2>/dev/null) in *SCHED_FIFO* | *SCHED_RR*) priority="real-time class (chrt), inherited" ;; esac
export COMPARE_PRIORITY=$priority
# Every size timed for at least 20 ms (100 ms busy): 20 calls of 256 B take 12 us, and one
# interrupt in them made a quiet run lose at 256 B (1.01 us against its usual 0.58).
long=(--min-ms 20); [ "$busy" = 1 ] && long=(--min-ms 100)
tmp=$(mktemp -d)
busy_pid=""; trace_pid=""
cleanup() {
  [ -z "$busy_pid" ] || kill "$busy_pid" 2>/dev/null || true
  [ -z "$trace_pid" ] || { kill "$trace_pid" 2>/dev/null; wait "$trace_pid" 2>/dev/null; } || true
  rm -rf "$tmp"
}
trap cleanup EXIT
if [ "$busy" = 1 ]; then
  sh -c 'while :; do :; done' &
  busy_pid=$!
fi
if [ -n "$trace" ]; then
  python3 "$(dirname "$0")/cpu_trace.py" "$trace" --match "${prog:0:15}" ${busy_pid:+--pid "$busy_pid"} &
  trace_pid=$!
fi
# The machine first (the CPU and its flags decide which kernels and stores run): bench/machine.sh.
"$(dirname "$0")/machine.sh" "$build"
for np in "${nps[@]}"; do
  for r in $(seq "$reps"); do
    # 8 B, then 16 B x 4^k up to --max (so 16, 64 and 256 MiB are all measured by default).
    { "${rt[@]}" mpirun "${flags[@]}" -np "$np" "$build/bench/$prog" -b 8 -e 8 -n 200 -w 20 -c 1 --compare-mpi "${long[@]}"
      "${rt[@]}" mpirun "${flags[@]}" -np "$np" "$build/bench/$prog" -b 16 -e "$max" -f 4 -n 20 -w 5 -c 1 --compare-mpi "${long[@]}"
    } > "$tmp/np$np.$r.txt"
    [ -z "$raw" ] || { mkdir -p "$raw"; cp "$tmp/np$np.$r.txt" "$raw/"; }
  done
  python3 "$(dirname "$0")/compare_table.py" "$np" "$busy" "$tmp"/np$np.*.txt
done
