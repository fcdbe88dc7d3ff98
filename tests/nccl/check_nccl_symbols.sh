#!/bin/sh
# The dynamic symbol table of libaccord_nccl.so must define every NCCL name that PyTorch
# 2.11.0+cu130's libtorch_cuda.so imports (nm -D --undefined-only there): a missing one makes
# PyTorch fail to load, or, preloaded, fall through to the real NCCL for that name.
# Usage: check_nccl_symbols.sh path/to/libaccord_nccl.so
lib="$1"
if [ ! -f "$lib" ]; then
  echo "FAIL: $lib does not exist; build nccl/libaccord_nccl.so first" >&2
  exit 1
fi
# nm first, on its own: in a pipeline its failure would be lost behind awk's success.
table=$(nm -D --defined-only "$lib") || {
  echo "FAIL: nm -D --defined-only $lib failed (is binutils installed?)" >&2
  exit 1
}
# Functions defined in the text section, strong (T) or weak (W): either satisfies the import.
defined=$(printf '%s\n' "$table" | awk '$2 == "T" || $2 == "W" { print $3 }')
missing=""
count=0
for name in \
  ncclAllGather ncclAllReduce ncclAlltoAll ncclBcast ncclBroadcast ncclCommAbort ncclCommCount \
  ncclCommDeregister ncclCommDestroy ncclCommFinalize ncclCommGetAsyncError ncclCommInitAll \
  ncclCommInitRank ncclCommInitRankConfig ncclCommInitRankScalable ncclCommRegister ncclCommShrink \
  ncclCommSplit ncclCommUserRank ncclCommWindowDeregister ncclCommWindowRegister ncclDevCommCreate \
  ncclDevCommDestroy ncclGetErrorString ncclGetLastError ncclGetUniqueId ncclGetVersion ncclGroupEnd \
  ncclGroupSimulateEnd ncclGroupStart ncclMemAlloc ncclMemFree ncclRecv ncclRedOpCreatePreMulSum \
  ncclRedOpDestroy ncclReduce ncclReduceScatter ncclSend; do
  count=$((count + 1))
  printf '%s\n' "$defined" | grep -qx "$name" || missing="$missing $name"
done
if [ "$count" -ne 38 ]; then
  echo "FAIL: the list has $count names, not PyTorch 2.11's 38" >&2
  exit 1
fi
if [ -n "$missing" ]; then
  echo "FAIL: $lib does not define (nm -D --defined-only):$missing; PyTorch 2.11 imports these, so it cannot load it" >&2
  exit 1
fi
echo "ok: $lib defines all $count NCCL names PyTorch 2.11 imports"
