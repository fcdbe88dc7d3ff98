#!/usr/bin/env bash
# The device path on a real GPU, as users run it, every step under a time limit: on a step that
# outlives its limit, the stacks of its processes (cuda-gdb, host and device threads) go to the
# log before they are killed, so a hang is a finding, not a lost call.
#
#   scripts/gpu-check.sh BUILD_DIR LOG_DIR [STEP...]
#   (default: one mps2 procs2 trainer torch ddp suite staged mps4 colls; GPU_CHECK_SECONDS=300:
#   a step not started by then is skipped)
#
# Steps (each prints one "=== step: ok|FAIL rc|HANG after N s" line; a summary ends the run).
# Exit status 0 only when every step ran and passed: a step that failed, hung, was skipped for
# time (GPU_CHECK_SECONDS) or is unknown makes it 1.
#   suite     meson test --suite gpu (4 at once)
#   one       1 rank, all_reduce_perf -g 1, 8 B .. 128 MiB, results checked
#   procs2    2 processes on GPU 0 (ipc), no MPS: time slices between the kernels
#   mps2      the same under MPS; mps4, mps8: 4 and 8 processes; staged: ACCORD_P2P_DISABLE=1
#             (host-staged: the staged all-reduce, then ACCORD_DEVICE_PROTO=fifo to compare);
#             mps2b1: mps2 with one-block kernels (ACCORD_GPU_BLOCKS=1);
#             mps8 and mps2b1 are not in the default list
#   direct    mps2 and mps4 with ACCORD_DEVICE_PROTO=fifo, oneshot and twoshot (issue 33: the direct
#             protocol against the FIFOs; mps2 and mps4 themselves run the default choice; not in
#             the default list)
#   colls     reduce_scatter, all_gather, broadcast, reduce: 2 processes under MPS
#   trainer   accord-train --device gpu, 2 ranks under MPS, --sync accord
#   torch     PyTorch's NCCL process group on libaccord_nccl.so (examples/torch_allreduce.py)
#   ddp       examples/pytorch_ddp.py (DDP, DDP_STEPS=300 steps): 1 process on PyTorch's own NCCL
#             and on Accord, 2 processes sharing the GPU on Accord and on Gloo (MPS); the losses
#             compared bit for bit (scripts/compare_losses.py: 1 process NCCL against Accord, 2
#             processes Accord against Gloo, rank by rank), and each run's ms a step; files in
#             LOG_DIR/ddp/
#   tcp2      GPU buffers between 2 processes over TCP (ACCORD_SHM_DISABLE=1: staged through pinned
#             host memory by pump threads, Note [Device data over TCP]), then the same job on
#             host buffers, for issue 35's ">= 70 % of host buffers" (not in the default list)
#   tcp2p2p   send/recv, all-to-all (2, 3 and 4 processes, every dtype, 0 to 19 FIFO slots), a
#             mismatch and a killed peer between processes over TCP (ACCORD_SHM_DISABLE=1), real
#             GPU memory on GPU 0 (MPS): tests/gpu_path/gpu_p2p_test's TCP cases, which run on
#             simulated GPUs in CI (not in the default list; never run on a GPU yet)
#   kill      kill -9 one of 2 ranks in the middle of 64 MiB all-reduces (MPS): the other ends
#             (not in the default list)
#   gpusuite3 the gpu suite 3 times over, 4 at once (not in the default list)
#   all12     the whole suite 3 times over, 12 at once (issue 20 item 3; not in the default list;
#             ALL_LIMIT seconds, 570 by default; one pass took 130-200 s on the H200, its
#             non-parallel tests running one at a time, so it needs a call of its own), with the caller's ACCORD_LOG and
#             ACCORD_TIMEOUT_MS, not this script's
#   all2      the same, 2 at once (not in the default list)
# Where the machine has one GPU every multi-rank step shares it (ACCORD_DEVICE=0).
set -u
build=${1:?usage: gpu-check.sh BUILD_DIR LOG_DIR [STEP...]}
logs=${2:?usage: gpu-check.sh BUILD_DIR LOG_DIR [STEP...]}
shift 2
steps=${*:-one mps2 procs2 trainer torch ddp suite staged mps4 colls}
deadline=${GPU_CHECK_SECONDS:-300}  # steps not started by then are skipped (device time is short)
mkdir -p "$logs"
build=$(cd "$build" && pwd)
summary=()
bad=0  # steps that failed, hung, were skipped or unknown
[ -n "${ACCORD_LOG+x}" ] && caller_log=$ACCORD_LOG
[ -n "${ACCORD_TIMEOUT_MS+x}" ] && caller_timeout=$ACCORD_TIMEOUT_MS
export ACCORD_LOG=${ACCORD_LOG:-gpu:info}
export ACCORD_TIMEOUT_MS=${ACCORD_TIMEOUT_MS:-15000}  # a lost hand-off ends in an error, not a hang
# the suites run with the caller's environment, not the two settings above
plain=(env -u ACCORD_LOG -u ACCORD_TIMEOUT_MS)
[ -n "${caller_log+x}" ] && plain+=(ACCORD_LOG="$caller_log")
[ -n "${caller_timeout+x}" ] && plain+=(ACCORD_TIMEOUT_MS="$caller_timeout")
mpi=(mpirun --allow-run-as-root --oversubscribe --bind-to none -x ACCORD_TIMEOUT_MS -x ACCORD_DEVICE=0
     -x ACCORD_LOG -x LD_LIBRARY_PATH -x PATH)

