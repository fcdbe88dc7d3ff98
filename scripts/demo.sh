#!/usr/bin/env bash
# The first run, on a built-in default: installs what is missing and builds the programs it runs
# (the output goes to a log, the terminal gets one line per step; without a GPU, without the CUDA
# kernels, which scripts/build.sh adds later), then
#   1. this machine's topology (accord-topo): its GPUs, and each pair's route and why;
#   2. all-reduce across 2 ranks on host memory, Accord against Open MPI's MPI_Allreduce on the
#      same buffers (the ratio column);
#   3. where a GPU is found: all-reduce of GPU buffers, 1 rank, then 2 processes sharing GPU 0
#      (and whether MPS runs); where none is, one line says why this part was skipped;
#   4. LeNet-5 trained on Fashion-MNIST by 2 ranks, gradients averaged by Accord (200 steps of
#      32 samples per rank; on the GPU where there is one);
# and a summary of at most five lines. The build's and every program's whole output is kept in
# BUILD_DIR/demo-logs/. The exit status is non-zero if the build or any section failed.
#
# usage: scripts/demo.sh [--quick] [--verbose] [--no-build]
#   --quick     a short run: 3 sizes per benchmark, one epoch over 1024 training samples
#   --verbose   everything the programs print (the benchmark's rounds per size, the trainer's
#               setup lines)
#   --no-build  run the build in BUILD_DIR as it is: no setup.sh, no meson, no ninja
# Environment:
#   BUILD_DIR=DIR          the build directory (default: build)
#   ACCORD_SIM_TOPO=FILE   run the GPU part on simulated GPUs of a topology file, e.g.
#                          ../shared/fixtures/topologies/autodl-2x-rtx2080ti-pix-p2p-cannot.txt:
#                          results are exact, but their memory is host memory, so the times are
#                          not GPU times; the trainer's --device gpu needs a real GPU (cuDNN)
#   DEMO_GPU=0             skip the GPU part
#   DEMO_LOGS=DIR          where the outputs go (default: BUILD_DIR/demo-logs)
set -euo pipefail
# ACCORD_SIM_TOPO and DEMO_LOGS are relative to where the demo was started; BUILD_DIR is
# relative to the repository, as in scripts/build.sh.
sim_topo=${ACCORD_SIM_TOPO:-}
[ -z "$sim_topo" ] || [[ $sim_topo == /* ]] || sim_topo=$PWD/$sim_topo
logs=${DEMO_LOGS:-}
[ -z "$logs" ] || [[ $logs == /* ]] || logs=$PWD/$logs
unset ACCORD_SIM_TOPO  # the GPU part gets it back explicitly; the host sections run without it
cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build}
quick=0 verbose=0 do_build=1
while [ $# -gt 0 ]; do
  case $1 in
    --quick) quick=1 ;;
    --verbose | -v) verbose=1 ;;
    --no-build) do_build=0 ;;
    -h | --help) sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0"; exit 0 ;;
    *) echo "demo.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
  shift
done
t_start=$SECONDS
logs=${logs:-$build/demo-logs}
mkdir -p "$logs"
logs=$(cd "$logs" && pwd)
failed=()

# ---------------------------------------------------------------------------------------------
# Build: each step's output goes to the log; the terminal gets one line per step.
build_log=$logs/build.log
step_no=0
# build_step [--no-ticker] TITLE CMD...: runs CMD with its output in the log; on failure prints
# the step's last error lines and the log's path, and exits.
build_step() {
  local ticker=1
  [ "$1" != --no-ticker ] || { ticker=0; shift; }
  local title=$1
  shift
  step_no=$((step_no + 1))
  local t0=$SECONDS from
  from=$(wc -l <"$build_log")
  printf '\n=== step %d of 3: %s: %s\n' "$step_no" "$title" "$*" >>"$build_log"
  "$@" >>"$build_log" 2>&1 &
  local pid=$!
  # On a terminal, one line kept up to date: elapsed seconds and Ninja's [done/total].
  if [ -t 1 ] && [ $ticker = 1 ]; then
    local last
    while kill -0 "$pid" 2>/dev/null; do
      last=$(tail -n 1 "$build_log")
      [[ $last =~ ^\[([0-9]+/[0-9]+)\] ]] && last=" ${BASH_REMATCH[1]}" || last=""
      printf '\r[%d/3] %s ...%s %d s\033[K' "$step_no" "$title" "$last" $((SECONDS - t0))
      sleep 1
    done
    printf '\r\033[K'
  fi
  if wait "$pid"; then
    printf '[%d/3] %s: done in %d s\n' "$step_no" "$title" $((SECONDS - t0))
    return 0
  fi
  printf '[%d/3] %s: FAILED after %d s. The last error lines:\n' "$step_no" "$title" $((SECONDS - t0))
  local errors
  errors=$(tail -n +$((from + 1)) "$build_log" | grep -E -i 'error|fatal|failed|not found' | tail -n 12 || true)
  [ -n "$errors" ] || errors=$(tail -n 12 "$build_log")
  sed 's/^/    /' <<<"$errors"
  echo "The whole output is in $build_log"
  exit 1
}

if [ $do_build = 1 ]; then
  : >"$build_log"
  echo "Building Accord (the output goes to $build_log)"
  # No ticker here: sudo may ask for a password on the terminal.
  build_step --no-ticker "install missing packages (scripts/setup.sh --demo)" ./scripts/setup.sh --demo
  if [ -f "$build/build.ninja" ]; then
    step_no=2
    echo "[2/3] configure: $build is configured already"
  elif ./scripts/gpu-present.sh; then
    build_step "configure (meson setup $build)" meson setup "$build"
  else
    # No GPU driver: the CUDA kernels (the longest step of the build) could not run here, and
    # simulated GPUs (ACCORD_SIM_TOPO) run the same protocol on host threads without them.
    # scripts/build.sh (and so scripts/test.sh) puts them back: the note below tells it to.
    build_step "configure without CUDA, as there is no GPU (meson setup $build -Dcuda=disabled)" \
      meson setup "$build" -Dcuda=disabled
    echo "scripts/demo.sh configured this build with -Dcuda=disabled (no GPU); scripts/build.sh" \
      "sets -Dcuda=auto again and removes this file" >"$build/.demo-no-cuda"
  fi
  # Only what the demo runs (about 100 of the build's 240 steps); scripts/build.sh and
  # scripts/test.sh build the rest, tests and framework libraries.
  targets=()
  for t in bench/all_reduce_perf tools/accord-topo trainer/accord-train; do
    ninja -C "$build" -t query "$t" >/dev/null 2>&1 && targets+=("$t")
  done
  build_step "compile the demo's programs (ninja -C $build ${targets[*]##*/})" ninja -C "$build" "${targets[@]}"
