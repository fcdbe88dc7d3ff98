// The host reduction kernels, one source built once per ISA: -DACCORD_KERNEL_ISA=sse2 (the
// x86-64 baseline), avx2 (+F16C) and avx512 (F/BW/VL), or generic off x86. Each build exports
// isa_<name>::kernels(), a table of every dtype x op plus copy; reduce_dispatch.cpp picks one.
//
// Vector bodies use GCC vector extensions at the ISA's register width (16/32/64 bytes), so one
// text serves every width; F16C converts halves where present, integer shifts do bfloat16 and,
// on SSE2, halves. Every vector body computes exactly what element_ops.hpp computes per element
// (no FMA: built with -ffp-contract=off; no reassociation: element-wise only), and heads and
// tails use element_ops.hpp itself, so every variant gives the same bits.
//
// Cost: one pass, reading a and b once and writing dst0 (and dst1) once. With dst1 or streaming,
// work goes through a 4 KiB stack block (L1) that is then copied out: the extra L1 traffic is
// small next to the memory traffic that streaming saves (an ordinary store first reads the line
// it overwrites; see shared/research/host-baselines.md).
#include "collectives/kernels/reduce_isa.hpp"

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "collectives/kernels/element_ops.hpp"

#if defined(__SSE2__)
#include <immintrin.h>
#endif

#ifndef ACCORD_KERNEL_ISA
#error "build with -DACCORD_KERNEL_ISA=sse2|avx2|avx512|generic"
#endif

#define ACCORD_ISA_STR2(x) #x
#define ACCORD_ISA_STR(x) ACCORD_ISA_STR2(x)

// isa_sse2, isa_avx2 ...: one namespace per build, so the objects link together.
#define ACCORD_ISA_NS ACCORD_EOPS_CAT(isa_, ACCORD_KERNEL_ISA)

