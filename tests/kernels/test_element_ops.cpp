// element_ops.hpp on its own: the 16-bit float conversions over all 65536 patterns against
// references computed with double math (and against F16C where the CPU has it), integer wrap
// and truncating average, and the documented NaN / signed-zero rule of max and min, checked
// through every host ISA variant too.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "tests/kernels/kernel_test_util.hpp"

namespace accord::kernels {
namespace {

using testing::available_isas;
using testing::op_name;

// ---- references from double math ------------------------------------------------------

double f16_value(uint16_t h) {  // finite halves only
  const int e = (h >> 10) & 0x1f;
  const int m = h & 0x3ff;
  const double mag = e == 0 ? std::ldexp(m, -24) : std::ldexp(1024 + m, e - 25);
  return (h & 0x8000) ? -mag : mag;
}

// Rounds x (not NaN) to binary16 with round-to-nearest-even using double arithmetic.
uint16_t ref_f32_to_f16(float x) {
  const uint16_t sign = std::signbit(x) ? 0x8000 : 0;
  const double ax = std::fabs(static_cast<double>(x));
  if (ax >= 65520.0) return sign | 0x7c00;  // including inf
  const int e = ax < std::ldexp(1.0, -14) ? -14 : std::ilogb(ax);
  const double quantum = std::ldexp(1.0, e - 10);
  const double q = std::nearbyint(ax / quantum);  // default rounding mode: ties to even
  const double v = q * quantum;
  if (v == 0) return sign;
  if (v < std::ldexp(1.0, -14)) return sign | static_cast<uint16_t>(v / std::ldexp(1.0, -24));
  const int ve = std::ilogb(v);
  const int mant = static_cast<int>(v / std::ldexp(1.0, ve - 10)) - 1024;
  return sign | static_cast<uint16_t>(((ve + 15) << 10) | mant);
}

// The same for bfloat16 (8-bit exponent, 7 mantissa bits, subnormals at 2^-133 steps).
uint16_t ref_f32_to_bf16(float x) {
  const uint16_t sign = std::signbit(x) ? 0x8000 : 0;
  const double ax = std::fabs(static_cast<double>(x));
  if (ax >= std::ldexp(2.0 - std::ldexp(1.0, -8), 127)) return sign | 0x7f80;
  const int e = ax < std::ldexp(1.0, -126) ? -126 : std::ilogb(ax);
  const double v = std::nearbyint(ax / std::ldexp(1.0, e - 7)) * std::ldexp(1.0, e - 7);
  const float vf = static_cast<float>(v);  // exact: v has at most 8 significant bits
  uint32_t bits;
  memcpy(&bits, &vf, 4);
  return sign | static_cast<uint16_t>(bits >> 16);
}

float next_up(float x) { return std::nextafter(x, std::numeric_limits<float>::infinity()); }
float next_down(float x) { return std::nextafter(x, -std::numeric_limits<float>::infinity()); }

// ---- float16 ------------------------------------------------------------------------------

TEST(Float16, ToFloatExhaustive) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = f16_to_f32(static_cast<uint16_t>(h));
    const bool nan = (h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0;
    if (nan) {
      // Quiet NaN, same sign, payload shifted into the top of the float's mantissa.
      const uint32_t want = ((h & 0x8000u) << 16) | 0x7fc00000u | ((h & 0x3ffu) << 13);
      ASSERT_EQ(f32_bits(f), want) << std::hex << h;
    } else if ((h & 0x7c00) == 0x7c00) {
      ASSERT_EQ(f, (h & 0x8000) ? -INFINITY : INFINITY) << std::hex << h;
    } else {
      ASSERT_EQ(static_cast<double>(f), f16_value(static_cast<uint16_t>(h))) << std::hex << h;
      ASSERT_EQ(std::signbit(f), (h & 0x8000) != 0);
    }
  }
}

TEST(Float16, RoundTripExhaustive) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const bool nan = (h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0;
    const uint16_t want = static_cast<uint16_t>(nan ? (h | 0x200) : h);  // NaN comes back quiet
    ASSERT_EQ(f32_to_f16(f16_to_f32(static_cast<uint16_t>(h))), want) << std::hex << h;
  }
}