elif [ ! -x "$build/bench/all_reduce_perf" ] || [ ! -x "$build/tools/accord-topo" ]; then
  echo "demo.sh: --no-build, but $build has no bench/all_reduce_perf or tools/accord-topo;" \
    "run scripts/build.sh (or set BUILD_DIR)" >&2
  exit 1
fi

# ---------------------------------------------------------------------------------------------
# Helpers for the sections.
mpiflags=(--oversubscribe)
if [ "$(id -u)" = 0 ]; then mpiflags+=(--allow-run-as-root); fi
have_mpirun=0 no_mpi_why="no mpirun"
command -v mpirun >/dev/null && no_mpi_why="this build has no MPI"
# Not `ldd ... | grep -q`: under pipefail, grep -q leaving at the first match can kill ldd with
# SIGPIPE, and the pipeline then says "no MPI" (a fresh clone's demo ran without Open MPI so).
if command -v mpirun >/dev/null && [[ "$(ldd "$build/bench/all_reduce_perf")" == *libmpi* ]]; then
  have_mpirun=1
fi

# launch NP CMD...: NP processes of CMD, under mpirun where the build has MPI, else started
# torchrun style (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT).
launch() {
  local np=$1 r rc=0 pids=()
  shift
  if [ $have_mpirun = 1 ]; then
    mpirun "${mpiflags[@]}" -np "$np" "$@"
    return
  fi
  # A port the kernel has just given out and nobody holds (a random one may be taken).
  local port
  port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])' \
    2>/dev/null) || port=$((20000 + RANDOM % 20000))
  for ((r = 0; r < np; r++)); do
    RANK=$r WORLD_SIZE=$np MASTER_ADDR=127.0.0.1 MASTER_PORT=$port "$@" &
    pids+=($!)
  done
  for r in "${pids[@]}"; do wait "$r" || rc=$?; done
  return $rc
}

