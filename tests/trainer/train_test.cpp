// The optimizer's formulas, gradient buckets and the communication thread, and the training
// loop run in-process with LocalSync: it learns, writes its outputs, and a run stopped and
// resumed from its checkpoint ends with bitwise the same state as an uninterrupted one.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <filesystem>
#include <fstream>

#include "test_data.hpp"
#include "trainer/checkpoint.hpp"
#include "trainer/grad_sync.hpp"
#include "trainer/optimizer.hpp"
#include "trainer/train.hpp"

namespace accord::trainer {
namespace {

TEST(Optimizer, AdamL2AndMovingAverageMatchTheFormulas) {
  OptimizerConfig c;
  c.lr = 0.1f;
  c.lr_decay = 0.5f;
  c.lr_decay_steps = 2;
  c.l2 = 0.01f;
  c.ema_decay = 0.99f;
  // One layer: 2 weights then 1 bias.
  Optimizer opt(c, {ParamRange{0, 0, 3, 2}}, 3);
  std::vector<float> p = {1.0f, -2.0f, 0.5f}, g = {0.3f, 0.0f, -0.1f};
  opt.reset_ema(p.data());
  EXPECT_FLOAT_EQ(opt.learning_rate(), 0.1f);
  opt.apply(p.data(), g.data());
  // Step 1: m = 0.1 g', v = 0.001 g'^2, lr_t = lr * sqrt(1 - 0.999) / (1 - 0.9), update =
  // lr_t * m / (sqrt(v) + eps) = lr * sign(g') (up to eps) with g' = g + l2 w for weights.
  EXPECT_NEAR(p[0], 1.0f - 0.1f, 1e-5);
  EXPECT_NEAR(p[1], -2.0f + 0.1f, 1e-5);  // g = 0 but L2 pulls the weight toward 0
  EXPECT_NEAR(p[2], 0.5f + 0.1f, 1e-5);   // bias: no L2
  // EMA decay min(0.99, 2/11).
  const float d = 2.0f / 11.0f;
  EXPECT_NEAR(opt.ema()[0], d * 1.0f + (1 - d) * p[0], 1e-6);
  EXPECT_EQ(opt.step(), 1);
  EXPECT_NEAR(opt.learning_rate(), 0.1 * std::pow(0.5, 0.5), 1e-7);
  EXPECT_NEAR(opt.l2_loss(p.data()), 0.5 * 0.01 * (p[0] * p[0] + p[1] * p[1]), 1e-7);
}

TEST(Buckets, WholeLayersInBackwardOrderCoveringEverything) {
  std::unique_ptr<Model> m;
  ASSERT_TRUE(Model::create("cnn", Shape{1, 28, 28}, 10, &m).ok());
  const std::vector<Bucket> b = make_buckets(m->param_ranges(), 256 * 1024);
  ASSERT_EQ(b.size(), 2u);  // [fc10 + fc512], [conv2 + conv1]
  EXPECT_EQ(b[0].offset + b[0].count, m->param_count());
  EXPECT_EQ(b[1].offset, 0u);
  EXPECT_EQ(b[1].count, b[0].offset);
  EXPECT_EQ(m->layers()[b[0].ready_layer]->name(), "fc512");
  EXPECT_EQ(m->layers()[b[1].ready_layer]->name(), "conv5x5x32");
  // Tiny buckets: one per layer, last layer first.
  const std::vector<Bucket> each = make_buckets(m->param_ranges(), 1);
  ASSERT_EQ(each.size(), 4u);
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(each[i].offset, m->param_ranges()[3 - i].offset);
  // Huge buckets: one.
  EXPECT_EQ(make_buckets(m->param_ranges(), size_t{1} << 40).size(), 1u);
}

TEST(CommWorker, RunsInOrderAndStopsAfterAnError) {
  CommWorker w;
  std::vector<int> order;
  for (int i = 0; i < 5; ++i) w.submit([&order, i] { order.push_back(i); return ok_status(); });
  ASSERT_TRUE(w.wait().ok());
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2, 3, 4}));
  w.submit([] { return Status::error("peer 1 died"); });
  bool ran = false;
  w.submit([&ran] { ran = true; return ok_status(); });
  const Status s = w.wait();
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.message(), "peer 1 died");
  EXPECT_FALSE(ran);
}

