#!/usr/bin/env bash
# mpi4py's own test suite (Debian's python3-mpi4py 3.1.4, the tests of its PyPI sdist that
# scripts/setup.sh fetches) under libaccord_mpi.so with ACCORD_MPI_MIN_BYTES=0, so that every
# call Accord can serve goes through it: an outside program's view of the interposition.
# Usage: mpi4py_suite.sh NP LIBACCORD_MPI TESTDIR [MPIRUN_ARG...]
# (the extra mpirun arguments come before the program: -x ACCORD_MPI_DISABLE=1 shows the
# suite's own floors failing, as they must when Accord serves nothing)
# Excluded: test_spawn, which fails without Accord too: MPI_Comm_spawn's children cannot reach
# their parents over the self,vader transports run_mpirun.sh selects ("unreachable proc"), and
# with Open MPI's default transports it hangs. test_dynproc, which issue 20 also left out, passes
# with and without Accord here, so it runs.
# Prints mpi4py's result per rank and how many calls went through Accord and through MPI
# (ACCORD_MPI_STATS=1). Fails unless every rank passed, ran at least 1362 tests with at most 160
# skipped, and printed its own counters in which Accord served at least 40% of its calls and at
# least 20% of each collective's. Exits 77 (skip) without Debian's mpi4py or the fetched tests.
set -u
np=$1 lib=$2 dir=$3
shift 3
here=$(cd "$(dirname "$0")" && pwd)
py=/usr/bin/python3  # Debian's python3-mpi4py is built for Debian's interpreter
if ! "$py" -c 'import sys, mpi4py; sys.exit(mpi4py.__version__ != "3.1.4")' 2>/dev/null; then
  echo "SKIP: Debian's python3-mpi4py 3.1.4 is not importable by $py; run scripts/setup.sh"
  exit 77
fi
if [ ! -f "$dir/runtests.py" ]; then
  echo "SKIP: mpi4py's tests are not in $dir; scripts/setup.sh fetches them with" \
    "'pip download --no-deps --no-binary :all: mpi4py==3.1.4' (was PyPI reachable?)"
  exit 77
fi
# Each rank's output in a file of its own (mpirun --output-filename): on one stream the ranks'
# progress dots land inside each other's result lines ("OKs (skipped=152)s", seen at np 3).
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
start=$(date +%s)
(cd "$dir" && "$here/run_mpirun.sh" "$np" --output-filename "$out/ranks" -x LD_PRELOAD="$lib" \
  -x ACCORD_MPI_MIN_BYTES=0 -x ACCORD_MPI_STATS=1 "$@" "$py" runtests.py --no-builddir -e test_spawn) \
  >"$out/mpirun.log" 2>&1
status=$?
elapsed=$(($(date +%s) - start))
# Open MPI 4 writes ranks/1/rank.R/{stdout,stderr}; look for them wherever they are.
rank_log() { find "$out/ranks" -path "*/rank.$1/*" -type f -name 'std*' -print0 2>/dev/null | sort -z | xargs -0 -r cat; }
for r in $(seq 0 $((np - 1))); do rank_log "$r" >"$out/rank.$r.log"; done
# What mpirun said itself, and (where Open MPI copies rank output there too) the rest, without
# the lines of progress dots.
grep -v '^[.sxEF]*$' "$out/mpirun.log" | tail -40
echo "mpi4py np $np: mpirun exit status $status after $elapsed s"
# Floors, so that a run in which Accord served nothing or less, or mpi4py ran little, cannot
# pass. With Debian 12's Open MPI 4.1.4, at np 2, 3 and 4 every rank ran 1362 tests (the
# pinned sdist's count: fewer means a file was left out or not loaded), 152 of them skipped by
# mpi4py itself, as without Accord (its skips follow the MPI library's features: 8 more are
# allowed for another build of it). Accord served 49.7% of each rank's calls at np 2, 54.1-55.1%
# at np 3 and 58.5% at np 4, and at least 34.5% of each collective's (all-reduce is the lowest,
# at every np); the counts are the same from run to run (interpose/mpi/README.md). When Accord's
# init fails the library quietly routes every call to MPI (0%), so the share is what proves
# Accord served the suite; the floors sit about 10 and 15 points under the lowest measured
# share, room for a change of routing that keeps a little more with MPI, not for a collective
# or the whole library routed away.
min_tests=1362 max_skipped=160 min_accord_pct=40 min_call_pct=20
ranks_ran=0 ranks_ok=0 short=""
for r in $(seq 0 $((np - 1))); do
  f="$out/rank.$r.log"
  ran=$(grep -oE 'Ran [0-9]+ tests in [0-9.]+s' "$f" | tail -1)
  result=$(grep -oE '^(OK( \(skipped=[0-9]+\))?|FAILED \([^)]*\))$' "$f" | tail -1)
  echo "rank $r: ${ran:-no 'Ran N tests' line}; ${result:-no result line}"
  [ -n "$ran" ] && ranks_ran=$((ranks_ran + 1))
  case $result in OK*) ranks_ok=$((ranks_ok + 1)) ;; FAILED*) grep -E '^(FAIL|ERROR):' "$f" | head -20 ;; esac
  n=$(echo "$ran" | grep -oE '[0-9]+' | head -1)
  skipped=$(echo "$result" | grep -oE 'skipped=[0-9]+' | grep -oE '[0-9]+')
  [ -n "$n" ] && [ "$n" -lt "$min_tests" ] && short+=" rank $r ran $n tests (fewer than $min_tests);"
  [ -n "$skipped" ] && [ "$skipped" -gt "$max_skipped" ] && short+=" rank $r skipped $skipped (more than $max_skipped);"
