#!/usr/bin/env bash
# Starts NP copies of a program with RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT (no MPI) and
# fails unless every one exits 0. Usage: env_launch.sh NP PROGRAM ARGS...
set -u
np=$1; shift
# A port the kernel hands out as free (a random one may be held by another test's connection).
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
pids=()
for r in $(seq 0 $((np - 1))); do
  env -u OMPI_COMM_WORLD_RANK RANK=$r WORLD_SIZE=$np MASTER_ADDR=127.0.0.1 MASTER_PORT=$port "$@" &
  pids+=($!)
done
status=0
for p in "${pids[@]}"; do wait "$p" || status=1; done
exit $status
