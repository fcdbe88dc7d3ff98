// Helpers shared by the kernel tests: a scalar reference that applies element_ops.hpp one
// element at a time (the definition every host ISA variant and the CUDA kernels must match
// bit for bit), random inputs that include NaN, infinities, zeros and subnormals, and names.
#pragma once

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "collectives/kernels/element_ops.hpp"
#include "collectives/kernels/reduce_kernels.hpp"

namespace accord::kernels::testing {

inline constexpr accord_datatype_t kAllDtypes[] = {
    ACCORD_INT8,   ACCORD_UINT8,   ACCORD_INT32,   ACCORD_UINT32,  ACCORD_INT64,
    ACCORD_UINT64, ACCORD_FLOAT16, ACCORD_FLOAT32, ACCORD_FLOAT64, ACCORD_BFLOAT16};
inline constexpr accord_red_op_t kAllOps[] = {ACCORD_SUM, ACCORD_PROD, ACCORD_MAX, ACCORD_MIN,
                                              ACCORD_AVG};

inline size_t dtype_bytes(accord_datatype_t d) {
  switch (d) {
    case ACCORD_INT8:
    case ACCORD_UINT8:
      return 1;
    case ACCORD_FLOAT16:
    case ACCORD_BFLOAT16:
      return 2;
    case ACCORD_INT32:
    case ACCORD_UINT32:
    case ACCORD_FLOAT32:
      return 4;
    default:
      return 8;
  }
}

inline const char* dtype_name(accord_datatype_t d) {
  static const char* const kNames[] = {"int8",   "uint8",   "int32",   "uint32",  "int64",
                                       "uint64", "float16", "float32", "float64", "bfloat16"};
  return kNames[d];
}

inline const char* op_name(accord_red_op_t o) {
  static const char* const kNames[] = {"sum", "prod", "max", "min", "avg"};
  return kNames[o];
}

template <class T, class Op>
void reference_typed(uint8_t* out, const uint8_t* a, const uint8_t* b, size_t n, int divisor) {
  for (size_t i = 0; i < n; ++i) {
    T x, y, r;
    memcpy(&x, a + i * sizeof(T), sizeof(T));
    if (b != nullptr) {
      memcpy(&y, b + i * sizeof(T), sizeof(T));
      r = reduce_elem<T, Op>(x, y, divisor);
    } else {
      r = copy_elem<T>(x, divisor);
    }
    memcpy(out + i * sizeof(T), &r, sizeof(T));
  }
}

template <class T>
void reference_op(accord_red_op_t op, uint8_t* out, const uint8_t* a, const uint8_t* b, size_t n,
                  int divisor) {
  switch (op) {
    case ACCORD_SUM:
    case ACCORD_AVG:
      return reference_typed<T, OpSum>(out, a, b, n, divisor);
    case ACCORD_PROD:
      return reference_typed<T, OpProd>(out, a, b, n, divisor);
    case ACCORD_MAX:
      return reference_typed<T, OpMax>(out, a, b, n, divisor);
    case ACCORD_MIN:
      return reference_typed<T, OpMin>(out, a, b, n, divisor);
    default:
      return;
  }
}

// out = a op b (or a when b is null), divided when divisor > 1; the scalar definition.
inline void reference(accord_datatype_t d, accord_red_op_t op, void* out, const void* a,
                      const void* b, size_t n, int divisor) {
  auto* o = static_cast<uint8_t*>(out);
  auto* x = static_cast<const uint8_t*>(a);
  auto* y = static_cast<const uint8_t*>(b);
  switch (d) {
    case ACCORD_INT8:
      return reference_op<int8_t>(op, o, x, y, n, divisor);
    case ACCORD_UINT8:
      return reference_op<uint8_t>(op, o, x, y, n, divisor);
    case ACCORD_INT32:
      return reference_op<int32_t>(op, o, x, y, n, divisor);
    case ACCORD_UINT32:
      return reference_op<uint32_t>(op, o, x, y, n, divisor);
    case ACCORD_INT64:
      return reference_op<int64_t>(op, o, x, y, n, divisor);
    case ACCORD_UINT64:
      return reference_op<uint64_t>(op, o, x, y, n, divisor);
    case ACCORD_FLOAT16:
      return reference_op<Half>(op, o, x, y, n, divisor);
    case ACCORD_FLOAT32:
      return reference_op<float>(op, o, x, y, n, divisor);
    case ACCORD_FLOAT64:
      return reference_op<double>(op, o, x, y, n, divisor);
    case ACCORD_BFLOAT16:
      return reference_op<BFloat16>(op, o, x, y, n, divisor);
    default:
      return;
  }
}

// Random elements: integers are random bits; floats are mostly ordinary values (so that sums
// and products stay interesting) with one in eight a random bit pattern (NaN, inf, subnormal,
// zero of either sign); halves are random bit patterns throughout.
inline void fill_random(accord_datatype_t d, void* p, size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  auto* out = static_cast<uint8_t*>(p);
  const size_t s = dtype_bytes(d);
  std::uniform_real_distribution<double> val(-100.0, 100.0);
  for (size_t i = 0; i < n; ++i) {
    const uint64_t bits = rng();
    const bool special = (bits & 7) == 0;
    if (d == ACCORD_FLOAT32 && !special) {
      const float f = static_cast<float>(val(rng));
      memcpy(out + i * s, &f, s);
    } else if (d == ACCORD_FLOAT64 && !special) {
      const double f = val(rng);
      memcpy(out + i * s, &f, s);
    } else {
      const uint64_t r = special ? rng() : bits;
      memcpy(out + i * s, &r, s);
    }
  }
}

// The variants to check: every ISA the CPU runs.
inline std::vector<Isa> available_isas() {
  std::vector<Isa> out;
  for (int i = 0; i < kNumIsas; ++i) {
    if (isa_available(static_cast<Isa>(i))) out.push_back(static_cast<Isa>(i));
  }
  return out;
}

}  // namespace accord::kernels::testing
