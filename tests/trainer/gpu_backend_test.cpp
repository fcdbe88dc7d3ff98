// The GPU backend against the CPU backend: forward, loss, backward (parameter gradients,
// which carry every later layer's input gradient) and optimizer steps of small models made
// of each layer type, of LeNet-5 and of the MLP, within float tolerance; and gradient
// buckets in device memory through BucketedSync's host path. Needs a CUDA GPU: every test
// skips without one (gtest_skip_main turns that into meson's SKIP).
#include "trainer/gpu_backend.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>
#include <vector>

#include "trainer/backend.hpp"

namespace accord::trainer {
namespace {

using Build = std::function<std::unique_ptr<Model>()>;

std::unique_ptr<Model> make(Shape in, std::vector<std::unique_ptr<Layer>> layers) {
  auto m = std::make_unique<Model>("test", in);
  for (auto& l : layers) m->add(std::move(l));
  m->finalize();
  return m;
}

template <typename... L>
std::vector<std::unique_ptr<Layer>> seq(std::unique_ptr<L>... layers) {
  std::vector<std::unique_ptr<Layer>> v;
  (v.push_back(std::move(layers)), ...);
  return v;
}

// max |a - b| / max(1, max |b|)
double rel_diff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double d = 0, scale = 1;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    d = std::max(d, static_cast<double>(std::fabs(a[i] - b[i])));
    scale = std::max(scale, static_cast<double>(std::fabs(b[i])));
  }
  return d / scale;
}

class GpuBackendTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const Status s = open_gpu(0, &device_);
    if (!s.ok()) GTEST_SKIP() << "no GPU here: " << s.message();
  }

  // Both backends from the same model and initial weights.
  void start(const Build& build) {
    auto cm = build();
    auto gm = build();
    cm->init_params(7);
    gm->init_params(7);
    in_ = cm->input_shape();
    classes_ = cm->classes();
    cpu_ = make_cpu_backend(std::move(cm), OptimizerConfig{});
    ASSERT_TRUE(make_gpu_backend(device_, std::move(gm), OptimizerConfig{}, &gpu_).ok());
    cpu_->optimizer().reset_ema(cpu_->model().params().data());
    gpu_->optimizer().reset_ema(gpu_->model().params().data());
    ASSERT_TRUE(gpu_->push_state().ok());
  }

  void batch_of(int batch, uint64_t seed) {
    Rng rng(seed);
    images_.resize(in_.size() * batch);
    for (float& x : images_) x = static_cast<float>(rng.uniform());
    labels_.resize(batch);
    for (uint8_t& y : labels_) y = static_cast<uint8_t>(rng.next() % classes_);
  }

  // to_host copies on the communication stream, which is ordered after backward (on the
  // compute stream) only by mark_ready / wait_ready, as the gradient sync uses them. Without
  // that the copy raced the backward: wrong gradients whenever other work slowed the GPU
  // (seen beside the other GPU tests, 2026-11-26).
  std::vector<float> gpu_grads() {
    std::vector<float> g(gpu_->model().param_count());
    void* stream = nullptr;
    EXPECT_TRUE(gpu_->device()->mark_ready(0).ok());
    EXPECT_TRUE(gpu_->device()->wait_ready(0, &stream).ok());
    EXPECT_TRUE(gpu_->device()->to_host(gpu_->grads(), g.data(), g.size()).ok());
    return g;
  }

  // One step on both: logits, loss, gradients, then parameters and moving average after Adam.
  void step_and_compare(int batch, uint64_t seed, double tol) {
    batch_of(batch, seed);
    const float* cl = nullptr;
    const float* gl = nullptr;
    ASSERT_TRUE(cpu_->logits(images_.data(), batch, &cl).ok());
    const std::vector<float> cpu_logits(cl, cl + static_cast<size_t>(batch) * classes_);
    ASSERT_TRUE(gpu_->logits(images_.data(), batch, &gl).ok());
    const std::vector<float> gpu_logits(gl, gl + static_cast<size_t>(batch) * classes_);
    EXPECT_LT(rel_diff(gpu_logits, cpu_logits), tol) << "logits";

    float closs = 0, gloss = 0;
    int ccorrect = 0, gcorrect = 0;
    ASSERT_TRUE(cpu_->forward(images_.data(), batch).ok());
    ASSERT_TRUE(gpu_->forward(images_.data(), batch).ok());
    ASSERT_TRUE(cpu_->loss(labels_.data(), batch, &closs, &ccorrect).ok());
    ASSERT_TRUE(gpu_->loss(labels_.data(), batch, &gloss, &gcorrect).ok());
    EXPECT_NEAR(gloss, closs, tol * std::max(1.0f, std::fabs(closs)));
    std::vector<size_t> cdone, gdone;
    ASSERT_TRUE(cpu_->backward(batch, [&](size_t i) { cdone.push_back(i); }).ok());
    ASSERT_TRUE(gpu_->backward(batch, [&](size_t i) { gdone.push_back(i); }).ok());
    EXPECT_EQ(gdone, cdone);
    const std::vector<float> cg(cpu_->grads(), cpu_->grads() + cpu_->model().param_count());
    EXPECT_LT(rel_diff(gpu_grads(), cg), tol) << "gradients";

    double cl2 = 0, gl2 = 0;
    ASSERT_TRUE(cpu_->apply(&cl2).ok());
    ASSERT_TRUE(gpu_->apply(&gl2).ok());
    EXPECT_NEAR(gl2, cl2, tol * std::max(1.0, cl2));
    EXPECT_EQ(gpu_->optimizer().step(), cpu_->optimizer().step());
    ASSERT_TRUE(gpu_->pull_state().ok());
    const auto cp = cpu_->model().params();
    EXPECT_LT(
        rel_diff(std::vector<float>(gpu_->model().params().begin(), gpu_->model().params().end()),
                 std::vector<float>(cp.begin(), cp.end())),
        tol)
        << "parameters after Adam";
    EXPECT_LT(rel_diff(gpu_->optimizer().ema(), cpu_->optimizer().ema()), tol) << "moving average";
    EXPECT_LT(rel_diff(gpu_->optimizer().m(), cpu_->optimizer().m()), tol) << "Adam m";
  }

  void run(const Build& build, double tol = 2e-4) {
    start(build);
    if (HasFatalFailure()) return;
    for (int batch : {1, 3, 8}) {
      SCOPED_TRACE("batch " + std::to_string(batch));
      step_and_compare(batch, 100 + batch, tol);
    }
  }

  GpuDevice device_;
  Shape in_;
  int classes_ = 0;
  std::unique_ptr<Backend> cpu_, gpu_;
  std::vector<float> images_;
  std::vector<uint8_t> labels_;
};

