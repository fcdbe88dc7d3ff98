// The device path's protocol on a host thread: what the simulated runtime runs when it launches
// the collective kernel (Note [One protocol, two executors], dev_call.hpp). Only the lanes are
// written here; the protocol is dev_call.hpp's, the same text nvcc compiles in dev_kernel.cu.
#include "accord_config.h"

#include <sched.h>
#include <unistd.h>

#include <atomic>
#include <cstddef>
#include <cstring>
#include <functional>
#include <thread>
#include <vector>

#include "collectives/device/dev_call.hpp"
#include "collectives/device/dev_kernels.hpp"
#include "collectives/device/direct_call.hpp"
#include "collectives/kernels/reduce_kernels.hpp"
#include "collectives/schedule.hpp"
#include "transport/device/sim_timeslice.hpp"
#include "transport/shm/fifo.hpp"

namespace accord::dev {

// The device protocol reads the host FIFO's layout by offsets and the schedule's enums by value.
static_assert(static_cast<int>(StepKind::kSend) == kStepSend && static_cast<int>(StepKind::kRecv) == kStepRecv &&
              static_cast<int>(StepKind::kRecvReduce) == kStepRecvReduce &&
              static_cast<int>(StepKind::kRecvReduceSend) == kStepRecvReduceSend &&
              static_cast<int>(StepKind::kRecvReduceCopySend) == kStepRecvReduceCopySend &&
              static_cast<int>(StepKind::kRecvCopySend) == kStepRecvCopySend &&
              static_cast<int>(StepKind::kCopy) == kStepCopy && static_cast<int>(StepKind::kReduceAll) == kStepReduceAll);
static_assert(static_cast<int>(Buf::kInput) == kBufInput && static_cast<int>(Buf::kOutput) == kBufOutput &&
              static_cast<int>(Buf::kAddress) == kBufAddress);
static_assert(static_cast<int>(Collective::kAllReduce) == kCollAllReduce &&
              static_cast<int>(Collective::kReduceScatter) == kCollReduceScatter &&
              static_cast<int>(Collective::kAllGather) == kCollAllGather &&
              static_cast<int>(Collective::kBroadcast) == kCollBroadcast &&
              static_cast<int>(Collective::kReduce) == kCollReduce);
static_assert(offsetof(SlotHeader, seq) == 0 && offsetof(SlotHeader, size) == 4 && offsetof(SlotHeader, tag) == 8 &&
              sizeof(SlotHeader) == kSlotHeaderBytes);
static_assert(offsetof(FifoCtrl, head) == kHeadOffset);
static_assert(offsetof(FifoCtrl, reverse_head) == kReverseHeadOffset);
static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t));

namespace {

struct HostLanes {
  kernels::ReduceFn reduce = nullptr;
  kernels::ReduceFn prod = nullptr;  // Note [Pre-multiplied sum]
  size_t elem_bytes = 1;
  std::vector<uint8_t> scaled[2], scalars, folded;
  uint32_t block_index = 0;
  std::vector<uint32_t> delta;  // 2 * nranks (Note [Blocks])

