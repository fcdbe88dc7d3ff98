#!/usr/bin/env bash
# Runs an mpirun job that must fail: exit status non-zero, within a bound, with the dead
# rank named in the output. Usage: expect_job_fails.sh MAX_SECONDS NEEDLE NP PROGRAM...
set -u
max=$1; needle=$2; shift 2
start=$(date +%s%N)
out=$("$(dirname "$0")/run_mpirun.sh" "$@" 2>&1)
status=$?
elapsed_ms=$(( ($(date +%s%N) - start) / 1000000 ))  # no bc: the GPU machine has none
elapsed=$(printf "%d.%03d" $((elapsed_ms / 1000)) $((elapsed_ms % 1000)))
echo "$out" | tail -20
echo "exit status $status after $elapsed s"
[ $status -ne 0 ] || { echo "FAIL: the job exited 0"; exit 1; }
# EXPECT_STATUS: the job's exit status must be this one; EXPECT_STATUS_NOT: must not be (a
# program's own MPI_Abort code, when the failure must end the job before the program can).
if [ -n "${EXPECT_STATUS:-}" ] && [ "$status" != "$EXPECT_STATUS" ]; then
  echo "FAIL: exit status $status, not $EXPECT_STATUS"
  exit 1
fi
if [ -n "${EXPECT_STATUS_NOT:-}" ] && [ "$status" = "$EXPECT_STATUS_NOT" ]; then
  echo "FAIL: exit status $status, the status the test must not end with"
  exit 1
fi
echo "$out" | grep -qF -- "$needle" || { echo "FAIL: output does not mention '$needle'"; exit 1; }
# EXPECT_NOT: a text the output must not contain (a program's own "FAIL:" line).
if [ -n "${EXPECT_NOT:-}" ] && echo "$out" | grep -qF -- "$EXPECT_NOT"; then
  echo "FAIL: output mentions '$EXPECT_NOT'"
  exit 1
fi
(( elapsed_ms < max * 1000 )) || { echo "FAIL: took longer than $max s"; exit 1; }
echo "ok"
