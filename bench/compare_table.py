#!/usr/bin/env python3
"""compare.sh's table: Accord against Open MPI over several runs of all_reduce_perf
--compare-mpi, the median run and the worst run side by side.

Usage: bench/compare_table.py NRANKS BUSY(0|1) RUN_OUTPUT...

RUN_OUTPUT files are named like np2.7.txt (run 7). Prints the Markdown table on stdout; on
stderr, one line per run and size that Accord lost (on its medians, on its paired rounds, or
both), with that size's rounds.
"""
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rounds import parse_rounds_line  # noqa: E402


def read_runs(paths):
    """rows: size -> [(Accord us, Open MPI us, paired ratio)], one per run; lost: [(run, size,
    which ratio lost, the rounds line)]."""
    rows = {}
    lost = []
    for path in paths:
        run = path.rsplit(".", 2)[-2]  # np2.7.txt: run 7
        last = None
        for line in open(path):
            parsed = parse_rounds_line(line)
            if parsed is not None:
                if last is None or parsed[0] != last[0]:
                    continue
                # Paired rounds: round k of Accord and round k of Open MPI ran back to back;
                # the median of the three pairs' ratios. A change of the machine's state
                # between two rounds spoils one pair, where it can put two of one library's
                # three rounds and one of the other's on its slow side (bench/NOTES-2026-11.md,
                # "Rounds of equal length").
                size, a, m = last
                at = [r.us for r in parsed[1]["accord"]]
                mt = [r.us for r in parsed[1]["mpi"]]
                paired = m / a
                if len(at) == len(mt) == 3 and min(at) > 0:
                    paired = statistics.median(mr / ar for ar, mr in zip(at, mt))
                    rows[size][-1] = (a, m, paired)
                if m / a < 1 or paired < 1:
                    which = "both" if m / a < 1 and paired < 1 else ("medians only" if m / a < 1 else "paired only")
                    lost.append((run, size, which, line[4:].strip()))
                continue
            if line.startswith("#") or not line.strip():
                continue
            f = line.split()
            # Another rank's "#  Rank  1 Pid ..." can land inside a long rounds line (both
            # ranks write to one pipe), leaving its tail on a line of its own: not a row.
            if not f[0].isdigit():
                continue
            # out-of-place time (us), Open MPI's time (us), from the same run
            size, a, m = int(f[0]), float(f[5]), float(f[13])
            rows.setdefault(size, []).append((a, m, m / a))  # the paired ratio replaces m / a when known
            last = (size, a, m)
    return rows, lost


def label(size):
    return f"{size} B" if size < 1024 else (f"{size >> 10} KiB" if size < 1 << 20 else f"{size >> 20} MiB")


def main():
    if len(sys.argv) < 4:
        print(__doc__, file=sys.stderr)
        return 2
    np_, busy, runs = sys.argv[1], sys.argv[2] == "1", sys.argv[3:]
    rows, lost = read_runs(runs)
    for run, size, which, rounds in lost:
        # What a lost run did, round by round (bench/rounds.py): times, context switches per
        # call (voluntary/involuntary) of the rank with the most, calls, steal time, when the
        # round started and how long it took.
        print(f"run {run} lost at {size} B ({which}): {rounds}", file=sys.stderr)
    # compare.sh says under which priority the job ran (COMPARE_PRIORITY); read alone, a
    # table of kept runs says what compare.sh did by default.
    priority = os.environ.get("COMPARE_PRIORITY", "nice -n -10")
    beside = "one busy process beside the ranks, no nice" if busy else f"quiet, {priority}"
    print(f"\n{np_} ranks, float32 sum, out of place, {len(runs)} runs ({beside})\n")
    print("| size | Accord median (us) | Accord worst (us) | Open MPI median (us) | Open MPI worst (us) "
          "| ratio of medians | worst run's ratio | worst run, paired rounds |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    flag = lambda x: " **<1**" if x < 1 else ""  # noqa: E731
    for size in sorted(rows):
        r = rows[size]
        am = statistics.median(a for a, _, _ in r); aw = max(a for a, _, _ in r)  # noqa: E702
        mm = statistics.median(m for _, m, _ in r); mw = max(m for _, m, _ in r)  # noqa: E702
        worst = min(m / a for a, m, _ in r)
        worst_paired = min(p for _, _, p in r)
        print(f"| {label(size)} | {am:.2f} | {aw:.2f} | {mm:.2f} | {mw:.2f} | {mm / am:.2f} | {worst:.2f}{flag(worst)} "
              f"| {worst_paired:.2f}{flag(worst_paired)} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
