#!/usr/bin/env bash
# scripts/gpu-check.sh's exit status (issue 38 item 4): 0 when every step passed, 1 when a step
# failed, hung, was skipped for time (GPU_CHECK_SECONDS) or is unknown. The step "one" runs a fake
# all_reduce_perf from a scratch build folder, so no GPU is needed. The hang (ONE_LIMIT=10 s:
# room for a loaded machine to start the fake) also checks the clean-up: the step's processes
# die, an orphan of it included, and a process of another session whose command line matches the
# step's pattern (all_reduce_perf, as another test's benchmark would) lives; a stand-in cuda-gdb
# takes the "stacks".
# Usage: gpu_check_status_test.sh PATH/TO/scripts/gpu-check.sh
set -u
script=$1
tmp=$(mktemp -d /tmp/accord-gpu-check-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/build/bench"
# FAKE_PERF: ok (exit 0), hang (an orphaned sleep and its own, their pids in FAKE_PIDS), else exit 3
cat >"$tmp/build/bench/all_reduce_perf" <<'EOS'
#!/bin/sh
echo "fake all_reduce_perf: $FAKE_PERF"
case $FAKE_PERF in
  ok) exit 0 ;;
  hang) (sleep 300 & echo $! >"$FAKE_PIDS"); echo $$ >>"$FAKE_PIDS"; sleep 300 ;;
  *) exit 3 ;;
esac
EOS
mkdir -p "$tmp/bin" "$tmp/other"
printf '#!/bin/sh\necho "stand-in cuda-gdb $*"\n' >"$tmp/bin/cuda-gdb"
printf '#!/bin/sh\nwhile :; do sleep 1; done\n' >"$tmp/other/all_reduce_perf"
chmod +x "$tmp/build/bench/all_reduce_perf" "$tmp/bin/cuda-gdb" "$tmp/other/all_reduce_perf"
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
# The hang, beside another session's all_reduce_perf that must survive it.
"$tmp/other/all_reduce_perf" &
other=$!
expect "a step that hangs" 1 "one: HANG after 10 s" FAKE_PERF=hang FAKE_PIDS="$tmp/pids" ONE_LIMIT=10 \
  PATH="$tmp/bin:$PATH" -- one
grep -qF "stand-in cuda-gdb -p" "$tmp/logs/one.log" ||
  { echo "FAIL - the hang's log has no stacks of the step's processes"; failures=$((failures + 1)); }
# alive PID: runs and is no zombie (an orphan's parent may reap it late); SIGKILL takes a moment.
alive() { local s; s=$(awk '{ print $3 }' "/proc/$1/stat" 2>/dev/null) && [ "$s" != Z ]; }
n=0
for p in $(cat "$tmp/pids" 2>/dev/null); do
  n=$((n + 1))
  for _ in $(seq 50); do alive "$p" || break; sleep 0.2; done
  if alive "$p"; then
    echo "FAIL - process $p of the hung step still runs"
    kill -9 "$p"
    failures=$((failures + 1))
  fi
done
[ "$n" = 2 ] || { echo "FAIL - the hung step recorded $n of its 2 pids"; failures=$((failures + 1)); }
if kill -0 "$other" 2>/dev/null; then
  echo "ok   - the hang's clean-up left another session's all_reduce_perf alone"
  kill "$other"
else
  echo "FAIL - the hang's clean-up killed another session's all_reduce_perf (pid $other)"
  failures=$((failures + 1))
fi
[ "$failures" = 0 ] || { echo "$failures case(s) failed"; exit 1; }
echo "ok"