// Conv forward, backward filter, bias, and backward data (of the second conv, through the
// first one's gradients); several input channels, so the axis swap is exercised too.
TEST_F(GpuBackendTest, Convolution) {
  run([] {
    return make(Shape{3, 8, 8}, seq(std::make_unique<SwapAxes>(false),
                                    std::make_unique<Conv2d>(4, 3), std::make_unique<Conv2d>(5, 5),
                                    std::make_unique<SwapAxes>(true), std::make_unique<Linear>(7)));
  });
}

TEST_F(GpuBackendTest, MaxPool) {
  run([] {
    return make(Shape{2, 6, 6}, seq(std::make_unique<SwapAxes>(false),
                                    std::make_unique<Conv2d>(3, 3), std::make_unique<MaxPool2d>(2),
                                    std::make_unique<SwapAxes>(true), std::make_unique<Linear>(5)));
  });
}

TEST_F(GpuBackendTest, Relu) {
  run([] {
    return make(Shape{1, 5, 5}, seq(std::make_unique<Linear>(11), std::make_unique<Relu>(),
                                    std::make_unique<Linear>(4)));
  });
}

TEST_F(GpuBackendTest, Linear) {
  run([] {
    return make(Shape{1, 1, 13}, seq(std::make_unique<Linear>(17), std::make_unique<Linear>(3)));
  });
}

// LeNet-5 and the MLP as accord-train builds them, a few training steps each.
TEST_F(GpuBackendTest, LeNetAndMlpTrainLikeTheCpu) {
  for (const char* kind : {"cnn", "mlp"}) {
    SCOPED_TRACE(kind);
    start([kind] {
      std::unique_ptr<Model> m;
      EXPECT_TRUE(Model::create(kind, Shape{1, 28, 28}, 10, &m).ok());
      return m;
    });
    if (HasFatalFailure()) return;
    for (int s = 0; s < 4; ++s) step_and_compare(16, 200 + s, 1e-3);
  }
}

// Buckets in device memory through BucketedSync: the communication thread copies each to
// host memory, average() sees exactly the gradients, and they come back unchanged.
class HostCopySync : public BucketedSync {
 public:
  HostCopySync() : BucketedSync(true) {}
  ~HostCopySync() override { (void)worker_.wait(); }
  std::string name() const override { return "host-copy"; }
  int rank() const override { return 0; }
  int nranks() const override { return 1; }
  std::vector<float> seen;

 protected:
  Status average(float* data, size_t count) override {
    seen.insert(seen.begin(), data, data + count);  // buckets arrive last layer first
    return ok_status();
  }
  Status broadcast_now(float*, size_t, int) override { return ok_status(); }
  Status sum_now(double*, size_t) override { return ok_status(); }
};

TEST_F(GpuBackendTest, DeviceBucketsGoThroughHostMemory) {
  start([] {
    std::unique_ptr<Model> m;
    EXPECT_TRUE(Model::create("cnn", Shape{1, 28, 28}, 10, &m).ok());
    return m;
  });
  if (HasFatalFailure()) return;
  const std::vector<Bucket> buckets = make_buckets(gpu_->model().param_ranges(), 64 * 1024);
  ASSERT_GT(buckets.size(), 1u);
  std::vector<int> bucket_of(gpu_->model().layers().size(), -1);
  for (size_t b = 0; b < buckets.size(); ++b)
    bucket_of[buckets[b].ready_layer] = static_cast<int>(b);
  HostCopySync sync;
  sync.set_buckets(gpu_->grads(), buckets);
  sync.set_device(gpu_->device());
  batch_of(8, 5);
  ASSERT_TRUE(gpu_->forward(images_.data(), 8).ok());
  float loss = 0;
  ASSERT_TRUE(gpu_->loss(labels_.data(), 8, &loss, nullptr).ok());
  ASSERT_TRUE(gpu_->backward(8,
                             [&](size_t layer) {
                               if (bucket_of[layer] >= 0)
                                 sync.bucket_ready(static_cast<size_t>(bucket_of[layer]));
                             })
                  .ok());
  ASSERT_TRUE(sync.finish().ok());
  const std::vector<float> g = gpu_grads();
  EXPECT_EQ(sync.seen, g);
  ASSERT_TRUE(cpu_->forward(images_.data(), 8).ok());
  ASSERT_TRUE(cpu_->loss(labels_.data(), 8, &loss, nullptr).ok());
  ASSERT_TRUE(cpu_->backward(8, nullptr).ok());
  EXPECT_LT(rel_diff(g, std::vector<float>(cpu_->grads(), cpu_->grads() + g.size())), 1e-3);
}

}  // namespace
}  // namespace accord::trainer
