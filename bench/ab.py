#!/usr/bin/env python3
"""Two builds (or one build under two environments) of a *_perf program, alternating in one job.

Each pair runs A then B (B then A on odd pairs, so neither always goes first) with the same
arguments, and the summary gives, per size and placement, each side's median busbw and the median
of the pair ratios of speed B / A (A's time / B's) with its quartiles. An A/A run (the same build twice) says how far apart
two identical programs come out on this machine now: trust a B / A only well outside that.

Usage: bench/ab.py A_BUILD B_BUILD [--pairs N] [--np 2] [--env-a K=V ...] [--env-b K=V ...]
                   [--program all_reduce_perf] [--prefix 'timeout 300 chrt -f 50'] [--raw DIR]
                   -- PERF_ARGS...
  e.g. bench/ab.py ../wt-old/build-b build-b --pairs 10 -- -b 16M -e 64M -f 4 -n 20 -w 5 -c 0
Exit status 0; with --bad-below R (and one size) it exits 1 when the median ratio is below R
(for `git bisect run`), 125 when a run failed.
"""
import argparse
import os
import shlex
import statistics
import subprocess
import sys


def parse(text):
    """{(size, 'oop'|'ip'): (busbw, time in us)} from a *_perf output."""
    out = {}
    for line in text.splitlines():
        f = line.split()
        if not f or line.startswith("#") or not f[0].isdigit() or len(f) < 13:
            continue
        size = int(f[0])
        out[(size, "oop")] = (float(f[7]), float(f[5]))
        out[(size, "ip")] = (float(f[11]), float(f[9]))
    return out


def quartiles(xs):
    xs = sorted(xs)
    if len(xs) < 4:
        return xs[0], xs[-1]
    q = statistics.quantiles(xs, n=4)
    return q[0], q[2]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--pairs", type=int, default=8)
    ap.add_argument("--np", type=int, default=2)
    ap.add_argument("--env-a", action="append", default=[])
    ap.add_argument("--env-b", action="append", default=[])
    ap.add_argument("--program", default="all_reduce_perf")
    ap.add_argument("--prefix", default="timeout 300 chrt -f 50")
    ap.add_argument("--raw")
    ap.add_argument("--bad-below", type=float)
    argv = sys.argv[1:]
    cut = argv.index("--") if "--" in argv else len(argv)
    o = ap.parse_args(argv[:cut])
    perf = argv[cut + 1:]
    root = ["--allow-run-as-root"] if os.geteuid() == 0 else []
    res = {"A": [], "B": []}
    for p in range(o.pairs):
        order = [("A", o.a, o.env_a), ("B", o.b, o.env_b)]
        if p % 2:
            order.reverse()
        for name, build, envs in order:
            env = dict(os.environ)
            xs = []
            for kv in envs:
                k, v = kv.split("=", 1)
                env[k] = v
                xs += ["-x", k]
            cmd = shlex.split(o.prefix) + ["mpirun"] + root + ["--oversubscribe", "-np", str(o.np)] + xs + \
                [os.path.join(build, "bench", o.program)] + perf
            r = subprocess.run(cmd, env=env, capture_output=True, text=True)
            if r.returncode != 0:
                sys.stderr.write(f"pair {p} {name}: exit {r.returncode}\n{r.stdout[-2000:]}{r.stderr[-2000:]}\n")
                sys.exit(125)
            if o.raw:
                os.makedirs(o.raw, exist_ok=True)
                with open(os.path.join(o.raw, f"{name}.{p}.txt"), "w") as f:
                    f.write(r.stdout)
            res[name].append(parse(r.stdout))
    keys = sorted(res["A"][0])
    print(f"# A {o.a} {' '.join(o.env_a)} | B {o.b} {' '.join(o.env_b)} | {o.pairs} pairs, np {o.np}, "
          f"prefix '{o.prefix}', args {' '.join(perf)}")
    print("| size | placement | A median us | B median us | A median busbw | B median busbw | "
          "B/A speed, median of pair ratios (quartiles) | A busbw min-max | B busbw min-max |")
    print("|---:|---|---:|---:|---:|---:|---|---|---|")
    worst = None
    for k in keys:
        a = [r[k][0] for r in res["A"]]
        b = [r[k][0] for r in res["B"]]
        # B's speed over A's: from the times, which keep their digits at small sizes.
        ratios = [ra[k][1] / rb[k][1] for ra, rb in zip(res["A"], res["B"]) if rb[k][1] > 0]
        ta = statistics.median(r[k][1] for r in res["A"])
        tb = statistics.median(r[k][1] for r in res["B"])
        med = statistics.median(ratios)
        lo, hi = quartiles(ratios)
        print(f"| {k[0]} | {k[1]} | {ta:.2f} | {tb:.2f} | {statistics.median(a):.2f} | {statistics.median(b):.2f} | "
              f"{med:.3f} ({lo:.3f}-{hi:.3f}) | {min(a):.2f}-{max(a):.2f} | {min(b):.2f}-{max(b):.2f} |")
        if k[1] == "oop":
            worst = med if worst is None else min(worst, med)
    if o.bad_below is not None and worst is not None and worst < o.bad_below:
        sys.exit(1)


if __name__ == "__main__":
    main()
