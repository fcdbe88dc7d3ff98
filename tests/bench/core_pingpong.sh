#!/usr/bin/env bash
# core_pingpong: a short run prints its summary with sane numbers; bad CPUs are errors that
# say so (exit 2). Skipped (77) on a machine with one CPU.
# Usage: core_pingpong.sh CORE_PINGPONG
set -u
prog=$1
[ "$(nproc)" -ge 2 ] || { echo "one CPU: nothing to ping-pong between"; exit 77; }
err=$(mktemp); trap 'rm -f "$err"' EXIT
# Both patterns: the round trip, and --exchange (both CPUs write, both wait), which must end
# too (each side waits for a counter the other only raises).
for mode in "" "--exchange"; do
  # shellcheck disable=SC2086
  out=$(timeout 30 "$prog" --seconds 0.3 --trips 2000 $mode) || { echo "FAIL: '$mode' exit $?: $out"; exit 1; }
  echo "$out"
  # "# CPUs 0 and 1: round trip of a cache line, ns: fastest F, median M, slowest S; K of N samples ..."
  read -r fastest median slowest n < <(echo "$out" |
    sed -n 's/.*fastest \([0-9.]*\), median \([0-9.]*\), slowest \([0-9.]*\); [0-9]* of \([0-9]*\) samples.*/\1 \2 \3 \4/p')
  [ -n "${n:-}" ] && [ "$n" -ge 1 ] || { echo "FAIL: '$mode': no summary line"; exit 1; }
  awk -v f="$fastest" -v m="$median" -v s="$slowest" 'BEGIN { exit !(f > 0 && f <= m && m <= s) }' ||
    { echo "FAIL: '$mode': expected 0 < fastest <= median <= slowest"; exit 1; }
done
echo "$out" | grep -q "exchange of two cache lines" || { echo "FAIL: --exchange does not say it timed exchanges"; exit 1; }
for bad in "--cpus 0,0" "--cpus 0,1000" "--cpus 1000,0" "--cpus 0,100000" "--trips 0" "--bogus"; do
  # shellcheck disable=SC2086
  "$prog" $bad > /dev/null 2> "$err"; rc=$?
  [ "$rc" = 2 ] || { echo "FAIL: '$bad' exited $rc, expected 2"; exit 1; }
  [ -s "$err" ] || { echo "FAIL: '$bad' said nothing"; exit 1; }
done
echo "core_pingpong: summary and bad arguments behave"
