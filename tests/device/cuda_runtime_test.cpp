// The CUDA adapter on a real GPU (suite 'gpu'): skips without CUDA or without a device. Covers
// the same rules as the simulated tests: copies, streams and events, peer access consistent
// with cudaDeviceCanAccessPeer, pointer queries, a reduction when the kernels are linked.
#include <atomic>
#include <cstdio>
#include <chrono>
#include <thread>
#include <vector>

#include "accord_config.h"
#include "tests/device/sim_util.hpp"
#include "tests/support/harness.hpp"
#if ACCORD_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "transport/device/cuda_runtime.hpp"
#endif

namespace accord::testing {
namespace {

#if ACCORD_HAVE_CUDA
std::unique_ptr<CudaRuntime> cuda_or_skip() {
  std::unique_ptr<CudaRuntime> rt;
  Status st = CudaRuntime::create(&rt);
  EXPECT_TRUE(st.ok()) << st.message();
  return rt;
}
#define REQUIRE_GPU(rt)                                                              \
  auto rt = cuda_or_skip();                                                          \
  if (!rt || rt->device_count() == 0)                                                \
    GTEST_SKIP() << "no CUDA device: " << (rt ? rt->unavailable_reason() : "create failed")
#else
#define REQUIRE_GPU(rt) GTEST_SKIP() << "built without CUDA"; \
  std::unique_ptr<DeviceRuntime> rt
#endif

TEST(CudaRuntime, CopiesStreamsAndEvents) {
  REQUIRE_GPU(rt);
  const size_t n = 1 << 20;
  std::vector<int32_t> host(n), back(n, 0);
  for (size_t i = 0; i < n; ++i) host[i] = static_cast<int32_t>(i);
  void *d, *d2, *pinned;
  ASSERT_OK(rt->alloc_device(0, n * 4, &d));
  ASSERT_OK(rt->alloc_device(0, n * 4, &d2));
  ASSERT_OK(rt->alloc_host_pinned(n * 4, &pinned));
  PointerInfo info;
  ASSERT_OK(rt->pointer_info(static_cast<char*>(d) + 8, &info));
  EXPECT_EQ(info.kind, MemoryKind::kDevice);
  EXPECT_EQ(info.device, 0);
  EXPECT_EQ(info.base, d);
  ASSERT_OK(rt->pointer_info(pinned, &info));
  EXPECT_EQ(info.kind, MemoryKind::kHostPinned);
  Stream a, b;
  Event e;
  ASSERT_OK(rt->create_stream(0, &a));
  ASSERT_OK(rt->create_stream(0, &b));
  ASSERT_OK(rt->create_event(0, &e));
  ASSERT_OK(rt->copy_async(CopyKind::kHostToDevice, d, host.data(), n * 4, a));
  ASSERT_OK(rt->copy_async(CopyKind::kDeviceToDevice, d2, d, n * 4, a));
  ASSERT_OK(rt->record_event(e, a));
  ASSERT_OK(rt->stream_wait_event(b, e));
  ASSERT_OK(rt->copy_async(CopyKind::kDeviceToHost, back.data(), d2, n * 4, b));
  ASSERT_OK(rt->synchronize_stream(b));
  bool done = false;
  ASSERT_OK(rt->query_event(e, &done));
  EXPECT_TRUE(done);
  EXPECT_EQ(back, host);
  ASSERT_OK(rt->destroy_event(e));
  ASSERT_OK(rt->destroy_stream(a));
  ASSERT_OK(rt->destroy_stream(b));
  ASSERT_OK(rt->free_device(d));
  ASSERT_OK(rt->free_device(d2));
  ASSERT_OK(rt->free_host_pinned(pinned));
  EXPECT_FALSE(rt->free_device(d).ok());
}

TEST(CudaRuntime, PeerAccessFollowsCanAccessPeer) {
  REQUIRE_GPU(rt);
  for (int a = 0; a < rt->device_count(); ++a)
    for (int b = 0; b < rt->device_count(); ++b) {
      if (a == b) continue;
      bool can = false;
      ASSERT_OK(rt->can_access_peer(a, b, &can));
      Status st = rt->enable_peer(a, b);
      if (can) {
        EXPECT_OK(st);
      } else {
        EXPECT_TRUE(fails_with(st, ACCORD_ERR_UNSUPPORTED, kPeerAccessUnsupportedText));
      }
    }
}

TEST(CudaRuntime, ReductionOrUnsupported) {
  REQUIRE_GPU(rt);
  const size_t n = 1000;
  std::vector<float> a(n), b(n), want(n), got(n);
  fill_input(a.data(), n, ACCORD_FLOAT32, ACCORD_SUM, 0, 2);
  fill_input(b.data(), n, ACCORD_FLOAT32, ACCORD_SUM, 1, 2);
  fill_expected(want.data(), n, ACCORD_FLOAT32, ACCORD_SUM, 2);
  void *da, *db;
  ASSERT_OK(rt->alloc_device(0, n * 4, &da));
  ASSERT_OK(rt->alloc_device(0, n * 4, &db));
  ASSERT_OK(rt->copy(CopyKind::kHostToDevice, 0, da, a.data(), n * 4));
  ASSERT_OK(rt->copy(CopyKind::kHostToDevice, 0, db, b.data(), n * 4));
  Stream s;
  ASSERT_OK(rt->create_stream(0, &s));
  kernels::ReduceArgs args;
  args.dst0 = da;
  args.a = da;
  args.b = db;
  args.count = n;
  Status st = rt->reduce_async(args, ACCORD_FLOAT32, ACCORD_SUM, s);
  if (st.code() == ACCORD_ERR_UNSUPPORTED) {
    std::printf("reduce_async: %s\n", st.message().c_str());
  } else {
    ASSERT_OK(st);
    ASSERT_OK(rt->copy_async(CopyKind::kDeviceToHost, got.data(), da, n * 4, s));
    ASSERT_OK(rt->synchronize_stream(s));
    EXPECT_EQ(count_mismatches(got.data(), want.data(), n, ACCORD_FLOAT32), 0u);
  }
  ASSERT_OK(rt->destroy_stream(s));
  ASSERT_OK(rt->free_device(da));
  ASSERT_OK(rt->free_device(db));
}

#if ACCORD_HAVE_CUDA
// Note [Caller's device]: a call on another GPU gives the thread's current device back, and
// current_device reports the thread's device.
TEST(CudaRuntime, CallerKeepsItsCurrentDevice) {
  REQUIRE_GPU(rt);
  const int last = rt->device_count() - 1;
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  ASSERT_EQ(cudaFree(nullptr), cudaSuccess);  // make the context current
  int current = -1;
  ASSERT_OK(rt->current_device(&current));
  EXPECT_EQ(current, 0);
  void* d = nullptr;
  Stream s;
  ASSERT_OK(rt->alloc_device(last, 4096, &d));
  ASSERT_OK(rt->create_stream(last, &s));
  int now = -1;
  ASSERT_EQ(cudaGetDevice(&now), cudaSuccess);
  EXPECT_EQ(now, 0);
  ASSERT_OK(rt->destroy_stream(s));
  ASSERT_OK(rt->free_device(d));
}

// The GPU waits on a flag from new_flag until a host thread sets it (cuStreamWaitValue64, or
// the host-function fallback): work behind the wait must not run before.
TEST(CudaRuntime, StreamWaitsForFlag) {
  REQUIRE_GPU(rt);
  std::atomic<uint64_t>* flag = rt->new_flag();
  ASSERT_NE(flag, nullptr);
  Stream s;
  Event e;
  ASSERT_OK(rt->create_stream(0, &s));
  ASSERT_OK(rt->create_event(0, &e));
  ASSERT_OK(rt->stream_wait_flag(s, flag, 1));
  ASSERT_OK(rt->record_event(e, s));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  bool done = true;
  ASSERT_OK(rt->query_event(e, &done));
  EXPECT_FALSE(done);
  flag->store(1, std::memory_order_release);
  ASSERT_OK(rt->synchronize_event(e));
  ASSERT_OK(rt->destroy_event(e));
  ASSERT_OK(rt->destroy_stream(s));
}

// Note [Stream memory operations]: one stream waits on a device word (EQ, then GEQ on a 64-bit
// word) that another stream writes; the work after the wait (a write into pinned host memory,
// which the host reads) runs only once the word is there.
TEST(CudaRuntime, StreamWriteAndWaitValue) {
  REQUIRE_GPU(rt);
  void *word, *pinned;
  ASSERT_OK(rt->alloc_device(0, 16, &word));
  ASSERT_OK(rt->alloc_host_pinned(16, &pinned));
  void* pinned_dev = nullptr;
  ASSERT_OK(rt->device_address(pinned, &pinned_dev));
  auto* host = static_cast<volatile uint64_t*>(pinned);
  host[0] = 0;
  host[1] = 0;
  Stream waiter, writer;
  ASSERT_OK(rt->create_stream(0, &waiter));
  ASSERT_OK(rt->create_stream(0, &writer));
  ASSERT_OK(rt->memset_async(word, 0, 16, writer));
  ASSERT_OK(rt->synchronize_stream(writer));
  ASSERT_OK(rt->stream_wait_value32(waiter, word, 3, DeviceRuntime::WaitCondition::kEq));
  ASSERT_OK(rt->stream_write_value32(waiter, pinned_dev, 11));
  ASSERT_OK(rt->stream_write_value32(writer, word, 4));  // not EQ 3
  ASSERT_OK(rt->synchronize_stream(writer));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(host[0], 0u) << "ran after an unsatisfied wait";
  ASSERT_OK(rt->stream_write_value32(writer, word, 3));
  ASSERT_OK(rt->synchronize_stream(waiter));
  EXPECT_EQ(host[0], 11u);
  void* word64 = static_cast<char*>(word) + 8;
  Status st = rt->stream_wait_value64(waiter, word64, uint64_t{1} << 40, DeviceRuntime::WaitCondition::kGeq);
  if (st.code() == ACCORD_ERR_UNSUPPORTED) {
    std::printf("64-bit stream memory operations unsupported here: %s\n", st.message().c_str());
  } else {
    ASSERT_OK(st);
    ASSERT_OK(rt->stream_write_value64(waiter, static_cast<char*>(pinned_dev) + 8, 22));
    ASSERT_OK(rt->stream_write_value64(writer, word64, (uint64_t{1} << 40) + 1));
    ASSERT_OK(rt->synchronize_stream(waiter));
    EXPECT_EQ(host[1], 22u);
  }
  EXPECT_FALSE(rt->stream_write_value64(writer, static_cast<char*>(word) + 4, 1).ok()) << "misaligned";
  ASSERT_OK(rt->destroy_stream(waiter));
  ASSERT_OK(rt->destroy_stream(writer));
  ASSERT_OK(rt->free_device(word));
  ASSERT_OK(rt->free_host_pinned(pinned));
}
#endif

TEST(CudaRuntime, BadInputs) {
  REQUIRE_GPU(rt);
  void* p;
  EXPECT_TRUE(fails_with(rt->alloc_device(rt->device_count(), 64, &p), ACCORD_ERR_INVALID_ARGUMENT, "does not exist"));
  EXPECT_TRUE(fails_with(rt->synchronize_stream(Stream{999}), ACCORD_ERR_INVALID_ARGUMENT, "stream 999"));
  EXPECT_TRUE(fails_with(rt->free_device(reinterpret_cast<void*>(0x1000)), ACCORD_ERR_INVALID_ARGUMENT,
                         "not an allocation"));
}

}  // namespace
}  // namespace accord::testing