// Every half, the midpoints to its neighbours (ties go to even) and the floats just either
// side of them, against the double-math rounding.
TEST(Float16, FromFloatAgainstDoubleMathAtEveryMidpoint) {
  for (uint32_t h = 0; h < 0x7c00; ++h) {
    for (const double sign : {1.0, -1.0}) {
      const double lo = f16_value(static_cast<uint16_t>(h));
      const double hi = h + 1 == 0x7c00 ? 65536.0 : f16_value(static_cast<uint16_t>(h + 1));
      const float mid = static_cast<float>(sign * (lo + hi) / 2);  // exact in float
      for (const float x : {static_cast<float>(sign * lo), mid, next_up(mid), next_down(mid)}) {
        ASSERT_EQ(f32_to_f16(x), ref_f32_to_f16(x)) << x << " near half 0x" << std::hex << h;
      }
    }
  }
  for (const float x : {0.0f, -0.0f, 1e-30f, -1e-30f, 1e-45f, 65504.0f, 65519.99f, 65520.0f, 1e10f,
                        INFINITY, -INFINITY}) {
    EXPECT_EQ(f32_to_f16(x), ref_f32_to_f16(x)) << x;
  }
  EXPECT_EQ(f32_to_f16(std::numeric_limits<float>::quiet_NaN()) & 0x7e00, 0x7e00);
}

#if defined(__x86_64__)
__attribute__((target("f16c"))) float hw_f16_to_f32(uint16_t h) { return _cvtsh_ss(h); }
__attribute__((target("f16c"))) uint16_t hw_f32_to_f16(float f) {
  return static_cast<uint16_t>(_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT));
}

// The host kernels convert with F16C in their vector bodies and element_ops in their tails:
// the two must agree on every bit, NaN payloads included.
TEST(Float16, MatchesF16cHardware) {
  if (!__builtin_cpu_supports("f16c")) GTEST_SKIP() << "no F16C";
  for (uint32_t h = 0; h < 65536; ++h) {
    ASSERT_EQ(f32_bits(f16_to_f32(static_cast<uint16_t>(h))),
              f32_bits(hw_f16_to_f32(static_cast<uint16_t>(h))))
        << std::hex << h;
  }
  // Every combination of sign, exponent and top 10 mantissa bits, with the 13 rounding bits
  // at and around the tie, plus random floats.
  const uint32_t lows[] = {0, 1, 0x0fff, 0x1000, 0x1001, 0x1fff, 0x0800, 0x17ff};
  for (uint32_t high = 0; high < (1u << 19); ++high) {
    for (const uint32_t low : lows) {
      const float f = f32_from_bits((high << 13) | low);
      ASSERT_EQ(f32_to_f16(f), hw_f32_to_f16(f)) << std::hex << f32_bits(f);
    }
  }
  std::mt19937 rng(42);
  for (int i = 0; i < (1 << 22); ++i) {
    const float f = f32_from_bits(static_cast<uint32_t>(rng()));
    ASSERT_EQ(f32_to_f16(f), hw_f32_to_f16(f)) << std::hex << f32_bits(f);
  }
}
#endif

// ---- bfloat16 -----------------------------------------------------------------------------

TEST(BFloat16, ToFloatAndRoundTripExhaustive) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = bf16_to_f32(static_cast<uint16_t>(h));
    ASSERT_EQ(f32_bits(f), h << 16);
    const bool nan = (h & 0x7f80) == 0x7f80 && (h & 0x7f) != 0;
    if (!nan && (h & 0x7f80) != 0x7f80) {
      // The value, from the fields with double math.
      const int e = (h >> 7) & 0xff;
      const int m = h & 0x7f;
      const double mag = e == 0 ? std::ldexp(m, -133) : std::ldexp(128 + m, e - 134);
      ASSERT_EQ(static_cast<double>(f), (h & 0x8000) ? -mag : mag) << std::hex << h;
    }
    ASSERT_EQ(f32_to_bf16(f), nan ? (h | 0x40) : h) << std::hex << h;
  }
}

TEST(BFloat16, FromFloatAgainstDoubleMathAtEveryMidpoint) {
  for (uint32_t h = 0; h < 0x7f80; ++h) {
    for (const uint32_t sign : {0u, 0x8000u}) {
      const float lo = bf16_to_f32(static_cast<uint16_t>(h | sign));
      const float hi = bf16_to_f32(static_cast<uint16_t>((h + 1) | sign));  // may be inf
      const uint32_t mid_bits = f32_bits(lo) + 0x8000;                      // exact midpoint
      const float mid = f32_from_bits(mid_bits);
      for (const float x : {lo, mid, f32_from_bits(mid_bits + 1), f32_from_bits(mid_bits - 1)}) {
        ASSERT_EQ(f32_to_bf16(x), ref_f32_to_bf16(x)) << x << " near 0x" << std::hex << h;
      }
      (void)hi;
    }
  }
  const float nan = f32_from_bits(0x7f800001u);  // signalling, payload only in low bits
  EXPECT_EQ(f32_to_bf16(nan), 0x7fc0);           // stays NaN (not inf), quiet
}

