// Element arithmetic for every dtype x op, written once for host C++ and CUDA device code.
// The host kernels (reduce_isa.cpp) use these functions for their scalar heads and tails and
// as the meaning their vector bodies must match bit for bit; the CUDA kernels use them as is.
// Everything is branch-light scalar code of a few instructions per element.
//
// Rules (see also reduce_kernels.hpp):
//  - float16 / bfloat16 are widened to float32 (exactly), combined in float32 and rounded back
//    to nearest even once, after the optional divide. The conversions are written here, bit
//    exact, so that no platform's half support decides a result:
//      f16 -> f32: exact, subnormals included; a NaN keeps its payload and becomes quiet
//                  (what F16C's vcvtph2ps does).
//      f32 -> f16: round to nearest even; overflow goes to infinity; a NaN keeps the top 10 bits
//                  of its payload and becomes quiet (what vcvtps2ph does).
//      bf16 -> f32: exact (a shift).
//      f32 -> bf16: round to nearest even; a NaN keeps the top 7 bits of its payload and becomes
//                  quiet. Denormals are kept (unlike AVX512_BF16's vcvtneps2bf16, which flushes
//                  them, so that instruction is not used).
//  - Integer sum and prod wrap: computed in the unsigned type, so there is no signed overflow.
//  - Integer divide (avg) truncates toward zero (C division), computed in 64 bits so that a
//    divisor wider than the element type is still right.
//  - Note [Canonical NaN]: when a float sum, product or divide gives NaN, the result is the
//    canonical quiet NaN (positive, empty payload: 0x7fc00000, 0x7ff8000000000000, and so
//    0x7e00 / 0x7fc0 for the halves). Which input's payload x86 propagates depends on operand
//    order, which the compiler may swap in a commutative add; GPUs return their own NaN. Fixing
//    it costs one compare and select and makes results identical on every variant and device.
//  - Floating max / min (Note [NaN in max and min]): if either operand is NaN the result is NaN,
//    and it is a when a is NaN, else b (the first NaN operand's payload survives). Otherwise the
//    larger (smaller) value; for equal operands max returns the bitwise AND and min the bitwise
//    OR of the two, so max(+0, -0) = +0 and min(+0, -0) = -0 in either order. So max and min are
//    commutative for every non-NaN input, and propagate NaN like sum does.
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "include/accord/accord.h"

#if defined(__CUDACC__)
#define ACCORD_HD __host__ __device__
#define ACCORD_HD_INLINE __host__ __device__ __forceinline__
#else
#define ACCORD_HD
#define ACCORD_HD_INLINE inline __attribute__((always_inline))
#endif

// The host kernels compile this header once per ISA (-mavx2, -mavx512f ...). Inline functions
// of one name from those objects would be merged by the linker, which could then call an
// AVX-512 copy on a CPU without AVX-512; an ISA-specific inline namespace keeps them apart.
#define ACCORD_EOPS_CAT2(a, b) a##b
#define ACCORD_EOPS_CAT(a, b) ACCORD_EOPS_CAT2(a, b)
#if defined(__CUDACC__)
#define ACCORD_EOPS_NS eops_cuda
#elif defined(ACCORD_KERNEL_ISA)
#define ACCORD_EOPS_NS ACCORD_EOPS_CAT(eops_, ACCORD_KERNEL_ISA)
#else
#define ACCORD_EOPS_NS eops_generic
#endif

namespace accord::kernels {
inline namespace ACCORD_EOPS_NS {

// Storage types of the two 16-bit floats: distinct types, so templates can tell them apart.
struct Half {
  uint16_t bits;
};
struct BFloat16 {
  uint16_t bits;
};

ACCORD_HD_INLINE uint32_t f32_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
#endif
}

ACCORD_HD_INLINE float f32_from_bits(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
#endif
}

ACCORD_HD_INLINE uint64_t f64_bits(double d) {
#if defined(__CUDA_ARCH__)
  return static_cast<uint64_t>(__double_as_longlong(d));
#else
  uint64_t u;
  memcpy(&u, &d, sizeof u);
  return u;
#endif
}

ACCORD_HD_INLINE double f64_from_bits(uint64_t u) {
#if defined(__CUDA_ARCH__)
  return __longlong_as_double(static_cast<long long>(u));
#else
  double d;
  memcpy(&d, &u, sizeof d);
  return d;
#endif
}

// ---- float16 <-> float32 ------------------------------------------------------------------

ACCORD_HD_INLINE float f16_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t out;
  if (exp == 0x1f) {
    out = sign | 0x7f800000u | (mant << 13) | (mant ? 0x00400000u : 0u);  // inf, or quiet NaN
  } else if (exp != 0) {
    out = sign | ((exp + (127 - 15)) << 23) | (mant << 13);
  } else if (mant == 0) {
    out = sign;  // +-0
  } else {
    // Subnormal: value = mant * 2^-24. Shift the leading 1 up to the implicit bit.
    int e = 127 - 15 + 1;
    while ((mant & 0x400u) == 0) {
      mant <<= 1;
      --e;
    }
    out = sign | (static_cast<uint32_t>(e) << 23) | ((mant & 0x3ffu) << 13);
  }
  return f32_from_bits(out);
}

