#!/usr/bin/env bash
# The machine a benchmark ran on, as Markdown lines for the head of its table (compare.sh):
# the CPU model and the flags that change what the host kernels and copies do (vector width:
# avx2/avx512*; string copies: erms/fsrm/fzrm/fsrs; direct stores: movdiri/movdir64b; cache
# line flushes: clflushopt/clwb), caches, CPUs, hypervisor, kernel, Open MPI, the commit, the
# date and the load at the start. Usage: bench/machine.sh [BUILD_DIR]
set -uo pipefail
build=${1:-build}
field() { lscpu 2>/dev/null | sed -n "s/^$1:[[:space:]]*//p" | head -1; }
model=$(field 'Model name'); model=${model:-$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)}
flags=" $(sed -n 's/^flags[[:space:]]*: //p' /proc/cpuinfo | head -1) "
relevant=(sse4_2 avx avx2 fma f16c avx512f avx512bw avx512vl avx512_bf16 avx512_fp16 erms fsrm fzrm fsrs
          movdiri movdir64b clflushopt clwb amx_tile)
have=(); lack=()
for f in "${relevant[@]}"; do
  if [[ $flags == *" $f "* ]]; then have+=("$f"); else lack+=("$f"); fi
done
hyper=$(field 'Hypervisor vendor')
echo "Machine: ${model:-unknown CPU} (family $(field 'CPU family'), model $(field 'Model'), $(nproc) CPUs online of $(field 'CPU(s)')," \
     "L2 $(field 'L2 cache'), L3 $(field 'L3 cache')${hyper:+, $hyper guest})"
echo "CPU flags: ${have[*]:-none of those below}; absent: ${lack[*]:-none}"
ompi=$(ompi_info --parsable 2>/dev/null | sed -n 's/^ompi:version:full://p' | head -1)
commit=$(git -C "$(dirname "$0")" rev-parse --short HEAD 2>/dev/null)
echo "Kernel $(uname -r); Open MPI ${ompi:-not found}; Accord ${commit:-?} ($build); $(date -u '+%Y-%m-%d %H:%M UTC')"
echo "Load at start (1/5/15 min): $(cut -d' ' -f1-3 /proc/loadavg)"
