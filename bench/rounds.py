"""The rounds line of all_reduce_perf --compare-mpi, read in one place (compare_table.py and
trace_rounds.py both use it).

Each size's row is followed by a line such as

  #   8 B rounds: Accord 8.16 us (0.106/0.844 x15355, steal 0 ms, at 35135.693+0.125 s) ...,
  Open MPI 195.28 us (0.000/47.613 x9104, steal 0 ms, at 35135.818+1.778 s) ...

(one line): per round, the time per call, the voluntary/involuntary context switches per call
of the rank with the most, the calls timed, the machine's steal time meanwhile, and when the
round started and how long it took (CLOCK_MONOTONIC seconds).
"""
import re
from collections import namedtuple

Round = namedtuple("Round", "us vol invol calls steal_ms start span")
ROUND = re.compile(r"([\d.]+) us \(([\d.]+)/([\d.]+) x(\d+), steal (-?\d+) ms, at ([\d.]+)\+([\d.]+) s\)")
LIBRARIES = (("accord", "Accord "), ("mpi", "Open MPI "))


def is_rounds_line(line):
    return line.startswith("#   ") and " B rounds: " in line


def parse_rounds_line(line):
    """(size in bytes, {"accord": [Round, ...], "mpi": [Round, ...]}), or None if the line is
    not a rounds line. A library whose part of the line does not parse has an empty list."""
    if not is_rounds_line(line):
        return None
    size = int(line.split()[1])
    acc, _, mpi = line.partition(", Open MPI")
    out = {}
    for (lib, _), part in zip(LIBRARIES, (acc, mpi)):
        out[lib] = [Round(float(m.group(1)), float(m.group(2)), float(m.group(3)), int(m.group(4)),
                          int(m.group(5)), float(m.group(6)), float(m.group(7))) for m in ROUND.finditer(part)]
    return size, out
