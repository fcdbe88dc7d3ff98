#!/usr/bin/env bash
# all_reduce_perf --compare-mpi --min-ms: every round, Accord's and MPI's, times calls for at
# least --min-ms (Note [Timing across scheduler ticks], bench/harness.cpp). With no warm-up
# the harness has no estimate at all and starts from -n 2 calls: the round must still go on
# until it has filled the time. Rounds of unequal length compared the libraries over
# different stretches of the scheduler's slices (bench/NOTES-2026-11.md, "Rounds of equal length").
# Usage: round_length.sh RUN_MPIRUN ALL_REDUCE_PERF
set -eu
run=$1; prog=$2
out=$("$run" 2 "$prog" -b 16 -e 64K -f 64 -n 2 -w 0 -c 1 --compare-mpi --min-ms 20)
printf '%s\n' "$out"
printf '%s\n' "$out" | python3 -c '
import re, sys
lines = [l for l in sys.stdin if " B rounds: " in l]
sizes = [int(l.split()[1]) for l in lines]
if sizes != [16, 1024, 65536]:
    sys.exit(f"FAIL: rounds lines for sizes {sizes}, wanted 16, 1024 and 65536")
for l in lines:
    spans = [float(s) for s in re.findall(r"at [0-9.]+\+([0-9.]+) s\)", l)]
    calls = [int(c) for c in re.findall(r" x([0-9]+),", l)]
    if len(spans) != 6 or len(calls) != 6:
        sys.exit(f"FAIL: wanted 3 Accord and 3 MPI rounds with their spans: {l}")
    if min(spans) < 0.020:
        sys.exit(f"FAIL: a round timed {min(spans) * 1e3:.1f} ms, under --min-ms 20: {l}")
    if min(calls) <= 2:
        sys.exit(f"FAIL: a round timed only its -n 2 calls: {l}")
print("every round timed at least 20 ms")
'
