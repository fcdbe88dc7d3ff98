#!/usr/bin/env bash
# bench/cpu_trace.py and bench/trace_rounds.py (compare.sh --trace): the trace samples every CPU
# and the ranks every 10 ms, on the clock all_reduce_perf --compare-mpi prints its rounds on,
# so that every round of a job run beside it falls inside the trace.
# Usage: trace_tools.sh SOURCE_ROOT RUN_MPIRUN ALL_REDUCE_PERF
set -eu
src=$1; run=$2; prog=$3
dir=$(mktemp -d)
trace_pid=""
trap '[ -z "$trace_pid" ] || kill "$trace_pid" 2>/dev/null || true; rm -rf "$dir"' EXIT
python3 "$src/bench/cpu_trace.py" "$dir/trace" --match all_reduce_perf &
trace_pid=$!
sleep 0.3
"$run" 2 "$prog" -b 16 -e 64K -f 64 -n 20 -w 5 -c 1 --compare-mpi --min-ms 10 > "$dir/np2.1.txt"
sleep 0.1
kill "$trace_pid"; wait "$trace_pid" || true; trace_pid=""
ncpu=$(grep -c '^cpu[0-9]' /proc/stat)
python3 - "$dir/trace" "$ncpu" <<'PY'
import sys
lines = open(sys.argv[1]).read().splitlines()
ncpu = int(sys.argv[2])
if len(lines) < 20:
    sys.exit(f"FAIL: {len(lines)} samples, wanted one every 10 ms for over 0.4 s")
ranks = set()
for l in lines:
    left, bar, right = l.partition(" | ")
    f = left.split()
    if not bar or len(f) != 1 + ncpu or not all(c.startswith(f"cpu{i}:") for i, c in enumerate(f[1:])):
        sys.exit(f"FAIL: a sample without every CPU's steal/idle: {l!r}")
    for p in right.split():
        pid, cpu, state = p.split(":")
        if not (0 <= int(cpu) < ncpu) or state not in "RSDTtZIXxKWP":
            sys.exit(f"FAIL: a process's CPU or state is off: {l!r}")
        ranks.add(pid)
if len(ranks) != 2:
    sys.exit(f"FAIL: the trace saw {len(ranks)} all_reduce_perf processes, wanted the 2 ranks")
print(f"{len(lines)} samples, both ranks seen")
PY
out=$(python3 "$src/bench/trace_rounds.py" "$dir/trace" "$dir/np2.1.txt")
printf '%s\n' "$out"
# 3 sizes x 3 rounds x 2 libraries, all inside the trace.
printf '%s\n' "$out" | grep -q '^18 rounds, 0 outside the trace' || { echo "FAIL: wanted 18 rounds, none outside the trace"; exit 1; }
# compare.sh's table (bench/compare_table.py, through bench/rounds.py as trace_rounds.py
# above) reads the same real output: one row per size, every column a number.
table=$(python3 "$src/bench/compare_table.py" 2 0 "$dir/np2.1.txt" 2>/dev/null)
printf '%s\n' "$table"
printf '%s\n' "$table" | python3 -c '
import re, sys
rows = {}
for l in sys.stdin:
    cells = [c.strip() for c in l.strip().strip("|").split("|")]
    if len(cells) == 8 and all(re.fullmatch(r"[0-9.]+( \*\*<1\*\*)?", c) for c in cells[1:]):
        rows[cells[0]] = cells
missing = [s for s in ("16 B", "1 KiB", "64 KiB") if s not in rows]
if missing:
    sys.exit(f"FAIL: no table row with every column for {missing}")
'
