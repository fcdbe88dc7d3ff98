// CUDA_VISIBLE_DEVICES on simulated GPUs (Note [Simulated visible devices]): the process sees
// the listed GPUs of the machine, renumbered from 0 in the list's order; entries are indices or
// UUID prefixes; the first bad or repeated entry ends the list, and an empty list hides every
// GPU. Bus ids and UUIDs stay the machine's; a hidden GPU is not found by bus id; peer access
// and the peers a GPU lists are the machine's, visible or not.
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "tests/device/sim_util.hpp"

namespace accord::testing {
namespace {

SimOptions visible(const std::string& list) {
  SimOptions o;
  o.visible_set = true;
  o.visible_devices = list;
  return o;
}

std::string bus_of(SimulatedRuntime* rt, int device) {
  DeviceInfo info;
  EXPECT_OK(rt->device_info(device, &info));
  return info.pci_bus_id;
}

TEST(SimVisible, ListRenumbersInItsOrder) {
  auto all = make_sim(kTf4);
  auto rt = make_sim(kTf4, visible("2,0"));
  ASSERT_TRUE(all && rt);
  EXPECT_EQ(rt->device_count(), 2);
  EXPECT_EQ(rt->physical_index(0), 2);
  EXPECT_EQ(rt->physical_index(1), 0);
  EXPECT_EQ(bus_of(rt.get(), 0), bus_of(all.get(), 2));
  EXPECT_EQ(bus_of(rt.get(), 1), bus_of(all.get(), 0));
  DeviceInfo a, b;
  ASSERT_OK(rt->device_info(0, &a));
  ASSERT_OK(all->device_info(2, &b));
  EXPECT_EQ(a.uuid, b.uuid);
  EXPECT_EQ(a.uuid.rfind("GPU-", 0), 0u) << a.uuid;
  // Ordinal 2 does not exist here; the machine's GPU 2 is ordinal 0.
  void* p = nullptr;
  EXPECT_TRUE(
      fails_with(rt->alloc_device(2, 64, &p), ACCORD_ERR_INVALID_ARGUMENT, "sees 2 of the 4 GPUs"));
  ASSERT_OK(rt->alloc_device(0, 64, &p));
  PointerInfo info;
  ASSERT_OK(rt->pointer_info(p, &info));
  EXPECT_EQ(info.device, 0);
  ASSERT_OK(rt->free_device(p));
  // GPUs 2 and 0 of the machine cannot peer (the halves of the tf4 machine).
  bool can = true;
  ASSERT_OK(rt->can_access_peer(0, 1, &can));
  EXPECT_FALSE(can);
}

TEST(SimVisible, HiddenGpusAreNotFoundByBusIdButStillListedAsPeers) {
  auto all = make_sim(kTf4);
  auto rt = make_sim(kTf4, visible("1"));
  ASSERT_TRUE(all && rt);
  ASSERT_EQ(rt->device_count(), 1);
  int d = -2;
  ASSERT_OK(rt->device_by_bus_id(bus_of(all.get(), 1), &d));
  EXPECT_EQ(d, 0);
  ASSERT_OK(rt->device_by_bus_id(bus_of(all.get(), 0), &d));
  EXPECT_EQ(d, -1);
  // Upper case and an 8-digit domain name the same GPU (as cudaDeviceGetByPCIBusId accepts).
  std::string upper = "0000" + bus_of(all.get(), 1);
  for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  ASSERT_OK(rt->device_by_bus_id(upper, &d));
  EXPECT_EQ(d, 0);
  // GPU 1 peers with GPU 0 of the machine, which this process does not see.
  std::vector<std::string> peers;
  ASSERT_OK(rt->peer_bus_ids(0, &peers));
  EXPECT_EQ(peers, std::vector<std::string>{bus_of(all.get(), 0)});
}

TEST(SimVisible, UuidsBadEntriesAndEmpty) {
  auto all = make_sim(kDgx1);
  ASSERT_TRUE(all);
  DeviceInfo five;
  ASSERT_OK(all->device_info(5, &five));
  auto by_uuid = make_sim(kDgx1, visible(five.uuid.substr(0, 40) + ",3"));
  ASSERT_TRUE(by_uuid);
  EXPECT_EQ(by_uuid->device_count(), 2);
  EXPECT_EQ(by_uuid->physical_index(0), 5);
  EXPECT_EQ(by_uuid->physical_index(1), 3);
  // As CUDA: the list ends at the first entry that names no GPU, or names one again.
  auto cut = make_sim(kDgx1, visible("4,9,1"));
  EXPECT_EQ(cut->device_count(), 1);
  auto repeat = make_sim(kDgx1, visible("4,1,4,2"));
  EXPECT_EQ(repeat->device_count(), 2);
  EXPECT_NE(repeat->description().find("'4' is a repeat"), std::string::npos)
      << repeat->description();
  auto none = make_sim(kDgx1, visible(""));
  EXPECT_EQ(none->device_count(), 0);
  EXPECT_STREQ(none->kind(), "none");
  void* p = nullptr;
  EXPECT_TRUE(
      fails_with(none->alloc_device(0, 64, &p), ACCORD_ERR_UNSUPPORTED, "hides the 8 GPUs"));
}

}  // namespace
}  // namespace accord::testing
