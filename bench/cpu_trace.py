#!/usr/bin/env python3
"""What the machine's CPUs did, every 10 ms, on the clock all_reduce_perf's rounds use.

Usage: bench/cpu_trace.py OUT [--period-ms 10] [--match all_reduce_perf] [--pid PID]...

Writes one line per sample until killed (SIGTERM or SIGINT):
    T cpu0:STEAL/IDLE cpu1:STEAL/IDLE ... | PID:CPU:STATE ...
T is CLOCK_MONOTONIC in seconds (what `all_reduce_perf --compare-mpi` prints as each round's
"at T+SPAN s"); STEAL and IDLE are the ms each CPU spent stolen by the hypervisor and idle
since the last sample (/proc/stat, in clock ticks: 10 ms here, so a single sample reads 0 or
10); then, for every process whose name matches --match and every --pid, the CPU it last ran
on and its state (R running or runnable, S sleeping) from /proc/PID/stat.

bench/compare.sh --trace FILE starts it beside a sweep (the busy process is passed as --pid),
and bench/trace_rounds.py matches each round with the samples taken while it ran (bench/NOTES-2026-11.md,
"Busy collapses: steal per CPU"). It costs about 1% of one CPU at 10 ms.
"""
import os
import signal
import sys
import time


def cpu_ticks():
    out = {}
    with open("/proc/stat") as f:
        for line in f:
            if not line.startswith("cpu") or line.startswith("cpu "):
                continue
            p = line.split()
            # user nice system idle iowait irq softirq steal
            out[p[0]] = (int(p[4]), int(p[8]))
    return out


def procs(match, pids):
    found = []
    want = set(pids)
    if match:
        for d in os.listdir("/proc"):
            if d.isdigit():
                want.add(int(d))
    for pid in sorted(want):
        try:
            with open(f"/proc/{pid}/stat") as f:
                s = f.read()
        except OSError:
            continue
        name = s[s.index("(") + 1:s.rindex(")")]
        rest = s[s.rindex(")") + 2:].split()
        if pid not in pids and name != match:
            continue
        # rest[0] is field 3 (state); field 39 (processor) is rest[36].
        found.append(f"{pid}:{rest[36]}:{rest[0]}")
    return found


def main():
    args = sys.argv[1:]
    if not args or args[0].startswith("-"):
        print(__doc__, file=sys.stderr)
        return 2
    out_path, args = args[0], args[1:]
    period, match, pids = 0.010, "all_reduce_perf", []
    while args:
        if args[0] == "--period-ms":
            period = float(args[1]) / 1e3
        elif args[0] == "--match":
            match = args[1]
        elif args[0] == "--pid":
            pids.append(int(args[1]))
        else:
            print(f"cpu_trace.py: unknown argument {args[0]}\n{__doc__}", file=sys.stderr)
            return 2
        args = args[2:]
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    signal.signal(signal.SIGINT, lambda *_: stop.append(1))
    ms_per_tick = 1000.0 / os.sysconf("SC_CLK_TCK")
    # Matching processes by name means listing /proc: do it every 10th sample, and read the
    # known pids' stat files in between.
    known = []
    with open(out_path, "w") as out:
        last = cpu_ticks()
        n = 0
        next_t = time.monotonic()
        while not stop:
            next_t += period
            delay = next_t - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            t = time.monotonic()
            now = cpu_ticks()
            cols = []
            for cpu in sorted(now, key=lambda c: int(c[3:])):
                i0, s0 = last.get(cpu, now[cpu])
                i1, s1 = now[cpu]
                cols.append(f"{cpu}:{(s1 - s0) * ms_per_tick:.0f}/{(i1 - i0) * ms_per_tick:.0f}")
            last = now
            if n % 10 == 0:
                known = [int(p.split(":")[0]) for p in procs(match, pids)]
            n += 1
            ps = procs(None, known) if known else []
            out.write(f"{t:.4f} {' '.join(cols)} | {' '.join(ps)}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
