#!/usr/bin/env bash
# Starts NP copies of a program with RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT (no MPI) and
# fails unless every one exits 0. Usage: env_launch.sh NP PROGRAM ARGS...
set -u
np=$1; shift
port=$((20000 + RANDOM % 30000))
pids=()
for r in $(seq 0 $((np - 1))); do
  env -u OMPI_COMM_WORLD_RANK RANK=$r WORLD_SIZE=$np MASTER_ADDR=127.0.0.1 MASTER_PORT=$port "$@" &
  pids+=($!)
done
status=0
for p in "${pids[@]}"; do wait "$p" || status=1; done
exit $status
