// TEMPORARY scalar kernels so the core can be tested before the vectorised kernels land.
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "collectives/kernels/reduce_kernels.hpp"

namespace accord::kernels {
namespace {
inline float bf2f(uint16_t h) { uint32_t u = uint32_t(h) << 16; float f; std::memcpy(&f, &u, 4); return f; }
inline uint16_t f2bf(float f) { uint32_t u; std::memcpy(&u, &f, 4); if ((u & 0x7fffffff) > 0x7f800000) return uint16_t((u >> 16) | 0x40); u += 0x7fff + ((u >> 16) & 1); return uint16_t(u >> 16); }
template <typename T> struct Acc { using type = T; static T in(T v) { return v; } static T out(T v) { return v; } };
struct Half { uint16_t bits; };
struct BF { uint16_t bits; };
template <> struct Acc<Half> { using type = float; static float in(Half v) { _Float16 h; std::memcpy(&h, &v.bits, 2); return float(h); } static Half out(float f) { _Float16 h = (_Float16)f; Half r; std::memcpy(&r.bits, &h, 2); return r; } };
template <> struct Acc<BF> { using type = float; static float in(BF v) { return bf2f(v.bits); } static BF out(float f) { return BF{f2bf(f)}; } };
template <typename A> A wrap_add(A a, A b) { if constexpr (std::is_integral_v<A>) return A(std::make_unsigned_t<A>(a) + std::make_unsigned_t<A>(b)); else return a + b; }
template <typename A> A wrap_mul(A a, A b) { if constexpr (std::is_integral_v<A>) return A(std::make_unsigned_t<A>(a) * std::make_unsigned_t<A>(b)); else return a * b; }
template <typename T, int Op> void run(const ReduceArgs& r) {
  using A = typename Acc<T>::type;
  for (size_t i = 0; i < r.count; ++i) {
    T x, y; std::memcpy(&x, (const char*)r.a + i * sizeof(T), sizeof(T));
    A v = Acc<T>::in(x);
    if (r.b) { std::memcpy(&y, (const char*)r.b + i * sizeof(T), sizeof(T)); A w = Acc<T>::in(y);
      if (Op == ACCORD_SUM || Op == ACCORD_AVG) v = wrap_add(v, w); else if (Op == ACCORD_PROD) v = wrap_mul(v, w);
      else if (Op == ACCORD_MAX) v = v < w ? w : v; else v = w < v ? w : v; }
    if (r.divisor > 1) v = A(v / A(r.divisor));
    T o = Acc<T>::out(v);
    std::memcpy((char*)r.dst0 + i * sizeof(T), &o, sizeof(T));
    if (r.dst1) std::memcpy((char*)r.dst1 + i * sizeof(T), &o, sizeof(T));
  }
}
template <typename T> ReduceFn pick(accord_red_op_t op) {
  switch (op) { case ACCORD_SUM: return run<T, ACCORD_SUM>; case ACCORD_PROD: return run<T, ACCORD_PROD>; case ACCORD_MAX: return run<T, ACCORD_MAX>; case ACCORD_MIN: return run<T, ACCORD_MIN>; case ACCORD_AVG: return run<T, ACCORD_AVG>; default: return nullptr; }
}
}  // namespace
ReduceFn get_reduce_fn(accord_datatype_t d, accord_red_op_t op) {
  switch (d) { case ACCORD_INT8: return pick<int8_t>(op); case ACCORD_UINT8: return pick<uint8_t>(op); case ACCORD_INT32: return pick<int32_t>(op); case ACCORD_UINT32: return pick<uint32_t>(op); case ACCORD_INT64: return pick<int64_t>(op); case ACCORD_UINT64: return pick<uint64_t>(op); case ACCORD_FLOAT16: return pick<Half>(op); case ACCORD_BFLOAT16: return pick<BF>(op); case ACCORD_FLOAT32: return pick<float>(op); case ACCORD_FLOAT64: return pick<double>(op); default: return nullptr; }
}
void reduce(accord_datatype_t d, accord_red_op_t op, const ReduceArgs& a) { if (auto f = get_reduce_fn(d, op)) f(a); }
void copy(void* dst, const void* src, size_t bytes, bool) { if (dst != src && bytes) std::memmove(dst, src, bytes); }
const char* isa_name() { return "scalar-tmp"; }
}  // namespace accord::kernels