ACCORD_HD_INLINE uint16_t f32_to_f16(float f) {
  const uint32_t x = f32_bits(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t ax = x & 0x7fffffffu;
  if (ax > 0x7f800000u) {  // NaN: keep the payload's top bits, set the quiet bit
    return static_cast<uint16_t>(sign | 0x7e00u | ((ax >> 13) & 0x3ffu));
  }
  if (ax >= 0x477ff000u) {  // >= 65520 (max half + half an ulp) rounds to infinity
    return static_cast<uint16_t>(sign | 0x7c00u);
  }
  if (ax >= 0x38800000u) {  // >= 2^-14: normal half
    // Rebias the exponent, then round the 13 dropped bits to nearest even. A carry out of the
    // mantissa correctly bumps the exponent (up to infinity, excluded above).
    const uint32_t r = ax - ((127u - 15u) << 23);
    const uint32_t odd = (r >> 13) & 1u;
    return static_cast<uint16_t>(sign | ((r + 0xfffu + odd) >> 13));
  }
  if (ax < 0x33000000u) {  // < 2^-25 (half the smallest subnormal): rounds to zero
    return static_cast<uint16_t>(sign);
  }
  // Subnormal half: value / 2^-24, rounded to nearest even. The float's exponent is in [102, 112].
  const uint32_t e = ax >> 23;
  const uint32_t m = (ax & 0x7fffffu) | 0x800000u;  // 24-bit significand, value = m * 2^(e-150)
  const uint32_t shift = 126u - e;                  // m * 2^(e-150) / 2^-24 = m >> (126 - e)
  const uint32_t q = m >> shift;
  const uint32_t rem = m & ((1u << shift) - 1u);
  const uint32_t half = 1u << (shift - 1u);
  const uint32_t up = (rem > half || (rem == half && (q & 1u))) ? 1u : 0u;
  return static_cast<uint16_t>(sign | (q + up));  // q + up == 0x400 becomes the smallest normal
}

// ---- bfloat16 <-> float32 -----------------------------------------------------------------

ACCORD_HD_INLINE float bf16_to_f32(uint16_t h) {
  return f32_from_bits(static_cast<uint32_t>(h) << 16);
}

ACCORD_HD_INLINE uint16_t f32_to_bf16(float f) {
  const uint32_t x = f32_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x0040u);
  return static_cast<uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

// ---- element traits: storage type -> compute type ----------------------------------------

template <class T>
struct ElemTraits {  // integers and float32 / float64: computed as themselves
  using Compute = T;
  ACCORD_HD_INLINE static Compute load(T v) { return v; }
  ACCORD_HD_INLINE static T store(Compute v) { return v; }
};
template <>
struct ElemTraits<Half> {
  using Compute = float;
  ACCORD_HD_INLINE static float load(Half v) { return f16_to_f32(v.bits); }
  ACCORD_HD_INLINE static Half store(float v) { return Half{f32_to_f16(v)}; }
};
template <>
struct ElemTraits<BFloat16> {
  using Compute = float;
  ACCORD_HD_INLINE static float load(BFloat16 v) { return bf16_to_f32(v.bits); }
  ACCORD_HD_INLINE static BFloat16 store(float v) { return BFloat16{f32_to_bf16(v)}; }
};

// Unsigned type of at least int's width, so that narrow types do not promote to signed int.
template <class C>
using WrapType =
    std::conditional_t<(sizeof(C) < sizeof(unsigned)), unsigned, std::make_unsigned_t<C>>;

// ---- ops on the compute type -------------------------------------------------------------

// Note [Canonical NaN] (file comment).
inline constexpr uint32_t kCanonicalNaN32 = 0x7fc00000u;
inline constexpr uint64_t kCanonicalNaN64 = 0x7ff8000000000000ull;

template <class C>
ACCORD_HD_INLINE C canonical_nan(C x) {
  if constexpr (sizeof(C) == 4) {
    return x != x ? f32_from_bits(kCanonicalNaN32) : x;
  } else {
    return x != x ? f64_from_bits(kCanonicalNaN64) : x;
  }
}

struct OpSum {
  template <class C>
  ACCORD_HD_INLINE static C apply(C a, C b) {
    if constexpr (std::is_integral_v<C>) {
      using U = WrapType<C>;
      return static_cast<C>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b)));
    } else {
      return canonical_nan(a + b);
    }
  }
};