// Records which buckets were averaged and when, to check overlap without any transport.
class RecordingSync : public BucketedSync {
 public:
  explicit RecordingSync(bool overlap) : BucketedSync(overlap) {}
  ~RecordingSync() override { (void)worker_.wait(); }
  std::string name() const override { return "recording"; }
  int rank() const override { return 0; }
  int nranks() const override { return 1; }
  std::vector<size_t> offsets;
  std::atomic<int> finished{0};  // finish() calls begun, as seen by the comm thread
  std::atomic<int> before_finish{0};
  std::atomic<bool> in_finish{false};

 protected:
  Status average(float* data, size_t) override {
    offsets.push_back(static_cast<size_t>(data - base));
    if (!in_finish) ++before_finish;
    return ok_status();
  }
  Status broadcast_now(float*, size_t, int) override { return ok_status(); }
  Status sum_now(double*, size_t) override { return ok_status(); }

 public:
  float* base = nullptr;
};

TEST(BucketedSync, OverlapStartsBucketsDuringBackwardAndNoOverlapWaitsForFinish) {
  std::unique_ptr<Model> m;
  ASSERT_TRUE(Model::create("mlp", Shape{1, 28, 28}, 10, &m).ok());
  m->init_params(1);
  std::vector<float> x(784 * 4, 0.5f);
  const std::vector<uint8_t> y = {1, 2, 3, 4};
  for (bool overlap : {true, false}) {
    RecordingSync s(overlap);
    s.base = m->grads().data();
    const std::vector<Bucket> buckets = make_buckets(m->param_ranges(), 1);
    s.set_buckets(m->grads().data(), buckets);
    std::vector<int> bucket_of(m->layers().size(), -1);
    for (size_t b = 0; b < buckets.size(); ++b) bucket_of[buckets[b].ready_layer] = static_cast<int>(b);
    m->forward(x.data(), 4);
    m->loss(y.data(), 4, nullptr);
    m->backward(4, [&](size_t l) {
      if (bucket_of[l] >= 0) s.bucket_ready(static_cast<size_t>(bucket_of[l]));
    });
    // Give the comm thread a moment only to make the overlap case observable.
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    s.in_finish = true;
    ASSERT_TRUE(s.finish().ok());
    ASSERT_EQ(s.offsets.size(), 3u);
    for (size_t i = 0; i < 3; ++i) EXPECT_EQ(s.offsets[i], buckets[i].offset);
    if (overlap)
      EXPECT_EQ(s.before_finish, 3);
    else
      EXPECT_EQ(s.before_finish, 0);
  }
}

struct Fixture {
  std::string data, out;
  Options options;
};

Fixture small_run(const std::string& name, const std::string& model) {
  Fixture f;
  f.data = testing::scratch_dir(name + "-data");
  f.out = testing::scratch_dir(name + "-out");
  testing::write_idx_dataset(f.data, 96, 40, true);
  f.options.data = f.data;
  f.options.model = model;
  f.options.batch = 8;
  f.options.epochs = 2;
  f.options.log_every = 5;
  f.options.threads = 1;
  return f;
}

