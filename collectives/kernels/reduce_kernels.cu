// CUDA reduction kernels: every dtype x op, element arithmetic from element_ops.hpp (shared
// with the host kernels, so results match the host's bits; halves use its integer
// conversions rather than __half's, whose NaN results differ). One grid-stride kernel per
// dtype x op and access width: 16-byte vectors when every pointer is 16-byte aligned, one
// element at a time when only element-aligned, byte copies in and out otherwise.
//
// Cost: memory bound; each element is read once from a (and b) and written once to dst0 (and
// dst1). Built for sm_70, sm_75, sm_80, sm_90 and compute_90 PTX (collectives/kernels/meson.build).
//
// Note [Volta from CUDA 13]: CUDA 13's nvcc cannot target sm_70. Its compute_75 PTX of this
// file asks for sm_75 only in its `.target` line (no instruction here needs more than sm_53;
// bfloat16 arithmetic goes through float below sm_80), so ptx_to_sm70.sh retargets it and a
// CUDA 12 ptxas assembles the sm_70 cubin, which nvcc's fatbinary step then packs beside the
// others. The kernel names come from the same front end, so the host stub's registrations find
// them (the test CudaFatbin.EveryCubinHasTheSameKernels checks it). What was never checked: a
// Volta GPU running it; NVIDIA's R580 driver still runs Volta, but no GPU was at hand.
#include <cstdint>
#include <cstring>

#include "collectives/kernels/cuda_kernels.hpp"
#include "collectives/kernels/element_ops.hpp"

namespace accord::kernels {
namespace {

constexpr int kThreads = 256;
constexpr int kMaxBlocks = 4096;

enum class Access { kVec16, kElem, kBytes };

template <class T, class Op>
__device__ __forceinline__ T combine(const ReduceArgs& args, T a, const void* b, size_t i) {
  if (b == nullptr) return copy_elem<T>(a, args.divisor);
  return reduce_elem<T, Op>(a, static_cast<const T*>(b)[i], args.divisor);
}

template <class T>
__device__ __forceinline__ void put(T* p, T v, bool streaming) {
  if (streaming) {
    if constexpr (sizeof(T) == 8) {
      __stcs(reinterpret_cast<unsigned long long*>(p), *reinterpret_cast<unsigned long long*>(&v));
    } else if constexpr (sizeof(T) == 4) {
      __stcs(reinterpret_cast<unsigned int*>(p), *reinterpret_cast<unsigned int*>(&v));
    } else {
      *p = v;  // no cache-streaming store below 32 bits
    }
  } else {
    *p = v;
  }
}

// 16 bytes at a time: each thread loads a uint4 from a (and b), combines its elements, stores.
template <class T, class Op>
__global__ void reduce_vec16(ReduceArgs args) {
  constexpr size_t kPer = 16 / sizeof(T);
  const size_t nvec = args.count / kPer;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  const auto* a4 = static_cast<const uint4*>(args.a);
  const auto* b4 = static_cast<const uint4*>(args.b);
  auto* d0 = static_cast<uint4*>(args.dst0);
  auto* d1 = static_cast<uint4*>(args.dst1);
  for (size_t v = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; v < nvec;
       v += stride) {
    uint4 x = a4[v];
    T ex[kPer];
    memcpy(ex, &x, 16);
    if (b4 != nullptr) {
      const uint4 y = b4[v];
      T ey[kPer];
      memcpy(ey, &y, 16);
#pragma unroll
      for (size_t k = 0; k < kPer; ++k) ex[k] = reduce_elem<T, Op>(ex[k], ey[k], args.divisor);
    } else {
#pragma unroll
      for (size_t k = 0; k < kPer; ++k) ex[k] = copy_elem<T>(ex[k], args.divisor);
    }
    memcpy(&x, ex, 16);
    if (args.dst0_streaming) {
      __stcs(d0 + v, x);
    } else {
      d0[v] = x;
    }
    if (d1 != nullptr) d1[v] = x;
  }
  // The tail (fewer than kPer elements), one per thread of the first block.
  const size_t i = nvec * kPer + threadIdx.x;
  if (blockIdx.x == 0 && i < args.count) {
    const T r = combine<T, Op>(args, static_cast<const T*>(args.a)[i], args.b, i);
    put(static_cast<T*>(args.dst0) + i, r, args.dst0_streaming);
    if (d1 != nullptr) static_cast<T*>(args.dst1)[i] = r;
  }
}

// One element at a time: element-aligned (kElem) or arbitrary (kBytes) pointers.
template <class T, class Op, Access kAccess>
__global__ void reduce_scalar(ReduceArgs args) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < args.count;
       i += stride) {
    if constexpr (kAccess == Access::kElem) {
      const T r = combine<T, Op>(args, static_cast<const T*>(args.a)[i], args.b, i);
      put(static_cast<T*>(args.dst0) + i, r, args.dst0_streaming);
      if (args.dst1 != nullptr) static_cast<T*>(args.dst1)[i] = r;
    } else {
      T x;
      memcpy(&x, static_cast<const char*>(args.a) + i * sizeof(T), sizeof(T));
      if (args.b != nullptr) {
        T y;
        memcpy(&y, static_cast<const char*>(args.b) + i * sizeof(T), sizeof(T));
        x = reduce_elem<T, Op>(x, y, args.divisor);
      } else {
        x = copy_elem<T>(x, args.divisor);
      }
      memcpy(static_cast<char*>(args.dst0) + i * sizeof(T), &x, sizeof(T));
      if (args.dst1 != nullptr)
        memcpy(static_cast<char*>(args.dst1) + i * sizeof(T), &x, sizeof(T));
    }
  }
}

