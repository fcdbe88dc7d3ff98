// Note [Simulated CUDA rules] (transport/device/sim_runtime.hpp): the simulation enforces the
// rules of CUDA that the first device path broke, so that a design which hangs on a GPU fails
// here. Each test holds a stream the way that design held the caller's stream (a flag only
// this thread sets later; stream_wait_flag is the simulation of cuStreamWaitValue64) and then
// makes the call that hung on an H100: with the rule, the call fails after the stall limit
// instead of passing. The same calls pass when nothing holds the device.
#include <atomic>
#include <chrono>
#include <thread>

#include "collectives/device/dev_kernels.hpp"
#include "tests/device/sim_util.hpp"

namespace accord::testing {
namespace {

constexpr int64_t kStallMs = 300;

std::unique_ptr<SimulatedRuntime> make_strict() {
  SimOptions o;
  o.stall_ms = kStallMs;
  return make_sim(kTf4, o);
}

// A stream of `device` held until the flag is set to 1. Going out of scope releases it and
// waits until the stream has passed the flag, which lives here.
struct Held {
  std::atomic<uint64_t> flag{0};
  Stream stream;
  SimulatedRuntime* rt = nullptr;
  ~Held() {
    flag.store(1);
    if (rt != nullptr) (void)rt->synchronize_stream(stream);
  }
};

void hold(SimulatedRuntime* rt, int device, Held* h, bool blocking = false) {
  ASSERT_OK(rt->create_stream(device, &h->stream, blocking));
  ASSERT_OK(rt->stream_wait_flag(h->stream, &h->flag, 1));
  h->rt = rt;
}

void noop(const void*) {}

KernelDesc kernel_named(const char* name) {
  KernelDesc k;
  k.name = name;
  k.host_func = &noop;
  return k;
}

// 6e24fe8's design: the worker launched its first reduction kernel while the caller's stream
// was held until the worker finished. With lazy loading that launch waits for the device.
TEST(SimRules, FirstLaunchOfAKernelWaitsForTheDeviceToGoIdle) {
  auto rt = make_strict();
  ASSERT_TRUE(rt);
  Held held;
  ASSERT_NO_FATAL_FAILURE(hold(rt.get(), 0, &held));
  Stream worker;
  ASSERT_OK(rt->create_stream(0, &worker));
  const char params[8] = {};
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_TRUE(fails_with(rt->launch_kernel(kernel_named("lazy"), params, sizeof params, worker), ACCORD_ERR_CUDA,
                         "lazy loading"));
  EXPECT_GE(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(kStallMs));
  // The reduction kernels too (the old DeviceMover's reduce_async).
  void* d = nullptr;
  held.flag.store(1);
  ASSERT_OK(rt->synchronize_stream(held.stream));
  ASSERT_OK(rt->alloc_device(0, 64, &d));
  Held again;
  ASSERT_NO_FATAL_FAILURE(hold(rt.get(), 0, &again));
  kernels::ReduceArgs k;
  k.dst0 = d;
  k.a = d;
  k.count = 16;
  EXPECT_TRUE(fails_with(rt->reduce_async(k, ACCORD_FLOAT32, ACCORD_SUM, worker), ACCORD_ERR_CUDA, "lazy loading"));
  // Loaded ahead (as the communicator does at init), the launch returns at once.
  ASSERT_OK(rt->load_kernel(0, kernel_named("eager")));
  ASSERT_OK(rt->launch_kernel(kernel_named("eager"), params, sizeof params, worker));
  // And the collective kernel loads on every GPU.
  for (int dev = 0; dev < rt->device_count(); ++dev) ASSERT_OK(rt->load_kernel(dev, dev::collective_kernel()));
  // Another device is not held: its first launch goes through.
  Stream other;
  ASSERT_OK(rt->create_stream(1, &other));
  ASSERT_OK(rt->launch_kernel(kernel_named("lazy"), params, sizeof params, other));
  again.flag.store(1);
  ASSERT_OK(rt->synchronize_stream(worker));
  ASSERT_OK(rt->free_device(d));
}

// cudaFree, cudaMalloc, cudaHostRegister and cudaEventDestroy wait for the device: the old
// worker destroyed its event while the caller's stream it was holding waited for the worker.
TEST(SimRules, ImplicitlySynchronizingCallsWaitForTheDevice) {
  auto rt = make_strict();
  ASSERT_TRUE(rt);
  void* d = nullptr;
  ASSERT_OK(rt->alloc_device(0, 64, &d));
  Event e;
  ASSERT_OK(rt->create_event(0, &e));
  std::vector<char> host(4096);
  {
    Held held;
    ASSERT_NO_FATAL_FAILURE(hold(rt.get(), 0, &held));
    void* more = nullptr;
    EXPECT_TRUE(fails_with(rt->alloc_device(0, 64, &more), ACCORD_ERR_CUDA, "cudaMalloc"));
    EXPECT_TRUE(fails_with(rt->free_device(d), ACCORD_ERR_CUDA, "cudaFree"));
    EXPECT_TRUE(fails_with(rt->destroy_event(e), ACCORD_ERR_CUDA, "event destruction"));
    EXPECT_TRUE(fails_with(rt->register_host(host.data(), host.size()), ACCORD_ERR_CUDA, "cudaHostRegister"));
    // A device nobody holds: its memory comes and goes at once.
    void* on1 = nullptr;
    ASSERT_OK(rt->alloc_device(1, 64, &on1));
    ASSERT_OK(rt->free_device(on1));
    // Calls that do not synchronize pass.
    Event e2;
    ASSERT_OK(rt->create_event(0, &e2));
    ASSERT_OK(rt->record_event(e2, held.stream));
    held.flag.store(1);
    ASSERT_OK(rt->synchronize_event(e2));
    ASSERT_OK(rt->destroy_event(e2));
  }
  ASSERT_OK(rt->register_host(host.data(), host.size()));
  ASSERT_OK(rt->unregister_host(host.data()));
  ASSERT_OK(rt->destroy_event(e));
  ASSERT_OK(rt->free_device(d));
}

// A synchronous copy (cudaMemcpy) runs on the legacy default stream: it waits for the blocking
// streams of its device (users' streams, made as cudaStreamCreate makes them), not for
// non-blocking ones (Accord's own).
TEST(SimRules, SynchronousCopiesWaitForBlockingStreams) {
  auto rt = make_strict();
  ASSERT_TRUE(rt);
  void* d = nullptr;
  ASSERT_OK(rt->alloc_device(0, 64, &d));
  char buf[64] = {};
  {
    Held nonblocking;
    ASSERT_NO_FATAL_FAILURE(hold(rt.get(), 0, &nonblocking, false));
    ASSERT_OK(rt->copy(CopyKind::kHostToDevice, 0, d, buf, sizeof buf));
    Held blocking;
    ASSERT_NO_FATAL_FAILURE(hold(rt.get(), 0, &blocking, true));
    EXPECT_TRUE(fails_with(rt->copy(CopyKind::kDeviceToHost, 0, buf, d, sizeof buf), ACCORD_ERR_CUDA,
                           "legacy default stream"));
  }
  ASSERT_OK(rt->free_device(d));
}

// No CUDA call inside a host function (cudaLaunchHostFunc): the call fails, the stream goes on.
struct CallFromHostFn {
  SimulatedRuntime* rt;
  Status result;
  static void run(void* arg) {
    auto* self = static_cast<CallFromHostFn*>(arg);
    Event e;
    self->result = self->rt->create_event(0, &e);
  }
};

TEST(SimRules, HostFunctionsMayNotCallTheRuntime) {
  auto rt = make_strict();
  ASSERT_TRUE(rt);
  Stream s;
  ASSERT_OK(rt->create_stream(0, &s));
  CallFromHostFn call{rt.get(), Status()};
  ASSERT_OK(rt->launch_host_func(s, &CallFromHostFn::run, &call));
  ASSERT_OK(rt->synchronize_stream(s));
  EXPECT_TRUE(fails_with(call.result, ACCORD_ERR_INVALID_USAGE, "cudaErrorNotPermitted"));
  // Outside a host function the same call works.
  Event e;
  ASSERT_OK(rt->create_event(0, &e));
  ASSERT_OK(rt->destroy_event(e));
}

}  // namespace
}  // namespace accord::testing
