// Host reduction kernels against the scalar reference, bit for bit: every ISA variant the CPU
// runs x every dtype x op, at awkward sizes, misaligned pointers, in place, with a second
// destination, with a divisor, with b == nullptr and with streaming stores; guard bytes around
// every buffer catch writes out of range.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include "tests/kernels/kernel_test_util.hpp"

namespace accord::kernels {
namespace {

using testing::available_isas;
using testing::dtype_bytes;
using testing::dtype_name;
using testing::fill_random;
using testing::kAllDtypes;
using testing::kAllOps;
using testing::op_name;
using testing::reference;

constexpr size_t kGuard = 64;
constexpr uint8_t kCanary = 0xa5;
constexpr size_t kSizes[] = {0, 1, 2, 3, 7, 15, 16, 17, 31, 63, 64, 65, 1000, 4097};
constexpr size_t kLarge = 1000003;

enum class Alias { kNone, kDst0IsA, kDst0IsB, kDst1IsA, kDst1IsB };

struct Config {
  const char* name;
  bool streaming;
  bool dst1;
  int divisor;
  bool b_null;
  Alias alias;
};

constexpr Config kConfigs[] = {
    {"plain", false, false, 0, false, Alias::kNone},
    {"streaming", true, false, 0, false, Alias::kNone},
    {"dst1", false, true, 0, false, Alias::kNone},
    {"dst1+streaming", true, true, 1, false, Alias::kNone},
    {"divisor3", false, false, 3, false, Alias::kNone},
    {"divisor200+dst1+streaming", true, true, 200, false, Alias::kNone},
    {"b_null", false, true, 0, true, Alias::kNone},
    {"b_null+divisor3+streaming", true, false, 3, true, Alias::kNone},
    {"dst0=a", false, false, 0, false, Alias::kDst0IsA},
    {"dst0=b+dst1+streaming+divisor3", true, true, 3, false, Alias::kDst0IsB},
};

// ReduceArgs::dst1 may be a or b exactly (the executor's fused steps never do it today, but the
// contract allows it): the whole result must be read before dst1 is written.
constexpr Config kDst1Aliased[] = {
    {"dst1=a", false, true, 0, false, Alias::kDst1IsA},
    {"dst1=b+divisor3", false, true, 3, false, Alias::kDst1IsB},
    {"dst1=a+streaming", true, true, 0, false, Alias::kDst1IsA},
    {"dst1=b+streaming", true, true, 0, false, Alias::kDst1IsB},
};

// One buffer with guard bytes on both sides and its data at a chosen byte offset.
struct Guarded {
  std::vector<uint8_t> mem;
  size_t off;
  size_t bytes;
  Guarded(size_t bytes_, size_t off_)
      : mem(bytes_ + off_ + 2 * kGuard, kCanary), off(off_), bytes(bytes_) {}
  uint8_t* data() { return mem.data() + kGuard + off; }
  bool guards_intact() const {
    for (size_t i = 0; i < kGuard + off; ++i) {
      if (mem[i] != kCanary) return false;
    }
    for (size_t i = kGuard + off + bytes; i < mem.size(); ++i) {
      if (mem[i] != kCanary) return false;
    }
    return true;
  }
};

std::string first_mismatch(const uint8_t* got, const uint8_t* want, size_t n, size_t s) {
  for (size_t i = 0; i < n; ++i) {
    if (memcmp(got + i * s, want + i * s, s) != 0) {
      uint64_t g = 0, w = 0;
      memcpy(&g, got + i * s, s);
      memcpy(&w, want + i * s, s);
      char buf[128];
      snprintf(buf, sizeof buf, "element %zu of %zu: got 0x%llx, want 0x%llx", i, n,
               static_cast<unsigned long long>(g), static_cast<unsigned long long>(w));
      return buf;
    }
  }
  return "";
}

// Runs one case; offsets are byte offsets of a, b, dst0, dst1 from a 64-byte boundary
// (std::vector's data is at least 16-aligned; the guard keeps the relative offsets distinct).
void run_case(Isa isa, accord_datatype_t d, accord_red_op_t op, size_t n, const Config& c,
              const size_t (&offs)[4], uint64_t seed) {
  SCOPED_TRACE(std::string(isa_name(isa)) + " " + dtype_name(d) + " " + op_name(op) +
               " n=" + std::to_string(n) + " " + c.name + " offsets " + std::to_string(offs[0]) +
               "," + std::to_string(offs[1]) + "," + std::to_string(offs[2]) + "," +
               std::to_string(offs[3]));
  const size_t s = dtype_bytes(d);
  const size_t bytes = n * s;
  Guarded A(bytes, offs[0]), B(bytes, offs[1]), D0(bytes, offs[2]), D1(bytes, offs[3]);
  fill_random(d, A.data(), n, seed);
  fill_random(d, B.data(), n, seed ^ 0x9e3779b97f4a7c15ull);
  const std::vector<uint8_t> a0(A.data(), A.data() + bytes), b0(B.data(), B.data() + bytes);
  std::vector<uint8_t> want(bytes + 1);
  reference(d, op, want.data(), a0.data(), c.b_null ? nullptr : b0.data(), n, c.divisor);

  ReduceArgs args;
  args.a = A.data();
  args.b = c.b_null ? nullptr : B.data();
  args.dst0 = c.alias == Alias::kDst0IsA   ? A.data()
              : c.alias == Alias::kDst0IsB ? B.data()
                                           : D0.data();
  args.dst1 = c.alias == Alias::kDst1IsA   ? A.data()
              : c.alias == Alias::kDst1IsB ? B.data()
              : c.dst1                     ? D1.data()
                                           : nullptr;
  args.count = n;
  args.divisor = c.divisor;
  args.dst0_streaming = c.streaming;
  const ReduceFn fn = get_reduce_fn(d, op, isa);
  ASSERT_NE(fn, nullptr);
  fn(args);

  const auto* dst0 = static_cast<const uint8_t*>(args.dst0);
  EXPECT_EQ(first_mismatch(dst0, want.data(), n, s), "") << "dst0";
  if (c.dst1) {
    EXPECT_EQ(first_mismatch(static_cast<const uint8_t*>(args.dst1), want.data(), n, s), "") << "dst1";
  }
  if (c.alias != Alias::kDst0IsA && c.alias != Alias::kDst1IsA) {
    EXPECT_TRUE(std::equal(a0.begin(), a0.end(), A.data())) << "a changed";
  }
  if (c.alias != Alias::kDst0IsB && c.alias != Alias::kDst1IsB) {
    EXPECT_TRUE(std::equal(b0.begin(), b0.end(), B.data())) << "b changed";
  }
  EXPECT_TRUE(A.guards_intact() && B.guards_intact() && D0.guards_intact() && D1.guards_intact())
      << "write out of range";
}

class ReduceKernels : public ::testing::TestWithParam<std::tuple<Isa, accord_datatype_t>> {};

TEST_P(ReduceKernels, MatchesScalarReference) {
  const auto [isa, d] = GetParam();
  uint64_t seed = 1;
  for (const accord_red_op_t op : kAllOps) {
    for (const size_t n : kSizes) {
      for (const Config& c : kConfigs) {
        ++seed;
        // Misalign each pointer differently, by whole and by partial elements.
        const size_t offs[4] = {(seed * 7) % 64, (seed * 13 + 5) % 64, (seed * 29 + 3) % 64,
                                (seed * 37 + 11) % 64};
        run_case(isa, d, op, n, c, offs, seed);
        if (::testing::Test::HasFailure()) return;
      }
    }
    // One large case per op, rotating through the configurations that stream.
    const Config& big = kConfigs[(1 + 2 * static_cast<int>(op)) % std::size(kConfigs)];
    const size_t offs[4] = {0, 4, static_cast<size_t>(op) * 8 + 8, 3};
    run_case(isa, d, op, kLarge, big, offs, ++seed);
    run_case(isa, d, op, kLarge, kConfigs[0], offs, ++seed);
  }
}

TEST_P(ReduceKernels, EveryDst0AlignmentWithStreamingAndDst1) {
  const auto [isa, d] = GetParam();
  const size_t s = dtype_bytes(d);
  for (size_t off = 0; off < 64; ++off) {
    const size_t offs[4] = {(off * 3) % 64, (off * 5 + 1) % 64, off, (off + 17) % 64};
    run_case(isa, d, ACCORD_SUM, 4096 / s + 100, kConfigs[3], offs, off + 1000);
    run_case(isa, d, ACCORD_MAX, 4096 / s + 100, kConfigs[1], offs, off + 2000);
    if (::testing::Test::HasFailure()) return;
  }
}

// Note [Copies into a peer's slot]: dst1 is written by `rep movsb` from 1 KiB up (or by the
// vector loop with ACCORD_SLOT_COPY=vector). Both ways, around that size and well above it, at
// every configuration with dst1, with dst1 aliasing an operand too.
TEST_P(ReduceKernels, Dst1EitherWayOfCopyingIntoASlot) {
  const auto [isa, d] = GetParam();
  const size_t s = dtype_bytes(d);
  const SlotCopy before = slot_copy_mode();
  uint64_t seed = 5000;
  for (const SlotCopy mode : {SlotCopy::kRepMovsb, SlotCopy::kVector}) {
    set_slot_copy_mode(mode);
    SCOPED_TRACE(mode == SlotCopy::kRepMovsb ? "rep movsb" : "vector");
    for (const size_t bytes : {kSlotRepMinBytes - 8, kSlotRepMinBytes, kSlotRepMinBytes + 24, size_t{65536} + 40,
                               size_t{262147}}) {
      const size_t n = bytes / s;
      for (const Config& c : kConfigs) {
        if (!c.dst1) continue;
        ++seed;
        const size_t offs[4] = {(seed * 7) % 64, (seed * 13 + 5) % 64, (seed * 29 + 3) % 64, (seed * 37 + 11) % 64};
        run_case(isa, d, ACCORD_SUM, n, c, offs, seed);
      }
      for (const Config& c : kDst1Aliased) {
        ++seed;
        const size_t offs[4] = {(seed * 5) % 64, (seed * 11 + 2) % 64, (seed * 3 + 1) % 64, 0};
        run_case(isa, d, ACCORD_MAX, n, c, offs, seed);
      }
      if (::testing::Test::HasFailure()) break;
    }
  }
  set_slot_copy_mode(before);
}

// All 65536 halves through each variant's load + store conversion (max(x, x) = x, NaN quieted).
TEST_P(ReduceKernels, HalfConversionsExhaustive) {
  const auto [isa, d] = GetParam();
  if (d != ACCORD_FLOAT16 && d != ACCORD_BFLOAT16) GTEST_SKIP() << "16-bit floats only";
  std::vector<uint16_t> in(65536), got(65536), want(65536);
  for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<uint16_t>(i);
  for (const accord_red_op_t op : {ACCORD_MAX, ACCORD_SUM}) {
    for (const int divisor : {0, 3}) {
      ReduceArgs args;
      args.a = in.data();
      args.b = in.data();
      args.dst0 = got.data();
      args.count = in.size();
      args.divisor = divisor;
      get_reduce_fn(d, op, isa)(args);
      reference(d, op, want.data(), in.data(), in.data(), in.size(), divisor);
      EXPECT_EQ(first_mismatch(reinterpret_cast<uint8_t*>(got.data()),
                               reinterpret_cast<uint8_t*>(want.data()), in.size(), 2),
                "")
          << op_name(op) << " divisor " << divisor;
    }
  }
}

std::string param_name(const ::testing::TestParamInfo<std::tuple<Isa, accord_datatype_t>>& info) {
  return std::string(isa_name(std::get<0>(info.param))) + "_" + dtype_name(std::get<1>(info.param));
}

INSTANTIATE_TEST_SUITE_P(AllVariants, ReduceKernels,
                         ::testing::Combine(::testing::ValuesIn(available_isas()),
                                            ::testing::ValuesIn(kAllDtypes)),
                         param_name);

TEST(ReduceDispatch, ResolvesEveryDtypeAndOp) {
  for (const accord_datatype_t d : kAllDtypes) {
    for (const accord_red_op_t op : kAllOps) EXPECT_NE(get_reduce_fn(d, op), nullptr);
  }
  EXPECT_EQ(get_reduce_fn(ACCORD_NUM_DTYPES, ACCORD_SUM), nullptr);
  EXPECT_EQ(get_reduce_fn(ACCORD_FLOAT32, ACCORD_NUM_OPS), nullptr);
  EXPECT_EQ(get_reduce_fn(static_cast<accord_datatype_t>(-1), ACCORD_SUM), nullptr);
  EXPECT_TRUE(isa_available(selected_isa()));
  EXPECT_STREQ(isa_name(), isa_name(selected_isa()));
}

// A variant the CPU lacks is unavailable, and none of its code runs: filling its table is its
// own code, so on an AVX2-only CPU (an AMD EPYC VM) asking about avx512 once died of SIGILL.
TEST(ReduceDispatch, VariantTheCpuLacksNeverRuns) {
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl"))
    GTEST_SKIP() << "this CPU has AVX-512";
  EXPECT_FALSE(isa_available(Isa::kAvx512));
  EXPECT_EQ(get_reduce_fn(ACCORD_FLOAT32, ACCORD_SUM, Isa::kAvx512), nullptr);
  EXPECT_FALSE(copy(nullptr, nullptr, 0, false, Isa::kAvx512));
#else
  GTEST_SKIP() << "x86-64 only";
#endif
}

// meson runs this binary once per variant with ACCORD_KERNEL_ISA set (tests/kernels/meson.build).
TEST(ReduceDispatch, HonoursAccordKernelIsa) {
  const char* forced = getenv("ACCORD_KERNEL_ISA");
  if (forced == nullptr) GTEST_SKIP() << "ACCORD_KERNEL_ISA not set";
  bool available = false;
  for (const Isa isa : available_isas()) available |= strcmp(isa_name(isa), forced) == 0;
  if (!available) GTEST_SKIP() << forced << " is not available on this CPU";
  EXPECT_STREQ(isa_name(), forced);
  // The forced variant is what get_reduce_fn hands out.
  EXPECT_EQ(get_reduce_fn(ACCORD_FLOAT32, ACCORD_SUM),
            get_reduce_fn(ACCORD_FLOAT32, ACCORD_SUM, selected_isa()));
}

TEST(ReduceCopy, MatchesMemcpyEveryVariantAndAlignment) {
  for (const Isa isa : available_isas()) {
    // Around one and four vectors of every width (the vector loop's body and its tail).
    for (const size_t bytes : {size_t{0}, size_t{1}, size_t{15}, size_t{16}, size_t{17}, size_t{63}, size_t{64},
                               size_t{65}, size_t{100}, size_t{127}, size_t{128}, size_t{129}, size_t{255},
                               size_t{256}, size_t{257}, size_t{1023}, size_t{1024}, size_t{5000},
                               size_t{1} << 20}) {
      for (size_t off = 0; off < 64; off += 7) {
        for (const bool streaming : {false, true}) {
          Guarded src(bytes, (off * 3) % 64), dst(bytes, off);
          fill_random(ACCORD_UINT8, src.data(), bytes, bytes + off);
          ASSERT_TRUE(copy(dst.data(), src.data(), bytes, streaming, isa));
          EXPECT_EQ(memcmp(dst.data(), src.data(), bytes), 0)
              << isa_name(isa) << " " << bytes << " bytes, offset " << off;
          EXPECT_TRUE(dst.guards_intact());
        }
      }
    }
  }
  std::vector<uint8_t> x(100, 1), y(100, 2);
  copy(y.data(), x.data(), x.size(), true);
  EXPECT_EQ(x, y);
}

// Note [Copies into a peer's slot]: copy_to_peer gives memcpy's bytes, both ways of copying,
// every variant, around the 1 KiB where `rep movsb` takes over, with every relative alignment.
TEST(ReduceCopy, ToPeerMatchesMemcpyEitherWayEveryVariantAndAlignment) {
  const SlotCopy before = slot_copy_mode();
  for (const SlotCopy mode : {SlotCopy::kRepMovsb, SlotCopy::kVector}) {
    set_slot_copy_mode(mode);
    for (const Isa isa : available_isas()) {
      for (const size_t bytes : {size_t{0}, size_t{1}, size_t{63}, size_t{65}, size_t{1021}, kSlotRepMinBytes - 1,
                                 kSlotRepMinBytes, kSlotRepMinBytes + 1, size_t{4099}, size_t{65536} + 13,
                                 (size_t{1} << 20) + 7}) {
        for (size_t off = 0; off < 64; off += 9) {
          Guarded src(bytes, (off * 5 + 3) % 64), dst(bytes, off);
          fill_random(ACCORD_UINT8, src.data(), bytes, bytes * 3 + off);
          ASSERT_TRUE(copy_to_peer(dst.data(), src.data(), bytes, isa));
          EXPECT_EQ(memcmp(dst.data(), src.data(), bytes), 0)
              << isa_name(isa) << (mode == SlotCopy::kRepMovsb ? " rep movsb " : " vector ") << bytes
              << " bytes, offset " << off;
          EXPECT_TRUE(dst.guards_intact() && src.guards_intact());
        }
      }
    }
  }
  set_slot_copy_mode(before);
  std::vector<uint8_t> x(5000, 1), y(5000, 2);
  copy_to_peer(y.data(), x.data(), x.size());
  EXPECT_EQ(x, y);
  // An empty message (a barrier's) may come with null pointers: nothing is touched, which
  // UBSan (in the ASan build) checks.
  copy_to_peer(nullptr, nullptr, 0);
  for (const Isa isa : available_isas()) EXPECT_TRUE(copy_to_peer(nullptr, nullptr, 0, isa));
}

// meson runs this binary with ACCORD_SLOT_COPY=vector and =bogus as well
// (tests/kernels/meson.build): read once, at the first slot copy; unknown values keep rep movsb.
TEST(ReduceDispatch, HonoursAccordSlotCopy) {
  const char* v = getenv("ACCORD_SLOT_COPY");
  const bool vector = v != nullptr && strcmp(v, "vector") == 0;
  EXPECT_EQ(slot_copy_mode(), vector ? SlotCopy::kVector : SlotCopy::kRepMovsb) << (v ? v : "(unset)");
}

// Note [Prefetch while streaming]: the hint only reads ahead. Shorter, longer or no prefetch
// region, the results are those of the call without it and the region is left as it was.
TEST(ReducePrefetch, HintChangesNoResultAndNoByte) {
  for (const Isa isa : available_isas()) {
    for (const accord_datatype_t d : {ACCORD_FLOAT32, ACCORD_FLOAT16, ACCORD_INT64}) {
      const size_t s = dtype_bytes(d);
      for (const size_t n : {size_t{0}, size_t{1}, size_t{33}, size_t{5000}, size_t{1} << 16}) {
        for (const size_t pf_bytes : {size_t{0}, n * s / 2 + 1, n * s * 2 + 64}) {
          SCOPED_TRACE(std::string(isa_name(isa)) + " " + dtype_name(d) +
                       " n=" + std::to_string(n) + " prefetch " + std::to_string(pf_bytes));
          Guarded A(n * s, 16), B(n * s, 16), plain(n * s, 16), hinted(n * s, 16), P(pf_bytes, 5);
          fill_random(d, A.data(), n, n + 1);
          fill_random(d, B.data(), n, n + 2);
          fill_random(ACCORD_UINT8, P.data(), pf_bytes, n + 3);
          const std::vector<uint8_t> p0(P.data(), P.data() + pf_bytes);
          for (const bool with_b : {true, false}) {
            ReduceArgs args;
            args.a = A.data();
            args.b = with_b ? B.data() : nullptr;
            args.count = n;
            args.dst0_streaming = true;
            args.dst0 = plain.data();
            get_reduce_fn(d, ACCORD_SUM, isa)(args);
            args.dst0 = hinted.data();
            args.prefetch = P.data();
            args.prefetch_bytes = pf_bytes;
            get_reduce_fn(d, ACCORD_SUM, isa)(args);
            EXPECT_EQ(memcmp(plain.data(), hinted.data(), n * s), 0)
                << (with_b ? "a + b" : "copy of a");
          }
          copy(hinted.data(), B.data(), n * s, true, P.data(), pf_bytes);
          EXPECT_EQ(memcmp(hinted.data(), B.data(), n * s), 0) << "copy";
          EXPECT_TRUE(std::equal(p0.begin(), p0.end(), P.data())) << "the prefetched bytes changed";
          EXPECT_TRUE(plain.guards_intact() && hinted.guards_intact() && P.guards_intact());
        }
      }
    }
  }
}

}  // namespace
}  // namespace accord::kernels