// ---- integers -------------------------------------------------------------------------------

TEST(Integers, SumAndProdWrap) {
  EXPECT_EQ((reduce_elem<int8_t, OpSum>(127, 1, 0)), -128);
  EXPECT_EQ((reduce_elem<uint8_t, OpSum>(255, 1, 0)), 0);
  EXPECT_EQ((reduce_elem<int8_t, OpProd>(-128, -1, 0)), -128);
  EXPECT_EQ((reduce_elem<uint8_t, OpProd>(16, 17, 0)), 16);  // 272 mod 256
  EXPECT_EQ((reduce_elem<int32_t, OpSum>(INT32_MAX, 1, 0)), INT32_MIN);
  EXPECT_EQ((reduce_elem<int32_t, OpProd>(INT32_MIN, -1, 0)), INT32_MIN);
  EXPECT_EQ((reduce_elem<uint32_t, OpProd>(0xffffffffu, 0xffffffffu, 0)), 1u);
  EXPECT_EQ((reduce_elem<int64_t, OpSum>(INT64_MAX, 1, 0)), INT64_MIN);
  EXPECT_EQ((reduce_elem<int64_t, OpProd>(INT64_MIN, -1, 0)), INT64_MIN);
  EXPECT_EQ((reduce_elem<uint64_t, OpSum>(~0ull, 2, 0)), 1ull);
}

TEST(Integers, AvgTruncatesTowardZero) {
  EXPECT_EQ((reduce_elem<int32_t, OpSum>(-4, -3, 2)), -3);  // (-7)/2
  EXPECT_EQ((reduce_elem<int32_t, OpSum>(4, 3, 2)), 3);
  EXPECT_EQ((reduce_elem<int8_t, OpSum>(-4, -3, 2)), -3);
  EXPECT_EQ((reduce_elem<int64_t, OpSum>(-4, -3, 2)), -3);
  EXPECT_EQ((reduce_elem<int8_t, OpSum>(-128, 0, 200)), 0);  // divisor wider than int8
  EXPECT_EQ((reduce_elem<int8_t, OpSum>(-128, 0, 128)), -1);
  EXPECT_EQ((reduce_elem<uint8_t, OpSum>(200, 100, 2)), 22);  // the sum wraps first: 44 / 2
  EXPECT_EQ((reduce_elem<uint64_t, OpSum>(~0ull, 0, 3)), ~0ull / 3);
  EXPECT_EQ(copy_elem<int32_t>(-7, 2), -3);
  EXPECT_EQ(copy_elem<int32_t>(-7, 1), -7);
}

// Through the kernels of every variant, long enough for their vector bodies.
TEST(Integers, KernelsWrapAndTruncate) {
  for (const Isa isa : available_isas()) {
    std::vector<int8_t> a(100, -4), b(100, -3), out(100);
    a[0] = 127;
    b[0] = 1;
    ReduceArgs args;
    args.a = a.data();
    args.b = b.data();
    args.dst0 = out.data();
    args.count = a.size();
    get_reduce_fn(ACCORD_INT8, ACCORD_SUM, isa)(args);
    EXPECT_EQ(out[0], -128) << isa_name(isa);
    EXPECT_EQ(out[99], -7) << isa_name(isa);
    args.divisor = 2;
    get_reduce_fn(ACCORD_INT8, ACCORD_AVG, isa)(args);
    EXPECT_EQ(out[0], -64) << isa_name(isa);
    EXPECT_EQ(out[99], -3) << isa_name(isa);
  }
}

// ---- Note [NaN in max and min] ----------------------------------------------------------

TEST(MaxMin, NaNAndSignedZeroRule) {
  const float qa = f32_from_bits(0x7fc00001u), qb = f32_from_bits(0xffc00002u);
  EXPECT_EQ(f32_bits(OpMax::apply(qa, 1.0f)), f32_bits(qa));
  EXPECT_EQ(f32_bits(OpMax::apply(1.0f, qb)), f32_bits(qb));
  EXPECT_EQ(f32_bits(OpMax::apply(qa, qb)), f32_bits(qa));  // a's payload wins
  EXPECT_EQ(f32_bits(OpMax::apply(qb, qa)), f32_bits(qb));
  EXPECT_EQ(f32_bits(OpMin::apply(qa, -INFINITY)), f32_bits(qa));
  EXPECT_EQ(f32_bits(OpMin::apply(INFINITY, qb)), f32_bits(qb));
  EXPECT_EQ(f32_bits(OpMax::apply(0.0f, -0.0f)), 0u);
  EXPECT_EQ(f32_bits(OpMax::apply(-0.0f, 0.0f)), 0u);
  EXPECT_EQ(f32_bits(OpMin::apply(0.0f, -0.0f)), 0x80000000u);
  EXPECT_EQ(f32_bits(OpMin::apply(-0.0f, 0.0f)), 0x80000000u);
  EXPECT_EQ(OpMax::apply(2.0, 3.0), 3.0);
  EXPECT_EQ(OpMin::apply(2.0, 3.0), 2.0);
  EXPECT_EQ(f64_bits(OpMax::apply(-0.0, 0.0)), 0u);
  EXPECT_TRUE(std::isnan(OpMin::apply(1.0, std::nan(""))));
}

