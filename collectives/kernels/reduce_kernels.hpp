// Host reduction kernels: every dtype x op, vectorised, with optional streaming (non-temporal)
// stores for outputs that will not be read soon. The element arithmetic lives in
// element_ops.hpp so that the CUDA kernels share it.
//
// Contract used by the executor (collectives/executor.cpp):
//  - dst0 and dst1 may each alias a or b exactly (in place); other overlap is not allowed
//    (and dst0 and dst1 must not overlap each other).
//  - No alignment is required of any pointer; counts may be anything including 0.
//  - float16 / bfloat16: a op b (then / divisor) is computed in float32 and rounded to nearest
//    even once, at the end.
//  - Integer sum and prod wrap (two's complement). The divisor (avg's post-op) is applied
//    whenever divisor > 1, whatever the op: integers truncate toward zero, floats divide
//    (x / divisor) in the element type (float32 for halves). ACCORD_AVG's kernel is the sum's:
//    the caller passes divisor = nranks on the step that finishes an element, 0 elsewhere.
//  - NaN: a float sum, product or divide that gives NaN gives the canonical quiet NaN; max and
//    min return the first NaN operand (element_ops.hpp: Note [Canonical NaN], Note [NaN in
//    max and min]).
//  - Results are a pure function of the inputs: same inputs give the same bits on every call,
//    every thread, every ISA variant and the CUDA kernels (no FMA contraction, no
//    reassociation), assuming the default floating-point environment (no FTZ/DAZ).
//  - With dst0_streaming the call ends with an sfence, so a flag stored after it (a FIFO's
//    "ready") is not seen before the data.
#pragma once

#include <cstddef>

#include "include/accord/accord.h"

namespace accord::kernels {

struct ReduceArgs {
  void* dst0 = nullptr;     // required
  void* dst1 = nullptr;     // optional second copy of the result, written as copy_to_peer()
                            // writes (the next rank's FIFO slot)
  const void* a = nullptr;  // first operand (left side: result = a op b)
  const void* b = nullptr;  // second operand; nullptr = no reduction, copy a (then apply divisor)
  size_t count = 0;         // elements
  int divisor = 0;          // > 1: divide the result by this (avg post-op); 0 or 1: none
  bool dst0_streaming = false;  // write dst0 with non-temporal stores (large outputs)
  // With dst0_streaming: bytes the caller reads next, pulled into the cache while this call
  // streams (Note [Prefetch while streaming], reduce_isa.cpp). A hint: no effect on results.
  const void* prefetch = nullptr;
  size_t prefetch_bytes = 0;
};

// Resolved once per (dtype, op) and ISA; calling it does no dispatch.
using ReduceFn = void (*)(const ReduceArgs& args);

// Returns nullptr for an unknown dtype or op.
ReduceFn get_reduce_fn(accord_datatype_t dtype, accord_red_op_t op);

// Convenience: one-off call (dispatches every time).
void reduce(accord_datatype_t dtype, accord_red_op_t op, const ReduceArgs& args);

// memcpy, with non-temporal stores when streaming is true (and the size makes it worthwhile);
// a streaming copy prefetches `prefetch` as ReduceArgs::prefetch says.
void copy(void* dst, const void* src, size_t bytes, bool streaming, const void* prefetch = nullptr,
          size_t prefetch_bytes = 0);

// memcpy into memory that another rank's core reads next (a FIFO slot): whole lines written
// without first fetching them from that core (Note [Copies into a peer's slot],
// reduce_isa.cpp).
void copy_to_peer(void* dst, const void* src, size_t bytes);

// How copy_to_peer() and ReduceArgs::dst1 write: `rep movsb` (the default on x86-64) or the
// vector loop of copy(). ACCORD_SLOT_COPY=rep|vector, read at the first call, sets it;
// set_slot_copy_mode() overrides it (tests, benchmarks). Same bytes either way.
enum class SlotCopy { kRepMovsb, kVector };
inline constexpr size_t kSlotRepMinBytes = 1024;  // smaller copies take the vector loop
SlotCopy slot_copy_mode();
void set_slot_copy_mode(SlotCopy mode);

// Name of the ISA variant chosen at run time ("avx512", "avx2", "sse2"), for logs and benchmarks.
const char* isa_name();

// ---- ISA variants (tests and benchmarks) ----
// Every variant gives the same bits. The best one the CPU supports is chosen once, at the first
// call; ACCORD_KERNEL_ISA=sse2|avx2|avx512 forces one (a variant the CPU lacks falls back to the
// best it has, with a warning). Off x86 the only variant is kGeneric.
enum class Isa { kGeneric = 0, kSse2 = 1, kAvx2 = 2, kAvx512 = 3 };
inline constexpr int kNumIsas = 4;

// Built into this library and runnable on this CPU.
bool isa_available(Isa isa);
const char* isa_name(Isa isa);
Isa selected_isa();

// The kernel of one variant; nullptr for an unknown dtype or op or an unavailable variant.
ReduceFn get_reduce_fn(accord_datatype_t dtype, accord_red_op_t op, Isa isa);

// copy() and copy_to_peer() of one variant; false (and nothing copied) if the variant is
// unavailable.
bool copy(void* dst, const void* src, size_t bytes, bool streaming, Isa isa);
bool copy_to_peer(void* dst, const void* src, size_t bytes, Isa isa);

}  // namespace accord::kernels
