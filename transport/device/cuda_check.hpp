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

// A driver API function through the runtime's driver entry point (Accord links no libcuda),
// or null when this driver has none (CUDA 12's versions).
inline void* cuda_driver_entry(const char* name) {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult found{};
  if (cudaGetDriverEntryPointByVersion(name, &fn, 12000, cudaEnableDefault, &found) != cudaSuccess ||
      found != cudaDriverEntryPointSuccess)
    fn = nullptr;
  cudaGetLastError();
  return fn;
}

}  // namespace accord

// Note [Caller's device]: the adapter makes a device current for each call and gives the
// thread's current device back afterwards (as NCCL does), so that a program that drives GPU 0
// and calls a collective of GPU 3 still runs its next kernel on GPU 0. A thread that had no
// CUDA context before the call is left on the device the call used: restoring "device 0"
// there would create a context on GPU 0 that nobody asked for.
namespace accord {

// The calling thread's CUDA context, without creating one (cuCtxGetCurrent through the
// runtime's driver entry point; false when the driver cannot say).
bool cuda_thread_has_context();

class CudaDeviceGuard {
 public:
  CudaDeviceGuard() = default;
  CudaDeviceGuard(const CudaDeviceGuard&) = delete;
  CudaDeviceGuard& operator=(const CudaDeviceGuard&) = delete;
  ~CudaDeviceGuard() {
    if (saved_ >= 0 && saved_ != now_) {
      cudaSetDevice(saved_);
      cudaGetLastError();
    }
  }
  // Makes `device` current (remembering the caller's on the first call).
  cudaError_t set(int device) {
    if (!checked_) {
      checked_ = true;
      int d = -1;
      if (cuda_thread_has_context() && cudaGetDevice(&d) == cudaSuccess) saved_ = d;
      cudaGetLastError();
    }
    if (now_ == device || (now_ < 0 && saved_ == device)) {
      now_ = device;
      return cudaSuccess;
    }
    cudaError_t e = cudaSetDevice(device);
    if (e == cudaSuccess) now_ = device;
    return e;
  }

 private:
  bool checked_ = false;
  int saved_ = -1;  // the caller's device; -1: it had no context, nothing to restore
  int now_ = -1;
};

}  // namespace accord

#define ACCORD_CUDA_CHECK(call, device, op)                                              \
  do {                                                                                   \
    cudaError_t accord_cuda_err_ = (call);                                               \
    if (accord_cuda_err_ != cudaSuccess)                                                 \
      return ::accord::cuda_error(accord_cuda_err_, device, op, #call);                  \
  } while (0)
