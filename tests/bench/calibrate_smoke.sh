#!/usr/bin/env bash
# bench/calibrate.sh end to end on a few sizes: the tune file it writes has every candidate at
# every size, and the library accepts it (the tuner then names it as the source of its picks).
# Usage: calibrate_smoke.sh SOURCE_DIR BUILD_DIR
set -eu
src=$1 build=$2
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
ACCORD_CALIBRATE_SIZES=8,4K,64K bash "$src/bench/calibrate.sh" "$build" --ranks 2 --rounds 1 --no-check \
  --out "$tmp/t.tune" 2> "$tmp/err" || { cat "$tmp/err"; exit 1; }
n=$(grep -c '^all_reduce 2 ' "$tmp/t.tune")
[ "$n" = 18 ] || { echo "expected 6 candidates x 3 sizes in the tune file, found $n:"; cat "$tmp/t.tune"; exit 1; }
head -1 "$tmp/t.tune" | grep -qx 'accord-tune 1' || { echo "no header"; exit 1; }
ACCORD_TUNE_FILE="$tmp/t.tune" ACCORD_LOG=warn,tune:info \
  "$src/tests/mpi/run_mpirun.sh" 2 -x ACCORD_TUNE_FILE -x ACCORD_LOG "$build/bench/all_reduce_perf" \
  -b 8 -e 64K -f 8 -n 2 -w 1 -c 1 > "$tmp/out" 2> "$tmp/log" || { cat "$tmp/out" "$tmp/log"; exit 1; }
grep -q "all_reduce of 4096 bytes (2 ranks): .*$tmp/t.tune predicts" "$tmp/log" ||
  { echo "the tuner did not use the tune file:"; grep "INFO tune" "$tmp/log"; exit 1; }
echo "calibrate.sh wrote $n measurements; the tuner used them"
