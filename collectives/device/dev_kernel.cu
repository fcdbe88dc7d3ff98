// The collective kernel on a GPU: dev_call.hpp's protocol (Note [One protocol, two executors])
// run by one block of kCollectiveThreads threads on the caller's stream. Thread 0 waits on and
// writes the flags; every thread moves its share of each step's bytes; __syncthreads between.
// Built for the same architectures as the reduction kernels (collectives/kernels/meson.build).
//
// Reads of anything a peer may have written (slots, flags) bypass the non-coherent L1
// (ld.global.cv, volatile): a slot is reused every nslots messages within one kernel.
//
// Cost: one block moves data at a fraction of the GPU's bandwidth; the protocol is what this
// file is about. Several blocks, each on its own FIFOs (NCCL's channels), are the next step.
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "collectives/device/dev_call.hpp"
#include "collectives/device/direct_call.hpp"
#include "collectives/kernels/element_ops.hpp"

namespace accord::dev {
namespace {

using kernels::reduce_elem;
using kernels::copy_elem;

template <class T>
__device__ __forceinline__ T load_cv(const T* p) {
  T v;
  if constexpr (sizeof(T) == 1) {
    const unsigned char x = *reinterpret_cast<const volatile unsigned char*>(p);
    memcpy(&v, &x, 1);
  } else if constexpr (sizeof(T) == 2) {
    const unsigned short x = __ldcv(reinterpret_cast<const unsigned short*>(p));
    memcpy(&v, &x, 2);
  } else if constexpr (sizeof(T) == 4) {
    const unsigned int x = __ldcv(reinterpret_cast<const unsigned int*>(p));
    memcpy(&v, &x, 4);
  } else {
    const unsigned long long x = __ldcv(reinterpret_cast<const unsigned long long*>(p));
    memcpy(&v, &x, 8);
  }
  return v;
}

__device__ __forceinline__ bool aligned16(const void* p) {
  return (reinterpret_cast<uintptr_t>(p) & 15) == 0;
}

// Note [Pre-multiplied sum] (dev_call.hpp): x * scalar for the operands MoveArgs::scale names;
// only sums are pre-multiplied, so only their loops carry the test.
template <class T, class Op>
__device__ __forceinline__ T premul(T x, uint32_t scale, uint32_t bit, T s) {
  if constexpr (std::is_same_v<Op, kernels::OpSum>) {
    if (scale & bit) return reduce_elem<T, kernels::OpProd>(x, s, 0);
  }
  return x;
}

// Not inlined (nor move_bytes): each of the 41 moves (10 dtypes x 4 ops, and bytes) is compiled
// once, instead of once at each of the protocols' four call sites (dev_call.hpp, direct_call.hpp).
// Inlined, ptxas took 175 s for sm_90 alone, and the build compiles three architectures; so, 43 s
// (2-core VM under load, 2026-11-28; no spills, no stack, 103 registers for the kernel). The cost
// is a call per step's move, which is a loop over up to a slot's or a chunk's bytes: not yet
// measured on a GPU (HARDWARE_RISKS.md).
template <class T, class Op>
__device__ __noinline__ void move_typed(const MoveArgs m) {
  T sv;
  memcpy(&sv, &m.scalar, sizeof(T));
  const uint32_t scale = m.scale;
  const T* a = static_cast<const T*>(m.a);
  const T* b = static_cast<const T*>(m.b);
  T* d0 = static_cast<T*>(m.dst0);
  T* d1 = static_cast<T*>(m.dst1);
  const size_t n = m.count;
  // Note [Folding in one pass] (dev_call.hpp): the divisor goes with the last operation.
  const uint32_t nmore = b != nullptr ? m.nmore : 0;
  const int32_t div_b = nmore == 0 ? m.divisor : 0;
  bool more_aligned = true;
  for (uint32_t j = 0; j < nmore; ++j) more_aligned = more_aligned && aligned16(m.more[j]);
  size_t start = 0;
  if (aligned16(a) && (b == nullptr || aligned16(b)) && aligned16(d0) && (d1 == nullptr || aligned16(d1)) &&
      more_aligned) {
    constexpr size_t kPer = 16 / sizeof(T);
    const size_t nvec = n / kPer;
    // One vector of each operand per thread at a time: unrolling this loop for every dtype
    // and op made the file take five times as long to compile (12 minutes on 2 cores); the
    // blocks of a large call (Note [Blocks]) keep enough loads in flight instead.
    const size_t stride = blockDim.x;
    size_t v = threadIdx.x;
    for (; v < nvec; v += stride) {
      uint4 x = __ldcv(reinterpret_cast<const uint4*>(a) + v);
      T ex[kPer];
      memcpy(ex, &x, 16);
      if (b != nullptr) {
        const uint4 y = __ldcv(reinterpret_cast<const uint4*>(b) + v);
        T ey[kPer];
        memcpy(ey, &y, 16);
#pragma unroll
        for (size_t k = 0; k < kPer; ++k)
          ex[k] = reduce_elem<T, Op>(premul<T, Op>(ex[k], scale, 1, sv), premul<T, Op>(ey[k], scale, 2, sv),
                                     div_b);
        for (uint32_t j = 0; j < nmore; ++j) {
          const uint4 z = __ldcv(reinterpret_cast<const uint4*>(m.more[j]) + v);
          T ez[kPer];
          memcpy(ez, &z, 16);
          const int32_t div = j + 1 == nmore ? m.divisor : 0;
#pragma unroll
          for (size_t k = 0; k < kPer; ++k) ex[k] = reduce_elem<T, Op>(ex[k], ez[k], div);
        }
      } else {
#pragma unroll
        for (size_t k = 0; k < kPer; ++k) ex[k] = copy_elem<T>(premul<T, Op>(ex[k], scale, 1, sv), m.divisor);
      }
      memcpy(&x, ex, 16);
      reinterpret_cast<uint4*>(d0)[v] = x;
      if (d1 != nullptr) reinterpret_cast<uint4*>(d1)[v] = x;
    }
    start = nvec * kPer;
  }
  for (size_t i = start + threadIdx.x; i < n; i += blockDim.x) {
    T x = premul<T, Op>(load_cv(a + i), scale, 1, sv);
    x = b != nullptr ? reduce_elem<T, Op>(x, premul<T, Op>(load_cv(b + i), scale, 2, sv), div_b)
                     : copy_elem<T>(x, m.divisor);
    for (uint32_t j = 0; j < nmore; ++j)
      x = reduce_elem<T, Op>(x, load_cv(static_cast<const T*>(m.more[j]) + i), j + 1 == nmore ? m.divisor : 0);
    d0[i] = x;
    if (d1 != nullptr) d1[i] = x;
  }
}

template <class T>
__device__ void move_op(const MoveArgs& m, int32_t op) {
  switch (op) {
    case ACCORD_PROD:
      return move_typed<T, kernels::OpProd>(m);
    case ACCORD_MAX:
      return move_typed<T, kernels::OpMax>(m);
    case ACCORD_MIN:
      return move_typed<T, kernels::OpMin>(m);
    default:  // sum, and avg (its divide is the divisor)
      return move_typed<T, kernels::OpSum>(m);
  }
}

__device__ __noinline__ void move_bytes(const MoveArgs m) {
  // A copy of any bytes: 16 at a time when everything is aligned, then byte by byte.
  const auto* a = static_cast<const unsigned char*>(m.a);
  auto* d0 = static_cast<unsigned char*>(m.dst0);
  auto* d1 = static_cast<unsigned char*>(m.dst1);
  size_t start = 0;
  if (aligned16(a) && aligned16(d0) && (d1 == nullptr || aligned16(d1))) {
    const size_t nvec = m.count / 16;
    constexpr unsigned kUnroll = 4;  // as move_typed
    const size_t stride = blockDim.x;
    size_t v = threadIdx.x;
    for (; v + (kUnroll - 1) * stride < nvec; v += kUnroll * stride) {
      uint4 x[kUnroll];
#pragma unroll
      for (unsigned u = 0; u < kUnroll; ++u) x[u] = __ldcv(reinterpret_cast<const uint4*>(a) + v + u * stride);
#pragma unroll
      for (unsigned u = 0; u < kUnroll; ++u) {
        reinterpret_cast<uint4*>(d0)[v + u * stride] = x[u];
        if (d1 != nullptr) reinterpret_cast<uint4*>(d1)[v + u * stride] = x[u];
      }
    }
    for (; v < nvec; v += stride) {
      const uint4 x = __ldcv(reinterpret_cast<const uint4*>(a) + v);
      reinterpret_cast<uint4*>(d0)[v] = x;
      if (d1 != nullptr) reinterpret_cast<uint4*>(d1)[v] = x;
    }
    start = nvec * 16;
  }
  for (size_t i = start + threadIdx.x; i < m.count; i += blockDim.x) {
    const unsigned char x = *reinterpret_cast<const volatile unsigned char*>(a + i);
    d0[i] = x;
    if (d1 != nullptr) d1[i] = x;
  }
}

struct CudaLanes {
  uint64_t* share_buf;  // __shared__
  DevStep* step_buf;    // __shared__
  uint32_t* delta_buf;  // dynamic __shared__, 2 * nranks (nblocks > 1 only)
  int32_t dtype;
  int32_t op;

