// Outputs and inputs around training: CRC-32C, TensorBoard event files (byte-exact against
// known records, and read back with a small reader of our own), checkpoints (round trip,
// damage detection), JSON lines, and the command line.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "event_reader.hpp"
#include "test_data.hpp"
#include "trainer/checkpoint.hpp"
#include "trainer/crc32c.hpp"
#include "trainer/metrics.hpp"
#include "trainer/options.hpp"
#include "trainer/tensorboard.hpp"

namespace accord::trainer {
namespace {

using testing::read_events;
using testing::Scalar;

std::string hex(const std::string& s) {
  static const char* d = "0123456789abcdef";
  std::string h;
  for (unsigned char c : s) {
    h += d[c >> 4];
    h += d[c & 15];
  }
  return h;
}

TEST(Crc32c, CheckValue) {
  EXPECT_EQ(crc32c("123456789", 9), 0xE3069283u);
  // Incremental over two pieces equals one pass.
  EXPECT_EQ(crc32c("6789", 4, crc32c("12345", 5)), 0xE3069283u);
}

// Records from research/ecosystem.md section 5 (computed with TensorFlow's writer).
TEST(TensorBoard, ByteExactRecords) {
  EXPECT_EQ(hex(frame_record(encode_file_version_event(1.0))),
            "1800000000000000a37f4b22090000000000"
            "00f03f1a0d627261696e2e4576656e743a3286bf577a");
  EXPECT_EQ(hex(encode_scalar_event(1.0, 5, "loss", 0.5f)),
            "09000000000000f03f10052a0d0a0b0a046c6f7373150000003f");
}

TEST(TensorBoard, WriterOutputReadsBack) {
  const std::string dir = testing::scratch_dir("tb") + "/run/a";
  std::string path;
  {
    EventWriter w;
    ASSERT_TRUE(w.open(dir).ok());
    path = w.path();
    EXPECT_NE(path.find("/events.out.tfevents."), std::string::npos);
    ASSERT_TRUE(w.scalar("train/loss", 2.5f, 10).ok());
    ASSERT_TRUE(w.scalar("test/accuracy", 0.875f, 300).ok());
  }
  std::string version;
  const std::vector<Scalar> s = read_events(path, &version);
  EXPECT_EQ(version, "brain.Event:2");
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s[0].tag, "train/loss");
  EXPECT_EQ(s[0].step, 10);
  EXPECT_EQ(s[0].value, 2.5f);
  EXPECT_EQ(s[1].tag, "test/accuracy");
  EXPECT_EQ(s[1].step, 300);
  EXPECT_EQ(s[1].value, 0.875f);
}

TrainState sample_state() {
  TrainState s;
  s.model = "cnn";
  s.dataset = "mnist";
  s.seed = 99;
  s.step = 1234;
  s.epoch = 2;
  s.step_in_epoch = 17;
  s.global_batch = 128;
  for (int i = 0; i < 1000; ++i) {
    s.params.push_back(i * 0.5f);
    s.m.push_back(-i * 0.25f);
    s.v.push_back(i * 1e-6f);
    s.ema.push_back(i * 0.49f);
  }
  return s;
}

TEST(Checkpoint, RoundTrip) {
  const std::string path = checkpoint_path(testing::scratch_dir("ckpt"));
  const TrainState a = sample_state();
  ASSERT_TRUE(save_checkpoint(path, a).ok());
  TrainState b;
  const Status s = load_checkpoint(path, &b);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(b.model, a.model);
  EXPECT_EQ(b.dataset, a.dataset);
  EXPECT_EQ(b.seed, a.seed);
  EXPECT_EQ(b.step, a.step);
  EXPECT_EQ(b.epoch, a.epoch);
  EXPECT_EQ(b.step_in_epoch, a.step_in_epoch);
  EXPECT_EQ(b.global_batch, a.global_batch);
  EXPECT_EQ(b.params, a.params);
  EXPECT_EQ(b.m, a.m);
  EXPECT_EQ(b.v, a.v);
  EXPECT_EQ(b.ema, a.ema);
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
}

TEST(Checkpoint, DamageIsDetectedAndNamed) {
  const std::string dir = testing::scratch_dir("ckptbad");
  const std::string path = checkpoint_path(dir);
  ASSERT_TRUE(save_checkpoint(path, sample_state()).ok());
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekp(200);
  f.put('\x7f');
  f.close();
  TrainState s;
  Status st = load_checkpoint(path, &s);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find(path), std::string::npos);
  EXPECT_NE(st.message().find("damaged"), std::string::npos);

