// make_device_runtime: ACCORD_SIM_TOPO picks simulated GPUs of that file; without it, CUDA when
// it has devices, else a runtime with none that says why. CudaRuntime on a machine without a
// driver reports zero devices and the driver's message instead of failing.
#include "accord_config.h"
#include "tests/device/sim_util.hpp"
#if ACCORD_HAVE_CUDA
#include "transport/device/cuda_runtime.hpp"
#endif

namespace accord::testing {
namespace {

TEST(Select, SimTopoGivesTheSimulatedMachine) {
  Settings s;
  s.sim_topo = fixture_path(kDgx1);
  std::unique_ptr<DeviceRuntime> rt;
  ASSERT_OK(make_device_runtime(s, &rt));
  EXPECT_STREQ(rt->kind(), "simulated");
  EXPECT_EQ(rt->device_count(), 8);
  EXPECT_NE(rt->description().find("dgx1-v100-topo-m.txt"), std::string::npos) << rt->description();
}

TEST(Select, AMissingTopologyFileIsAnErrorNamingIt) {
  Settings s;
  s.sim_topo = "/nonexistent/machine.txt";
  std::unique_ptr<DeviceRuntime> rt;
  Status st = make_device_runtime(s, &rt);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("/nonexistent/machine.txt"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("ACCORD_SIM_TOPO"), std::string::npos) << st.message();
}

TEST(Select, WithoutSimulationItIsCudaOrNone) {
  Settings s;
  std::unique_ptr<DeviceRuntime> rt;
  ASSERT_OK(make_device_runtime(s, &rt));
  ASSERT_TRUE(rt);
  if (std::string(rt->kind()) == "cuda") {
    EXPECT_GT(rt->device_count(), 0);
    return;
  }
  EXPECT_STREQ(rt->kind(), "none");
  EXPECT_EQ(rt->device_count(), 0);
  EXPECT_NE(rt->description().find("no GPUs"), std::string::npos) << rt->description();
  void* p;
  EXPECT_TRUE(fails_with(rt->alloc_device(0, 64, &p), ACCORD_ERR_UNSUPPORTED, "ACCORD_SIM_TOPO"));
  Stream st;
  EXPECT_TRUE(fails_with(rt->create_stream(0, &st), ACCORD_ERR_UNSUPPORTED, "no GPUs"));
}

TEST(Select, CudaRuntimeWithoutDevicesSaysWhy) {
#if ACCORD_HAVE_CUDA
  std::unique_ptr<CudaRuntime> rt;
  ASSERT_OK(CudaRuntime::create(&rt));
  if (rt->device_count() > 0) GTEST_SKIP() << "this machine has " << rt->device_count() << " CUDA device(s)";
  EXPECT_FALSE(rt->unavailable_reason().empty());
  EXPECT_NE(rt->description().find(rt->unavailable_reason()), std::string::npos);
  void* p;
  Status st = rt->alloc_device(0, 64, &p);
  EXPECT_TRUE(fails_with(st, ACCORD_ERR_UNSUPPORTED, rt->unavailable_reason()));
  PointerInfo info;
  int x;
  ASSERT_OK(rt->pointer_info(&x, &info));
  EXPECT_EQ(info.kind, MemoryKind::kHost);
#else
  GTEST_SKIP() << "built without CUDA";
#endif
}

}  // namespace
}  // namespace accord::testing