  __device__ bool leader() const { return threadIdx.x == 0; }
  __device__ uint32_t block() const { return blockIdx.x; }
  __device__ uint32_t fetch_add(uint32_t* p, uint32_t v) { return atomicAdd(p, v); }
  __device__ uint32_t* deltas() { return delta_buf; }
  __device__ void sync() { __syncthreads(); }
  template <class T>
  __device__ T share(T v) {
    static_assert(sizeof(T) <= sizeof(uint64_t), "one word");
    __syncthreads();  // everyone has read the previous value
    if (leader()) memcpy(share_buf, &v, sizeof(T));
    __syncthreads();
    memcpy(&v, share_buf, sizeof(T));
    return v;
  }
  __device__ uint32_t load(const uint32_t* p) {
    const uint32_t v = *reinterpret_cast<const volatile uint32_t*>(p);
    __threadfence_system();  // what the flag guards is read after it
    return v;
  }
  __device__ void store(uint32_t* p, uint32_t v) {
    __threadfence_system();
    *reinterpret_cast<volatile uint32_t*>(p) = v;
  }
  __device__ void store64(uint64_t* p, uint64_t v) {
    __threadfence_system();
    *reinterpret_cast<volatile uint64_t*>(p) = v;
  }
  __device__ uint64_t load64(const uint64_t* p) {
    const uint64_t v = *reinterpret_cast<const volatile uint64_t*>(p);
    __threadfence_system();  // what the flag guards is read after it
    return v;
  }
  __device__ void publish() { __threadfence_system(); }
  __device__ void pause(uint32_t spins) { __nanosleep(spins < 1024 ? 32 : 1000); }
  __device__ void move(const MoveArgs& m) {
    if (m.copy_bytes) return move_bytes(m);
    switch (dtype) {
      case ACCORD_INT8:
        return move_op<int8_t>(m, op);
      case ACCORD_UINT8:
        return move_op<uint8_t>(m, op);
      case ACCORD_INT32:
        return move_op<int32_t>(m, op);
      case ACCORD_UINT32:
        return move_op<uint32_t>(m, op);
      case ACCORD_INT64:
        return move_op<int64_t>(m, op);
      case ACCORD_UINT64:
        return move_op<uint64_t>(m, op);
      case ACCORD_FLOAT16:
        return move_op<kernels::Half>(m, op);
      case ACCORD_FLOAT64:
        return move_op<double>(m, op);
      case ACCORD_BFLOAT16:
        return move_op<kernels::BFloat16>(m, op);
      default:
        return move_op<float>(m, op);
    }
  }
  __device__ DevStep step(const DevStep* p) {
    __syncthreads();  // everyone has read the previous step
    if (leader()) *step_buf = *p;
    __syncthreads();
    return *step_buf;
  }
};

// The parameter is __grid_constant__ (CUDA 11.7+, sm_70+): CallRunner keeps references into
// it (p.call, p.steps), and taking the address of a plain by-value parameter makes every
// thread copy all of DevLaunch (896 bytes) into its local memory (an 824-832 byte stack
// frame, close to the 1 KiB default stack; growing the stack at a launch waits for the
// device, Note [Warm-up launch] in engine.cpp). Grid constants are read in place.
__global__ void __launch_bounds__(kCollectiveThreads)
    collective_kernel_fn(const __grid_constant__ DevLaunch p) {
  __shared__ uint64_t share_buf;
  __shared__ DevStep step_buf;
  extern __shared__ uint32_t delta_buf[];  // Note [Blocks]: launched with 8 * nranks bytes
  if (p.direct.proto != kProtoFifo) {  // Note [Direct protocol]: no FIFO, no counts
    CudaLanes lanes{&share_buf, &step_buf, nullptr, p.call.dtype, p.call.op};
    DirectRunner<CudaLanes> direct(p.call, p.direct, lanes);
    (void)direct.run();  // failures are in DevCtl
    return;
  }
  if (p.call.nblocks > 1) {
    for (int32_t i = threadIdx.x; i < 2 * p.call.nranks; i += blockDim.x) delta_buf[i] = 0;
    __syncthreads();
  }
  CudaLanes lanes{&share_buf, &step_buf, delta_buf, p.call.dtype, p.call.op};
  CallRunner<CudaLanes> runner(p.call, p.call.steps != nullptr ? p.call.steps : p.steps, lanes);
  (void)runner.run();  // failures are in DevCtl
}

}  // namespace

const void* collective_kernel_cuda();  // declared in dev_kernels.hpp, which nvcc need not read
const void* collective_kernel_cuda() { return reinterpret_cast<const void*>(&collective_kernel_fn); }

}  // namespace accord::dev