struct OpProd {
  template <class C>
  ACCORD_HD_INLINE static C apply(C a, C b) {
    if constexpr (std::is_integral_v<C>) {
      using U = WrapType<C>;
      return static_cast<C>(static_cast<U>(static_cast<U>(a) * static_cast<U>(b)));
    } else {
      return canonical_nan(a * b);
    }
  }
};

// Note [NaN in max and min]: see the file comment. In bits: pick a when a wins or a is NaN,
// b when b wins or b is NaN, and AND (max) / OR (min) of the bits when equal.
struct OpMax {
  template <class C>
  ACCORD_HD_INLINE static C apply(C a, C b) {
    if constexpr (std::is_integral_v<C>) {
      return a > b ? a : b;
    } else if constexpr (sizeof(C) == 4) {
      if (a > b || a != a) return a;
      return a == b ? f32_from_bits(f32_bits(a) & f32_bits(b)) : b;
    } else {
      if (a > b || a != a) return a;
      return a == b ? f64_from_bits(f64_bits(a) & f64_bits(b)) : b;
    }
  }
};

struct OpMin {
  template <class C>
  ACCORD_HD_INLINE static C apply(C a, C b) {
    if constexpr (std::is_integral_v<C>) {
      return a < b ? a : b;
    } else if constexpr (sizeof(C) == 4) {
      if (a < b || a != a) return a;
      return a == b ? f32_from_bits(f32_bits(a) | f32_bits(b)) : b;
    } else {
      if (a < b || a != a) return a;
      return a == b ? f64_from_bits(f64_bits(a) | f64_bits(b)) : b;
    }
  }
};

// The avg post-op: x / divisor, truncating toward zero for integers.
template <class C>
ACCORD_HD_INLINE C divide(C x, int divisor) {
  if constexpr (std::is_integral_v<C> && std::is_signed_v<C>) {
    return static_cast<C>(static_cast<int64_t>(x) / static_cast<int64_t>(divisor));
  } else if constexpr (std::is_integral_v<C>) {
    return static_cast<C>(static_cast<uint64_t>(x) / static_cast<uint64_t>(divisor));
  } else {
    return canonical_nan(x / static_cast<C>(divisor));
  }
}

// ---- whole elements: what every kernel computes for one element -------------------------

// a op b, then / divisor when divisor > 1.
template <class T, class Op>
ACCORD_HD_INLINE T reduce_elem(T a, T b, int divisor) {
  using Tr = ElemTraits<T>;
  auto r = Op::apply(Tr::load(a), Tr::load(b));
  if (divisor > 1) r = divide(r, divisor);
  return Tr::store(r);
}

// The b == nullptr case: a, then / divisor when divisor > 1 (halves are still rounded through
// float32, which only changes signalling NaNs into quiet ones).
template <class T>
ACCORD_HD_INLINE T copy_elem(T a, int divisor) {
  using Tr = ElemTraits<T>;
  if (divisor <= 1) return a;
  return Tr::store(divide(Tr::load(a), divisor));
}

// Storage type of each dtype, and op struct of each op (avg is sum plus the divide post-op).
template <accord_datatype_t D>
struct DtypeType;
template <accord_red_op_t O>
struct OpType;
// clang-format off
template <> struct DtypeType<ACCORD_INT8> { using type = int8_t; };
template <> struct DtypeType<ACCORD_UINT8> { using type = uint8_t; };
template <> struct DtypeType<ACCORD_INT32> { using type = int32_t; };
template <> struct DtypeType<ACCORD_UINT32> { using type = uint32_t; };
template <> struct DtypeType<ACCORD_INT64> { using type = int64_t; };
template <> struct DtypeType<ACCORD_UINT64> { using type = uint64_t; };
template <> struct DtypeType<ACCORD_FLOAT16> { using type = Half; };
template <> struct DtypeType<ACCORD_FLOAT32> { using type = float; };
template <> struct DtypeType<ACCORD_FLOAT64> { using type = double; };
template <> struct DtypeType<ACCORD_BFLOAT16> { using type = BFloat16; };
template <> struct OpType<ACCORD_SUM> { using type = OpSum; };
template <> struct OpType<ACCORD_PROD> { using type = OpProd; };
template <> struct OpType<ACCORD_MAX> { using type = OpMax; };
template <> struct OpType<ACCORD_MIN> { using type = OpMin; };
template <> struct OpType<ACCORD_AVG> { using type = OpSum; };  // the divisor is the post-op
// clang-format on

}  // namespace ACCORD_EOPS_NS
}  // namespace accord::kernels
