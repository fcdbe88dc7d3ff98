#!/usr/bin/env bash
# MPI_Allreduce of a plain MPI program with and without LD_PRELOAD=libaccord_mpi.so: runs
# build/bench/mpi_allreduce_time REPS times each way, alternating, and prints a Markdown
# table of the medians. Usage: bench/mpi_preload.sh BUILD_DIR NP [REPS] [MAX_BYTES]
# ACCORD_MPI_MIN_BYTES is set to 0 so that every size goes through Accord (the table is what
# the default threshold is chosen from).
set -euo pipefail
build=$1; np=$2; reps=${3:-3}; max=${4:-67108864}
prog=$build/bench/mpi_allreduce_time
lib=$(realpath "$build/interpose/mpi/libaccord_mpi.so")
flags=(--oversubscribe --mca btl self,vader -np "$np")
if [ "$(id -u)" = 0 ]; then flags+=(--allow-run-as-root); fi
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
for r in $(seq "$reps"); do
  mpirun "${flags[@]}" "$prog" "$max" > "$tmp/mpi.$r"
  ACCORD_MPI_MIN_BYTES=0 mpirun "${flags[@]}" -x LD_PRELOAD="$lib" -x ACCORD_MPI_MIN_BYTES "$prog" "$max" > "$tmp/accord.$r"
done
median() { sort -g | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }
echo "| size (bytes) | Open MPI (us) | with libaccord_mpi.so (us) | speed-up |"
echo "|---:|---:|---:|---:|"
for bytes in $(awk '{print $1}' "$tmp/mpi.1"); do
  m=$(cat "$tmp"/mpi.* | awk -v b="$bytes" '$1==b {print $2}' | median)
  a=$(cat "$tmp"/accord.* | awk -v b="$bytes" '$1==b {print $2}' | median)
  echo "| $bytes | $m | $a | $(awk -v m="$m" -v a="$a" 'BEGIN {printf "%.2f", m/a}') |"
done
