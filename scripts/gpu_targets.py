#!/usr/bin/env python3
"""The GPU targets of issues 33, 34, 35 and 37, read from the logs of scripts/gpu-check.sh's
`targets` steps: one Markdown table, a row per target, what was measured and whether it is met.

    scripts/gpu_targets.py LOG_DIR [--device "NVIDIA H200"] [--date 2026-11-29]

Every nccl-tests log (NVIDIA's programs, unchanged: the `t_*` steps) is read for its rows
(size, then time / algbw / busbw / #wrong out of place and in place) and its "Out of bounds
values : 0 OK" line. A target whose log is missing, or lacks the size, reads "not measured"; one
whose step failed or hung (gpu-check.sh's summary in LOG_DIR/summary.txt) says so. Exit status:
0 when every target was measured and met, 1 otherwise (the table is printed either way).
"""
import argparse
import os
import re
import sys

MiB = 1 << 20


def nccl_rows(path):
    """{size: row} of an nccl-tests log, and whether it ended "Out of bounds values : 0 OK".
    A row: dict(time, busbw, wrong, ip_time, ip_busbw, ip_wrong); a field that is not a number
    (N/A) is None."""
    rows, ok = {}, False
    try:
        with open(path, errors="replace") as f:
            for line in f:
                if re.match(r"#\s*Out of bounds values\s*:\s*0 OK", line):
                    ok = True
                fields = line.split()
                if len(fields) < 13 or not fields[0].isdigit() or not fields[1].isdigit():
                    continue

                def num(s):
                    try:
                        return float(s)
                    except ValueError:
                        return None
                rows[int(fields[0])] = dict(time=num(fields[5]), busbw=num(fields[7]), wrong=num(fields[8]),
                                            ip_time=num(fields[9]), ip_busbw=num(fields[11]),
                                            ip_wrong=num(fields[12]))
    except OSError:
        return None, False
    return rows, ok


def exact(rows, ok):
    """Whether every row of a log has #wrong 0 (both columns that were checked) and the log ended OK."""
    if not rows or not ok:
        return False
    return all(r["wrong"] in (0, None) and r["ip_wrong"] in (0, None) for r in rows.values())


def ms_a_step(path):
    try:
        with open(path) as f:
            m = re.search(r"# ms a step: ([0-9.]+)", f.read())
        return float(m.group(1)) if m else None
    except OSError:
        return None


def size_label(n):
    return f"{n // MiB} MiB" if n >= MiB else f"{n} B"