bool aligned_to(const ReduceArgs& args, uintptr_t align) {
  const auto ok = [align](const void* p) {
    return p == nullptr || reinterpret_cast<uintptr_t>(p) % align == 0;
  };
  return ok(args.dst0) && ok(args.dst1) && ok(args.a) && ok(args.b);
}

unsigned grid_for(size_t items) {
  const size_t blocks = (items + kThreads - 1) / kThreads;
  return static_cast<unsigned>(blocks < 1 ? 1 : (blocks > kMaxBlocks ? kMaxBlocks : blocks));
}

template <class T, class Op>
cudaError_t launch(const ReduceArgs& args, cudaStream_t stream) {
  if (aligned_to(args, 16)) {
    constexpr size_t kPer = 16 / sizeof(T);
    // At least one block, so that block 0 also does the tail when there is no full vector.
    reduce_vec16<T, Op><<<grid_for(args.count / kPer), kThreads, 0, stream>>>(args);
  } else if (aligned_to(args, alignof(T))) {
    reduce_scalar<T, Op, Access::kElem><<<grid_for(args.count), kThreads, 0, stream>>>(args);
  } else {
    reduce_scalar<T, Op, Access::kBytes><<<grid_for(args.count), kThreads, 0, stream>>>(args);
  }
  return cudaGetLastError();
}

template <class T>
cudaError_t launch_op(const ReduceArgs& args, accord_red_op_t op, cudaStream_t stream) {
  switch (op) {
    case ACCORD_SUM:
    case ACCORD_AVG:
      return launch<T, OpSum>(args, stream);  // avg: the divisor is the post-op
    case ACCORD_PROD:
      return launch<T, OpProd>(args, stream);
    case ACCORD_MAX:
      return launch<T, OpMax>(args, stream);
    case ACCORD_MIN:
      return launch<T, OpMin>(args, stream);
    default:
      return cudaErrorInvalidValue;
  }
}

}  // namespace

cudaError_t cuda_reduce(const ReduceArgs& args, accord_datatype_t dtype, accord_red_op_t op,
                        cudaStream_t stream) {
  if (args.count == 0) return cudaSuccess;
  if (args.dst0 == nullptr || args.a == nullptr) return cudaErrorInvalidValue;
  switch (dtype) {
    case ACCORD_INT8:
      return launch_op<int8_t>(args, op, stream);
    case ACCORD_UINT8:
      return launch_op<uint8_t>(args, op, stream);
    case ACCORD_INT32:
      return launch_op<int32_t>(args, op, stream);
    case ACCORD_UINT32:
      return launch_op<uint32_t>(args, op, stream);
    case ACCORD_INT64:
      return launch_op<int64_t>(args, op, stream);
    case ACCORD_UINT64:
      return launch_op<uint64_t>(args, op, stream);
    case ACCORD_FLOAT16:
      return launch_op<Half>(args, op, stream);
    case ACCORD_FLOAT32:
      return launch_op<float>(args, op, stream);
    case ACCORD_FLOAT64:
      return launch_op<double>(args, op, stream);
    case ACCORD_BFLOAT16:
      return launch_op<BFloat16>(args, op, stream);
    default:
      return cudaErrorInvalidValue;
  }
}

}  // namespace accord::kernels
