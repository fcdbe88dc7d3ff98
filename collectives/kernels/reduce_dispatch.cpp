// Run-time choice among the ISA builds of reduce_isa.cpp: the best one the CPU supports, or the
// one ACCORD_KERNEL_ISA names, decided once (first call) and then a table lookup. Built with
// ACCORD_KERNELS_HAVE_<ISA> defines saying which variants exist (collectives/kernels/meson.build).
#include <atomic>
#include <cstdlib>
#include <cstring>

#include "collectives/kernels/reduce_isa.hpp"
#include "collectives/kernels/reduce_kernels.hpp"
#include "core/log.hpp"

namespace accord::kernels {
namespace {

const char* const kIsaNames[kNumIsas] = {"generic", "sse2", "avx2", "avx512"};

const IsaKernels* built_kernels(Isa isa) {
  switch (isa) {
#if defined(ACCORD_KERNELS_HAVE_GENERIC)
    case Isa::kGeneric:
      return &isa_generic::kernels();
#endif
#if defined(ACCORD_KERNELS_HAVE_SSE2)
    case Isa::kSse2:
      return &isa_sse2::kernels();
#endif
#if defined(ACCORD_KERNELS_HAVE_AVX2)
    case Isa::kAvx2:
      return &isa_avx2::kernels();
#endif
#if defined(ACCORD_KERNELS_HAVE_AVX512)
    case Isa::kAvx512:
      return &isa_avx512::kernels();
#endif
    default:
      return nullptr;
  }
}

bool cpu_supports(Isa isa) {
#if defined(__x86_64__) || defined(__i386__)
  // libgcc's cpu model also checks that the OS saves the AVX / AVX-512 state (XCR0).
  __builtin_cpu_init();
  switch (isa) {
    case Isa::kGeneric:
      return true;
    case Isa::kSse2:
      return __builtin_cpu_supports("sse2");
    case Isa::kAvx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c");
    case Isa::kAvx512:
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("f16c");
  }
  return false;
#else
  return isa == Isa::kGeneric;
#endif
}

Isa choose_isa() {
  Isa best = Isa::kGeneric;
  for (int i = 0; i < kNumIsas; ++i) {
    if (isa_available(static_cast<Isa>(i))) best = static_cast<Isa>(i);
  }
  // ACCORD_KERNEL_ISA: read once, here. Not in core/settings.cpp's table because kernels are
  // chosen before (and without) a communicator.
  const char* forced = getenv("ACCORD_KERNEL_ISA");
  if (forced != nullptr && forced[0] != '\0') {
    int want = -1;
    for (int i = 0; i < kNumIsas; ++i) {
      if (strcmp(forced, kIsaNames[i]) == 0) want = i;
    }
    if (want < 0) {
      LOG_WARN(kEnv, "ACCORD_KERNEL_ISA=%s is not one of generic, sse2, avx2, avx512; using %s",
               forced, kIsaNames[static_cast<int>(best)]);
    } else if (!isa_available(static_cast<Isa>(want))) {
      LOG_WARN(kEnv, "ACCORD_KERNEL_ISA=%s: not built or not supported by this CPU; using %s",
               forced, kIsaNames[static_cast<int>(best)]);
    } else {
      best = static_cast<Isa>(want);
    }
  }
  LOG_INFO(kColl, "reduction kernels: %s", kIsaNames[static_cast<int>(best)]);
  return best;
}

const IsaKernels& selected() {
  static const IsaKernels* const k = built_kernels(selected_isa());
  return *k;
}

bool valid(accord_datatype_t dtype, accord_red_op_t op) {
  return static_cast<int>(dtype) >= 0 && dtype < ACCORD_NUM_DTYPES && static_cast<int>(op) >= 0 &&
         op < ACCORD_NUM_OPS;
}

}  // namespace

bool isa_available(Isa isa) {
  // The CPU first: built_kernels() runs the ISA's own code to fill its table, and an AVX-512
  // build's code is AVX-512 instructions (SIGILL on a CPU without them, as this VM's AMD EPYC).
  return static_cast<int>(isa) >= 0 && static_cast<int>(isa) < kNumIsas && cpu_supports(isa) &&
         built_kernels(isa) != nullptr;
}

const char* isa_name(Isa isa) {
  const int i = static_cast<int>(isa);
  return i >= 0 && i < kNumIsas ? kIsaNames[i] : "unknown";
}

Isa selected_isa() {
  static const Isa isa = choose_isa();
  return isa;
}

const char* isa_name() { return isa_name(selected_isa()); }

ReduceFn get_reduce_fn(accord_datatype_t dtype, accord_red_op_t op) {
  if (!valid(dtype, op)) return nullptr;
  return selected().reduce[dtype][op];
}

ReduceFn get_reduce_fn(accord_datatype_t dtype, accord_red_op_t op, Isa isa) {
  if (!valid(dtype, op) || !isa_available(isa)) return nullptr;
  return built_kernels(isa)->reduce[dtype][op];
}

void reduce(accord_datatype_t dtype, accord_red_op_t op, const ReduceArgs& args) {
  const ReduceFn fn = get_reduce_fn(dtype, op);
  if (fn != nullptr) fn(args);
}

void copy(void* dst, const void* src, size_t bytes, bool streaming, const void* prefetch,
          size_t prefetch_bytes) {
  selected().copy(dst, src, bytes, streaming, prefetch, prefetch_bytes);
}

void copy_to_peer(void* dst, const void* src, size_t bytes) { selected().slot_copy(dst, src, bytes); }

bool copy_to_peer(void* dst, const void* src, size_t bytes, Isa isa) {
  if (!isa_available(isa)) return false;
  built_kernels(isa)->slot_copy(dst, src, bytes);
  return true;
}

namespace {
// ACCORD_SLOT_COPY: read once, at the first slot copy (as ACCORD_KERNEL_ISA above).
int slot_copy_from_environment() {
  const char* v = getenv("ACCORD_SLOT_COPY");
  if (v == nullptr || v[0] == '\0' || strcmp(v, "rep") == 0) return static_cast<int>(SlotCopy::kRepMovsb);
  if (strcmp(v, "vector") == 0) {
    LOG_INFO(kColl, "ACCORD_SLOT_COPY=vector: messages go into FIFO slots by the vector loop");
    return static_cast<int>(SlotCopy::kVector);
  }
  LOG_WARN(kEnv, "ACCORD_SLOT_COPY=%s is not one of rep, vector; using rep", v);
  return static_cast<int>(SlotCopy::kRepMovsb);
}

std::atomic<int>& slot_copy_setting() {
  static std::atomic<int> mode{slot_copy_from_environment()};
  return mode;
}
}  // namespace

SlotCopy slot_copy_mode() { return static_cast<SlotCopy>(slot_copy_setting().load(std::memory_order_relaxed)); }

void set_slot_copy_mode(SlotCopy mode) { slot_copy_setting().store(static_cast<int>(mode), std::memory_order_relaxed); }

bool copy(void* dst, const void* src, size_t bytes, bool streaming, Isa isa) {
  if (!isa_available(isa)) return false;
  built_kernels(isa)->copy(dst, src, bytes, streaming, nullptr, 0);
  return true;
}

}  // namespace accord::kernels
