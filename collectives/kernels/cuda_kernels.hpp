// CUDA reduction kernels (reduce_kernels.cu): the same dtype x op and the same element
// arithmetic (element_ops.hpp) as the host kernels, so a GPU and a CPU reducing the same
// inputs give the same bits. Built only when the CUDA toolkit is found (ACCORD_HAVE_CUDA).
#pragma once

#include <cuda_runtime_api.h>

#include "collectives/kernels/reduce_kernels.hpp"

namespace accord::kernels {

// Enqueues dst0 (and dst1) = a op b (or a, when b is null), divided by args.divisor when it is
// > 1, on `stream`. Pointers are device (or managed / mapped) memory, may alias exactly as on
// the host, and need no alignment beyond the element's: 16-byte aligned buffers use 16-byte
// vector loads and stores. dst0_streaming writes dst0 with the evict-first hint (st.global.cs).
// Returns cudaErrorInvalidValue for an unknown dtype / op or a null pointer, else the launch's
// error. Does not synchronise.
cudaError_t cuda_reduce(const ReduceArgs& args, accord_datatype_t dtype, accord_red_op_t op,
                        cudaStream_t stream);

}  // namespace accord::kernels
