#!/usr/bin/env bash
# slot_copy: a short run prints a row per message size and way of writing the slot, with a
# positive GB/s for the state it ran in; bad arguments are errors that say so (exit 2).
# Skipped (77) on a machine with one CPU.
# Usage: slot_copy.sh SLOT_COPY
set -u
prog=$1
[ "$(nproc)" -ge 2 ] || { echo "one CPU: no second CPU to send to"; exit 77; }
err=$(mktemp); trap 'rm -f "$err"' EXIT
out=$("$prog" --seconds 0.3 --sizes 1K,5000,64K --bytes 256K) || { echo "FAIL: exit $?: $out"; exit 1; }
echo "$out"
# Every size x sender once, each with a number in the fast column or the slow one (or both).
for size in 1K 5000 64K; do
  for way in vector rep rep/4K nt; do
    row=$(echo "$out" | awk -v s="$size" -v w="$way" '$1 == s && $2 == w')
    [ "$(echo "$row" | grep -c .)" = 1 ] || { echo "FAIL: expected one row for $size $way"; exit 1; }
    echo "$row" | awk '{ ok = 0; for (i = 3; i <= 4; ++i) if ($i != "-" && $i + 0 > 0) ok = 1; exit !ok }' ||
      { echo "FAIL: no positive GB/s in: $row"; exit 1; }
  done
done
n=$(echo "$out" | sed -n 's/^# CPUs 0 to 1, 8 slots, 262144 bytes a sample per way, \([0-9]*\) samples.*/\1/p')
[ -n "$n" ] && [ "$n" -ge 1 ] || { echo "FAIL: no header line with the sample count"; exit 1; }
for bad in "--cpus 0,0" "--cpus 0,1000" "--cpus 1000,0" "--cpus 0,100000" "--sizes 0" "--sizes 1K,x" "--sizes 65M" "--bytes 0" "--seconds 0" "--fast-ns 0" "--fast-ns x" "--bogus"; do
  # shellcheck disable=SC2086
  "$prog" $bad > /dev/null 2> "$err"; rc=$?
  [ "$rc" = 2 ] || { echo "FAIL: '$bad' exited $rc, expected 2"; exit 1; }
  [ -s "$err" ] || { echo "FAIL: '$bad' said nothing"; exit 1; }
done
echo "slot_copy: rows, numbers and bad arguments behave"