class Table:
    def __init__(self, logs, summary):
        self.logs, self.summary, self.lines, self.unmet = logs, summary, [], 0

    def log(self, step):
        """A step's log (LOG_DIR/STEP.log), or "" when it has none."""
        try:
            with open(os.path.join(self.logs, step + ".log"), errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    def step_note(self, step):
        s = self.summary.get(step)
        return f" (step {s})" if s and not s.startswith("ok") else ""

    def add(self, issue, measure, target, measured, met, step=None):
        if measured is None:
            measured, met = "not measured" + (self.step_note(step) if step else ""), None
        if met is not True:
            self.unmet += 1
        mark = {True: "met", False: "**not met**", None: "-"}[met]
        self.lines.append(f"| {issue} | {measure} | {target} | {measured} | {mark} |")

    def nccl(self, issue, measure, step, size, column, op, target, unit):
        rows, ok = nccl_rows(os.path.join(self.logs, step + ".log"))
        row = (rows or {}).get(size)
        value = row.get(column) if row else None
        if value is None:
            return self.add(issue, measure, f"{op} {target} {unit}", None, None, step)
        good = value >= target if op == ">=" else value <= target
        wrong = "" if exact(rows, ok) else "; **#wrong or out-of-bounds not 0**"
        self.add(issue, measure, f"{op} {target} {unit}", f"{value:g} {unit}{wrong}", good and not wrong, step)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("logs")
    p.add_argument("--device", default="")
    p.add_argument("--date", default="")
    a = p.parse_args()
    summary = {}
    try:
        with open(os.path.join(a.logs, "summary.txt")) as f:
            for line in f:
                name, _, rest = line.partition(": ")
                summary[name.strip()] = rest.strip()
    except OSError:
        pass
    t = Table(a.logs, summary)
    mps2, mps4 = "2 processes on one GPU, MPS", "4 processes on one GPU, MPS"
    # issue 33
    t.nccl(33, f"all_reduce 128 MiB busbw, {mps2}", "t_mps2_all_reduce", 128 * MiB, "busbw", ">=", 400, "GB/s")
    t.nccl(33, f"all_reduce 8 B, {mps2}", "t_mps2_all_reduce", 8, "time", "<=", 10, "us")
    t.nccl(33, f"all_reduce 128 MiB busbw, {mps2}, buffers registered (-R 1)", "t_mps2_all_reduce_registered",
           128 * MiB, "busbw", ">=", 400, "GB/s")
    for c in ("all_gather", "reduce_scatter", "broadcast", "reduce"):
        t.nccl(33, f"{c} 64 MiB busbw, {mps2}", f"t_mps2_{c}", 64 * MiB, "busbw", ">=", 300, "GB/s")
    for c in ("all_gather", "reduce_scatter"):  # Note [Registered inputs]: read where they lie
        t.nccl(33, f"{c} 64 MiB busbw, {mps2}, buffers registered (-R 1)", f"t_mps2_{c}_registered", 64 * MiB,
               "busbw", ">=", 300, "GB/s")
    t.nccl(33, f"all_reduce 64 MiB busbw, {mps4}", "t_mps4_all_reduce", 64 * MiB, "busbw", ">=", 250, "GB/s")
    t.nccl(33, f"all_reduce 8 B, {mps4}", "t_mps4_all_reduce", 8, "time", "<=", 15, "us")
    t.nccl(33, "forced host-staged (ACCORD_P2P_DISABLE=1) all_reduce 64 MiB busbw, 2 processes",
           "t_staged_all_reduce", 64 * MiB, "busbw", ">=", 20, "GB/s")
    # No target of their own: the figure (sendrecv: Note [Copy-engine messages], by copy engines,
    # then on the kernel, ACCORD_P2P_COPY_MIN_BYTES=-1).
    for c in ("all_gather", "reduce_scatter", "broadcast", "reduce", "sendrecv", "sendrecv_kernel"):
        rows, ok = nccl_rows(os.path.join(a.logs, f"t_staged_{c}.log"))
        r = (rows or {}).get(64 * MiB)
        name = "sendrecv, every message on the kernel," if c == "sendrecv_kernel" else c
        t.lines.append(f"| 33 | forced host-staged {name} 64 MiB busbw, 2 processes (reference) | - | "
                       f"{'%g GB/s' % r['busbw'] if r and r['busbw'] is not None else 'not measured'}"
                       f"{'' if not rows or exact(rows, ok) else '; **not exact**'} | - |")
    t.nccl(33, "1 process, in-place 8 B", "t_one_accord", 8, "ip_time", "<=", 0.5, "us")
    t.nccl(33, "1 process, out-of-place 8 B", "t_one_accord", 8, "time", "<=", 6, "us")
    rows, _ = nccl_rows(os.path.join(a.logs, "t_one_nccl.log"))
    r = (rows or {}).get(8)
    t.lines.append(f"| 33 | the real NCCL, 1 process, in-place / out-of-place 8 B (reference) | - | "
                   f"{'%g / %g us' % (r['ip_time'], r['time']) if r and r['ip_time'] is not None else 'not measured'} | - |")
    runs = {f[:-4]: nccl_rows(os.path.join(a.logs, f)) for f in sorted(os.listdir(a.logs))
            if f.startswith("t_") and f.endswith(".log")}
    nccl_logs = [name for name, (rows, _) in runs.items() if rows]
    inexact = [name for name in nccl_logs if not exact(*runs[name])]
    t.add("33-35", "every size of every nccl-tests run exact (#wrong 0, out of bounds 0)", "exact",
          f"{len(nccl_logs) - len(inexact)} of {len(nccl_logs)} runs exact" +
          (f"; not: {', '.join(inexact)}" if inexact else "") if nccl_logs else None, not inexact)
    # issue 34
    t.nccl(34, "all_reduce 8 B, 2 processes on one GPU, no MPS", "t_slice2_all_reduce", 8, "time", "<=", 60, "us")
    t.nccl(34, "all_reduce 128 MiB busbw, 2 processes, no MPS", "t_slice2_all_reduce", 128 * MiB, "busbw", ">=", 150,
           "GB/s")
    t.nccl(34, "all_reduce 8 B, 4 processes, no MPS", "t_slice4_all_reduce", 8, "time", "<=", 150, "us")
    acc = [ms_a_step(os.path.join(a.logs, "t_ddp_slice", f"accord2.rank{r}")) for r in (0, 1)]
    gloo = [ms_a_step(os.path.join(a.logs, "t_ddp_slice", f"gloo2.rank{r}")) for r in (0, 1)]
    if None in acc or None in gloo:
        t.add(34, "PyTorch DDP, 2 processes, no MPS: ms a step, Accord against Gloo", "below Gloo's", None, None,
              "t_ddp_slice")
    else:
        t.add(34, "PyTorch DDP, 2 processes, no MPS: ms a step, Accord against Gloo", "below Gloo's",
              f"{max(acc):.2f} against {max(gloo):.2f} ms", max(acc) < max(gloo))
    equal = [re.search(rf"losses rank {r}: (equal|different)", t.log("t_ddp_slice")) for r in (0, 1)]
    t.add(35, "examples/pytorch_ddp.py, 2 processes on one GPU: losses, Accord against Gloo", "equal",
          None if None in equal else ", ".join(f"rank {r} {m.group(1)}" for r, m in enumerate(equal)),
          None not in equal and all(m.group(1) == "equal" for m in equal), "t_ddp_slice")
    text = t.log("t_kill_slice")
    m = re.search(r"rank 0 exit (\d+), (\d+) ms after the kill", text)
    named = re.search(r"rank 1\b", text.split("=== ", 2)[-1]) is not None
    t.add(34, "kill -9 of one of 2 processes mid-collective, no MPS", "survivor fails within 2 s naming rank 1",
          f"exit {m.group(1)} after {m.group(2)} ms; rank 1 {'named' if named else '**not named**'}" if m else None,
          bool(m) and m.group(1) != "0" and int(m.group(2)) <= 2000 and named, "t_kill_slice")
    # issue 35
    for np_, step in ((2, "t_mps2"), (4, "t_mps4")):
        for c in ("sendrecv", "alltoall"):
            rows, ok = nccl_rows(os.path.join(a.logs, f"{step}_{c}.log"))
            t.add(35, f"{c}_perf, {np_} processes on one GPU (MPS), every size", "#wrong 0",
                  None if not rows else ("exact" if exact(rows, ok) else "**wrong or out of bounds**"),
                  exact(rows, ok), f"{step}_{c}")
    for c in ("sendrecv", "alltoall"):
        t.nccl(35, f"{c} 64 MiB busbw, {mps2}", f"t_mps2_{c}", 64 * MiB, "busbw", ">=", 200, "GB/s")
    for backend in ("accord", "gloo"):
        text = t.log(f"t_torch_p2p_{backend}")
        done = "all results exact" in text
        t.add(35, "torch send/recv, batch_isend_irecv, all_to_all_single" +
              (", premul_sum on CUDA tensors, 2 processes, Accord" if backend == "accord"
               else " on CPU tensors, 2 processes, Gloo (the reference)"), "exact",
              None if not text else "exact" if done else "**not exact, or failed**", done, f"t_torch_p2p_{backend}")
    dev_rows, dev_ok = nccl_rows(os.path.join(a.logs, "t_tcp_device.log"))
    host_rows, _ = nccl_rows(os.path.join(a.logs, "t_tcp_host.log"))
    dv = (dev_rows or {}).get(64 * MiB)
    hv = (host_rows or {}).get(64 * MiB)
    if dv and hv and dv["busbw"] and hv["busbw"]:
        share = dv["busbw"] / hv["busbw"]
        t.add(35, "all_reduce 64 MiB of GPU buffers over TCP (ACCORD_SHM_DISABLE=1), 2 processes, against host buffers",
              ">= 70 %", f"{dv['busbw']:g} against {hv['busbw']:g} GB/s ({share:.0%})"
              + ("" if exact(dev_rows, dev_ok) else "; **not exact**"), share >= 0.7 and exact(dev_rows, dev_ok))
    else:
        t.add(35, "all_reduce 64 MiB of GPU buffers over TCP, against host buffers", ">= 70 %", None, None, "t_tcp_device")
    # issue 37: demo.sh's summary line is "GPU (NAME): ...; exact" after a run on a GPU, "GPU
    # (simulated, ...)" on simulated ones, "GPU: skipped (...)" without.
    text = t.log("t_demo")
    m = re.search(r"demo seconds after the build: (\d+)", text)
    line = re.search(r"^GPU \((?!simulated).*$", text, re.M)
    gpu = line is not None and line.group(0).endswith("exact")
    t.add(37, "./scripts/demo.sh on the GPU machine: GPU sections run, exact", "<= 120 s after the build",
          f"{m.group(1)} s, GPU sections {'ran, exact' if gpu else '**did not run, or not exact**'}" if m else None,
          bool(m) and gpu and int(m.group(1)) <= 120 and re.search(r"^demo rc 0;", text, re.M) is not None, "t_demo")
    head = f"GPU targets{' on ' + a.device if a.device else ''}{', ' + a.date if a.date else ''} " \
           f"(scripts/gpu_targets.py {a.logs})"
    print(head)
    print()
    print("| issue | measure | target | measured | |")
    print("|---|---|---|---|---|")
    print("\n".join(t.lines))
    print()
    print(f"{t.unmet} target(s) not met or not measured" if t.unmet else "every target met")
    return 1 if t.unmet else 0


if __name__ == "__main__":
    sys.exit(main())
