#!/usr/bin/env bash
# scripts/gpu-check.sh's exit status (issue 38 item 4): 0 when every step passed, 1 when a step
# failed, was skipped for time (GPU_CHECK_SECONDS) or is unknown. The step "one" runs a fake
# all_reduce_perf from a scratch build folder, so no GPU is needed. Not covered: a HANG, whose
# clean-up kills every process named all_reduce_perf on the machine (the GPU machine is the
# script's own; here other tests' benchmarks could be running).
# Usage: gpu_check_status_test.sh PATH/TO/scripts/gpu-check.sh
set -u
script=$1
tmp=$(mktemp -d /tmp/accord-gpu-check-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/build/bench"
printf '#!/bin/sh\necho "fake all_reduce_perf: $FAKE_PERF"\n[ "$FAKE_PERF" = ok ] || exit 3\n' \
  >"$tmp/build/bench/all_reduce_perf"
chmod +x "$tmp/build/bench/all_reduce_perf"
failures=0
# expect NAME WANT_STATUS NEEDLE [ENV...] -- STEP...
expect() {
  local name=$1 want=$2 needle=$3
  shift 3
  local envs=()
  while [ "$1" != -- ]; do envs+=("$1"); shift; done
  shift
  local out status
  out=$(env "${envs[@]}" "$script" "$tmp/build" "$tmp/logs" "$@" 2>&1)
  status=$?
  if [ "$status" != "$want" ] || ! grep -qF -- "$needle" <<<"$out"; then
    echo "FAIL - $name: exit status $status (want $want), output must contain '$needle':"
    sed 's/^/    /' <<<"$out" | tail -20
    failures=$((failures + 1))
  else
    echo "ok   - $name: exit status $status, '$needle'"
  fi
}
expect "a step that passes" 0 "one: ok" FAKE_PERF=ok -- one
expect "a step that fails" 1 "one: FAIL rc 3" FAKE_PERF=fail -- one
expect "an unknown step after one that passed" 1 "1 step(s) failed" FAKE_PERF=ok -- one nosuch
expect "a step skipped for time" 1 "one: skipped (past GPU_CHECK_SECONDS=-1)" FAKE_PERF=ok GPU_CHECK_SECONDS=-1 -- one
expect "an unknown step" 1 "nosuch: unknown step" FAKE_PERF=ok -- nosuch
[ "$failures" = 0 ] || { echo "$failures case(s) failed"; exit 1; }
echo "ok"
