// Seam between the ISA-specific builds of reduce_isa.cpp and the run-time dispatch
// (reduce_dispatch.cpp). Each variant is the same source compiled with other -m flags; each
// exports one table. Internal to collectives/kernels.
#pragma once

#include <cstddef>

#include "collectives/kernels/reduce_kernels.hpp"

namespace accord::kernels {

using CopyFn = void (*)(void* dst, const void* src, size_t bytes, bool streaming,
                        const void* prefetch, size_t prefetch_bytes);

using SlotCopyFn = void (*)(void* dst, const void* src, size_t bytes);

struct IsaKernels {
  const char* name;
  ReduceFn reduce[ACCORD_NUM_DTYPES][ACCORD_NUM_OPS];
  CopyFn copy;
  SlotCopyFn slot_copy;  // copy_to_peer(), and how ReduceArgs::dst1 is written
};

// One per built variant; which ones exist is decided by collectives/kernels/meson.build
// (ACCORD_KERNELS_HAVE_<ISA> in the dispatch build).
namespace isa_generic {
const IsaKernels& kernels();
}
namespace isa_sse2 {
const IsaKernels& kernels();
}
namespace isa_avx2 {
const IsaKernels& kernels();
}
namespace isa_avx512 {
const IsaKernels& kernels();
}

// Blocking used when the result goes to two places or with streaming stores: compute one
// block into an L1-resident buffer, then copy it out. A multiple of 64 bytes so that block
// starts stay cache-line aligned in dst0 once the first block has aligned them.
inline constexpr size_t kBlockBytes = 4096;

// copy() with streaming below this size uses ordinary stores: a few lines gain nothing from
// bypassing the cache and the sfence costs more.
inline constexpr size_t kStreamMinBytes = 1024;

}  // namespace accord::kernels