# show NAME FILTER CMD...: runs CMD; its whole output (stderr too) goes to $logs/NAME.txt and the
# terminal gets what the awk program FILTER makes of it (all of it with --verbose). Returns CMD's
# exit status; a failure is remembered for the summary.
show() {
  local name=$1 filter=$2
  shift 2
  local raw=$logs/$name.txt
  [ $verbose = 1 ] && filter='{ print; fflush() }'
  { local rc=0; "$@" 2>&1 || rc=$?; echo $rc >"$raw.rc"; } | tee "$raw" | awk "$filter" || true
  local rc
  rc=$(cat "$raw.rc" 2>/dev/null || echo "unknown")
  rm -f "$raw.rc"
  if [ "$rc" != 0 ]; then
    echo "  FAILED: exit status $rc; the whole output is in $raw"
    failed+=("$name")
  fi
  return "$rc"
}

# Size in bytes as people say it, for the tables (awk).
awk_common='
function human(b) {
  if (b >= 1048576 && b % 1048576 == 0) return b / 1048576 " MiB"
  if (b >= 1024 && b % 1024 == 0) return b / 1024 " KiB"
  return b " B"
}
function bench_row() { return $0 !~ /^#/ && NF >= 13 && $1 ~ /^[0-9]+$/ }
'
# all_reduce_perf --compare-mpi, as a narrow table: Accord and Open MPI side by side (out of
# place), the ratio of their bus bandwidths, and whether every value (in place too) was right.
# Lines that are not the table's (warnings, errors) pass through.
filter_mpi=$awk_common'
BEGIN {
  printf "  %9s %12s %9s %14s %9s %8s\n", "size", "Accord (us)", "GB/s", "Open MPI (us)", "GB/s", "ratio"
}
bench_row() {
  printf "  %9s %12s %9s %14s %9s %8s\n", human($1), $6, $8, (NF >= 16 ? $14 : "-"), (NF >= 16 ? $15 : "-"), (NF >= 16 ? $16 : "-")
  wrong += $9 + $13; rows++; fflush(); next
}
/^#/ { next }
{ print; fflush() }
END {
  if (!rows) exit
  print "  (time of one call; GB/s: bus bandwidth; ratio: Accord / Open MPI bus bandwidth, above 1 Accord is faster)"
  if (wrong) printf "  WRONG: %d values differ from the exact result\n", wrong
  else print "  every result exact, out of place and in place"
}'
# all_reduce_perf -g: the plan's pair lines, then size, time, bandwidths and in-place time.
filter_gpu=$awk_common'
/^# nranks/ { nranks = $3 }
/^#   pair / { sub(/^#   /, "  "); print; fflush(); next }
/ WARN gpu .* MPS does not run/ { next }
bench_row() {
  if (!rows++) printf "  %9s %11s %12s %12s %15s\n", "size", "time (us)", "algbw GB/s", "busbw GB/s", "in place (us)"
  printf "  %9s %11s %12s %12s %15s\n", human($1), $6, $7, (nranks > 1 ? $8 : "-"), $10
  wrong += $9 + $13; fflush(); next
}
/^#/ { next }
{ print; fflush() }
END {
  if (!rows) exit
  if (wrong) printf "  WRONG: %d values differ from the exact result\n", wrong
  else print "  every result exact, out of place and in place"
}'
# -g N over every GPU of one process, a single size: only the route of each pair.
filter_plan='/^#   pair / { sub(/^#   /, "  "); print; fflush(); next } /^#/ || NF >= 13 { next } { print; fflush() }'
# accord-train: the progress lines made shorter, the setup lines dropped, the rest kept.
filter_train='
/^(accord-train: [0-9]+ ranks?, sync |model .* on |gradient buckets \(|data .* training, .* test samples)/ { next }
/ WARN gpu .* MPS does not run/ { next }
/^train epoch/ {
  sub(/:$/, "", $5)
  printf "  epoch %s, step %s: loss %s, training accuracy %s, %s samples/s, communication %s of the step time\n",
         $3, $5, $7, $9, $13, $17
  fflush(); next
}
/^END epoch/ {
  n = split($0, part, "test accuracy ")
  printf "  end of epoch %s: test accuracy %s\n", $3, part[n]; fflush(); next
}
{ print "  " $0; fflush() }'

# The bus-bandwidth ratios of the host benchmark: "0.85x (64 B) to 3.10x (2 MiB)".
ratio_range() {
  awk "$awk_common"'/^# Accord \/ Open MPI busbw ratio by size:/ {
      for (i = 1; i <= NF; i++) { if ($i !~ /^[0-9]+:[0-9.]+$/) continue
        split($i, p, ":"); r = p[2] + 0
        if (lo == "" || r < lo) { lo = r; lo_at = human(p[1]) }
        if (hi == "" || r > hi) { hi = r; hi_at = human(p[1]) } } }
    END { if (lo != "") printf "%.2fx (%s) to %.2fx (%s)", lo, lo_at, hi, hi_at }' "$1"
}
# The first and last rows of a -g run: "8 B in 8.0 us, 128 MiB at 2029 GB/s algbw".
gpu_figures() {
  awk "$awk_common"'/^# nranks/ { n = $3 } bench_row() { if (first == "") first = human($1) " in " $6 " us"
      last = human($1) " at " (n > 1 ? $8 " GB/s busbw" : $7 " GB/s algbw") }
    END { if (first != "") printf "%s, %s", first, last }' "$1"
}

