#!/usr/bin/env python3
"""Compares the per-step losses of two runs of examples/pytorch_ddp.py (OUT.rankR files).

    scripts/compare_losses.py A.rank0 B.rank0 [--tolerance REL]

Equal means bit for bit (the losses are written as float.hex) unless --tolerance gives a
relative difference to accept. Prints the steps compared, the first step that differs, the
largest relative difference and each run's "ms a step"; exits 0 when equal, 1 when not, 2 on
files that cannot be compared (missing, no steps, different step counts).
"""
import argparse
import sys


def read(path):
    steps, ms, head = [], None, ""
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line.startswith("# ms a step:"):
                ms = float(line.split(":")[1].split()[0])
            elif line.startswith("#"):
                head = head or line[1:].strip()
            elif line:
                fields = line.split()
                steps.append((int(fields[0]), float.fromhex(fields[1])))
    return head, steps, ms


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("a")
    p.add_argument("b")
    p.add_argument("--tolerance", type=float, default=0.0,
                   help="largest relative difference accepted (default 0: bit for bit)")
    args = p.parse_args()
    try:
        (head_a, a, ms_a), (head_b, b, ms_b) = read(args.a), read(args.b)
    except (OSError, ValueError, IndexError) as e:
        print(f"compare_losses: cannot read the runs: {e}")
        return 2
    print(f"A: {args.a}: {head_a}; {len(a)} steps, {ms_a} ms a step")
    print(f"B: {args.b}: {head_b}; {len(b)} steps, {ms_b} ms a step")
    if not a or len(a) != len(b):
        print(f"compare_losses: cannot compare: {len(a)} steps against {len(b)}")
        return 2
    first, worst, worst_step = None, 0.0, None
    for (sa, la), (sb, lb) in zip(a, b):
        if sa != sb:
            print(f"compare_losses: cannot compare: step {sa} against step {sb}")
            return 2
        rel = abs(la - lb) / max(abs(la), abs(lb), 1e-30) if la != lb else 0.0
        if rel > worst:
            worst, worst_step = rel, sa
        if rel > args.tolerance and first is None:
            first = (sa, la, lb)
    if first is None:
        kind = "bit for bit" if args.tolerance == 0 else f"within {args.tolerance:g}"
        print(f"equal ({kind}) over {len(a)} steps; largest relative difference {worst:.3g}")
        return 0
    step, la, lb = first
    print(f"DIFFERENT: first at step {step}: {la!r} against {lb!r}; largest relative difference "
          f"{worst:.3g} (step {worst_step})")
    return 1


if __name__ == "__main__":
    sys.exit(main())
