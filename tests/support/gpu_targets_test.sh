#!/usr/bin/env bash
# scripts/gpu_targets.py and gpu-check.sh's targets wiring, without a GPU: logs written in
# nccl-tests' format stand in for a run on the GPU machine, and the table must say, target by
# target, what was measured and whether it is met; a missing log reads "not measured" and a
# failed step is named. Then gpu-check.sh's t_one step, on a fake nccl-tests folder (NT_DIR),
# must leave the logs, summary.txt and targets.md that the table is made from.
# Usage: gpu_targets_test.sh PATH/TO/scripts
set -u
scripts=$1
tmp=$(mktemp -d /tmp/accord-gpu-targets-XXXXXX)
trap "rm -rf $tmp" EXIT
failures=0
# nt FILE WRONG ROWS...: an nccl-tests log; a row is "SIZE OOP_US OOP_BUSBW IP_US IP_BUSBW"
nt() {
  local file=$1 wrong=$2
  shift 2
  {
    echo "# nThread 1 nGpus 1 minBytes 8 maxBytes 134217728 step: 4(factor) warmup iters: 5 iters: 20"
    echo "#                                                              out-of-place                       in-place"
    echo "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong"
    echo "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)"
    for row in "$@"; do
      set -- $row
      printf '%12s %13s %9s %7s %7s %8s %7s %7s %6s %8s %7s %7s %6s\n' "$1" $(($1 / 4)) float sum -1 "$2" 0 "$3" \
        "$wrong" "$4" 0 "$5" 0
    done
    echo "# Out of bounds values : $wrong $([ "$wrong" = 0 ] && echo OK || echo FAILED)"
    echo "# Avg bus bandwidth    : 1"
  } >"$tmp/logs/$file.log"
}
check() {  # check NAME NEEDLE: the table holds the line
  if grep -qF -- "$2" "$tmp/table"; then
    echo "ok   - $1"
  else
    echo "FAIL - $1: no line with '$2' in:"
    sed 's/^/    /' "$tmp/table"
    failures=$((failures + 1))
  fi
}
mkdir -p "$tmp/logs/t_ddp_slice"
nt t_mps2_all_reduce 0 "8 9.5 0 9.1 0" "134217728 300 447.2 310 433.1"
nt t_mps2_all_gather 0 "67108864 300 310.5 300 310"
nt t_mps2_reduce_scatter 0 "67108864 300 290 300 290"
nt t_mps2_sendrecv 3 "67108864 300 250 300 250"
nt t_one_accord 0 "8 5.9 0 0.4 0"
nt t_one_nccl 0 "8 5.2 0 0.3 0"
nt t_tcp_device 0 "67108864 9000 7.5 9000 7.5"
nt t_tcp_host 0 "67108864 6000 10 6000 10"
printf '# ms a step: 3.5 over 290 steps\n' >"$tmp/logs/t_ddp_slice/accord2.rank0"
printf '# ms a step: 3.6 over 290 steps\n' >"$tmp/logs/t_ddp_slice/accord2.rank1"
printf '# ms a step: 6.8 over 290 steps\n' >"$tmp/logs/t_ddp_slice/gloo2.rank0"
printf '# ms a step: 6.9 over 290 steps\n' >"$tmp/logs/t_ddp_slice/gloo2.rank1"
printf '=== t_ddp_slice: ddp_slice_check\nlosses rank 0: equal\nlosses rank 1: different\n' >"$tmp/logs/t_ddp_slice.log"
printf '=== t_kill_slice: bash -c ...\nrank 0: all_reduce: rank 1 died (its process ended)\nrank 0 exit 1, 840 ms after the kill\n' \
  >"$tmp/logs/t_kill_slice.log"
printf 't_mps2_all_reduce: ok in 12 s\nt_mps4_all_reduce: HANG after 60 s\n' >"$tmp/logs/summary.txt"
python3 "$scripts/gpu_targets.py" "$tmp/logs" --device "NVIDIA H200" --date 2026-11-29 >"$tmp/table"
status=$?
[ "$status" = 1 ] && echo "ok   - exit status 1 with targets unmet" ||
  { echo "FAIL - exit status $status with targets unmet (want 1)"; failures=$((failures + 1)); }