# Where the GPU part runs: CUDA's GPUs, simulated ones (ACCORD_SIM_TOPO), or nowhere and why.
gpu_kind=none gpu_why="" gpu_name="" ngpus=0
if [ "${DEMO_GPU:-1}" = 0 ]; then
  gpu_why="DEMO_GPU=0"
elif ! runtime=$(ACCORD_SIM_TOPO=$sim_topo "$build/tools/accord-topo" --runtime 2>&1); then
  gpu_why="accord-topo --runtime failed: $runtime"
  failed+=(gpu)
else
  first=$(head -n 1 <<<"$runtime")
  gpu_name=$(sed -n 's/^GPU0: \([^,]*\),.*/\1/p' <<<"$runtime")
  ngpus=$(grep -c '^GPU[0-9]*:' <<<"$runtime" || true)
  case $first in
    cuda:*) gpu_kind=cuda ;;
    simulated:*) gpu_kind=sim ;;
    *) gpu_why=${first#none: } ;;
  esac
  [ "$ngpus" -gt 0 ] || gpu_kind=none
  if [ $gpu_kind = none ] && [ -f "$build/.demo-no-cuda" ]; then
    gpu_why="no NVIDIA GPU or driver on this machine (so the demo's build left CUDA out)"
  fi
fi

# Processes sharing a GPU run their kernels at the same time only under MPS; the library looks
# for its control pipe as CUDA does (collectives/device/engine.cpp, mps_running).
mps=0
[ -e "${CUDA_MPS_PIPE_DIRECTORY:-/tmp/nvidia-mps}/control" ] && mps=1
if [ $gpu_kind = sim ]; then
  mps_note="simulated GPUs have no MPS (the library's warning about it is left out)"
elif [ $mps = 1 ]; then
  mps_note="MPS runs, so both processes' kernels run on it at the same time"
else
  mps_note="MPS does not run, so the GPU gives the processes turns and each step of a collective"
  mps_note+=$'\n  waits for the other\'s turn (H200: 2.3 ms at 8 B, 22 us under MPS); start it: nvidia-cuda-mps-control -d'
fi

if [ $quick = 1 ]; then
  host_sizes=(-b 8 -e 32K -f 64 -n 5 -w 2)
else
  host_sizes=(-b 8 -e 64M -f 8 -n 20 -w 5)
fi

# ---------------------------------------------------------------------------------------------
echo
if [ $gpu_kind = sim ]; then
  echo "=== 1. Topology: the simulated machine of $sim_topo (accord-topo --file)"
  show topology '{ print; fflush() }' "$build/tools/accord-topo" --file "$sim_topo" || true
else
  echo "=== 1. Topology of this machine (accord-topo)"
  show topology '{ print; fflush() }' "$build/tools/accord-topo" || true
fi

echo
host_log=$logs/allreduce-host.txt
if [ $have_mpirun = 1 ]; then
  echo "=== 2. All-reduce of float32 on host memory, 2 ranks: Accord and Open MPI on the same buffers"
  show allreduce-host "$filter_mpi" launch 2 "$build/bench/all_reduce_perf" "${host_sizes[@]}" --compare-mpi || true
else
  echo "=== 2. All-reduce of float32 on host memory, 2 ranks (no Open MPI to compare with: $no_mpi_why)"
  show allreduce-host "$filter_gpu" launch 2 "$build/bench/all_reduce_perf" "${host_sizes[@]}" || true
fi

echo
gpu_summary=""
if [ $gpu_kind = none ]; then
  echo "=== 3. GPU part skipped: ${gpu_why:-no GPU}"
  gpu_summary="GPU: skipped (section 3 says why)"
else
  # 1 rank to 128 MiB; 2 processes to 128 MiB under MPS, to 2 MiB where they take turns or the
  # GPUs are simulated (host memory).
  one_sizes=(-b 8 -e 128M -f 16 -n 20 -w 3) two_sizes=(-b 8 -e 128M -f 16 -n 10 -w 2)
  [ $gpu_kind = cuda ] || one_sizes=(-b 8 -e 8M -f 16 -n 10 -w 2)
  [ $gpu_kind = cuda ] && [ $mps = 1 ] || two_sizes=(-b 8 -e 2M -f 16 -n 5 -w 1)
  if [ $quick = 1 ]; then one_sizes=(-b 8 -e 32K -f 64 -n 5 -w 1) two_sizes=("${one_sizes[@]}"); fi
  if [ $gpu_kind = sim ]; then
    echo "=== 3. All-reduce on GPU buffers: $ngpus simulated GPUs (${gpu_name:-unnamed}) of $(basename "$sim_topo")"
    echo "  (simulated: the kernels are host threads and GPU memory is host memory, so the results are"
    echo "   exact but the times are not a GPU's)"
  else
    echo "=== 3. All-reduce on GPU buffers: $ngpus x $gpu_name"
  fi
  if [ "$ngpus" -gt 1 ]; then
    echo "Routes between the $ngpus GPUs, one process driving them all (all_reduce_perf -g $ngpus --show-plan):"
    ACCORD_SIM_TOPO=$sim_topo show gpu-routes "$filter_plan" "$build/bench/all_reduce_perf" -g "$ngpus" -b 8 -e 8 \
      -n 1 -w 0 --show-plan || true
  fi
  echo "1 rank on GPU 0 (all_reduce_perf -g 1):"
  ACCORD_SIM_TOPO=$sim_topo ACCORD_DEVICE=0 show gpu-1rank "$filter_gpu" "$build/bench/all_reduce_perf" -g 1 \
    "${one_sizes[@]}" || true
  echo "2 processes sharing GPU 0 (ACCORD_DEVICE=0): $mps_note"
  ACCORD_SIM_TOPO=$sim_topo ACCORD_DEVICE=0 show gpu-2procs "$filter_gpu" launch 2 "$build/bench/all_reduce_perf" -g 1 \
    "${two_sizes[@]}" --show-plan || true
  one=$(gpu_figures "$logs/gpu-1rank.txt") two=$(gpu_figures "$logs/gpu-2procs.txt")
  exact="exact"
  [[ " ${failed[*]} " == *" gpu-"* ]] && exact="FAILED (section 3)"
  if [ $gpu_kind = sim ]; then
    gpu_summary="GPU (simulated, $ngpus x ${gpu_name:-GPU}): 1 rank and 2 processes on GPU 0 $exact; no GPU times"
  else
    gpu_summary="GPU ($gpu_name): 1 rank ${one:-failed}; 2 processes on GPU 0 ($([ $mps = 1 ] || echo "no ")MPS)"
    gpu_summary+=" ${two:-failed}; $exact"
  fi
fi

echo
# Training: on the GPU where CUDA has one and accord-train has the GPU backend (cuDNN).
train_data=/usr/share/datasets/fashion-mnist
device=cpu
train_note=""
if [ -x "$build/trainer/accord-train" ]; then
  if [ $gpu_kind = cuda ] && [[ "$(ldd "$build/trainer/accord-train")" == *libcudnn* ]]; then
    device=gpu
    # Rank r trains on GPU local rank % GPUs (trainer/README.md).
    train_note="rank 0 on GPU 0, rank 1 on GPU 1"
    [ "$ngpus" -gt 1 ] || train_note="both ranks on GPU 0: $mps_note"
  elif [ $gpu_kind = cuda ]; then
    train_note="on the CPU: this accord-train was built without the GPU backend (cuDNN and cuBLAS not found)"
  elif [ $gpu_kind = sim ]; then
    train_note="on the CPU: --device gpu needs a real GPU (cuDNN and cuBLAS); simulated GPUs serve only collectives"
  fi
fi
if [ $quick = 1 ]; then
  steps=(--epochs 1 --batch 16 --log-every 16)
  what="1 epoch of 1024 samples (--quick), batch 16 per rank"
else
  steps=(--epochs 1 --max-steps 200 --batch 32 --log-every 50)
  what="200 steps of 32 samples per rank"
fi
echo "=== 4. Training: LeNet-5 on Fashion-MNIST, 2 ranks on the $device, gradients averaged by Accord, $what"
[ -z "$train_note" ] || echo "  (${train_note})"
train_summary=""
if [ ! -x "$build/trainer/accord-train" ]; then
  echo "  skipped: accord-train was not built: it needs OpenBLAS and zlib (libopenblas-dev, zlib1g-dev);"
  echo "  run scripts/setup.sh, then meson configure $build -Dopenblas=enabled and scripts/build.sh"
  train_summary="training: skipped (accord-train not built; section 4)"
elif [ ! -d "$train_data" ]; then
  echo "  skipped: no Fashion-MNIST in $train_data (apt-get install dataset-fashion-mnist)"
  train_summary="training: skipped (no data; section 4)"
else
  if [ $quick = 1 ]; then
    # The first 1024 training and 512 test samples, as plain IDX files.
    if ! python3 - "$train_data" "$logs/data" <<'PY'; then
import gzip, os, struct, sys
src, dst = sys.argv[1], sys.argv[2]
os.makedirs(dst, exist_ok=True)
for prefix, n in (("train", 1024), ("t10k", 512)):
    for kind in ("images-idx3", "labels-idx1"):
        name = f"{prefix}-{kind}-ubyte"
        with gzip.open(os.path.join(src, name + ".gz")) as f:
            magic = f.read(4)
            ndim = magic[3]
            dims = struct.unpack(f">{ndim}I", f.read(4 * ndim))
            record = 1
            for d in dims[1:]:
                record *= d
            body = f.read(n * record)
        with open(os.path.join(dst, name), "wb") as out:
            out.write(magic + struct.pack(f">{ndim}I", n, *dims[1:]) + body)
PY
      echo "  FAILED: could not take the first samples of $train_data into $logs/data"
      failed+=(train-data)
    fi
    train_data=$logs/data
  fi
  train=("$build/trainer/accord-train" --model cnn --device "$device" --sync accord --data "$train_data" "${steps[@]}")
  show train "$filter_train" launch 2 "${train[@]}" || true
  done_line=$(grep '^done:' "$logs/train.txt" | tail -n 1 || true)
  if [[ $done_line =~ ^done:\ ([0-9]+)\ steps,\ test\ accuracy\ ([0-9.]+).*,\ ([0-9]+)\ samples/s,\ comm\ ([0-9]+%) ]]; then
    train_summary="training ($device, 2 ranks, ${BASH_REMATCH[1]} steps): test accuracy ${BASH_REMATCH[2]},"
    train_summary+=" ${BASH_REMATCH[3]} samples/s, communication ${BASH_REMATCH[4]} of the training time"
  else
    train_summary="training: FAILED (section 4)"
  fi
fi

# ---------------------------------------------------------------------------------------------
echo
echo "=== Summary ($((SECONDS - t_start)) s; every program's whole output is in $logs)"
if [ $have_mpirun = 1 ]; then
  range=$(ratio_range "$host_log")
  if [ -n "$range" ]; then
    echo "host all-reduce, 2 ranks: Accord / Open MPI bus bandwidth from $range"
  else
    echo "host all-reduce, 2 ranks: FAILED (section 2)"
  fi
else
  echo "host all-reduce, 2 ranks: $(gpu_figures "$host_log") (no Open MPI to compare with: $no_mpi_why)"
fi
echo "$gpu_summary"
echo "$train_summary"
echo "next: bench/README.md (benchmark flags, -g N, --show-plan), README.md \"Using Accord under PyTorch\"" \
  "and \"Running under mpirun\", tools/README.md (accord-topo), ./scripts/test.sh"
if [ ${#failed[@]} -gt 0 ]; then
  echo "FAILED: ${failed[*]} (outputs in $logs)"
  exit 1
fi
