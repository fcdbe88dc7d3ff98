#!/usr/bin/env bash
# The main job on a built-in default: installs what is missing, builds, then
#   1. prints this machine's topology (accord-topo),
#   2. benchmarks all-reduce across 2 ranks against Open MPI's MPI_Allreduce,
#   3. trains LeNet on Fashion-MNIST for a short run with 2 ranks (200 steps of 32 samples per
#      rank, about 15 s; prints the test accuracy at the end).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build}
./scripts/setup.sh
./scripts/build.sh

mpiflags=(--oversubscribe)
if [ "$(id -u)" = 0 ]; then mpiflags+=(--allow-run-as-root); fi
have_mpirun=0
# Not `ldd ... | grep -q`: under pipefail, grep -q leaving at the first match can kill ldd with
# SIGPIPE, and the pipeline then says "no MPI" (a fresh clone's demo ran without Open MPI so).
if command -v mpirun >/dev/null && [ -f "$build/bench/all_reduce_perf" ] &&
   [[ "$(ldd "$build/bench/all_reduce_perf")" == *libmpi* ]]; then
  have_mpirun=1
fi

echo
echo "=== 1. Topology of this machine (accord-topo) ==="
"$build/tools/accord-topo"

echo
echo "=== 2. All-reduce, 2 ranks, float32 sum: Accord vs Open MPI in the same run ==="
if [ $have_mpirun = 1 ]; then
  mpirun "${mpiflags[@]}" -np 2 "$build/bench/all_reduce_perf" -b 8 -e 64M -f 8 -n 20 -w 5 --compare-mpi
else
  echo "(no MPI: two processes started with RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT instead)"
  port=$((20000 + RANDOM % 20000))
  for r in 0 1; do
    RANK=$r WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port "$build/bench/all_reduce_perf" -b 8 -e 64M -f 8 -n 20 -w 5 &
  done
  wait
fi

echo
echo "=== 3. Training: LeNet-5 on Fashion-MNIST, 2 ranks, gradients all-reduced by Accord ==="
if [ -x "$build/trainer/accord-train" ]; then
  if [ $have_mpirun = 1 ]; then
    mpirun "${mpiflags[@]}" -np 2 "$build/trainer/accord-train" --model cnn --epochs 1 --max-steps 200 --batch 32
  else
    port=$((20000 + RANDOM % 20000))
    for r in 0 1; do
      RANK=$r WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port "$build/trainer/accord-train" --model cnn --epochs 1 --max-steps 200 --batch 32 &
    done
    wait
  fi
else
  echo "(accord-train was not built: it needs OpenBLAS and zlib (libopenblas-dev, zlib1g-dev);"
  echo " run scripts/setup.sh, then meson configure $build -Dopenblas=enabled and scripts/build.sh)"
fi