check "the heading names the device and date" "GPU targets on NVIDIA H200, 2026-11-29"
check "a busbw target met" "| 33 | all_reduce 128 MiB busbw, 2 processes on one GPU, MPS | >= 400 GB/s | 447.2 GB/s | met |"
check "a latency target met" "| 33 | all_reduce 8 B, 2 processes on one GPU, MPS | <= 10 us | 9.5 us | met |"
check "a busbw target not met" "| reduce_scatter 64 MiB busbw, 2 processes on one GPU, MPS | >= 300 GB/s | 290 GB/s | **not met** |"
check "a missing log" "| broadcast 64 MiB busbw, 2 processes on one GPU, MPS | >= 300 GB/s | not measured | - |"
check "a step that hung is named" "| all_reduce 64 MiB busbw, 4 processes on one GPU, MPS | >= 250 GB/s | not measured (step HANG after 60 s) | - |"
check "the in-place column" "| 33 | 1 process, in-place 8 B | <= 0.5 us | 0.4 us | met |"
check "the real NCCL's reference" "the real NCCL, 1 process, in-place / out-of-place 8 B (reference) | - | 0.3 / 5.2 us |"
check "wrong results fail a target whatever the speed" "| sendrecv 64 MiB busbw, 2 processes on one GPU, MPS | >= 200 GB/s | 250 GB/s; **#wrong or out-of-bounds not 0** | **not met** |"
check "wrong results are counted" "runs exact; not: t_mps2_sendrecv"
check "DDP against Gloo" "| 34 | PyTorch DDP, 2 processes, no MPS: ms a step, Accord against Gloo | below Gloo's | 3.60 against 6.90 ms | met |"
check "DDP losses" "| rank 0 equal, rank 1 different | **not met** |"
check "the kill" "| exit 1 after 840 ms; rank 1 named | met |"
check "TCP against host buffers" "| 7.5 against 10 GB/s (75%) | met |"
check "the demo, not run" "| 37 | ./scripts/demo.sh on the GPU machine: GPU sections run, exact | <= 120 s after the build | not measured"
check "torch, not run" "| 35 | torch send/recv, batch_isend_irecv, all_to_all_single on CPU tensors, 2 processes, Gloo (the reference) | exact | not measured"
# demo.sh's summary (gpu-check.sh's demo_check keeps its tail): a run on a real GPU meets the
# target; one whose GPU part was simulated or skipped does not.
demo() {  # demo GPU_LINE: the step's log
  printf '=== t_demo: demo_check\nhost all-reduce, 2 ranks: ...\n%s\ndemo rc 0; demo seconds after the build: 61\n' "$1" \
    >"$tmp/logs/t_demo.log"
  python3 "$scripts/gpu_targets.py" "$tmp/logs" >"$tmp/table"
}
demo "GPU (NVIDIA H200): 1 rank 8 us at 8 B; 2 processes on GPU 0 (no MPS) 60 us at 8 B; exact"
check "the demo on a GPU" "| 61 s, GPU sections ran, exact | met |"
demo "GPU (simulated, 4 x V100): 1 rank and 2 processes on GPU 0 exact; no GPU times"
check "the demo on simulated GPUs" "| 61 s, GPU sections **did not run, or not exact** | **not met** |"
demo "GPU (NVIDIA H200): 1 rank 8 us at 8 B; 2 processes on GPU 0 (MPS) failed; FAILED (section 3)"
check "the demo's GPU part failed" "| 61 s, GPU sections **did not run, or not exact** | **not met** |"
# gpu-check.sh's t_one on fake nccl-tests: the logs, summary.txt and targets.md.
mkdir -p "$tmp/nt" "$tmp/build/nccl" "$tmp/bin"
cat >"$tmp/nt/all_reduce_perf" <<'EOS'
#!/bin/sh
# stands in for NVIDIA's all_reduce_perf: slower on the "real NCCL" (no build/nccl in the path)
case $LD_LIBRARY_PATH in *build/nccl*) t=0.4 ;; *) t=0.3 ;; esac
echo "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong"
echo "           8             2     float     sum      -1     5.50    0.00    0.00      0     $t    0.00    0.00      0"
echo "# Out of bounds values : 0 OK"
EOS
printf '#!/bin/sh\nexit 0\n' >"$tmp/bin/nvidia-smi"
chmod +x "$tmp/nt/all_reduce_perf" "$tmp/bin/nvidia-smi"
out=$(cd "$scripts/.." && PATH="$tmp/bin:$PATH" NT_DIR="$tmp/nt" "$scripts/gpu-check.sh" "$tmp/build" "$tmp/run" t_one 2>&1)
status=$?
if [ "$status" = 0 ] && grep -qF "t_one_accord: ok" "$tmp/run/summary.txt" && grep -qF "t_one_nccl: ok" "$tmp/run/summary.txt"; then
  echo "ok   - gpu-check.sh t_one: both steps ran, summary.txt written"
else
  echo "FAIL - gpu-check.sh t_one: exit status $status, summary:"; sed 's/^/    /' <<<"$out" | tail -20
  failures=$((failures + 1))
fi
cp "$tmp/run/targets.md" "$tmp/table" 2>/dev/null || : >"$tmp/table"
check "gpu-check.sh t_one leaves targets.md with Accord's figure" "| 33 | 1 process, in-place 8 B | <= 0.5 us | 0.4 us | met |"
check "and the real NCCL's" "(reference) | - | 0.3 / 5.5 us |"
[ "$failures" = 0 ] || { echo "$failures case(s) failed"; exit 1; }
echo "gpu_targets.py and gpu-check.sh's targets steps: every case passed"