  bool leader() const { return true; }
  uint32_t block() const { return block_index; }
  uint32_t fetch_add(uint32_t* p, uint32_t v) { return __atomic_fetch_add(p, v, __ATOMIC_ACQ_REL); }
  uint32_t* deltas() { return delta.data(); }
  void sync() {}
  template <class T>
  T share(T v) {
    return v;
  }
  uint32_t load(const uint32_t* p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }
  void store(uint32_t* p, uint32_t v) { __atomic_store_n(p, v, __ATOMIC_RELEASE); }
  void store64(uint64_t* p, uint64_t v) { __atomic_store_n(p, v, __ATOMIC_RELEASE); }
  uint64_t load64(const uint64_t* p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }
  void publish() { std::atomic_thread_fence(std::memory_order_release); }
  // A simulated kernel holds its stream's thread while it waits, as a real one holds its SMs;
  // on a machine with fewer cores than simulated streams it must still let the others run.
  // Between two polls is also where a GPU shared without MPS switches a spinning kernel out at
  // the end of its slice (Note [Simulated time slices]; a no-op when the model is off). A
  // kernel that cannot get its slice back (ACCORD_SIM_STALL_MS) goes on polling without it,
  // until the watchdog aborts it.
  void pause(uint32_t spins) {
    (void)sim::timeslice_point();
    if (spins < 64) return;
    if (spins < 2048) {
      sched_yield();
      return;
    }
    usleep(20);
  }
  void move(const MoveArgs& m) {
    if (m.copy_bytes) {
      kernels::copy(m.dst0, m.a, m.count, false);
      if (m.dst1 != nullptr) kernels::copy(m.dst1, m.a, m.count, false);
      return;
    }
    kernels::ReduceArgs k;
    k.dst0 = m.dst0;
    k.dst1 = m.dst1;
    k.a = m.a;
    k.b = m.b;
    if (m.scale != 0) {  // Note [Pre-multiplied sum]: the scaled operands first, then as any move
      scalars.resize(m.count * elem_bytes);
      for (size_t i = 0; i < m.count; ++i) std::memcpy(scalars.data() + i * elem_bytes, &m.scalar, elem_bytes);
      const void** operand[2] = {&k.a, &k.b};
      for (int j = 0; j < 2; ++j) {
        if (!(m.scale & (1u << j)) || *operand[j] == nullptr) continue;
        scaled[j].resize(m.count * elem_bytes);
        kernels::ReduceArgs p;
        p.dst0 = scaled[j].data();
        p.a = *operand[j];
        p.b = scalars.data();
        p.count = m.count;
        prod(p);
        *operand[j] = scaled[j].data();
      }
    }
    k.count = m.count;
    k.divisor = m.nmore == 0 ? m.divisor : 0;
    // Note [Folding in one pass]: the same bits, fold by fold through dst0; through a buffer of
    // its own where dst0 is one of the later sources (a reduce-scatter or reduce whose output is
    // its input, Note [Registered inputs]), as the GPU reads every source of an element before
    // it writes it.
    const size_t bytes = m.count * elem_bytes;
    const auto* d = static_cast<const uint8_t*>(m.dst0);
    bool aliased = false;
    for (uint32_t j = 0; j < m.nmore; ++j) {
      const auto* x = static_cast<const uint8_t*>(m.more[j]);
      aliased = aliased || (x < d + bytes && d < x + bytes);
    }
    if (aliased) folded.resize(bytes);
    void* acc = aliased ? static_cast<void*>(folded.data()) : m.dst0;
    if (m.nmore > 0) {
      k.dst0 = acc;
      k.dst1 = nullptr;
    }
    reduce(k);
    for (uint32_t j = 0; j < m.nmore; ++j) {
      kernels::ReduceArgs r;
      r.dst0 = acc;
      r.dst1 = j + 1 == m.nmore && !aliased ? m.dst1 : nullptr;
      r.a = acc;
      r.b = m.more[j];
      r.count = m.count;
      r.divisor = j + 1 == m.nmore ? m.divisor : 0;
      reduce(r);
    }
    if (aliased) {
      std::memcpy(m.dst0, acc, bytes);
      if (m.dst1 != nullptr) std::memcpy(m.dst1, acc, bytes);
    }
  }
  DevStep step(const DevStep* p) { return *p; }
};

void run_block(const DevLaunch& p, uint32_t block, sim::KernelSlice* slice) {
  sim::AdoptKernelSlice adopt(slice);  // every block runs inside the kernel's time slice
  HostLanes lanes;
  lanes.reduce = kernels::get_reduce_fn(static_cast<accord_datatype_t>(p.call.dtype),
                                        static_cast<accord_red_op_t>(p.call.op));
  lanes.prod = kernels::get_reduce_fn(static_cast<accord_datatype_t>(p.call.dtype), ACCORD_PROD);
  lanes.elem_bytes = p.call.elem_bytes;
  lanes.block_index = block;
  if (p.call.nblocks > 1) lanes.delta.assign(2 * static_cast<size_t>(p.call.nranks), 0);
  if (p.direct.proto != kProtoFifo) {
    DirectRunner<HostLanes> direct(p.call, p.direct, lanes);
    (void)direct.run();  // failures are in DevCtl
    return;
  }
  CallRunner<HostLanes> runner(p.call, p.call.steps != nullptr ? p.call.steps : p.steps, lanes);
  (void)runner.run();  // failures are in DevCtl
}

// The blocks of a launch run at once, as a GPU's do (Note [Blocks] needs that: a block waits
// for messages that need every block of the peer): block 0 on the stream's thread, the others
// on threads of their own.
void run_collective_host(const void* params) {
  const DevLaunch& p = *static_cast<const DevLaunch*>(params);
  std::vector<std::thread> others;
  sim::KernelSlice* slice = sim::current_kernel_slice();
  for (uint32_t b = 1; b < p.call.nblocks; ++b) others.emplace_back(run_block, std::cref(p), b, slice);
  run_block(p, 0, slice);
  for (std::thread& t : others) t.join();
}

}  // namespace

const KernelDesc& collective_kernel() {
  static const KernelDesc k = [] {
    KernelDesc d;
    d.name = "accord_collective";
#if ACCORD_HAVE_CUDA
    d.cuda_func = collective_kernel_cuda();
#endif
    d.host_func = &run_collective_host;
    d.threads = kCollectiveThreads;
    return d;
  }();
  return k;
}

}  // namespace accord::dev
