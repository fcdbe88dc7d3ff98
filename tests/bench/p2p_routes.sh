#!/usr/bin/env bash
# Runs p2p_bandwidth (through any launcher) and checks its table: every ordered pair of NPAIRS
# appears exactly once, with the expected route, a positive bandwidth and latency, and the summary
# line. Unordered pairs listed as A-B=ROUTE take that route both ways; every other pair DEFAULT.
# A-B=ROUTE:PATH also wants the topology's path class in the PATH column (the physical pair's,
# whatever the ordinals: CUDA_VISIBLE_DEVICES).
# With --flagged N, the summary must count N flagged pairs and the rows must carry N flags.
# Usage: p2p_routes.sh [--flagged N] NPAIRS DEFAULT [A-B=ROUTE ...] -- COMMAND ARGS...
set -u
flagged=-1
if [ "$1" = "--flagged" ]; then flagged=$2; shift 2; fi
npairs=$1 default=$2
shift 2
expect=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do expect+=("$1"); shift; done
if [ $# -eq 0 ]; then echo "usage: $0 NPAIRS DEFAULT [A-B=ROUTE ...] -- COMMAND ARGS..." >&2; exit 2; fi
shift
out=$("$@" 2>&1)
status=$?
echo "$out"
if [ $status -ne 0 ]; then echo "FAIL: '$*' exited with $status" >&2; exit 1; fi
echo "$out" | awk -v npairs="$npairs" -v flagged="$flagged" -v def="$default" -v expects="${expect[*]:-}" '
  BEGIN {
    n = split(expects, e, " ")
    for (i = 1; i <= n; i++) {
      split(e[i], kv, "="); split(kv[1], ab, "-")
      split(kv[2], rp, ":")
      want[ab[1] " " ab[2]] = rp[1]; want[ab[2] " " ab[1]] = rp[1]
      if (rp[2] != "") { path[ab[1] " " ab[2]] = rp[2]; path[ab[2] " " ab[1]] = rp[2] }
    }
  }
  # Table rows: "SRC DST ROUTE PATH SIZE TIME GBS PREDICTED RATIO STAGED LAT FLAGS".
  $1 ~ /^[0-9]+$/ && $2 ~ /^[0-9]+$/ && NF == 12 {
    key = $1 " " $2
    if (key in seen) { printf "FAIL: pair %s -> %s printed twice\n", $1, $2; bad = 1 }
    seen[key] = 1; rows++
    route = (key in want) ? want[key] : def
    if ($3 != route) { printf "FAIL: pair %s -> %s took route %s, expected %s\n", $1, $2, $3, route; bad = 1 }
    if ((key in path) && $4 != path[key]) { printf "FAIL: pair %s -> %s: path %s, expected %s\n", $1, $2, $4, path[key]; bad = 1 }
    if ($12 != "-") flags++
    if (!($7 > 0) || !($11 > 0)) { printf "FAIL: pair %s -> %s: bandwidth %s GB/s, latency %s us\n", $1, $2, $7, $11; bad = 1 }
  }
  /^# [0-9]+ pairs, / { summary = $2; summary_flagged = $9 + 0 }
  END {
    if (rows != npairs) { printf "FAIL: %d pair rows, expected %d\n", rows, npairs; bad = 1 }
    if (summary != npairs) { printf "FAIL: summary line counts %s pairs, expected %d\n", summary, npairs; bad = 1 }
    if (flagged >= 0 && (summary_flagged != flagged || flags + 0 != flagged)) {
      printf "FAIL: %d flagged rows, summary says %d, expected %d\n", flags, summary_flagged, flagged; bad = 1
    }
    if (!bad) printf "OK: %d ordered pairs, routes as expected\n", rows
    exit bad
  }' >&2