namespace accord::kernels {
namespace ACCORD_ISA_NS {
namespace {

#if defined(__AVX512F__) && defined(__AVX512BW__)
constexpr size_t kVecBytes = 64;
#elif defined(__AVX2__)
constexpr size_t kVecBytes = 32;
#else
constexpr size_t kVecBytes = 16;
#endif

template <class E, size_t B>
struct VT {
  typedef E type __attribute__((vector_size(B)));
};
template <class E>
using Vec = typename VT<E, kVecBytes>::type;
template <size_t S>
using SInt = std::conditional_t<S == 1, int8_t, std::conditional_t<S == 4, int32_t, int64_t>>;
template <size_t S>
using UInt = std::make_unsigned_t<SInt<S>>;

using F32V = Vec<float>;
using U32V = Vec<uint32_t>;
using I32V = Vec<int32_t>;
using U16H = typename VT<uint16_t, kVecBytes / 2>::type;  // as many u16 lanes as F32V has lanes

template <class V>
inline V loadu(const uint8_t* p) {
  V v;
  memcpy(&v, p, sizeof v);
  return v;
}
template <class V>
inline void storeu(uint8_t* p, V v) {
  memcpy(p, &v, sizeof v);
}

// ---- 16-bit floats, a vector of F32V's lane count at a time ------------------------------

// Integer-only f16 -> f32 except for subnormals, which go through an exact int -> float
// conversion and a multiply with a normal result, so FTZ/DAZ modes cannot change them.
inline F32V f16_to_f32_generic(U32V h) {
  const U32V sign = (h & 0x8000u) << 16;
  const U32V em = h & 0x7fffu;
  const U32V normal = (em << 13) + ((127u - 15u) << 23);
  const U32V quiet = (U32V)(em > 0x7c00u) & 0x00400000u;
  const U32V infnan = (em << 13) | 0x7f800000u | quiet;
  const F32V sub = __builtin_convertvector((I32V)em, F32V) * 0x1p-24f;
  const U32V r = em >= 0x7c00u ? infnan : (em < 0x400u ? (U32V)sub : normal);
  return (F32V)(r | sign);
}

// Round to nearest even as element_ops.hpp's f32_to_f16; subnormals by the magic-number add
// (the hardware's RNE does the rounding; its inputs and result are normal floats).
inline U32V f32_to_f16_generic(F32V f) {
  const U32V x = (U32V)f;
  const U32V sign = (x >> 16) & 0x8000u;
  const U32V ax = x & 0x7fffffffu;
  const U32V nan = 0x7e00u | ((ax >> 13) & 0x3ffu);
  const U32V r = ax - ((127u - 15u) << 23);
  const U32V normal = (r + 0xfffu + ((r >> 13) & 1u)) >> 13;
  const F32V magic = (F32V)(U32V{} + (126u << 23));  // 0.5f: ulp 2^-24 = the half subnormal step
  const U32V sub = (U32V)((F32V)ax + magic) - (126u << 23);
  const U32V out = ax > 0x7f800000u    ? nan
                   : ax >= 0x477ff000u ? U32V{} + 0x7c00u
                   : ax >= 0x38800000u ? normal
                                       : sub;
  return out | sign;
}

inline F32V load_half(const uint8_t* p) {
#if defined(__AVX512F__)
  // The maskz forms: GCC 12 warns of the unmasked ones' undefined pass-through operand.
  return (F32V)_mm512_maskz_cvtph_ps(0xffff,
                                     _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
#elif defined(__F16C__) && defined(__AVX2__)
  return (F32V)_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
#else
  return f16_to_f32_generic(__builtin_convertvector(loadu<U16H>(p), U32V));
#endif
}

// f32 lanes -> the halves' bits, for an ordinary or a streaming store.
inline U16H pack_half(F32V v) {
#if defined(__AVX512F__)
  return (U16H)_mm512_maskz_cvtps_ph(0xffff, (__m512)v, _MM_FROUND_TO_NEAREST_INT);
#elif defined(__F16C__) && defined(__AVX2__)
  return (U16H)_mm256_cvtps_ph((__m256)v, _MM_FROUND_TO_NEAREST_INT);
#else
  return __builtin_convertvector(f32_to_f16_generic(v), U16H);
#endif
}

inline F32V load_bf16(const uint8_t* p) {
  return (F32V)(__builtin_convertvector(loadu<U16H>(p), U32V) << 16);
}

inline U16H pack_bf16(F32V v) {
  const U32V x = (U32V)v;
  const U32V nan = (x >> 16) | 0x40u;
  const U32V rne = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
  return __builtin_convertvector((x & 0x7fffffffu) > 0x7f800000u ? nan : rne, U16H);
}

// ---- lanes: how a storage type is loaded into and stored from a compute vector ----------

// V: the compute vector (kN lanes of E); S: the stored bits of kN elements (pack(V)).
template <class T>
struct Lanes {  // integers, float, double: the vector is of the type itself
  using E = T;
  using V = Vec<T>;
  using S = V;
  static constexpr size_t kN = kVecBytes / sizeof(T);
  static V load(const uint8_t* p) { return loadu<V>(p); }
  static S pack(V v) { return v; }
  static void store(uint8_t* p, V v) { storeu(p, v); }
};
template <>
struct Lanes<Half> {
  using E = float;
  using V = F32V;
  using S = U16H;
  static constexpr size_t kN = kVecBytes / 4;
  static V load(const uint8_t* p) { return load_half(p); }
  static S pack(V v) { return pack_half(v); }
  static void store(uint8_t* p, V v) { storeu(p, pack(v)); }
};
template <>
struct Lanes<BFloat16> {
  using E = float;
  using V = F32V;
  using S = U16H;
  static constexpr size_t kN = kVecBytes / 4;
  static V load(const uint8_t* p) { return load_bf16(p); }
  static S pack(V v) { return pack_bf16(v); }
  static void store(uint8_t* p, V v) { storeu(p, pack(v)); }
};

#if defined(__SSE2__)
// A non-temporal store of one packed vector; p is aligned to its size.
template <class S>
inline void stream_store(uint8_t* p, S v) {
  if constexpr (sizeof(S) == 64) {
    _mm512_stream_si512(reinterpret_cast<__m512i*>(p), (__m512i)v);
  } else if constexpr (sizeof(S) == 32) {
    _mm256_stream_si256(reinterpret_cast<__m256i*>(p), (__m256i)v);
  } else if constexpr (sizeof(S) == 16) {
    _mm_stream_si128(reinterpret_cast<__m128i*>(p), (__m128i)v);
  } else {
    static_assert(sizeof(S) == 8);
    long long x;
    memcpy(&x, &v, 8);
    _mm_stream_si64(reinterpret_cast<long long*>(p), x);
  }
}
#endif

// ---- ops on vectors: the same meaning as element_ops.hpp's ops --------------------------

// Note [Canonical NaN] in element_ops.hpp.
template <class E, class V>
inline V vcanon(V r) {
  using I = typename VT<SInt<sizeof(E)>, sizeof(V)>::type;
  const I canon =
      I{} + static_cast<SInt<sizeof(E)>>(sizeof(E) == 4 ? kCanonicalNaN32 : kCanonicalNaN64);
  return (V)(r != r ? canon : (I)r);
}

template <class Op, class E, class V>
inline V vapply(V a, V b) {
  using U = typename VT<UInt<sizeof(E)>, sizeof(V)>::type;
  using I = typename VT<SInt<sizeof(E)>, sizeof(V)>::type;
  if constexpr (std::is_same_v<Op, OpSum>) {
    if constexpr (std::is_integral_v<E>) {
      return (V)((U)a + (U)b);  // wraps, no signed overflow
    } else {
      return vcanon<E>(a + b);
    }
  } else if constexpr (std::is_same_v<Op, OpProd>) {
    if constexpr (std::is_integral_v<E>) {
      return (V)((U)a * (U)b);
    } else {
      return vcanon<E>(a * b);
    }
  } else if constexpr (std::is_integral_v<E>) {
    if constexpr (std::is_same_v<Op, OpMax>) {
      return a > b ? a : b;
    } else {
      return a < b ? a : b;
    }
  } else {  // Note [NaN in max and min] in element_ops.hpp
    const I ai = (I)a, bi = (I)b;
    if constexpr (std::is_same_v<Op, OpMax>) {
      return (V)(((a > b) | (a != a)) ? ai : (a == b ? (ai & bi) : bi));
    } else {
      return (V)(((a < b) | (a != a)) ? ai : (a == b ? (ai | bi) : bi));
    }
  }
}

// Integer division has no vector instruction and narrow types would need widening; integer
// averages are rare, so they take the scalar path (which element_ops.hpp defines anyway).
template <class T>
constexpr bool kVectorDivide = !std::is_integral_v<T>;

template <class T>
inline T load_elem(const uint8_t* p) {
  T v;
  memcpy(&v, p, sizeof v);
  return v;
}
template <class T>
inline void store_elem(uint8_t* p, T v) {
  memcpy(p, &v, sizeof v);
}

// out[i] = a[i] op b[i] (then / divisor when divisor > 1), for i < n. out may equal a or b.
template <class T, class Op>
void compute(uint8_t* out, const uint8_t* a, const uint8_t* b, size_t n, int divisor) {
  using L = Lanes<T>;
  using E = typename L::E;
  constexpr size_t kN = L::kN;
  constexpr size_t kS = sizeof(T);
  constexpr size_t kUnroll = 4;
  size_t i = 0;
  if (divisor <= 1) {
    for (; i + kUnroll * kN <= n; i += kUnroll * kN) {
      typename L::V r[kUnroll];
      for (size_t k = 0; k < kUnroll; ++k) {
        r[k] = vapply<Op, E>(L::load(a + (i + k * kN) * kS), L::load(b + (i + k * kN) * kS));
      }
      for (size_t k = 0; k < kUnroll; ++k) L::store(out + (i + k * kN) * kS, r[k]);
    }
    for (; i + kN <= n; i += kN) {
      L::store(out + i * kS, vapply<Op, E>(L::load(a + i * kS), L::load(b + i * kS)));
    }
  } else if constexpr (kVectorDivide<T>) {
    const E d = static_cast<E>(divisor);
    for (; i + kN <= n; i += kN) {
      L::store(out + i * kS,
               vcanon<E>(vapply<Op, E>(L::load(a + i * kS), L::load(b + i * kS)) / d));
    }
  }
  for (; i < n; ++i) {
    store_elem(out + i * kS,
               reduce_elem<T, Op>(load_elem<T>(a + i * kS), load_elem<T>(b + i * kS), divisor));
  }
}

// out[i] = a[i] / divisor (divisor > 1): the b == nullptr case with a post-op.
template <class T>
void divide_copy(uint8_t* out, const uint8_t* a, size_t n, int divisor) {
  using L = Lanes<T>;
  constexpr size_t kN = L::kN;
  constexpr size_t kS = sizeof(T);
  size_t i = 0;
  if constexpr (kVectorDivide<T>) {
    const typename L::E d = static_cast<typename L::E>(divisor);
    for (; i + kN <= n; i += kN)
      L::store(out + i * kS, vcanon<typename L::E>(L::load(a + i * kS) / d));
  }
  for (; i < n; ++i) store_elem(out + i * kS, copy_elem<T>(load_elem<T>(a + i * kS), divisor));
}

// ---- ordinary copies ----------------------------------------------------------------------

// Note [No rep movsb]: glibc's memcpy copies sizes from a few KiB up to its non-temporal
// threshold (a share of the L3) with `rep movsb`. On the project VM's AMD EPYC that ran a
// 2-rank ring all-reduce at 256 KiB and 1 MiB at 1.4-2.4 GB/s, against 5.5-9.8 GB/s with this
// loop of vector loads and stores (GLIBC_TUNABLES=glibc.cpu.x86_rep_movsb_threshold=100000000
// showed the same gain). Not yet measured on a CPU where `rep movsb` is fast (the earlier
// AVX-512 VM). Small copies stay with memcpy. That measurement changed every copy, into
// slots and out of them. Copies into a slot now use `rep movsb` after all (Note [Copies into a
// peer's slot], below), where it gains 1.1-3.7x; this loop keeps the rest. Copying out of a slot
// into a buffer 16 bytes out of step with it, `rep movsb` gave 6.2 GB/s against this loop's
// 8.1 in the two-thread test of that note (slow state).
inline void vec_copy(uint8_t* dst, const uint8_t* src, size_t bytes) {
  using V = Vec<long long>;
  if (bytes < 4 * kVecBytes) {
    memcpy(dst, src, bytes);
    return;
  }
  // The head as one vector, then from dst's first vector boundary on, so that no store
  // straddles two lines (src is then aligned too when it shares dst's offset in a line).
  storeu(dst, loadu<V>(src));
  size_t i = (kVecBytes - (reinterpret_cast<uintptr_t>(dst) & (kVecBytes - 1))) & (kVecBytes - 1);
  for (; i + 4 * kVecBytes <= bytes; i += 4 * kVecBytes) {
    const V v0 = loadu<V>(src + i);
    const V v1 = loadu<V>(src + i + kVecBytes);
    const V v2 = loadu<V>(src + i + 2 * kVecBytes);
    const V v3 = loadu<V>(src + i + 3 * kVecBytes);
    storeu(dst + i, v0);
    storeu(dst + i + kVecBytes, v1);
    storeu(dst + i + 2 * kVecBytes, v2);
    storeu(dst + i + 3 * kVecBytes, v3);
  }
  for (; i + kVecBytes <= bytes; i += kVecBytes) storeu(dst + i, loadu<V>(src + i));
  // The tail as one vector ending at the last byte (it rewrites bytes already copied).
  if (i < bytes) storeu(dst + bytes - kVecBytes, loadu<V>(src + bytes - kVecBytes));
}

// Note [Copies into a peer's slot]: a rank writes a message into a FIFO slot that the peer's
// core read last, so each line it overwrites is cached there; an ordinary store first fetches
// the line from that core (read for ownership) only to overwrite it whole. `rep movsb` of a
// few KiB or more writes whole lines without fetching them. bench/slot_copy (two threads on
// CPUs 0 and 1, 8 slots of 64 KiB messages) on the project VM's AMD EPYC, medians of 66 and 91
// runs: 30.9 GB/s with `rep movsb` at the sender against 8.4 with this file's vector loop while
// the two vCPUs were far apart (a cache line's round trip over 500 ns, the machine's slow
// state), 53.4 against 39.1 when they were close (about 105 ns); non-temporal stores gave 24.9
// and 20.1. Sent as 4 KiB pieces, `rep movsb` gave only 17.7 in the slow state: so a message
// goes in one `rep movsb`, not block by block. 4 KiB messages gained too (15.1 against 6.5
// slow, 35.6 against 31.1 fast), 1 KiB ones less (4.3 against 3.7, 32.5 against 20.0), so the
// threshold is 1 KiB. In 2-rank all-reduces of 256 KiB-4 MiB that is 2.4-2.6x in the slow
// state and 1.1-1.3x in the fast one (bench/NOTES-2026-11.md). What the receiver then does with the
// slot is the same either way. Under AddressSanitizer and ThreadSanitizer the vector loop runs
// instead, whose accesses they see. ACCORD_SLOT_COPY=vector restores the vector loop
// (reduce_dispatch.cpp). Only x86-64 has `rep movsb`; elsewhere the vector loop.
void slot_copy_impl(void* dst_, const void* src_, size_t bytes) {
  auto* dst = static_cast<uint8_t*>(dst_);
  const auto* src = static_cast<const uint8_t*>(src_);
  // An empty message may come with null pointers; a copy onto itself is none.
  if (bytes == 0 || dst == src) return;
#if defined(__x86_64__) && !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
  if (bytes >= kSlotRepMinBytes && slot_copy_mode() == SlotCopy::kRepMovsb) {
    asm volatile("rep movsb" : "+D"(dst), "+S"(src), "+c"(bytes) : : "memory");
    return;
  }
#endif
  vec_copy(dst, src, bytes);
}

template <class T, class Op>
void compute_any(uint8_t* out, const uint8_t* a, const uint8_t* b, size_t n, int divisor) {
  if (b != nullptr) {
    compute<T, Op>(out, a, b, n, divisor);
  } else if (divisor > 1) {
    divide_copy<T>(out, a, n, divisor);
  } else if (out != a) {
    vec_copy(out, a, n * sizeof(T));
  }
}

// ---- stores that bypass the cache ---------------------------------------------------------

// Note [Prefetch while streaming]: a rank of a large 2-rank all-reduce reads its input chunk
// from memory (copying it to the peer's slot), then streams the result chunk out with
// non-temporal stores. Done one after the other, the core has either reads or writes in
// flight, never both, and it is the number in flight, not the memory, that limits one core
// (two cores together reach about 40 GB/s of traffic on the 2-core VM, one about 30).
// Pulling the next chunk's input into the cache while the stores stream overlaps the two.
// 256 MiB out of place, 2 threads with a 256 KiB slot exchange (a C model of the direct
// schedule): 41 ms without, 35 ms with it. Ordinary stores with the same prefetch did not
// gain (in place they lost 4%), so only streaming calls prefetch, one line per 64 bytes
// written. Which bytes: the executor's Runner::ahead (executor.cpp).
class Prefetcher {
 public:
  Prefetcher(const void* p, size_t bytes)
      : p_(static_cast<const uint8_t*>(p)), end_(p == nullptr ? 0 : bytes) {}
  void next_line() {
#if defined(__SSE2__)
    if (off_ < end_) _mm_prefetch(reinterpret_cast<const char*>(p_ + off_), _MM_HINT_T0);
#endif
    off_ += 64;
  }

 private:
  const uint8_t* p_;
  size_t end_;
  size_t off_ = 0;
};

// Ordinary stores for the unaligned head and tail, non-temporal ones for the aligned middle.
// The caller issues the sfence.
void stream_copy(uint8_t* dst, const uint8_t* src, size_t bytes, Prefetcher& pf) {
#if defined(__SSE2__)
  const size_t head =
      (kVecBytes - (reinterpret_cast<uintptr_t>(dst) & (kVecBytes - 1))) & (kVecBytes - 1);
  if (head >= bytes) {
    memcpy(dst, src, bytes);
    return;
  }
  memcpy(dst, src, head);
  dst += head;
  src += head;
  bytes -= head;
  using V = Vec<long long>;
  for (size_t done = 0; bytes >= kVecBytes;
       bytes -= kVecBytes, dst += kVecBytes, src += kVecBytes, done += kVecBytes) {
    if ((done & 63) == 0) pf.next_line();
    const V v = loadu<V>(src);
#if defined(__AVX512F__) && defined(__AVX512BW__)
    _mm512_stream_si512(reinterpret_cast<__m512i*>(dst), (__m512i)v);
#elif defined(__AVX2__)
    _mm256_stream_si256(reinterpret_cast<__m256i*>(dst), (__m256i)v);
#else
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst), (__m128i)v);
#endif
  }
#endif
  memcpy(dst, src, bytes);
}

inline void store_fence() {
#if defined(__SSE2__)
  _mm_sfence();  // orders the non-temporal stores before whatever publishes the result
#endif
}

#if defined(__SSE2__)
// Streams dst0 straight from registers when its misalignment is whole elements: ordinary
// stores up to the first kVecBytes boundary, then a non-temporal store per vector (and an
// ordinary one to dst1), then ordinary stores for the tail. Returns false (nothing done) for
// the cases without a vector body (integer averages), which go through the block buffer.
template <class T, class Op>
bool stream_direct(uint8_t* dst0, uint8_t* dst1, const uint8_t* a, const uint8_t* b, size_t n,
                   int divisor, Prefetcher& pf) {
  using L = Lanes<T>;
  using E = typename L::E;
  constexpr size_t kN = L::kN;
  constexpr size_t kS = sizeof(T);
  const size_t mis = reinterpret_cast<uintptr_t>(dst0) & (kVecBytes - 1);
  if (mis % kS != 0 || (divisor > 1 && !kVectorDivide<T>)) return false;
  if (b == nullptr && divisor <= 1) {  // a plain copy
    if (dst0 != a) stream_copy(dst0, a, n * kS, pf);
    if (dst1 != nullptr) slot_copy_impl(dst1, a, n * kS);
    return true;
  }
  // Note [Streaming with a slot]: with dst1 (a peer's FIFO slot), the result goes there from
  // the registers in the same pass, by ordinary stores, though each fetches its line from the
  // peer's core first (Note [Copies into a peer's slot]). The alternatives cost a pass more:
  // the block path's `rep movsb` of each 4 KiB block took a 2-rank all-reduce out of place at
  // 64 and 128 MiB to 0.95 and 0.90x of this loop (6e24fe8), and the whole result into a stage
  // then one `rep movsb` to 0.91 and 0.86x; non-temporal stores into the slot ran the same as
  // ordinary ones (Intel Xeon VM; bench/NOTES-2026-11.md, "8 B at under half Open MPI's time,
  // and 64-128 MiB out of place").
  const auto finish = [&](size_t from, size_t count) {  // ordinary stores
    compute_any<T, Op>(dst0 + from * kS, a + from * kS, b ? b + from * kS : nullptr, count,
                       divisor);
    if (dst1 != nullptr) vec_copy(dst1 + from * kS, dst0 + from * kS, count * kS);
  };
  size_t i = ((kVecBytes - mis) & (kVecBytes - 1)) / kS;
  if (i >= n) {
    finish(0, n);
    return true;
  }
  finish(0, i);
  const E d = static_cast<E>(divisor);
  for (const size_t first = i; i + kN <= n; i += kN) {
    if ((((i - first) * kS) & 63) == 0) pf.next_line();
    typename L::V r = L::load(a + i * kS);
    if (b != nullptr) r = vapply<Op, E>(r, L::load(b + i * kS));
    if constexpr (kVectorDivide<T>) {
      if (divisor > 1) r = vcanon<E>(r / d);
    }
    const typename L::S packed = L::pack(r);
    stream_store(dst0 + i * kS, packed);
    if (dst1 != nullptr) storeu(dst1 + i * kS, packed);
  }
  finish(i, n - i);
  return true;
}
#endif

// ---- the entry points ---------------------------------------------------------------------

template <class T, class Op>
void reduce_entry(const ReduceArgs& args) {
  const size_t n = args.count;
  if (n == 0) return;
  constexpr size_t kS = sizeof(T);
  const int divisor = args.divisor > 1 ? args.divisor : 1;
  auto* dst0 = static_cast<uint8_t*>(args.dst0);
  auto* dst1 = static_cast<uint8_t*>(args.dst1);
  const auto* a = static_cast<const uint8_t*>(args.a);
  const auto* b = static_cast<const uint8_t*>(args.b);
  if (!args.dst0_streaming) {
    compute_any<T, Op>(dst0, a, b, n, divisor);
    // dst1 may be a or b: the result is all in dst0 before dst1 is written. One copy of the
    // whole result (Note [Copies into a peer's slot]).
    if (dst1 != nullptr) slot_copy_impl(dst1, dst0, n * kS);
    return;
  }

  Prefetcher pf(args.prefetch, args.prefetch_bytes);
#if defined(__SSE2__)
  if (stream_direct<T, Op>(dst0, dst1, a, b, n, divisor, pf)) {
    store_fence();
    return;
  }
#endif
  // Streaming to a dst0 misaligned by part of an element, and integer averages: compute a
  // block, then copy it out (dst1 block by block: the whole result is in no cache to copy it
  // from at the end).
  constexpr size_t kBlockElems = kBlockBytes / kS;
  alignas(64) uint8_t buf[kBlockBytes];
  // End the first block where dst0 reaches a cache-line boundary (when its misalignment is a
  // whole number of elements), so every later block streams whole lines.
  size_t block = kBlockElems;
  const size_t mis = reinterpret_cast<uintptr_t>(dst0) & 63;
  if (mis != 0 && mis % kS == 0) block = (64 - mis) / kS + kBlockElems - 64 / kS;
  for (size_t i = 0; i < n; i += block, block = kBlockElems) {
    const size_t m = n - i < block ? n - i : block;
    const size_t off = i * kS;
    compute_any<T, Op>(buf, a + off, b ? b + off : nullptr, m, divisor);
    stream_copy(dst0 + off, buf, m * kS, pf);
    if (dst1 != nullptr) slot_copy_impl(dst1 + off, buf, m * kS);
  }
  store_fence();
}

void copy_impl(void* dst, const void* src, size_t bytes, bool streaming, const void* prefetch,
               size_t prefetch_bytes) {
  if (bytes == 0 || dst == src) return;
  if (!streaming || bytes < kStreamMinBytes) {
    vec_copy(static_cast<uint8_t*>(dst), static_cast<const uint8_t*>(src), bytes);
    return;
  }
  Prefetcher pf(prefetch, prefetch_bytes);
  stream_copy(static_cast<uint8_t*>(dst), static_cast<const uint8_t*>(src), bytes, pf);
  store_fence();
}

template <accord_datatype_t D>
void fill_dtype(IsaKernels* k) {
  using T = typename DtypeType<D>::type;
  k->reduce[D][ACCORD_SUM] = &reduce_entry<T, OpSum>;
  k->reduce[D][ACCORD_PROD] = &reduce_entry<T, OpProd>;
  k->reduce[D][ACCORD_MAX] = &reduce_entry<T, OpMax>;
  k->reduce[D][ACCORD_MIN] = &reduce_entry<T, OpMin>;
  k->reduce[D][ACCORD_AVG] = &reduce_entry<T, OpSum>;  // the divisor is the post-op
}

IsaKernels make_kernels() {
  IsaKernels k{};
  k.name = ACCORD_ISA_STR(ACCORD_KERNEL_ISA);
  fill_dtype<ACCORD_INT8>(&k);
  fill_dtype<ACCORD_UINT8>(&k);
  fill_dtype<ACCORD_INT32>(&k);
  fill_dtype<ACCORD_UINT32>(&k);
  fill_dtype<ACCORD_INT64>(&k);
  fill_dtype<ACCORD_UINT64>(&k);
  fill_dtype<ACCORD_FLOAT16>(&k);
  fill_dtype<ACCORD_FLOAT32>(&k);
  fill_dtype<ACCORD_FLOAT64>(&k);
  fill_dtype<ACCORD_BFLOAT16>(&k);
  k.copy = &copy_impl;
  k.slot_copy = &slot_copy_impl;
  return k;
}

}  // namespace

const IsaKernels& kernels() {
  static const IsaKernels k = make_kernels();
  return k;
}

}  // namespace ACCORD_ISA_NS
}  // namespace accord::kernels
