// Turning a failed CUDA call into a Status: ACCORD_ERR_CUDA, the device, the operation, the
// call, and CUDA's error name and text. Only for the CUDA adapter's sources.
#pragma once

#include <cuda_runtime_api.h>

#include "core/status.hpp"

namespace accord {

inline Status cuda_error(cudaError_t e, int device, const char* op, const char* call) {
  cudaGetLastError();  // clear it, so that the next call does not report it again
  return error(ACCORD_ERR_CUDA, "device %d: %s: %s: %s: %s", device, op, call, cudaGetErrorName(e),
               cudaGetErrorString(e));
}

}  // namespace accord

#define ACCORD_CUDA_CHECK(call, device, op)                                              \
  do {                                                                                   \
    cudaError_t accord_cuda_err_ = (call);                                               \
    if (accord_cuda_err_ != cudaSuccess)                                                 \
      return ::accord::cuda_error(accord_cuda_err_, device, op, #call);                  \
  } while (0)
