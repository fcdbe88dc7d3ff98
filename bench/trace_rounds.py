#!/usr/bin/env python3
"""Match each timed round of a compare.sh sweep with what the CPUs did meanwhile.

Usage: bench/trace_rounds.py TRACE RUN_OUTPUT... [--slow X] [--list]

TRACE is bench/cpu_trace.py's output; RUN_OUTPUT the runs' all_reduce_perf --compare-mpi
outputs (compare.sh --raw DIR keeps them: DIR/np2.*.txt). For each library and size, a round
is slow when it took more than X times (3 by default) that library's median round at that
size. Prints, for slow rounds and for the others:
  - steal: ms the hypervisor took from the CPUs during the round, all CPUs together, per
    100 ms of round, and the most on any one CPU in any 10 ms sample window of 50 ms;
  - together: the share of samples in which both ranks were last seen on the same CPU;
  - busy: the share of samples in which the busy process (compare.sh --busy) shared a CPU with
    a rank;
  - runnable: the share of samples in which both ranks were runnable (state R).
--list prints every slow round with its own numbers.
"""
import os
import statistics
import sys
from bisect import bisect_left, bisect_right

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rounds import parse_rounds_line  # noqa: E402


def read_trace(path):
    ts, rows = [], []
    for line in open(path):
        left, _, right = line.partition("|")
        f = left.split()
        if len(f) < 2:
            continue
        steal = []
        for c in f[1:]:
            name, v = c.split(":")
            s, i = v.split("/")
            steal.append((int(name[3:]), float(s), float(i)))
        ps = []
        for p in right.split():
            pid, cpu, state = p.split(":")
            ps.append((int(pid), int(cpu), state))
        ts.append(float(f[0]))
        rows.append((steal, ps))
    return ts, rows


def read_rounds(paths):
    rounds = []  # (library, size, us, start, span, path)
    for path in paths:
        for line in open(path):
            parsed = parse_rounds_line(line)
            if parsed is None:
                continue
            size, by_lib = parsed
            for lib, rs in by_lib.items():
                for r in rs:
                    rounds.append((lib, size, r.us, r.start, r.span, path))
    return rounds


def window(ts, rows, start, span, busy_pids):
    lo, hi = bisect_left(ts, start), bisect_right(ts, start + span + 0.010)
    samples = rows[lo:hi]
    if not samples:
        return None
    total_steal = sum(s for steal, _ in samples for _, s, _ in steal)
    # The most stolen from one CPU in 5 consecutive samples (50 ms).
    worst = 0.0
    ncpu = len(samples[0][0])
    for c in range(ncpu):
        vals = [steal[c][1] if c < len(steal) else 0 for steal, _ in samples]
        for k in range(len(vals)):
            worst = max(worst, sum(vals[k:k + 5]))
    together = busy_with = runnable = 0
    for _, ps in samples:
        ranks = [p for p in ps if p[0] not in busy_pids]
        busy = [p for p in ps if p[0] in busy_pids]
        if len(ranks) >= 2 and ranks[0][1] == ranks[1][1]:
            together += 1
        if busy and any(r[1] == busy[0][1] for r in ranks):
            busy_with += 1
        if len(ranks) >= 2 and all(r[2] == "R" for r in ranks[:2]):
            runnable += 1
    n = len(samples)
    return dict(steal=total_steal / max(span, 0.01) * 0.1, worst=worst, together=together / n, busy=busy_with / n,
                runnable=runnable / n, samples=n)


def main():
    args = sys.argv[1:]
    slow_x, listing = 3.0, False
    if "--slow" in args:
        k = args.index("--slow")
        slow_x = float(args[k + 1])
        del args[k:k + 2]
    if "--list" in args:
        args.remove("--list")
        listing = True
    if len(args) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    ts, rows = read_trace(args[0])
    # The busy process: a pid the trace names from the first sample to the last that is not a
    # rank of any one job, i.e. seen in more than 90% of samples.
    seen = {}
    for _, ps in rows:
        for p in ps:
            seen[p[0]] = seen.get(p[0], 0) + 1
    busy_pids = {p for p, n in seen.items() if n > 0.9 * len(rows)}
    rounds = read_rounds(args[1:])
    med = {}
    for lib, size, us, *_ in rounds:
        med.setdefault((lib, size), []).append(us)
    med = {k: statistics.median(v) for k, v in med.items()}
    groups = {"slow": [], "other": []}
    missing = 0
    for r in rounds:
        lib, size, us, start, span, path = r
        w = window(ts, rows, start, span, busy_pids)
        if w is None:
            missing += 1
            continue
        slow = us > slow_x * med[(lib, size)]
        groups["slow" if slow else "other"].append((r, w))
        if slow and listing:
            print(f"{path.rsplit('/', 1)[-1]} {lib} {size} B {us:.2f} us (median {med[(lib, size)]:.2f}) "
                  f"at {start:.3f}+{span:.3f}: steal {w['steal']:.0f} ms/100 ms, worst 50 ms of a CPU {w['worst']:.0f}, "
                  f"together {w['together']:.2f}, busy beside a rank {w['busy']:.2f}, both runnable {w['runnable']:.2f}")
    print(f"{len(rounds)} rounds, {missing} outside the trace; slow = over {slow_x}x the median of its library and size")
    print("| rounds | count | Accord / Open MPI | steal per 100 ms (median, mean) | rounds with a CPU stolen >= 30 of 50 ms "
          "| ranks on one CPU | busy process beside a rank | both ranks runnable |")
    print("|---|---:|---|---:|---:|---:|---:|---:|")
    for name, g in groups.items():
        if not g:
            continue
        acc = sum(1 for r, _ in g if r[0] == "accord")
        st = [w["steal"] for _, w in g]
        stolen = sum(1 for _, w in g if w["worst"] >= 30)
        print(f"| {name} | {len(g)} | {acc} / {len(g) - acc} | {statistics.median(st):.1f}, {statistics.mean(st):.1f} "
              f"| {stolen} ({100 * stolen / len(g):.0f}%) | {statistics.mean(w['together'] for _, w in g):.2f} "
              f"| {statistics.mean(w['busy'] for _, w in g):.2f} | {statistics.mean(w['runnable'] for _, w in g):.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