mps_on() {
  export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps CUDA_MPS_LOG_DIRECTORY=/tmp/mpslog
  mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY
  pgrep -f nvidia-cuda-mps-control >/dev/null || nvidia-cuda-mps-control -d
  [[ " ${mpi[*]} " == *" CUDA_MPS_PIPE_DIRECTORY "* ]] || mpi+=(-x CUDA_MPS_PIPE_DIRECTORY -x CUDA_MPS_LOG_DIRECTORY)
}
mps_off() {
  pgrep -f nvidia-cuda-mps-control >/dev/null && { echo quit | nvidia-cuda-mps-control; sleep 1; }
}

# step NAME LIMIT_S PATTERN CMD...: PATTERN (pgrep -f) finds, among the step's own processes,
# those whose stacks to take. Each step is a session of its own (setsid; without job control the
# background child is no group leader, so setsid does not fork and the step's pid is the session
# id): a hang kills that session, orphans included, and nothing else on the machine. CMD runs
# under bash -c, so it may be one of this script's functions (exported: ddp_check).
step_sid=""  # the session of the step running now, killed if this script is interrupted
trap '[ -n "$step_sid" ] && pkill -9 -s "$step_sid"; exit 130' INT TERM
step() {
  local name=$1 limit=$2 pattern=$3
  shift 3
  local log=$logs/$name.log t0=$SECONDS
  if ((SECONDS > deadline)); then
    summary+=("$name: skipped (past GPU_CHECK_SECONDS=$deadline)")
    bad=$((bad + 1))
    return
  fi
  echo "=== $name: $*" | tee "$log"
  setsid -w bash -c '"$@"' "$name" "$@" >>"$log" 2>&1 &
  local pid=$!
  step_sid=$pid
  while kill -0 $pid 2>/dev/null && ((SECONDS - t0 < limit)); do sleep 0.2; done
  if kill -0 $pid 2>/dev/null; then
    echo "--- HANG after $limit s; stacks:" >>"$log"
    local n=0 p
    for p in $(pgrep -s "$pid" -f "$pattern"); do
      ((n++ < 2)) || break
      echo "--- pid $p: $(tr '\0' ' ' </proc/$p/cmdline 2>/dev/null)" >>"$log"
      timeout 30 "$gdb" -p "$p" -batch -ex "info threads" -ex "thread apply all bt 12" \
        -ex "info cuda kernels" >>"$log" 2>&1
    done
    pkill -9 -s "$pid"
    kill -9 $pid 2>/dev/null
    wait $pid 2>/dev/null
    summary+=("$name: HANG after $limit s")
    bad=$((bad + 1))
  else
    wait $pid
    local rc=$?
    summary+=("$name: $([ $rc = 0 ] && echo ok || echo "FAIL rc $rc") in $((SECONDS - t0)) s")
    [ $rc = 0 ] || bad=$((bad + 1))
  fi
  step_sid=""
  echo "${summary[-1]}" | tee -a "$log"
  tail -n 40 "$log" | grep -v "^===" | sed 's/^/    /'
}