  std::ofstream(dir + "/junk") << "hello";
  st = load_checkpoint(dir + "/junk", &s);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("not an accord-train checkpoint"), std::string::npos);
  st = load_checkpoint(dir + "/absent", &s);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("absent"), std::string::npos);
}

TEST(Metrics, JsonLines) {
  const std::string path = testing::scratch_dir("metrics") + "/m.jsonl";
  {
    MetricsLog log;
    ASSERT_TRUE(log.open(path, false).ok());
    ASSERT_TRUE(log.write(JsonLine().add("epoch", 1).add("step", int64_t{50}).add("loss", 0.25)).ok());
    ASSERT_TRUE(log.write(JsonLine().add("sync", std::string("a\"b")).add("x", 0.0 / 0.0)).ok());
  }
  std::ifstream f(path);
  std::string l1, l2;
  std::getline(f, l1);
  std::getline(f, l2);
  EXPECT_EQ(l1, "{\"epoch\":1,\"step\":50,\"loss\":0.25}");
  EXPECT_EQ(l2, "{\"sync\":\"a\\\"b\",\"x\":null}");
}

Status parse(std::vector<const char*> args, Options* o) {
  args.insert(args.begin(), "accord-train");
  return parse_options(static_cast<int>(args.size()), args.data(), o);
}

TEST(Options, DefaultsAndBothSpellings) {
  Options o;
  ASSERT_TRUE(parse({}, &o).ok());
  EXPECT_EQ(o.data, "/usr/share/datasets/fashion-mnist");
  EXPECT_EQ(o.model, "cnn");
  EXPECT_EQ(o.sync, "accord");
  ASSERT_TRUE(parse({"--model", "mlp", "--batch=32", "--lr", "0.01", "--sync=host-average", "--max-steps",
                     "7", "--checkpoint", "/tmp/x", "--resume", "--seed", "5", "--dataset", "cifar10"},
                    &o)
                  .ok());
  EXPECT_EQ(o.model, "mlp");
  EXPECT_EQ(o.batch, 32);
  EXPECT_FLOAT_EQ(o.opt.lr, 0.01f);
  EXPECT_EQ(o.sync, "host-average");
  EXPECT_EQ(o.max_steps, 7);
  EXPECT_TRUE(o.resume);
  EXPECT_EQ(o.seed, 5u);
  EXPECT_EQ(o.dataset, "cifar10");
}

TEST(Options, BadFlagsAreClearErrors) {
  struct Case {
    std::vector<const char*> args;
    const char* says;
  } cases[] = {
      {{"--bogus"}, "unknown flag --bogus"},
      {{"--batch", "zero"}, "--batch: 'zero' is not an integer"},
      {{"--batch", "0"}, "--batch: '0' is not an integer in [1,"},
      {{"--epochs"}, "--epochs needs a value"},
      {{"--model", "vgg"}, "--model: 'vgg' is not one of cnn, mlp"},
      {{"--sync", "nccl"}, "'nccl' is not one of accord, host-average"},
      {{"--lr", "-1"}, "--lr: '-1' is not a number"},
      {{"--resume"}, "--resume needs --checkpoint"},
      {{"--resume=yes", "--checkpoint", "d"}, "--resume takes no value"},
      {{"data"}, "unexpected argument 'data'"},
  };
  for (const Case& c : cases) {
    Options o;
    const Status s = parse(c.args, &o);
    ASSERT_FALSE(s.ok()) << c.says;
    EXPECT_NE(s.message().find(c.says), std::string::npos) << s.message();
  }
}

TEST(Options, HelpListsEveryFlag) {
  const std::string u = usage();
  for (const char* f : {"--data", "--dataset", "--model", "--epochs", "--batch", "--lr", "--sync", "--metrics",
                        "--checkpoint", "--resume", "--max-steps", "--seed", "--tensorboard", "--help"})
    EXPECT_NE(u.find(f), std::string::npos) << f;
}

}  // namespace
}  // namespace accord::trainer
