#!/usr/bin/env bash
# scripts/demo.sh --quick --no-build on this build, as a newcomer would run it: every section
# runs and the summary says what it should. Ratios and times are printed, never compared with
# anything (the machine may be loaded).
#   demo_test.sh SOURCE_ROOT BUILD_DIR               the GPUs CUDA finds, or the line saying
#                                                    why the GPU part was skipped
#   demo_test.sh SOURCE_ROOT BUILD_DIR TOPOLOGY_FILE the GPU part on simulated GPUs of that file
#                                                    (exit 77, SKIP, if the file is missing)
set -uo pipefail
src=$1 build=$2 topo=${3:-}
if [ -n "$topo" ] && [ ! -f "$topo" ]; then
  echo "SKIP: no topology file $topo"
  exit 77
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
out=$tmp/out.txt
if [ -n "$topo" ]; then export ACCORD_SIM_TOPO=$topo; else unset ACCORD_SIM_TOPO; fi
unset DEMO_GPU
DEMO_LOGS=$tmp/logs BUILD_DIR=$build "$src/scripts/demo.sh" --quick --no-build >"$out" 2>&1
rc=$?
cat "$out"
echo "----- demo_test checks"
errors=0
check() {  # check WHAT EXTENDED-REGEX: some line of the output matches
  if grep -E -q -- "$2" "$out"; then echo "ok: $1"; else echo "FAIL: $1 (no line matches: $2)"; errors=$((errors + 1)); fi
}
check_not() {  # check_not WHAT EXTENDED-REGEX: no line matches
  if grep -E -q -- "$2" "$out"; then echo "FAIL: $1 (a line matches: $2)"; errors=$((errors + 1)); else echo "ok: $1"; fi
}
[ $rc = 0 ] && echo "ok: exit status 0" || { echo "FAIL: demo.sh exited with status $rc"; errors=$((errors + 1)); }

check "section 1, topology" '^=== 1\. Topology'
check "section 2, host all-reduce" '^=== 2\. All-reduce of float32 on host memory, 2 ranks'
check "host results exact" '^  every result exact, out of place and in place$'
check_not "no rounds diagnostics without --verbose" 'rounds:'
check_not "no build output with --no-build" '^\[[0-9]+/3\]|Program .* found'
check_not "no failure" 'FAILED|WRONG'

# The summary: a header, then at most five lines.
summary=$(sed -n '/^=== Summary/,$p' "$out" | tail -n +2)
n=$(grep -c . <<<"$summary")
[ "$n" -ge 1 ] && [ "$n" -le 5 ] && echo "ok: summary of $n lines" ||
  { echo "FAIL: the summary has $n lines (1 to 5 expected)"; errors=$((errors + 1)); }
# With Open MPI (mpirun found and the build has MPI) the ratio range, else Accord's own figures.
if grep -q '^=== 2\. .*: Accord and Open MPI on the same buffers$' "$out"; then
  check "summary: ratio range" '^host all-reduce, 2 ranks: Accord / Open MPI bus bandwidth from [0-9.]+x \([0-9]+ [KM]?i?B\) to [0-9.]+x \([0-9]+ [KM]?i?B\)$'
else
  check "section 2 says why there is no comparison" '^=== 2\. .* \(no Open MPI to compare with: .+\)$'
  check "summary: host figures" '^host all-reduce, 2 ranks: 8 B in [0-9.]+ us, .* \(no Open MPI to compare with: .+\)$'
fi
check "summary: next commands" '^next: .*bench/README.md.*README.md.*scripts/test.sh'
if [ -d /usr/share/datasets/fashion-mnist ] && [ -x "$build/trainer/accord-train" ]; then
  check "section 4, training" '^=== 4\. Training: LeNet-5 on Fashion-MNIST, 2 ranks on the (cpu|gpu)'
  check "training, one line at the end of the epoch" '^  end of epoch 1: test accuracy 0\.[0-9]+$'
  check "summary: accuracy" '^training \((cpu|gpu), 2 ranks, 32 steps\): test accuracy 0\.[0-9]+, [0-9]+ samples/s, communication [0-9]+% of the training time$'
else
  check "summary: training skipped" '^training: skipped'
fi

if [ -n "$topo" ]; then
  check "section 1 shows the simulated machine" "^=== 1\. Topology: the simulated machine of $topo"
  check "section 3 on simulated GPUs" '^=== 3\. All-reduce on GPU buffers: 2 simulated GPUs'
  check "the route of the GPU pair and why" '^  pair 0-1: host-staged \(.+\)$'
  check "2 processes on GPU 0: their route" '^  pair 0-1: ipc \(.+\)$'
  check "says MPS does not apply" '^2 processes sharing GPU 0 \(ACCORD_DEVICE=0\): simulated GPUs have no MPS'
  n=$(grep -c '^  every result exact, out of place and in place$' "$out")
  [ "$n" = 3 ] && echo "ok: host, 1 GPU rank and 2 GPU processes exact" ||
    { echo "FAIL: $n tables exact, 3 expected"; errors=$((errors + 1)); }
  check "says what the trainer ran on" '^  \(on the CPU: --device gpu needs a real GPU'
  check "summary: GPU" '^GPU \(simulated, 2 x .+\): 1 rank and 2 processes on GPU 0 exact; no GPU times$'
elif grep -q '^=== 3\. GPU part skipped' "$out"; then
  check "GPU skipped in one line, saying why" '^=== 3\. GPU part skipped: .+'
  check_not "nothing else of the GPU part" '^1 rank on GPU 0|^2 processes sharing GPU 0'
  check "summary: GPU skipped" '^GPU: skipped \(section 3 says why\)$'
  # The whole run of a newcomer without a GPU fits in 80 lines (issue 37); --quick prints fewer.
  lines=$(wc -l <"$out")
  [ "$lines" -le 80 ] && echo "ok: $lines lines" || { echo "FAIL: $lines lines, more than 80"; errors=$((errors + 1)); }
else
  check "section 3 on the GPUs CUDA found" '^=== 3\. All-reduce on GPU buffers: [0-9]+ x '
  check "summary: GPU figures" '^GPU \(.+\): 1 rank 8 B in [0-9.]+ us, .+; 2 processes on GPU 0 \((no )?MPS\) 8 B in [0-9.]+ us, .+; exact$'
fi
echo "$errors failed checks"
[ $errors = 0 ]
