#!/usr/bin/env bash
# mpi4py's own test suite (Debian's python3-mpi4py 3.1.4, the tests of its PyPI sdist that
# scripts/setup.sh fetches) under libaccord_mpi.so with ACCORD_MPI_MIN_BYTES=0, so that every
# call Accord can serve goes through it: an outside program's view of the interposition.
# Usage: mpi4py_suite.sh NP LIBACCORD_MPI TESTDIR
# Excluded: test_spawn, which fails without Accord too: MPI_Comm_spawn's children cannot reach
# their parents over the self,vader transports run_mpirun.sh selects ("unreachable proc"), and
# with Open MPI's default transports it hangs. test_dynproc, which issue 20 also left out, passes
# with and without Accord here, so it runs.
# Prints mpi4py's result per rank and how many calls went through Accord and through MPI
# (ACCORD_MPI_STATS=1). Exits 77 (skip) without Debian's mpi4py or the fetched tests.
set -u
np=$1 lib=$2 dir=$3
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
  -x ACCORD_MPI_MIN_BYTES=0 -x ACCORD_MPI_STATS=1 "$py" runtests.py --no-builddir -e test_spawn) \
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
ranks_ran=0 ranks_ok=0
for r in $(seq 0 $((np - 1))); do
  f="$out/rank.$r.log"
  ran=$(grep -oE 'Ran [0-9]+ tests in [0-9.]+s' "$f" | tail -1)
  result=$(grep -oE '^(OK( \(skipped=[0-9]+\))?|FAILED \([^)]*\))$' "$f" | tail -1)
  echo "rank $r: ${ran:-no 'Ran N tests' line}; ${result:-no result line}"
  [ -n "$ran" ] && ranks_ran=$((ranks_ran + 1))
  case $result in OK*) ranks_ok=$((ranks_ok + 1)) ;; FAILED*) grep -E '^(FAIL|ERROR):' "$f" | head -20 ;; esac
done
# "libaccord_mpi: rank R: MPI_Allreduce A accord / M mpi, ..." at MPI_Finalize, one per rank of
# MPI_COMM_WORLD: the sum over ranks, and rank 0's by call (ranks differ a little: some tests
# give ranks sub-communicators of different sizes, and one of a single rank stays with MPI).
cat "$out"/rank.*.log | grep -oE 'libaccord_mpi: rank [0-9]+: MPI_.*' | awk -v np="$np" '
  { r = $3; sub(/:$/, "", r); sub(/^libaccord_mpi: rank [0-9]+: /, ""); n = split($0, items, ", ")
    for (i = 1; i <= n; ++i) { split(items[i], f, " "); names[f[1]] = 1; ta += f[2]; tm += f[5]
                               if (r == 0) { acc[f[1]] = f[2]; mpi[f[1]] = f[5]; ra += f[2]; rm += f[5] } }
    ranks++ }
  END { if (ranks == 0) { print "no libaccord_mpi counters: was it preloaded?"; exit }
        printf "libaccord_mpi counters of %d of %d ranks: %d calls through Accord, %d through MPI\n", ranks, np, ta, tm
        printf "rank 0: %d calls through Accord, %d through MPI:\n", ra, rm
        for (c in names) printf "  %-26s %6d Accord %6d MPI\n", c, acc[c], mpi[c] }'
if [ "$status" -ne 0 ] || [ "$ranks_ran" -ne "$np" ] || [ "$ranks_ok" -ne "$np" ]; then
  echo "FAIL: mpi4py's tests failed under libaccord_mpi.so at np $np ($ranks_ran of $np ranks" \
    "finished, $ranks_ok passed); rerun with -x ACCORD_MPI_DISABLE=1 to see whether MPI" \
    "alone fails too"
  for r in $(seq 0 $((np - 1))); do echo "--- rank $r, last lines"; grep -v '^[.sxEF]*$' "$out/rank.$r.log" | tail -15; done
  exit 1
fi
cat "$out"/rank.*.log | grep -q 'libaccord_mpi: rank [0-9]*: MPI_' ||
  { echo "FAIL: no rank printed libaccord_mpi's counters"; exit 1; }
echo "ok"
