// The kernels of the device path (Note [One protocol, two executors], dev_call.hpp), as the
// device runtime launches them: the CUDA function (dev_kernel.cu, in CUDA builds) and the
// same protocol for the simulation's host threads (dev_host.cpp).
#pragma once

#include "transport/device/device_runtime.hpp"

namespace accord::dev {

// The collective kernel: one DevLaunch (dev_call.hpp) as its only parameter.
const KernelDesc& collective_kernel();

#if ACCORD_HAVE_CUDA
// dev_kernel.cu: the __global__ function behind collective_kernel().
const void* collective_kernel_cuda();
#endif

}  // namespace accord::dev
