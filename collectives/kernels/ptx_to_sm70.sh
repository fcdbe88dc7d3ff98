#!/usr/bin/env bash
# Usage: ptx_to_sm70.sh PTXAS IN.ptx OUT.cubin
#
# Builds the Volta (sm_70) cubin of the reduction kernels when the main toolkit (CUDA 13) can no
# longer target sm_70. IN.ptx is CUDA 13's compute_75 PTX of reduce_kernels.cu; PTXAS is a
# CUDA 12 ptxas (scripts/setup.sh installs 12.9 from PyPI into .tools/). The PTX asks for
# sm_75 only by its `.target` line: the kernels use no instruction sm_70 lacks (bfloat16 is
# emulated below sm_80, the half conversions and 16-byte loads exist since sm_53), and ptxas
# refuses the file if that ever stops being true. Note [Volta from CUDA 13] in reduce_kernels.cu.
set -euo pipefail

if [ $# -ne 3 ]; then
  echo "usage: $0 PTXAS IN.ptx OUT.cubin" >&2
  exit 2
fi
ptxas=$1 in=$2 out=$3

# The newest PTX ISA each CUDA 12 ptxas reads (the PTX ISA manual's release history).
release=$("$ptxas" --version | sed -n 's/.*release \([0-9]*\.[0-9]*\).*/\1/p')
case "$release" in
  12.9) isa=8.8 ;;
  12.8) isa=8.7 ;;
  12.6 | 12.5) isa=8.5 ;;
  12.4) isa=8.4 ;;
  12.3) isa=8.3 ;;
  12.2) isa=8.2 ;;
  12.1) isa=8.1 ;;
  12.0) isa=8.0 ;;
  *)
    echo "ptx_to_sm70: $ptxas is CUDA '$release'; need a CUDA 12 ptxas (scripts/setup.sh" \
      "installs 12.9 into .tools/cuda-pypi)" >&2
    exit 1
    ;;
esac

grep -qx '\.target sm_75' "$in" || {
  echo "ptx_to_sm70: $in has no '.target sm_75' line; expected CUDA's compute_75 PTX" >&2
  exit 1
}
tmp="$out.ptx"
sed -e "s/^\.version [0-9.]*\$/.version $isa/" -e 's/^\.target sm_75$/.target sm_70/' "$in" >"$tmp"
"$ptxas" -O3 -arch=sm_70 "$tmp" -o "$out"
rm -f "$tmp"
