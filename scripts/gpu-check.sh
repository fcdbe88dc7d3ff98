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
#   fifoslice a job on the FIFOs without MPS (2 processes on GPU 0, TCP between them:
#             ACCORD_SHM_DISABLE=1), all_reduce 8 B-16 MiB with ACCORD_SHARED_GPU_SYNC=wait, then
#             spin (Note [Waiting FIFOs]; not in the default list; never run on a GPU yet)
#   threads   2 and 3 ranks as threads of one process on GPU 0 (all_reduce_perf -g N --share-gpus),
#             1 MB to 81 MB by 3 (no power of two: calls of several rounds, the last one short, Note
#             [Direct slices]), inputs read where they lie and (ACCORD_DIRECT_POINTER_MIN_BYTES=-1)
#             copied into the scratch: the A/B that sets that setting's default; the other four
#             collectives with 3 threads (not in the default list; never run on a GPU yet)
#   gpusuite3 the gpu suite 3 times over, 4 at once (not in the default list)
#   all12     the whole suite 3 times over, 12 at once (issue 20 item 3; not in the default list;
#             ALL_LIMIT seconds, 570 by default; one pass took 130-200 s on the H200, its
#             non-parallel tests running one at a time, so it needs a call of its own), with the caller's ACCORD_LOG and
#             ACCORD_TIMEOUT_MS, not this script's
#   all2      the same, 2 at once (not in the default list)
#   targets   every GPU target of issues 33, 34, 35 and 37 with NVIDIA's nccl-tests, unchanged
#             (NT_DIR, /opt/nt by default: ../shared/device/README.md), then the table of them
#             (scripts/gpu_targets.py: LOG_DIR/targets.md). It is these steps, in this order, each
#             also a step of its own (not in the default list; about 8 minutes on an H200 when
#             nothing hangs: give it GPU_CHECK_SECONDS=480 and a call of its own):
#             t_one     1 process, all_reduce 8 B, Accord then the real NCCL (PyTorch's wheel)
#             t_mps2    2 processes on GPU 0 (MPS): all_reduce 8 B-128 MiB (also with -R 1: the
#                       buffers registered, Note [User buffers mapped into peers]), sendrecv, alltoall,
#                       all_gather, reduce_scatter, broadcast, reduce 8 B-64 MiB (all_gather and
#                       reduce_scatter 64 MiB also with -R 1)
#                       (and sendrecv 64 MiB with ACCORD_DEVICE_P2P_BYTES=1M: 256 KiB slots)
#             t_mps4    4 processes (MPS): all_reduce, sendrecv, alltoall 8 B-64 MiB
#             t_staged  ACCORD_P2P_DISABLE=1, 2 processes (MPS): all_reduce, all_gather,
#                       reduce_scatter, broadcast, reduce 8 B-64 MiB (Note [Staged protocol])
#             t_torch   examples/torch_p2p.py, 2 processes: Accord (CUDA tensors, MPS), Gloo (CPU)
#             t_tcp     ACCORD_SHM_DISABLE=1, 2 processes (MPS): all_reduce 64 MiB of GPU buffers
#                       (nccl-tests), then of host buffers (Accord's all_reduce_perf)
#             t_slice   no MPS: all_reduce 8 B-128 MiB with 2 processes, 8 B with 4
#             t_kill_slice  no MPS: kill -9 of one of 2 ranks mid all-reduce
#             t_ddp_slice   no MPS: examples/pytorch_ddp.py, 2 processes, Accord then Gloo: ms a
#                       step, and the losses compared rank by rank (scripts/compare_losses.py)
#             t_ncu     no MPS, ACCORD_SHARED_GPU_SYNC=wait: ncu of rank 0's collective kernels
#                       in all_reduce 128 MiB (SpeedOfLight, MemoryWorkloadAnalysis)
#             t_demo    ./scripts/demo.sh, and its seconds after the build
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
# ddp_pair OUT PORT: the example on 2 processes sharing GPU 0, Accord then Gloo, and their losses
# compared rank by rank ("losses rank R: equal" or "different"); fails if any of it does.
ddp_pair() {
  local out=$1 rc=0 r
  local run=(python3 -m torch.distributed.run --master-port "$2" --nproc-per-node 2)
  local args=(examples/pytorch_ddp.py --device cuda --steps "${DDP_STEPS:-300}" --quiet)
  mkdir -p "$out"
  echo "--- 2 processes on GPU 0, Accord"
  env LD_PRELOAD="$build/nccl/libaccord_nccl.so" "${run[@]}" "${args[@]}" --backend nccl --out "$out/accord2" || rc=1
  echo "--- 2 processes on GPU 0, Gloo"; "${run[@]}" "${args[@]}" --backend gloo --out "$out/gloo2" || rc=1
  for r in 0 1; do
    if python3 scripts/compare_losses.py "$out/accord2.rank$r" "$out/gloo2.rank$r"; then
      echo "losses rank $r: equal"
    else
      echo "losses rank $r: different"; rc=1
    fi
  done
  return $rc
}
ddp_check() {
  local out=$logs/ddp rc=0
  local run=(python3 -m torch.distributed.run --master-port 29561 --nproc-per-node 1)
  local args=(examples/pytorch_ddp.py --device cuda --steps "${DDP_STEPS:-300}" --quiet)
  mkdir -p "$out"
  echo "--- 1 process, PyTorch's NCCL"; "${run[@]}" "${args[@]}" --backend nccl --out "$out/nccl1" || rc=1
  echo "--- 1 process, Accord"
  env LD_PRELOAD="$build/nccl/libaccord_nccl.so" "${run[@]}" "${args[@]}" --backend nccl --out "$out/accord1" || rc=1
  echo "--- losses: 1 process, NCCL against Accord"
  python3 scripts/compare_losses.py "$out/nccl1.rank0" "$out/accord1.rank0" || rc=1
  ddp_pair "$out" 29561 || rc=1
  grep -H "ms a step" "$out"/*.rank*
  return $rc
}
export -f ddp_pair ddp_check  # for step's bash -c, with the variables it reads
export build logs

# The targets steps' helpers: NVIDIA's nccl-tests on Accord (build/nccl/libnccl.so.2 first) or on
# the real NCCL (PyTorch's wheel), under mpirun with every process on GPU 0.
nt=${NT_DIR:-/opt/nt}
accord_nt=(env LD_LIBRARY_PATH="$build/nccl:${LD_LIBRARY_PATH:-}")
nt_mpi() {  # nt_mpi STEP NP PROGRAM ARGS... (extra mpirun options in NT_X, an array)
  local name=$1 np=$2 prog=$3
  shift 3
  step "$name" ${NT_LIMIT:-60} "${prog}_perf" "${accord_nt[@]}" "${mpi[@]}" -x NCCL_TESTS_DEVICE=0 "${NT_X[@]}" \
    -np "$np" "$nt/${prog}_perf" -g 1 "$@"
}
NT_X=()
real_nccl_lib() {
  python3 -c 'import nvidia.nccl as m; print(list(m.__path__)[0] + "/lib")' 2>/dev/null
}
# The no-MPS DDP comparison: ddp_pair, ms a step of each.
ddp_slice_check() {
  local rc=0
  ddp_pair "$logs/t_ddp_slice" 29563 || rc=1
  grep -H "ms a step" "$logs"/t_ddp_slice/*.rank*
  return $rc
}
# kill_check PORT SECONDS: 2 ranks on GPU 0 in 64 MiB all-reduces, without mpirun (which would
# kill the survivor itself); rank 1 is killed -9 after SECONDS, and rank 0 must fail, saying
# when.
kill_check() {
  export ACCORD_DEVICE=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$1
  RANK=0 "$perf" -g 1 -b 64M -e 64M -n 100000 -w 1 & local p0=$!
  RANK=1 "$perf" -g 1 -b 64M -e 64M -n 100000 -w 1 & local p1=$!
  sleep "$2"
  kill -9 $p1
  local t rc
  t=$(date +%s%N)
  wait $p0
  rc=$?
  echo "rank 0 exit $rc, $((($(date +%s%N) - t) / 1000000)) ms after the kill"
  [ $rc != 0 ]
}
# demo.sh, and its seconds after the build: its summary's total less its build steps'.
demo_check() {
  local out=$logs/demo.out rc
  ./scripts/demo.sh >"$out" 2>&1
  rc=$?
  tail -n 8 "$out"
  local built total
  built=$(sed -n 's/^\[[0-9]\/[0-9]\] .*: done in \([0-9]*\) s$/\1/p' "$out" | awk '{ s += $1 } END { print s + 0 }')
  total=$(sed -n 's/^=== Summary (\([0-9]*\) s.*/\1/p' "$out")
  echo "demo rc $rc; demo seconds after the build: $((${total:-0} - built))"
  return $rc
}
export -f ddp_slice_check kill_check demo_check
expand_targets() {
  echo t_one t_mps2 t_mps4 t_staged t_torch t_tcp t_slice t_kill_slice t_ddp_slice t_ncu t_demo
}
steps=$(for s in $steps; do [ "$s" = targets ] && expand_targets || echo "$s"; done)
ran_targets=0