done
# "libaccord_mpi: rank R: MPI_Allreduce A accord / M mpi, ..." at MPI_Finalize: each rank's own
# log must hold its own line (ranks differ a little: some tests give ranks sub-communicators of
# different sizes, and one of a single rank stays with MPI). Per rank: the share of all its
# calls, and the lowest share of one collective (so that one collective no longer served cannot
# hide in the total: without Accord's all-reduce, np 2's share would still be 45%).
no_counters="" low_ranks="" low_calls="" ta=0 tm=0
for r in $(seq 0 $((np - 1))); do
  line=$(grep -oE "libaccord_mpi: rank $r: MPI_.*" "$out/rank.$r.log" | tail -1)
  if [ -z "$line" ]; then no_counters+=" $r"; continue; fi
  read -r a m pct call call_pct < <(echo "${line#*: rank $r: }" | awk -v RS=', ' '
    { a += $2; m += $5; p = $2 + $5 > 0 ? 100 * $2 / ($2 + $5) : 100
      if (low == "" || p < low) { low = p; call = $1 } }
    END { t = a + m > 0 ? 100 * a / (a + m) : 0; printf "%d %d %.1f %s %.1f\n", a, m, t, call, low }')
  echo "rank $r: $a calls through Accord, $m through MPI ($pct% Accord; lowest: $call $call_pct%)"
  echo "rank $r by call: ${line#*: rank $r: }"
  ta=$((ta + a)) tm=$((tm + m))
  awk -v p="$pct" -v f="$min_accord_pct" 'BEGIN { exit !(p < f) }' && low_ranks+=" $r ($pct%)"
  awk -v p="$call_pct" -v f="$min_call_pct" 'BEGIN { exit !(p < f) }' && low_calls+=" rank $r $call ($call_pct%)"
done
echo "libaccord_mpi counters, all ranks: $ta calls through Accord, $tm through MPI"
if [ "$status" -ne 0 ] || [ "$ranks_ran" -ne "$np" ] || [ "$ranks_ok" -ne "$np" ]; then
  echo "FAIL: mpi4py's tests failed under libaccord_mpi.so at np $np ($ranks_ran of $np ranks" \
    "finished, $ranks_ok passed); rerun with -x ACCORD_MPI_DISABLE=1 to see whether MPI" \
    "alone fails too"
  for r in $(seq 0 $((np - 1))); do echo "--- rank $r, last lines"; grep -v '^[.sxEF]*$' "$out/rank.$r.log" | tail -15; done
  exit 1
fi
fail=0
if [ -n "$short" ]; then
  echo "FAIL: mpi4py ran too little at np $np:$short (was a test file left out or skipped whole?)"
  fail=1
fi
if [ -n "$no_counters" ]; then
  echo "FAIL: rank(s)$no_counters printed no libaccord_mpi counters (ACCORD_MPI_STATS=1);" \
    "was libaccord_mpi.so preloaded on every rank?"
  fail=1
fi
if [ -n "$low_ranks" ]; then
  echo "FAIL: Accord served less than $min_accord_pct% of the calls on rank(s)$low_ranks: did Accord's" \
    "init fail (then every call goes to MPI)? Look for 'cannot create an Accord communicator' above," \
    "or rerun with -x ACCORD_LOG=info"
  fail=1
fi
if [ -n "$low_calls" ]; then
  echo "FAIL: Accord served less than $min_call_pct% of one collective's calls on$low_calls: is that" \
    "collective no longer routed to Accord (a threshold, a dtype or communicator check)?"
  fail=1
fi
[ "$fail" = 0 ] || exit 1
echo "ok"
