#!/usr/bin/env bash
# all_reduce_algos' machine-state probe (Note [Machine state probe]), with the slow state faked
# by ALL_REDUCE_ALGOS_SLOW_PROBES (those probes report 10 us, every other one 1 us, whatever
# the machine measured, so the outcome does not depend on its load), 2 ranks, env launch:
#  1. one slow probe after the first sample: that sample is taken again, the wait said on stderr;
#  2. slow for longer than --state-wait: the job says it stops waiting (once), goes on, and
#     leaves the slow samples out of the median;
#  3. --state-wait 0: no probe.
# 1 MiB samples: 128 calls each (8 bytes would be 10000, minutes on a busy machine).
# Usage: algos_probe.sh ENV_LAUNCH ALL_REDUCE_ALGOS
set -u
launch=$1 prog=$2
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; cat "$tmp/out" "$tmp/err"; exit 1; }
run() {  # run SLOW_PROBES ARGS...
  local slow=$1; shift
  ALL_REDUCE_ALGOS_SLOW_PROBES=$slow "$launch" 2 "$prog" --sizes 1M --candidates direct \
    --no-tuner --samples -c 1 "$@" > "$tmp/out" 2> "$tmp/err" ||
    fail "all_reduce_algos exited non-zero"
  grep -q "wrong values: 0 OK" "$tmp/out" || fail "wrong values"
}
samples() { grep -E '^# +1048576 +direct:' "$tmp/out" | tr ' ' '\n' | grep -c '@'; }

run 1 --rounds 3 --state-wait 5
field() { sed -n "s/.*[;,(] \([0-9]*\) $1.*/\1/p" "$tmp/out"; }
[ "$(field 'samples retaken')" = 1 ] || fail "case 1: expected the first sample retaken, only it"
[ "$(samples)" = 3 ] || fail "case 1: expected 3 samples"
grep -q "waiting up to 5 s for the fast state" "$tmp/err" || fail "case 1: expected the wait announced on stderr"

# Probes 1-12 slow: the first sample's probe, then every probe of a 0.2 s wait (at most 5: the
# wait sleeps 50 ms between probes, so 10 slow probes outlast it on any machine), then the next
# samples' until probe 12; the rest are fast.
run 1,2,3,4,5,6,7,8,9,10,11,12 --rounds 16 --state-wait 0.2
gave_up=$(sed -n 's/.*(gave up \([0-9]*\) times).*/\1/p' "$tmp/out")
[ "$gave_up" = 1 ] || fail "case 2: expected one give-up"
[ "$(field 'samples retaken')" = 1 ] || fail "case 2: expected only the first sample retaken"
[ "$(grep -c 'stayed in a slow state' "$tmp/err")" = 1 ] || fail "case 2: expected the give-up said once on stderr"
[ "$(field 'slow samples left out')" -ge 1 ] || fail "case 2: expected slow samples left out of the median"
[ "$(samples)" = 16 ] || fail "case 2: expected 16 samples"
[ "$(grep -c 'for the fast state (--state-wait' "$tmp/err")" = 1 ] || fail "case 2: expected the wait announced once"

run 1 --rounds 2 --state-wait 0
if grep -q "probe" "$tmp/out"; then fail "case 3: --state-wait 0 still probed"; fi
[ "$(samples)" = 0 ] || fail "case 3: samples without probes have no @"
grep -qE '^# +1048576 +direct: [0-9.]+ [0-9.]+$' "$tmp/out" ||
  fail "case 3: expected 2 plain samples"
echo "probe: retake, give-up and off all behave"
