// Simulated streams and events: many asynchronous operations on one stream complete in order,
// events order two streams, and reductions on a stream give exact results for every dtype x op.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "tests/device/sim_util.hpp"
#include "tests/support/harness.hpp"

namespace accord::testing {
namespace {

TEST(SimStreams, ManyAsyncOpsOnOneStreamCompleteInOrder) {
  auto rt = make_sim(kDgx1);
  ASSERT_TRUE(rt);
  Stream s;
  ASSERT_OK(rt->create_stream(3, &s));
  void *cell, *ones;
  ASSERT_OK(rt->alloc_device(3, 4, &cell));
  ASSERT_OK(rt->alloc_device(3, 4, &ones));
  const int32_t one = 1;
  ASSERT_OK(rt->copy(CopyKind::kHostToDevice, 3, ones, &one, 4));
  // Each round overwrites the cell, adds one to it twice on the device, and reads it back:
  // any reordering shows up as a wrong snapshot.
  // Pinned memory, so that every copy is asynchronous.
  const int kRounds = 300;
  void *values_mem, *snapshots_mem;
  ASSERT_OK(rt->alloc_host_pinned(kRounds * 4, &values_mem));
  ASSERT_OK(rt->alloc_host_pinned(kRounds * 4, &snapshots_mem));
  auto* values = static_cast<int32_t*>(values_mem);
  auto* snapshots = static_cast<int32_t*>(snapshots_mem);
  for (int i = 0; i < kRounds; ++i) {
    values[i] = i * 10;
    snapshots[i] = -1;
  }
  for (int i = 0; i < kRounds; ++i) {
    ASSERT_OK(rt->copy_async(CopyKind::kHostToDevice, cell, &values[i], 4, s));
    kernels::ReduceArgs add;
    add.dst0 = cell;
    add.a = cell;
    add.b = ones;
    add.count = 1;
    ASSERT_OK(rt->reduce_async(add, ACCORD_INT32, ACCORD_SUM, s));
    ASSERT_OK(rt->reduce_async(add, ACCORD_INT32, ACCORD_SUM, s));
    ASSERT_OK(rt->copy_async(CopyKind::kDeviceToHost, &snapshots[i], cell, 4, s));
  }
  ASSERT_OK(rt->synchronize_stream(s));
  for (int i = 0; i < kRounds; ++i) ASSERT_EQ(snapshots[i], i * 10 + 2) << "round " << i;
  ASSERT_OK(rt->free_host_pinned(values_mem));
  ASSERT_OK(rt->free_host_pinned(snapshots_mem));
  ASSERT_OK(rt->destroy_stream(s));
  ASSERT_OK(rt->free_device(cell));
  ASSERT_OK(rt->free_device(ones));
}

// A host callback that holds its stream until the test opens the gate: ordering checks that
// do not depend on timing.
struct Gate {
  std::atomic<bool> open{false};
  static void wait(void* self) {
    auto* g = static_cast<Gate*>(self);
    while (!g->open.load()) std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
};

TEST(SimStreams, EventsOrderTwoStreams) {
  auto rt = make_sim(kTf4);
  ASSERT_TRUE(rt);
  const size_t n = 1 << 16;
  void *d, *src, *out;
  ASSERT_OK(rt->alloc_device(0, n * 4, &d));
  ASSERT_OK(rt->alloc_host_pinned(n * 4, &src));
  ASSERT_OK(rt->alloc_host_pinned(n * 4, &out));
  std::fill_n(static_cast<int32_t*>(src), n, 7);
  std::fill_n(static_cast<int32_t*>(out), n, 0);
  ASSERT_OK(rt->copy(CopyKind::kHostToDevice, 0, d, out, n * 4));  // zeros
  Stream producer, consumer;
  Event ready;
  ASSERT_OK(rt->create_stream(0, &producer));
  ASSERT_OK(rt->create_stream(1, &consumer));  // another device: events order across devices too
  ASSERT_OK(rt->create_event(0, &ready));
  ASSERT_OK(rt->enable_peer(1, 0));
  bool done = false;
  ASSERT_OK(rt->query_event(ready, &done));
  EXPECT_TRUE(done) << "an event never recorded counts as complete";
  ASSERT_OK(rt->stream_wait_event(consumer, ready));  // no-op: nothing recorded yet
  Gate gate;
  ASSERT_OK(rt->launch_host_func(producer, Gate::wait, &gate));
  ASSERT_OK(rt->copy_async(CopyKind::kHostToDevice, d, src, n * 4, producer));
  ASSERT_OK(rt->record_event(ready, producer));
  ASSERT_OK(rt->stream_wait_event(consumer, ready));
  ASSERT_OK(rt->copy_async(CopyKind::kDeviceToHost, out, d, n * 4, consumer));
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ASSERT_OK(rt->query_event(ready, &done));
  EXPECT_FALSE(done) << "the producer is held at the gate";
  EXPECT_EQ(static_cast<int32_t*>(out)[0], 0) << "the consumer ran before the event it waits for";
  gate.open = true;
  ASSERT_OK(rt->synchronize_stream(consumer));
  ASSERT_OK(rt->query_event(ready, &done));
  EXPECT_TRUE(done);
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(static_cast<int32_t*>(out)[i], 7) << "element " << i;
  ASSERT_OK(rt->synchronize_event(ready));
  ASSERT_OK(rt->destroy_event(ready));
  ASSERT_OK(rt->destroy_stream(producer));
  ASSERT_OK(rt->destroy_stream(consumer));
  ASSERT_OK(rt->free_device(d));
  ASSERT_OK(rt->free_host_pinned(src));
  ASSERT_OK(rt->free_host_pinned(out));
}

TEST(SimStreams, EnqueueReturnsAtOnceAndSynchronizeWaits) {
  SimOptions slow;
  slow.throttle = true;
  auto rt = make_sim(kTf4, slow);
  ASSERT_TRUE(rt);
  const size_t bytes = 24 << 20;  // ~2 ms at 12 GB/s
  void *d, *pinned;
  ASSERT_OK(rt->alloc_device(1, bytes, &d));
  ASSERT_OK(rt->alloc_host_pinned(bytes, &pinned));
  std::memset(pinned, 3, bytes);
  Stream s;
  ASSERT_OK(rt->create_stream(1, &s));
  Event e;
  ASSERT_OK(rt->create_event(1, &e));
  Gate gate;
  ASSERT_OK(rt->launch_host_func(s, Gate::wait, &gate));
  ASSERT_OK(rt->copy_async(CopyKind::kHostToDevice, d, pinned, bytes, s));
  ASSERT_OK(rt->record_event(e, s));
  bool done = true;
  ASSERT_OK(rt->query_event(e, &done));
  EXPECT_FALSE(done) << "enqueue returned, the work has not run";
  using Clock = std::chrono::steady_clock;
  auto t0 = Clock::now();
  gate.open = true;
  ASSERT_OK(rt->synchronize_device(1));
  auto took = std::chrono::duration<double>(Clock::now() - t0).count();
  ASSERT_OK(rt->query_event(e, &done));
  EXPECT_TRUE(done);
  EXPECT_GE(took, static_cast<double>(bytes) / (topo::kDefaultPciGbs * 1e9) * 0.99) << "throttled to PCIe speed";
  char back = 0;
  ASSERT_OK(rt->copy(CopyKind::kDeviceToHost, 1, &back, static_cast<char*>(d) + bytes - 1, 1));
  EXPECT_EQ(back, 3);
  ASSERT_OK(rt->destroy_event(e));
  ASSERT_OK(rt->destroy_stream(s));
  ASSERT_OK(rt->free_device(d));
  ASSERT_OK(rt->free_host_pinned(pinned));
}

TEST(SimStreams, PageableHostMemoryBehavesAsWithCuda) {
  SimOptions slow;
  slow.throttle = true;
  auto rt = make_sim(kTf4, slow);
  ASSERT_TRUE(rt);
  const size_t n = 1 << 20;
  void* d;
  ASSERT_OK(rt->alloc_device(2, n * 4, &d));
  Stream s;
  ASSERT_OK(rt->create_stream(2, &s));
  {
    // The source may be overwritten (here: destroyed) as soon as the call returns.
    std::vector<int32_t> src(n, 11);
    ASSERT_OK(rt->copy_async(CopyKind::kHostToDevice, d, src.data(), n * 4, s));
    std::fill(src.begin(), src.end(), -1);
  }
  // The destination holds the result when the call returns, without a synchronize.
  std::vector<int32_t> out(n, 0);
  ASSERT_OK(rt->copy_async(CopyKind::kDeviceToHost, out.data(), d, n * 4, s));
  EXPECT_EQ(out[0], 11);
  EXPECT_EQ(out[n - 1], 11);
  ASSERT_OK(rt->destroy_stream(s));
  ASSERT_OK(rt->free_device(d));
}

TEST(SimStreams, DestroyingAStreamFinishesItsWork) {
  auto rt = make_sim(kDgx1);
  ASSERT_TRUE(rt);
  std::vector<int64_t> host(1000, 5), back(1000, 0);
  void* d;
  ASSERT_OK(rt->alloc_device(6, 8000, &d));
  Stream s;
  ASSERT_OK(rt->create_stream(6, &s));
  ASSERT_OK(rt->copy_async(CopyKind::kHostToDevice, d, host.data(), 8000, s));
  ASSERT_OK(rt->copy_async(CopyKind::kDeviceToHost, back.data(), d, 8000, s));
  ASSERT_OK(rt->destroy_stream(s));
  EXPECT_EQ(back[999], 5);
  ASSERT_OK(rt->free_device(d));
}

// The simulation has no CUDA graphs: a stream never captures; a destroyed one is an error.
// Never 0x1 or 0x2 either (CUDA's cudaStreamLegacy and cudaStreamPerThread handles).
TEST(SimStreams, StreamsNeverCapture) {
  auto rt = make_sim(kDgx1);
  ASSERT_TRUE(rt);
  Stream s;
  ASSERT_OK(rt->create_stream(0, &s));
  EXPECT_GT(s.id, 2u);
  bool capturing = true;
  ASSERT_OK(rt->stream_capturing(s, &capturing));
  EXPECT_FALSE(capturing);
  ASSERT_OK(rt->destroy_stream(s));
  EXPECT_FALSE(rt->stream_capturing(s, &capturing).ok());
}

// Every dtype x op on a stream, buffers on the stream's device, on a peer it enabled, and in
// pinned host memory; results compared bit for bit with the exactly known answer.
TEST(SimStreams, ReductionsAreExactForEveryDtypeAndOp) {
  auto rt = make_sim(kDgx1);
  ASSERT_TRUE(rt);
  ASSERT_OK(rt->enable_peer(0, 1));
  Stream s;
  ASSERT_OK(rt->create_stream(0, &s));
  for (int dt = 0; dt < ACCORD_NUM_DTYPES; ++dt)
    for (int o = 0; o < ACCORD_NUM_OPS; ++o)
      for (size_t count : {size_t{0}, size_t{1}, size_t{7}, size_t{33}, size_t{1000}}) {
        const auto dtype = static_cast<accord_datatype_t>(dt);
        const auto op = static_cast<accord_red_op_t>(o);
        SCOPED_TRACE(::testing::Message() << dtype_name(dtype) << " " << op_name(op) << " count " << count);
        const size_t bytes = dtype_bytes(dtype) * count;
        std::vector<char> a(bytes + 1), b(bytes + 1), want(bytes + 1), got(bytes + 1), got1(bytes + 1);
        fill_input(a.data(), count, dtype, op, 0, 2);
        fill_input(b.data(), count, dtype, op, 1, 2);
        fill_expected(want.data(), count, dtype, op, 2);
        void *da, *db, *dst1, *pinned;
        ASSERT_OK(rt->alloc_device(0, bytes, &da));
        ASSERT_OK(rt->alloc_device(1, bytes, &db));  // a peer's memory
        ASSERT_OK(rt->alloc_device(0, bytes, &dst1));
        ASSERT_OK(rt->alloc_host_pinned(bytes, &pinned));
        ASSERT_OK(rt->copy(CopyKind::kHostToDevice, 0, da, a.data(), bytes));
        ASSERT_OK(rt->copy(CopyKind::kHostToDevice, 1, db, b.data(), bytes));
        kernels::ReduceArgs args;
        args.dst0 = da;  // in place
        args.dst1 = pinned;
        args.a = da;
        args.b = db;
        args.count = count;
        args.divisor = op == ACCORD_AVG ? 2 : 0;
        ASSERT_OK(rt->reduce_async(args, dtype, op, s));
        ASSERT_OK(rt->copy_async(CopyKind::kDeviceToHost, got.data(), da, bytes, s));
        // Copy form (b null) into a second device buffer.
        kernels::ReduceArgs copy_args;
        copy_args.dst0 = dst1;
        copy_args.a = pinned;
        copy_args.count = count;
        ASSERT_OK(rt->reduce_async(copy_args, dtype, op, s));
        ASSERT_OK(rt->copy_async(CopyKind::kDeviceToHost, got1.data(), dst1, bytes, s));
        ASSERT_OK(rt->synchronize_stream(s));
        EXPECT_EQ(count_mismatches(got.data(), want.data(), count, dtype), 0u);
        EXPECT_EQ(count_mismatches(pinned, want.data(), count, dtype), 0u);
        EXPECT_EQ(count_mismatches(got1.data(), want.data(), count, dtype), 0u);
        ASSERT_OK(rt->free_device(da));
        ASSERT_OK(rt->free_device(db));
        ASSERT_OK(rt->free_device(dst1));
        ASSERT_OK(rt->free_host_pinned(pinned));
      }
  ASSERT_OK(rt->destroy_stream(s));
}

TEST(SimStreams, ReductionArgumentsAreChecked) {
  auto rt = make_sim(kDgx1);
  ASSERT_TRUE(rt);
  Stream s;
  ASSERT_OK(rt->create_stream(0, &s));
  void *d0, *d5;
  ASSERT_OK(rt->alloc_device(0, 400, &d0));
  ASSERT_OK(rt->alloc_device(5, 400, &d5));
  std::vector<float> host(100);
  kernels::ReduceArgs args;
  args.dst0 = d0;
  args.a = d0;
  args.b = d5;
  args.count = 100;
  // 0 and 5 cannot peer on a DGX-1 (SYS).
  EXPECT_TRUE(fails_with(rt->reduce_async(args, ACCORD_FLOAT32, ACCORD_SUM, s), ACCORD_ERR_INVALID_USAGE,
                         "memory of device 5"));
  args.b = host.data();
  EXPECT_TRUE(fails_with(rt->reduce_async(args, ACCORD_FLOAT32, ACCORD_SUM, s), ACCORD_ERR_INVALID_ARGUMENT,
                         "not device memory"));
  args.b = d0;
  args.count = 101;
  EXPECT_TRUE(fails_with(rt->reduce_async(args, ACCORD_FLOAT32, ACCORD_SUM, s), ACCORD_ERR_INVALID_ARGUMENT,
                         "past the end"));
  args.count = 50;
  args.dst0 = static_cast<char*>(d0) + 4;
  EXPECT_TRUE(fails_with(rt->reduce_async(args, ACCORD_FLOAT32, ACCORD_SUM, s), ACCORD_ERR_INVALID_ARGUMENT,
                         "partly overlaps"));
  args.dst0 = d0;
  EXPECT_TRUE(fails_with(rt->reduce_async(args, static_cast<accord_datatype_t>(42), ACCORD_SUM, s),
                         ACCORD_ERR_INVALID_ARGUMENT, "unknown dtype"));
  args.a = nullptr;
  EXPECT_TRUE(fails_with(rt->reduce_async(args, ACCORD_FLOAT32, ACCORD_SUM, s), ACCORD_ERR_INVALID_ARGUMENT,
                         "a is null"));
  ASSERT_OK(rt->synchronize_stream(s));  // nothing bad was enqueued
  ASSERT_OK(rt->destroy_stream(s));
  ASSERT_OK(rt->free_device(d0));
  ASSERT_OK(rt->free_device(d5));
}

TEST(SimStreams, ThrottledPeerCopiesFollowTheTopologysBandwidth) {
  SimOptions slow;
  slow.throttle = true;
  auto rt = make_sim(kDgx1, slow);
  ASSERT_TRUE(rt);
  // A copy takes at least bytes / (the pair's bandwidth in the System): NV1 (0-1) and NV2 (0-4).
  const size_t bytes = 16 << 20;
  void *d0, *d1, *d4;
  ASSERT_OK(rt->alloc_device(0, bytes, &d0));
  ASSERT_OK(rt->alloc_device(1, bytes, &d1));
  ASSERT_OK(rt->alloc_device(4, bytes, &d4));
  ASSERT_OK(rt->enable_peer(0, 1));
  ASSERT_OK(rt->enable_peer(0, 4));
  using Clock = std::chrono::steady_clock;
  auto time_copy = [&](void* dst, int dev) {
    auto t0 = Clock::now();
    Status st = rt->copy_peer(dev, dst, 0, d0, bytes);
    EXPECT_TRUE(st.ok()) << st.message();
    return std::chrono::duration<double>(Clock::now() - t0).count();
  };
  const double nv1 = time_copy(d1, 1), nv2 = time_copy(d4, 4);
  EXPECT_GE(nv1, static_cast<double>(bytes) / (rt->system().bandwidth_gbs(0, 1) * 1e9) * 0.99);
  EXPECT_GE(nv2, static_cast<double>(bytes) / (rt->system().bandwidth_gbs(0, 4) * 1e9) * 0.99);
  ASSERT_OK(rt->free_device(d0));
  ASSERT_OK(rt->free_device(d1));
  ASSERT_OK(rt->free_device(d4));
}

// register_host makes existing host memory usable by kernels (the host-staged transport):
// refused before, accepted after, not freeable as runtime-pinned memory, refused again after
// unregister_host; overlapping registrations are errors. stream_wait_flag holds a stream until
// a host thread sets the flag.
TEST(SimStreams, RegisteredHostMemoryAndFlags) {
  auto rt = make_sim(kTf4);
  ASSERT_TRUE(rt);
  Stream s;
  ASSERT_OK(rt->create_stream(0, &s));
  std::vector<float> host(64, 3.0f);
  void* dev = nullptr;
  ASSERT_OK(rt->alloc_device(0, 64 * sizeof(float), &dev));
  kernels::ReduceArgs k;
  k.dst0 = host.data();
  k.a = dev;
  k.count = 64;
  EXPECT_FALSE(rt->reduce_async(k, ACCORD_FLOAT32, ACCORD_SUM, s).ok());  // pageable: refused
  ASSERT_OK(rt->register_host(host.data(), host.size() * sizeof(float)));
  PointerInfo info;
  ASSERT_OK(rt->pointer_info(host.data() + 3, &info));
  EXPECT_EQ(info.kind, MemoryKind::kHostPinned);
  EXPECT_FALSE(rt->register_host(host.data() + 8, 16).ok());  // overlaps
  EXPECT_FALSE(rt->free_host_pinned(host.data()).ok());       // not the runtime's to free
  std::vector<float> zeros(64, 0.0f);
  ASSERT_OK(rt->copy(CopyKind::kHostToDevice, 0, dev, zeros.data(), 64 * sizeof(float)));
  // The reduction kernel's first launch, before the stream is held: with lazy loading, a first
  // launch waits for the device to go idle (Note [Simulated CUDA rules]).
  ASSERT_OK(rt->reduce_async(k, ACCORD_FLOAT32, ACCORD_SUM, s));
  ASSERT_OK(rt->synchronize_stream(s));
  std::fill(host.begin(), host.end(), 3.0f);
  std::atomic<uint64_t> flag{0};
  ASSERT_OK(rt->stream_wait_flag(s, &flag, 2));
  ASSERT_OK(rt->reduce_async(k, ACCORD_FLOAT32, ACCORD_SUM, s));  // host = dev (zeros), after the flag
  flag.store(1);
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  EXPECT_EQ(host[0], 3.0f) << "ran before the flag reached its value";
  flag.store(2);
  ASSERT_OK(rt->synchronize_stream(s));
  for (float v : host) ASSERT_EQ(v, 0.0f);
  ASSERT_OK(rt->unregister_host(host.data()));
  EXPECT_FALSE(rt->unregister_host(host.data()).ok());
  EXPECT_FALSE(rt->reduce_async(k, ACCORD_FLOAT32, ACCORD_SUM, s).ok());
  ASSERT_OK(rt->free_device(dev));
  ASSERT_OK(rt->destroy_stream(s));
}

}  // namespace
}  // namespace accord::testing