export perf=$build/bench/all_reduce_perf  # kill_check reads it
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
    kill) mps_on; step kill 60 all_reduce_perf kill_check 29533 6 ;;
    threads)  # Note [Inputs read where they lie] and Note [Direct slices]: ranks as threads on GPU 0
      for n in 2 3; do
        step "threads$n" 60 all_reduce_perf env CUDA_MODULE_LOADING=EAGER "$perf" -g $n --share-gpus -b 1000003 \
          -e 81M -f 3 -n 10 -w 2 --show-plan
        step "threads${n}copy" 60 all_reduce_perf env CUDA_MODULE_LOADING=EAGER ACCORD_DIRECT_POINTER_MIN_BYTES=-1 \
          "$perf" -g $n --share-gpus -b 1000003 -e 81M -f 3 -n 10 -w 2
      done
      for c in reduce_scatter all_gather broadcast reduce; do
        step "threads3$c" 45 "${c}_perf" env CUDA_MODULE_LOADING=EAGER "$build/bench/${c}_perf" -g 3 --share-gpus \
          -b 1000003 -e 81M -f 3 -n 10 -w 2 -r 1
      done ;;
    gpusuite3) step gpusuite3 120 "build/(tests|trainer)" "${plain[@]}" meson test -C "$build" --suite gpu \
             --num-processes 4 --repeat 3 --no-rebuild ;;
    all12|all2) step "$s" ${ALL_LIMIT:-570} "build/(tests|trainer|bench)" "${plain[@]}" meson test -C "$build" \
             --repeat 3 --num-processes ${s#all} --print-errorlogs --no-rebuild ;;
    t_one) ran_targets=1
      step t_one_accord 30 all_reduce_perf "${accord_nt[@]}" "$nt/all_reduce_perf" -g 1 -b 8 -e 8 -n 2000 -w 200
      lib=$(real_nccl_lib)
      step t_one_nccl 30 all_reduce_perf env LD_LIBRARY_PATH="${lib:-/nonexistent}:${LD_LIBRARY_PATH:-}" \
        "$nt/all_reduce_perf" -g 1 -b 8 -e 8 -n 2000 -w 200 ;;
    t_mps2) ran_targets=1; mps_on
      nt_mpi t_mps2_all_reduce 2 all_reduce -b 8 -e 128M -f 4 -n 20 -w 5
      nt_mpi t_mps2_all_reduce_registered 2 all_reduce -b 8 -e 128M -f 4 -n 20 -w 5 -R 1
      for c in sendrecv alltoall all_gather reduce_scatter broadcast reduce; do
        nt_mpi "t_mps2_$c" 2 "$c" -b 8 -e 64M -f 8 -n 20 -w 5
      done
      # Note [Registered inputs]: the other collectives read registered inputs where they lie.
      for c in all_gather reduce_scatter; do nt_mpi "t_mps2_${c}_registered" 2 "$c" -b 64M -e 64M -n 20 -w 5 -R 1; done
      # Note [Point-to-point FIFOs]: the same sendrecv with the collectives' slot size (256 KiB).
      NT_X=(-x ACCORD_DEVICE_P2P_BYTES=1M)
      nt_mpi t_mps2_sendrecv_1m 2 sendrecv -b 64M -e 64M -n 20 -w 5
      NT_X=() ;;
    t_mps4) ran_targets=1; mps_on
      for c in all_reduce sendrecv alltoall; do nt_mpi "t_mps4_$c" 4 "$c" -b 8 -e 64M -f 8 -n 20 -w 5; done ;;
    t_staged) ran_targets=1; mps_on
      NT_X=(-x ACCORD_P2P_DISABLE=1)
      for c in all_reduce all_gather reduce_scatter broadcast reduce sendrecv; do
        nt_mpi "t_staged_$c" 2 "$c" -b 8 -e 64M -f 8 -n 20 -w 5
      done
      # Note [Copy-engine messages]: the same sendrecv with every message on the kernel (the A/B).
      NT_X=(-x ACCORD_P2P_DISABLE=1 -x ACCORD_P2P_COPY_MIN_BYTES=-1)
      nt_mpi t_staged_sendrecv_kernel 2 sendrecv -b 64M -e 64M -n 20 -w 5
      NT_X=() ;;
    t_torch) ran_targets=1; mps_on
      step t_torch_p2p_accord 90 torch_p2p env LD_PRELOAD="$build/nccl/libaccord_nccl.so" \
        python3 -m torch.distributed.run --master-port 29565 --nproc-per-node 2 examples/torch_p2p.py
      step t_torch_p2p_gloo 90 torch_p2p python3 -m torch.distributed.run --master-port 29567 --nproc-per-node 2 \
        examples/torch_p2p.py --backend gloo --device cpu ;;
    t_tcp) ran_targets=1; mps_on
      NT_X=(-x ACCORD_SHM_DISABLE=1); nt_mpi t_tcp_device 2 all_reduce -b 64M -e 64M -n 10 -w 2; NT_X=()
      step t_tcp_host 60 all_reduce_perf "${mpi[@]}" -x ACCORD_SHM_DISABLE=1 -np 2 "$perf" -b 64M -e 64M -n 10 -w 2 ;;
    t_slice) ran_targets=1; mps_off
      NT_LIMIT=120 nt_mpi t_slice2_all_reduce 2 all_reduce -b 8 -e 128M -f 16 -n 10 -w 2
      NT_LIMIT=90 nt_mpi t_slice4_all_reduce 4 all_reduce -b 8 -e 8 -n 20 -w 2 ;;
    fifoslice) mps_off  # Note [Waiting FIFOs]: a job on the FIFOs (TCP between 2 processes on GPU 0), no MPS
      for sync in wait spin; do
        NT_X=(-x ACCORD_SHM_DISABLE=1 -x ACCORD_SHARED_GPU_SYNC=$sync)
        NT_LIMIT=60 nt_mpi "fifoslice_$sync" 2 all_reduce -b 8 -e 16M -f 64 -n 5 -w 1
      done
      NT_X=() ;;
    t_kill_slice) ran_targets=1; mps_off; step t_kill_slice 60 all_reduce_perf kill_check 29535 8 ;;
    t_ddp_slice) ran_targets=1; mps_off; step t_ddp_slice 240 pytorch_ddp ddp_slice_check ;;
    t_ncu) ran_targets=1; mps_off
      step t_ncu 150 all_reduce_perf "${accord_nt[@]}" "${mpi[@]}" -x NCCL_TESTS_DEVICE=0 \
        -x ACCORD_SHARED_GPU_SYNC=wait -np 2 bash -c "if [ \$OMPI_COMM_WORLD_RANK = 0 ]; then
          exec ncu --kernel-name regex:collective_kernel --launch-skip 4 --launch-count 3 --section SpeedOfLight \
            --section MemoryWorkloadAnalysis $nt/all_reduce_perf -g 1 -b 128M -e 128M -n 4 -w 1 -c 0
        else exec $nt/all_reduce_perf -g 1 -b 128M -e 128M -n 4 -w 1 -c 0; fi" ;;
    t_demo) ran_targets=1; mps_off; step t_demo 240 demo.sh demo_check ;;
    *) echo "unknown step $s"; summary+=("$s: unknown step"); bad=$((bad + 1)) ;;
  esac
done
mps_off
echo "=== summary"
printf '%s\n' "${summary[@]}" | tee "$logs/summary.txt"
if ((ran_targets)); then
  python3 "$(dirname "$0")/gpu_targets.py" "$logs" \
    --device "$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1)" \
    --date "$(date -u +%F)" | tee "$logs/targets.md"
fi
if ((bad > 0)); then echo "gpu-check: $bad step(s) failed, hung, were skipped or unknown"; exit 1; fi
echo "gpu-check: every step passed"