// Note [Canonical NaN]: arithmetic that gives NaN gives the one canonical NaN.
TEST(CanonicalNaN, SumProdAndDivide) {
  const float qa = f32_from_bits(0xffc00123u), qb = f32_from_bits(0x7fc00456u);
  EXPECT_EQ(f32_bits(OpSum::apply(qa, qb)), kCanonicalNaN32);
  EXPECT_EQ(f32_bits(OpSum::apply(qb, qa)), kCanonicalNaN32);
  EXPECT_EQ(f32_bits(OpSum::apply(INFINITY, -INFINITY)), kCanonicalNaN32);
  EXPECT_EQ(f32_bits(OpProd::apply(0.0f, INFINITY)), kCanonicalNaN32);
  EXPECT_EQ(f64_bits(OpSum::apply(std::nan("7"), 1.0)), kCanonicalNaN64);
  EXPECT_EQ(f32_bits(divide(qa, 3)), kCanonicalNaN32);
  EXPECT_EQ((reduce_elem<Half, OpSum>(Half{0xfe01}, Half{0x7c00}, 0).bits), 0x7e00);
  EXPECT_EQ((reduce_elem<BFloat16, OpProd>(BFloat16{0xffc1}, BFloat16{0x3f80}, 2).bits), 0x7fc0);
  EXPECT_EQ(f32_bits(copy_elem<float>(qa, 1)), f32_bits(qa));  // payload kept without a divide
}

// The same rule through every variant's vector body and tail, for each float dtype.
TEST(MaxMin, KernelsFollowTheRule) {
  // Bits, not float constants, so that no compiler folds one NaN into another.
  constexpr uint32_t qa = 0x7fc00001u, qb = 0xffc00002u, one = 0x3f800000u, pz = 0,
                     nz = 0x80000000u, five = 0x40a00000u, three = 0x40400000u, ninf = 0xff800000u,
                     two = 0x40000000u;
  const uint32_t as[] = {qa, one, qa, pz, nz, five, ninf, two};
  const uint32_t bs[] = {one, qb, qb, nz, pz, three, qb, two};
  const uint32_t want_max[] = {qa, qb, qa, pz, pz, five, qb, two};
  const uint32_t want_min[] = {qa, qb, qa, nz, nz, three, qb, two};
  constexpr size_t kN = 8 * 40 + 3;  // vector body and a tail
  std::vector<float> a(kN), b(kN), out(kN);
  std::vector<uint16_t> ha(kN), hb(kN), hout(kN);
  for (size_t i = 0; i < kN; ++i) {
    a[i] = f32_from_bits(as[i % 8]);
    b[i] = f32_from_bits(bs[i % 8]);
    ha[i] = f32_to_f16(a[i]);  // NaNs become quiet, keeping the payload's top bits
    hb[i] = f32_to_f16(b[i]);
  }
  for (const Isa isa : available_isas()) {
    for (const accord_red_op_t op : {ACCORD_MAX, ACCORD_MIN}) {
      const uint32_t* want = op == ACCORD_MAX ? want_max : want_min;
      ReduceArgs args;
      args.a = a.data();
      args.b = b.data();
      args.dst0 = out.data();
      args.count = kN;
      get_reduce_fn(ACCORD_FLOAT32, op, isa)(args);
      for (size_t i = 0; i < kN; ++i) {
        ASSERT_EQ(f32_bits(out[i]), want[i % 8]) << isa_name(isa) << " " << op_name(op) << " " << i;
      }
      args.a = ha.data();
      args.b = hb.data();
      args.dst0 = hout.data();
      get_reduce_fn(ACCORD_FLOAT16, op, isa)(args);
      for (size_t i = 0; i < kN; ++i) {
        ASSERT_EQ(hout[i], f32_to_f16(f32_from_bits(want[i % 8])))
            << isa_name(isa) << " " << op_name(op) << " " << i;
      }
    }
  }
}

}  // namespace
}  // namespace accord::kernels
