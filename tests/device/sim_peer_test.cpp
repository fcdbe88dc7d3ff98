// Simulated GPUs on real topologies: peer access exactly as the System says (with the driver's
// words), direct copies refused without it, staged copies always working, pointer queries,
// and bad input turned into errors.
#include <algorithm>
#include <cstring>
#include <numeric>
#include <vector>

#include "tests/device/sim_util.hpp"

namespace accord::testing {
namespace {

class PeerMatrix : public ::testing::TestWithParam<const char*> {};

TEST_P(PeerMatrix, EnablePeerFailsExactlyWhereTheSystemSaysNoPeer) {
  auto rt = make_sim(GetParam());
  ASSERT_TRUE(rt);
  const topo::System& sys = rt->system();
  const int n = rt->device_count();
  ASSERT_GT(n, 1);
  for (int a = 0; a < n; ++a)
    for (int b = 0; b < n; ++b) {
      SCOPED_TRACE(::testing::Message() << "GPU" << a << " -> GPU" << b);
      bool can = true;
      ASSERT_OK(rt->can_access_peer(a, b, &can));
      Status st = rt->enable_peer(a, b);
      if (a == b) {
        EXPECT_FALSE(can);
        EXPECT_TRUE(fails_with(st, ACCORD_ERR_INVALID_ARGUMENT, "itself"));
      } else if (sys.p2p(a, b)) {
        EXPECT_TRUE(can);
        EXPECT_OK(st);
        EXPECT_OK(rt->enable_peer(a, b));  // twice is fine
      } else {
        EXPECT_FALSE(can);
        EXPECT_TRUE(fails_with(st, ACCORD_ERR_UNSUPPORTED, kPeerAccessUnsupportedText));
        EXPECT_TRUE(fails_with(st, ACCORD_ERR_UNSUPPORTED, sys.p2p_reason(a, b)));
        EXPECT_TRUE(fails_with(st, ACCORD_ERR_UNSUPPORTED, format("enable_peer(%d -> %d)", a, b)));
      }
    }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, PeerMatrix, ::testing::Values(kDgx1, kTf4));

TEST(SimPeer, FixturesHaveTheExpectedShape) {
  auto tf = make_sim(kTf4);
  ASSERT_TRUE(tf);
  EXPECT_EQ(tf->device_count(), 4);
  EXPECT_STREQ(tf->kind(), "simulated");
  for (int a = 0; a < 4; ++a)
    for (int b = 0; b < 4; ++b)
      if (a != b) {
        EXPECT_EQ(tf->system().p2p(a, b), (a < 2) == (b < 2)) << a << "," << b;
      }
  auto dgx = make_sim(kDgx1);
  ASSERT_TRUE(dgx);
  EXPECT_EQ(dgx->device_count(), 8);
  EXPECT_TRUE(dgx->system().p2p(0, 4));   // NV2
  EXPECT_FALSE(dgx->system().p2p(0, 5));  // SYS
  std::vector<std::string> ids;
  for (int d = 0; d < 8; ++d) {
    DeviceInfo info;
    ASSERT_OK(dgx->device_info(d, &info));
    EXPECT_FALSE(info.name.empty());
    ids.push_back(info.pci_bus_id);
    EXPECT_EQ(topo::normalize_bus_id(info.pci_bus_id), info.pci_bus_id);
  }
  std::sort(ids.begin(), ids.end());
  EXPECT_EQ(std::unique(ids.begin(), ids.end()), ids.end()) << "bus ids must be distinct";
}

// Fills a device buffer with 0, 1, 2, ... (int32) through a synchronous copy.
void fill_iota(DeviceRuntime& rt, int device, void* dev, size_t count, int start) {
  std::vector<int32_t> v(count);
  std::iota(v.begin(), v.end(), start);
  Status st = rt.copy(CopyKind::kHostToDevice, device, dev, v.data(), count * 4);
  ASSERT_TRUE(st.ok()) << st.message();
}

TEST(SimPeer, DirectCopiesNeedPeerAccessFromTheDeviceThatRunsThem) {
  auto rt = make_sim(kTf4);
  ASSERT_TRUE(rt);
  const size_t n = 1000;
  void *d0, *d1;
  ASSERT_OK(rt->alloc_device(0, n * 4, &d0));
  ASSERT_OK(rt->alloc_device(1, n * 4, &d1));
  fill_iota(*rt, 0, d0, n, 0);
  EXPECT_TRUE(fails_with(rt->copy_peer(1, d1, 0, d0, n * 4), ACCORD_ERR_INVALID_USAGE, kPeerAccessNotEnabledText));
  EXPECT_TRUE(fails_with(rt->copy_peer(1, d1, 0, d0, n * 4), ACCORD_ERR_INVALID_USAGE, "enable_peer(0, 1)"));
  // A device pointer of device 0 used by device 1's work is caught the same way.
  EXPECT_TRUE(fails_with(rt->copy(CopyKind::kDeviceToDevice, 1, d1, d0, n * 4), ACCORD_ERR_INVALID_USAGE,
                         "memory of device 0"));
  ASSERT_OK(rt->enable_peer(0, 1));
  ASSERT_OK(rt->copy_peer(1, d1, 0, d0, n * 4));  // pushed by device 0
  std::vector<int32_t> out(n);
  ASSERT_OK(rt->copy(CopyKind::kDeviceToHost, 1, out.data(), d1, n * 4));
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(out[i], static_cast<int32_t>(i));
  // The other direction is not enabled yet: pushing from 1 to 0 fails, and so does pulling
  // into device 1 on a stream of device 1.
  EXPECT_TRUE(fails_with(rt->copy_peer(0, d0, 1, d1, n * 4), ACCORD_ERR_INVALID_USAGE, "enable_peer(1, 0)"));
  Stream s1;
  ASSERT_OK(rt->create_stream(1, &s1));
  EXPECT_TRUE(fails_with(rt->copy_peer_async(1, d1, 0, d0, n * 4, s1), ACCORD_ERR_INVALID_USAGE, "enable_peer(1, 0)"));
  ASSERT_OK(rt->enable_peer(1, 0));
  fill_iota(*rt, 0, d0, n, 100);
  ASSERT_OK(rt->copy_peer_async(1, d1, 0, d0, n * 4, s1));
  ASSERT_OK(rt->copy_async(CopyKind::kDeviceToHost, out.data(), d1, n * 4, s1));
  ASSERT_OK(rt->synchronize_stream(s1));
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(out[i], static_cast<int32_t>(i + 100));
  // A stream of a third device cannot run the copy.
  Stream s2;
  ASSERT_OK(rt->create_stream(2, &s2));
  EXPECT_TRUE(fails_with(rt->copy_peer_async(1, d1, 0, d0, n * 4, s2), ACCORD_ERR_INVALID_ARGUMENT, "on device 2"));
  // Naming the wrong device for a pointer is an error even with peer access.
  EXPECT_TRUE(fails_with(rt->copy_peer(0, d1, 1, d0, n * 4), ACCORD_ERR_INVALID_ARGUMENT, "call names device"));
  ASSERT_OK(rt->destroy_stream(s1));
  ASSERT_OK(rt->destroy_stream(s2));
  ASSERT_OK(rt->free_device(d0));
  ASSERT_OK(rt->free_device(d1));
}

TEST(SimPeer, GpusThatCannotPeerCopyThroughPinnedHostMemory) {
  auto rt = make_sim(kTf4);
  ASSERT_TRUE(rt);
  const size_t n = 4096;
  void *d0, *d2, *pinned;
  ASSERT_OK(rt->alloc_device(0, n * 4, &d0));
  ASSERT_OK(rt->alloc_device(2, n * 4, &d2));
  ASSERT_OK(rt->alloc_host_pinned(n * 4, &pinned));
  fill_iota(*rt, 0, d0, n, 7);
  Status direct = rt->copy_peer(2, d2, 0, d0, n * 4);
  EXPECT_TRUE(fails_with(direct, ACCORD_ERR_INVALID_USAGE, "they cannot peer"));
  EXPECT_TRUE(fails_with(direct, ACCORD_ERR_INVALID_USAGE, rt->system().p2p_reason(0, 2)));
  EXPECT_TRUE(fails_with(rt->copy(CopyKind::kDeviceToDevice, 2, d2, d0, n * 4), ACCORD_ERR_INVALID_USAGE,
                         "memory of device 0"));
  // Staged: device 0 -> pinned on a stream of device 0, event, pinned -> device 2 on a stream
  // of device 2 that waits for it.
  Stream s0, s2;
  Event copied;
  ASSERT_OK(rt->create_stream(0, &s0));
  ASSERT_OK(rt->create_stream(2, &s2));
  ASSERT_OK(rt->create_event(0, &copied));
  ASSERT_OK(rt->copy_async(CopyKind::kDeviceToHost, pinned, d0, n * 4, s0));
  ASSERT_OK(rt->record_event(copied, s0));
  ASSERT_OK(rt->stream_wait_event(s2, copied));
  ASSERT_OK(rt->copy_async(CopyKind::kHostToDevice, d2, pinned, n * 4, s2));
  ASSERT_OK(rt->synchronize_stream(s2));
  std::vector<int32_t> out(n);
  ASSERT_OK(rt->copy(CopyKind::kDeviceToHost, 2, out.data(), d2, n * 4));
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(out[i], static_cast<int32_t>(i + 7));
  ASSERT_OK(rt->destroy_event(copied));
  ASSERT_OK(rt->destroy_stream(s0));
  ASSERT_OK(rt->destroy_stream(s2));
  ASSERT_OK(rt->free_host_pinned(pinned));
  ASSERT_OK(rt->free_device(d0));
  ASSERT_OK(rt->free_device(d2));
}

TEST(SimPeer, DeviceMemoryOfAnotherDeviceNeedsPeerAccess) {
  auto rt = make_sim(kDgx1);
  ASSERT_TRUE(rt);
  void* d2;
  ASSERT_OK(rt->alloc_device(2, 256, &d2));
  char host[256] = {1};
  Status st = rt->copy(CopyKind::kHostToDevice, 0, d2, host, sizeof host);
  EXPECT_TRUE(fails_with(st, ACCORD_ERR_INVALID_USAGE, "memory of device 2"));
  EXPECT_TRUE(fails_with(st, ACCORD_ERR_INVALID_USAGE, "enable_peer(0, 2)"));
  ASSERT_OK(rt->enable_peer(0, 2));  // NV1 on a DGX-1
  EXPECT_OK(rt->copy(CopyKind::kHostToDevice, 0, d2, host, sizeof host));
  ASSERT_OK(rt->free_device(d2));
}

TEST(SimPeer, PointerQueries) {
  auto rt = make_sim(kDgx1);
  ASSERT_TRUE(rt);
  void *d5, *pinned;
  ASSERT_OK(rt->alloc_device(5, 10000, &d5));
  ASSERT_OK(rt->alloc_host_pinned(100, &pinned));
  PointerInfo info;
  ASSERT_OK(rt->pointer_info(static_cast<char*>(d5) + 9999, &info));
  EXPECT_EQ(info.kind, MemoryKind::kDevice);
  EXPECT_EQ(info.device, 5);
  EXPECT_EQ(info.base, d5);
  EXPECT_EQ(info.bytes, 10000u);
  EXPECT_FALSE(info.imported);
  ASSERT_OK(rt->pointer_info(pinned, &info));
  EXPECT_EQ(info.kind, MemoryKind::kHostPinned);
  EXPECT_EQ(info.device, -1);
  int local = 0;
  ASSERT_OK(rt->pointer_info(&local, &info));
  EXPECT_EQ(info.kind, MemoryKind::kHost);
  ASSERT_OK(rt->pointer_info(nullptr, &info));
  EXPECT_EQ(info.kind, MemoryKind::kHost);
  ASSERT_OK(rt->free_device(d5));
  ASSERT_OK(rt->pointer_info(d5, &info));
  EXPECT_EQ(info.kind, MemoryKind::kHost) << "freed memory is no longer device memory";
  ASSERT_OK(rt->free_host_pinned(pinned));
}

TEST(SimPeer, BadInputsAreErrors) {
  auto rt = make_sim(kDgx1);
  ASSERT_TRUE(rt);
  void* p = nullptr;
  EXPECT_TRUE(fails_with(rt->alloc_device(8, 16, &p), ACCORD_ERR_INVALID_ARGUMENT, "devices 0-7"));
  EXPECT_TRUE(fails_with(rt->alloc_device(-1, 16, &p), ACCORD_ERR_INVALID_ARGUMENT, "device -1 does not exist"));
  EXPECT_TRUE(fails_with(rt->enable_peer(0, 9), ACCORD_ERR_INVALID_ARGUMENT, "device 9"));
  EXPECT_TRUE(fails_with(rt->alloc_device(0, 16, nullptr), ACCORD_ERR_INVALID_ARGUMENT, "null"));
  ASSERT_OK(rt->alloc_device(0, 0, &p));
  EXPECT_EQ(p, nullptr);
  EXPECT_OK(rt->free_device(nullptr));

  void *d, *pinned;
  ASSERT_OK(rt->alloc_device(0, 64, &d));
  ASSERT_OK(rt->alloc_host_pinned(64, &pinned));
  char host[128] = {};
  EXPECT_TRUE(fails_with(rt->copy(CopyKind::kHostToDevice, 0, d, nullptr, 8), ACCORD_ERR_INVALID_ARGUMENT, "src is null"));
  EXPECT_TRUE(fails_with(rt->copy(CopyKind::kHostToDevice, 0, nullptr, host, 8), ACCORD_ERR_INVALID_ARGUMENT, "dst is null"));
  EXPECT_TRUE(fails_with(rt->copy(CopyKind::kHostToDevice, 0, d, host, 65), ACCORD_ERR_INVALID_ARGUMENT,
                         "past the end"));
  EXPECT_TRUE(fails_with(rt->copy(CopyKind::kDeviceToHost, 0, host, host + 64, 8), ACCORD_ERR_INVALID_ARGUMENT,
                         "not device memory"));
  EXPECT_TRUE(fails_with(rt->copy(CopyKind::kHostToDevice, 0, d, d, 8), ACCORD_ERR_INVALID_ARGUMENT,
                         "not host memory"));
  EXPECT_TRUE(fails_with(rt->copy(CopyKind::kHostToDevice, 0, pinned, host, 8), ACCORD_ERR_INVALID_ARGUMENT,
                         "pinned host memory"));
  EXPECT_OK(rt->copy(CopyKind::kHostToDevice, 0, d, pinned, 64));  // pinned is a fine host side
  EXPECT_OK(rt->copy(CopyKind::kHostToDevice, 0, nullptr, nullptr, 0));  // nothing to do
  EXPECT_TRUE(fails_with(rt->free_device(static_cast<char*>(d) + 8), ACCORD_ERR_INVALID_ARGUMENT, "inside an allocation"));
  EXPECT_TRUE(fails_with(rt->free_device(pinned), ACCORD_ERR_INVALID_ARGUMENT, "free_host_pinned"));
  EXPECT_TRUE(fails_with(rt->free_host_pinned(d), ACCORD_ERR_INVALID_ARGUMENT, "free_device"));
  ASSERT_OK(rt->free_device(d));
  EXPECT_TRUE(fails_with(rt->free_device(d), ACCORD_ERR_INVALID_ARGUMENT, "freed already"));
  EXPECT_TRUE(fails_with(rt->copy(CopyKind::kHostToDevice, 0, d, host, 8), ACCORD_ERR_INVALID_ARGUMENT,
                         "freed memory"));
  ASSERT_OK(rt->free_host_pinned(pinned));

  Stream s;
  Event e;
  ASSERT_OK(rt->create_stream(3, &s));
  ASSERT_OK(rt->create_event(4, &e));
  EXPECT_TRUE(fails_with(rt->record_event(e, s), ACCORD_ERR_INVALID_ARGUMENT, "device 4 but stream"));
  ASSERT_OK(rt->destroy_stream(s));
  EXPECT_TRUE(fails_with(rt->synchronize_stream(s), ACCORD_ERR_INVALID_ARGUMENT, "does not exist"));
  EXPECT_TRUE(fails_with(rt->copy_async(CopyKind::kHostToDevice, host, host, 8, s), ACCORD_ERR_INVALID_ARGUMENT,
                         "does not exist"));
  EXPECT_TRUE(fails_with(rt->query_event(Event{12345}, nullptr), ACCORD_ERR_INVALID_ARGUMENT, "event 12345"));
  EXPECT_TRUE(fails_with(rt->synchronize_stream(Stream{}), ACCORD_ERR_INVALID_ARGUMENT, "stream 0"));
  ASSERT_OK(rt->destroy_event(e));
}

TEST(SimPeer, ARuntimeWithoutGpusSaysWhy) {
  SimOptions o;
  o.no_devices_reason = "CUDA: cudaErrorInsufficientDriver";
  SimulatedRuntime rt(topo::System{}, o);
  EXPECT_STREQ(rt.kind(), "none");
  EXPECT_EQ(rt.device_count(), 0);
  void* p;
  Status st = rt.alloc_device(0, 16, &p);
  EXPECT_TRUE(fails_with(st, ACCORD_ERR_UNSUPPORTED, "cudaErrorInsufficientDriver"));
  EXPECT_TRUE(fails_with(st, ACCORD_ERR_UNSUPPORTED, "ACCORD_SIM_TOPO"));
  int x;
  PointerInfo info;
  ASSERT_OK(rt.pointer_info(&x, &info));
  EXPECT_EQ(info.kind, MemoryKind::kHost);
}

}  // namespace
}  // namespace accord::testing
