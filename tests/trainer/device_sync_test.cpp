// AccordSync with gradients in "device" memory (DeviceGradients), without a GPU: a fake
// device whose buffers are host memory and whose stream is a token. Two ranks in one process
// (accord_comm_init_all). This Accord build answers ACCORD_ERR_UNSUPPORTED for a stream, so
// every bucket must take the host path: copied out, all-reduced, copied back, with exact
// averages; the ready marks and stream waits must match the buckets. A build whose library
// takes device buffers would be handed host pointers with a fake stream, so the test skips
// there (the GPU path is tested with real GPUs).
#include <gtest/gtest.h>

#include <cstring>
#include <thread>
#include <vector>

#include "trainer/accord_sync.hpp"

namespace accord::trainer {
namespace {

class FakeDevice : public DeviceGradients {
 public:
  Status mark_ready(size_t bucket) override {
    marked.push_back(bucket);
    return ok_status();
  }
  Status wait_ready(size_t bucket, void** stream) override {
    waited.push_back(bucket);
    *stream = &token_;
    return ok_status();
  }
  Status to_host(const float* device, float* host, size_t count) override {
    ++copies_out;
    std::memcpy(host, device, count * sizeof(float));
    return ok_status();
  }
  Status to_device(const float* host, float* device, size_t count) override {
    ++copies_in;
    std::memcpy(device, host, count * sizeof(float));
    return ok_status();
  }
  Status join() override {
    ++joins;
    return ok_status();
  }
  std::vector<size_t> marked, waited;
  int copies_out = 0, copies_in = 0, joins = 0;

 private:
  int token_ = 0;
};

TEST(DeviceSync, UnsupportedStreamFallsBackToHostAllReduce) {
  accord_comm_t comms[2] = {nullptr, nullptr};
  const int device0 = 0;
  const accord_status_t probe = accord_comm_init_all(comms, 1, &device0);
  if (probe == ACCORD_SUCCESS) (void)accord_comm_destroy(comms[0]);
  if (probe != ACCORD_ERR_UNSUPPORTED)
    GTEST_SKIP() << "this Accord build has a device path (accord_comm_init_all with a device list: "
                 << accord_status_string(probe) << "); the host fallback is not taken";
  ASSERT_EQ(accord_comm_init_all(comms, 2, nullptr), ACCORD_SUCCESS) << accord_last_error(nullptr);
  // Buckets of 3 (a prime), 1 and 1000 elements, in backward order.
  const std::vector<Bucket> buckets = {{1001, 3, 2}, {1000, 1, 1}, {0, 1000, 0}};
  std::vector<float> grads[2];
  FakeDevice dev[2];
  Status result[2];
  std::vector<std::thread> ranks;
  for (int r = 0; r < 2; ++r) {
    ranks.emplace_back([&, r] {
      AccordSync sync(comms[r], true);
      grads[r].resize(1004);
      sync.set_buckets(grads[r].data(), buckets);
      sync.set_device(&dev[r]);
      for (int step = 0; step < 2; ++step) {
        // rank 0: i % 7, rank 1: i % 7 + 2 * (step + 1): averages are exact in float.
        for (size_t i = 0; i < grads[r].size(); ++i)
          grads[r][i] = static_cast<float>(i % 7) + (r == 1 ? 2.0f * (step + 1) : 0.0f);
        for (size_t b = 0; b < buckets.size(); ++b) sync.bucket_ready(b);
        result[r] = sync.finish();
        if (!result[r].ok()) return;
        for (size_t i = 0; i < grads[r].size(); ++i)
          if (grads[r][i] != static_cast<float>(i % 7) + (step + 1)) {
            result[r] = Status::error("rank " + std::to_string(r) + " step " +
                                      std::to_string(step) + ": element " + std::to_string(i) +
                                      " is " + std::to_string(grads[r][i]));
            return;
          }
      }
    });
  }
  for (std::thread& t : ranks) t.join();
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(result[r].ok()) << result[r].message();
    // Every bucket of both steps marked, waited for, and (host path) copied out and back.
    EXPECT_EQ(dev[r].marked, (std::vector<size_t>{0, 1, 2, 0, 1, 2}));
    EXPECT_EQ(dev[r].waited, dev[r].marked);
    EXPECT_EQ(dev[r].copies_out, 6);
    EXPECT_EQ(dev[r].copies_in, 6);
    EXPECT_EQ(dev[r].joins, 2);
  }
}

}  // namespace
}  // namespace accord::trainer