# The ddp step: four runs of the example, then the comparisons; fails if any run or comparison does.
ddp_check() {
  local out=$logs/ddp rc=0 r
  local run=(python3 -m torch.distributed.run --master-port 29561)
  local args=(examples/pytorch_ddp.py --device cuda --steps "${DDP_STEPS:-300}" --quiet)
  local accord=(env LD_PRELOAD="$build/nccl/libaccord_nccl.so")
  mkdir -p "$out"
  echo "--- 1 process, PyTorch's NCCL"; "${run[@]}" --nproc-per-node 1 "${args[@]}" --backend nccl --out "$out/nccl1" || rc=1
  echo "--- 1 process, Accord"; "${accord[@]}" "${run[@]}" --nproc-per-node 1 "${args[@]}" --backend nccl \
    --out "$out/accord1" || rc=1
  echo "--- 2 processes on GPU 0, Accord"; "${accord[@]}" "${run[@]}" --nproc-per-node 2 "${args[@]}" --backend nccl \
    --out "$out/accord2" || rc=1
  echo "--- 2 processes on GPU 0, Gloo"; "${run[@]}" --nproc-per-node 2 "${args[@]}" --backend gloo --out "$out/gloo2" || rc=1
  echo "--- losses: 1 process, NCCL against Accord"
  python3 scripts/compare_losses.py "$out/nccl1.rank0" "$out/accord1.rank0" || rc=1
  for r in 0 1; do
    echo "--- losses: 2 processes, rank $r, Accord against Gloo"
    python3 scripts/compare_losses.py "$out/accord2.rank$r" "$out/gloo2.rank$r" || rc=1
  done
  grep -H "ms a step" "$out"/*.rank*
  return $rc
}
export -f ddp_check  # for step's bash -c, with the variables it reads
export build logs

perf=$build/bench/all_reduce_perf
gdb=$(command -v cuda-gdb || echo /usr/local/cuda/bin/cuda-gdb)
nvidia-smi --query-gpu=name,driver_version,memory.total,compute_mode --format=csv,noheader
for s in $steps; do
  case $s in
    suite) step suite 200 "build/(tests|trainer)" "${plain[@]}" meson test -C "$build" --suite gpu \
             --num-processes 4 --print-errorlogs --no-rebuild ;;
    one) step one ${ONE_LIMIT:-60} all_reduce_perf "$perf" -g 1 -b 8 -e 128M -f 4 -n 20 -w 3 --show-plan ;;
    procs2) mps_off; step procs2 60 all_reduce_perf "${mpi[@]}" -np 2 "$perf" -g 1 -b 8 -e 16M -f 8 -n 5 -w 1 \
             --show-plan ;;
    mps2) mps_on; step mps2 60 all_reduce_perf "${mpi[@]}" -np 2 "$perf" -g 1 -b 8 -e 256M -f 4 -n 10 -w 2 \
             --show-plan ;;
    mps4) mps_on; step mps4 60 all_reduce_perf "${mpi[@]}" -np 4 "$perf" -g 1 -b 8 -e 64M -f 8 -n 10 -w 2 ;;
    mps8) mps_on; step mps8 60 all_reduce_perf "${mpi[@]}" -np 8 "$perf" -g 1 -b 8 -e 64M -f 64 -n 10 -w 2 ;;
    mps2b1) mps_on; step mps2b1 60 all_reduce_perf "${mpi[@]}" -x ACCORD_GPU_BLOCKS=1 -np 2 "$perf" -g 1 -b 8 \
             -e 256M -f 4 -n 10 -w 2 ;;
    direct) mps_on  # issue 33: the direct protocol's forms against the FIFOs, 2 and 4 processes
      for p in fifo oneshot twoshot; do
        step "mps2$p" 60 all_reduce_perf "${mpi[@]}" -x ACCORD_DEVICE_PROTO=$p -np 2 "$perf" -g 1 -b 8 -e 128M \
          -f 4 -n 10 -w 2
        step "mps4$p" 60 all_reduce_perf "${mpi[@]}" -x ACCORD_DEVICE_PROTO=$p -np 4 "$perf" -g 1 -b 8 -e 64M \
          -f 8 -n 10 -w 2
      done ;;
    staged) mps_on  # issue 33 item 2: the staged all-reduce (default) against the FIFOs; compare 64 MiB busbw
      step staged 60 all_reduce_perf "${mpi[@]}" -x ACCORD_P2P_DISABLE=1 -np 2 "$perf" -g 1 \
             -b 8 -e 64M -f 8 -n 10 -w 2 --show-plan
      step stagedfifo 60 all_reduce_perf "${mpi[@]}" -x ACCORD_P2P_DISABLE=1 -x ACCORD_DEVICE_PROTO=fifo -np 2 \
             "$perf" -g 1 -b 8 -e 64M -f 8 -n 10 -w 2 --show-plan ;;
    colls) mps_on
      for c in reduce_scatter all_gather broadcast reduce; do
        step "$c" 45 "${c}_perf" "${mpi[@]}" -np 2 "$build/bench/${c}_perf" -g 1 -b 8 -e 16M -f 16 -n 5 -w 1
      done ;;
    trainer) mps_on; step trainer 120 accord-train "${mpi[@]}" -np 2 "$build/trainer/accord-train" --device gpu \
             --epochs 1 --max-steps 200 --sync accord --log-every 50 ;;
    torch) mps_on; step torch 90 torch_allreduce env LD_PRELOAD="$build/nccl/libaccord_nccl.so" \
             python3 -m torch.distributed.run --nproc-per-node 2 examples/torch_allreduce.py ;;
    ddp) mps_on; step ddp 240 pytorch_ddp ddp_check ;;
    tcp2) mps_on
      step tcp2 90 all_reduce_perf "${mpi[@]}" -x ACCORD_SHM_DISABLE=1 -np 2 "$perf" -g 1 -b 8 -e 64M -f 8 -n 5 -w 1 \
        --show-plan
      step tcp2host 90 all_reduce_perf "${mpi[@]}" -x ACCORD_SHM_DISABLE=1 -np 2 "$perf" -b 8 -e 64M -f 8 -n 5 -w 1 ;;
    tcp2p2p) mps_on
      step tcp2p2p 150 gpu_p2p_test env ACCORD_DEVICE=0 "$build/tests/gpu_path/gpu_p2p_test" \
        --gtest_filter='GpuP2pProcesses.*Tcp*' ;;
    kill) mps_on  # without mpirun, which would kill the survivor itself
      step kill 60 all_reduce_perf bash -c "export ACCORD_DEVICE=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=29533
        RANK=0 $perf -g 1 -b 64M -e 64M -n 100000 -w 1 & p0=\$!
        RANK=1 $perf -g 1 -b 64M -e 64M -n 100000 -w 1 & p1=\$!
        sleep 6; kill -9 \$p1; t=\$(date +%s%N); wait \$p0; rc=\$?
        echo rank 0 exit \$rc, \$(( (\$(date +%s%N) - t) / 1000000 )) ms after the kill; [ \$rc != 0 ]" ;;
    gpusuite3) step gpusuite3 120 "build/(tests|trainer)" "${plain[@]}" meson test -C "$build" --suite gpu \
             --num-processes 4 --repeat 3 --no-rebuild ;;
    all12|all2) step "$s" ${ALL_LIMIT:-570} "build/(tests|trainer|bench)" "${plain[@]}" meson test -C "$build" \
             --repeat 3 --num-processes ${s#all} --print-errorlogs --no-rebuild ;;
    *) echo "unknown step $s"; summary+=("$s: unknown step"); bad=$((bad + 1)) ;;
  esac
done
mps_off
echo "=== summary"
printf '%s\n' "${summary[@]}"
if ((bad > 0)); then echo "gpu-check: $bad step(s) failed, hung, were skipped or unknown"; exit 1; fi
echo "gpu-check: every step passed"