TEST(Train, LearnsAndWritesMetricsCheckpointAndEvents) {
  Fixture f = small_run("learn", "mlp");
  f.options.epochs = 3;
  f.options.metrics = f.out + "/metrics.jsonl";
  f.options.checkpoint = f.out + "/ckpt";
  f.options.tensorboard = f.out + "/tb";
  LocalSync sync;
  TrainResult r;
  const Status s = train(f.options, sync, &r);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(r.steps, 3 * 12);
  EXPECT_GT(r.test_accuracy, 0.8) << "synthetic classes are easy";
  std::ifstream m(f.options.metrics);
  std::string line;
  int lines = 0, epoch_ends = 0;
  while (std::getline(m, line)) {
    ++lines;
    EXPECT_NE(line.find("\"epoch\":"), std::string::npos) << line;
    EXPECT_NE(line.find("\"step\":"), std::string::npos) << line;
    EXPECT_NE(line.find("\"loss\":"), std::string::npos) << line;
    if (line.find("\"test_accuracy\":") != std::string::npos) ++epoch_ends;
  }
  EXPECT_EQ(epoch_ends, 3);
  EXPECT_EQ(lines, 3 + 36 / 5);
  TrainState st;
  ASSERT_TRUE(load_checkpoint(checkpoint_path(f.options.checkpoint), &st).ok());
  EXPECT_EQ(st.step, 36);
  EXPECT_EQ(st.epoch, 3);
  int event_files = 0;
  for (const auto& e : std::filesystem::directory_iterator(f.options.tensorboard))
    event_files += e.path().filename().string().find("tfevents") != std::string::npos;
  EXPECT_EQ(event_files, 1);
}

TEST(Train, CnnRunsOnCifarShapedData) {
  Fixture f = small_run("cifar", "cnn");
  testing::write_cifar_dataset(f.data, 8, 16);
  f.options.dataset = "cifar10";
  f.options.max_steps = 3;
  LocalSync sync;
  TrainResult r;
  const Status s = train(f.options, sync, &r);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(r.steps, 3);
}

TEST(Train, ResumeEqualsUninterrupted) {
  for (const std::string model : {"mlp", "cnn"}) {
    SCOPED_TRACE(model);
    Fixture f = small_run("resume-" + model, model);
    LocalSync sync;
    TrainResult r;
    // Uninterrupted: 2 epochs of 12 steps.
    Options whole = f.options;
    whole.checkpoint = f.out + "/whole";
    ASSERT_TRUE(train(whole, sync, &r).ok());
    // Stopped mid-epoch 2 (step 17), then resumed to the end.
    Options part = f.options;
    part.checkpoint = f.out + "/part";
    part.max_steps = 17;
    ASSERT_TRUE(train(part, sync, &r).ok());
    EXPECT_EQ(r.steps, 17);
    TrainState mid;
    ASSERT_TRUE(load_checkpoint(checkpoint_path(part.checkpoint), &mid).ok());
    EXPECT_EQ(mid.epoch, 1);
    EXPECT_EQ(mid.step_in_epoch, 5);
    part.max_steps = 0;
    part.resume = true;
    const Status s = train(part, sync, &r);
    ASSERT_TRUE(s.ok()) << s.message();
    EXPECT_EQ(r.steps, 24);
    TrainState a, b;
    ASSERT_TRUE(load_checkpoint(checkpoint_path(whole.checkpoint), &a).ok());
    ASSERT_TRUE(load_checkpoint(checkpoint_path(part.checkpoint), &b).ok());
    EXPECT_EQ(a.step, b.step);
    EXPECT_EQ(a.params, b.params) << "weights differ after resume";
    EXPECT_EQ(a.m, b.m);
    EXPECT_EQ(a.v, b.v);
    EXPECT_EQ(a.ema, b.ema);
  }
}

TEST(Train, ResumeRefusesAnotherModelOrDataOrder) {
  Fixture f = small_run("refuse", "mlp");
  f.options.checkpoint = f.out + "/ckpt";
  f.options.max_steps = 3;
  LocalSync sync;
  TrainResult r;
  ASSERT_TRUE(train(f.options, sync, &r).ok());
  Options other = f.options;
  other.resume = true;
  other.batch = 4;
  Status s = train(other, sync, &r);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("samples per step"), std::string::npos) << s.message();
  other = f.options;
  other.resume = true;
  other.model = "cnn";
  s = train(other, sync, &r);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("not --model cnn"), std::string::npos) << s.message();
}

TEST(Train, MissingDataIsAnErrorNamingTheFile) {
  Options o;
  o.data = "/nonexistent/fashion";
  LocalSync sync;
  TrainResult r;
  const Status s = train(o, sync, &r);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("/nonexistent/fashion/train-images-idx3-ubyte"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace accord::trainer
