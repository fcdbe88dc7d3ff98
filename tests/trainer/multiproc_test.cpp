// accord-train as real jobs: N processes started with RANK / WORLD_SIZE / MASTER_ADDR /
// MASTER_PORT (torchrun style) or under mpirun, on small datasets written here. Checks that
// N ranks x batch b end with the weights of 1 rank x batch N*b, that host-average and accord
// agree, that a 2-rank run stopped and resumed ends where an uninterrupted one does, that
// only rank 0 writes outputs, and that bad input ends the job with a clear message.
//
// ACCORD_TRAIN names the accord-train binary (meson sets it); ACCORD_MPIRUN names mpirun for
// the Mpirun tests (they skip without it).
#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "event_reader.hpp"
#include "test_data.hpp"
#include "trainer/checkpoint.hpp"

namespace accord::trainer {
namespace {

std::string slurp(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

struct Job {
  std::vector<int> codes;  // exit status per rank (or of mpirun)
  std::vector<std::string> logs;
  std::string log(int r) const { return slurp(logs[r]); }
};

// A port the kernel hands out as free: bound on port 0, closed again. One derived from the pid
// (as before) may be held by another program on the machine (another worktree's tests).
int next_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  int port = 0;
  if (fd >= 0 && ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0)
    port = ntohs(addr.sin_port);
  if (fd >= 0) ::close(fd);
  EXPECT_GT(port, 0) << "no free port on 127.0.0.1";
  return port;
}

pid_t spawn(const std::vector<std::string>& argv, const std::vector<std::string>& env, const std::string& log) {
  const pid_t pid = ::fork();
  if (pid != 0) return pid;
  for (const std::string& e : env) ::putenv(const_cast<char*>(e.c_str()));
  const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ::dup2(fd, 1);
  ::dup2(fd, 2);
  std::vector<char*> a;
  for (const std::string& s : argv) a.push_back(const_cast<char*>(s.c_str()));
  a.push_back(nullptr);
  ::execv(a[0], a.data());
  std::perror("execv");
  ::_exit(127);
}

int wait_for(pid_t pid) {
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

const char* train_binary() { return std::getenv("ACCORD_TRAIN"); }

// Runs accord-train as nranks processes with the torchrun-style environment.
Job run_env(int nranks, std::vector<std::string> args, const std::string& dir) {
  Job job;
  const int port = next_port();
  std::vector<pid_t> pids;
  args.insert(args.begin(), train_binary());
  for (int r = 0; r < nranks; ++r) {
    job.logs.push_back(dir + "/rank" + std::to_string(r) + "-" + std::to_string(port) + ".log");
    std::vector<std::string> env;
    if (nranks > 1)
      env = {"RANK=" + std::to_string(r), "WORLD_SIZE=" + std::to_string(nranks), "MASTER_ADDR=127.0.0.1",
             "MASTER_PORT=" + std::to_string(port), "ACCORD_INIT_TIMEOUT_MS=30000"};
    pids.push_back(spawn(args, env, job.logs.back()));
  }
  for (pid_t p : pids) job.codes.push_back(wait_for(p));
  return job;
}

class TrainJob : public ::testing::Test {
 protected:
  void SetUp() override {
    if (train_binary() == nullptr) GTEST_SKIP() << "ACCORD_TRAIN is not set";
    data_ = testing::scratch_dir("mp-data");
    out_ = testing::scratch_dir("mp-out");
    testing::write_idx_dataset(data_, 160, 48, true);
  }
  // Common flags: small data, 1 BLAS thread per rank, no log noise.
  std::vector<std::string> flags(const std::string& model, int batch, int steps, const std::string& ckpt) {
    return {"--data", data_, "--model", model, "--batch", std::to_string(batch), "--max-steps",
            std::to_string(steps), "--epochs", "3", "--threads", "1", "--log-every", "4", "--checkpoint", out_ + "/" + ckpt};
  }
  TrainState load(const std::string& ckpt) {
    TrainState s;
    const Status st = load_checkpoint(checkpoint_path(out_ + "/" + ckpt), &s);
    EXPECT_TRUE(st.ok()) << st.message();
    return s;
  }
  static void expect_ok(const Job& j) {
    for (size_t r = 0; r < j.codes.size(); ++r) EXPECT_EQ(j.codes[r], 0) << "rank " << r << ":\n" << j.log(r);
  }
  static double max_diff(const std::vector<float>& a, const std::vector<float>& b) {
    EXPECT_EQ(a.size(), b.size());
    double d = 0;
    for (size_t i = 0; i < a.size() && i < b.size(); ++i) d = std::max(d, static_cast<double>(std::fabs(a[i] - b[i])));
    return d;
  }
  std::string data_, out_;
};

// The data-parallel promise: the average of N rank-means over disjoint slices is the mean
// over the union, so after K steps the weights agree up to float rounding (Adam normalises
// each update to about lr, so rounding differences stay near 1e-6 per step).
TEST_F(TrainJob, TwoRanksMatchOneRankWithTwiceTheBatch) {
  for (const std::string model : {"mlp", "cnn"}) {
    SCOPED_TRACE(model);
    const int steps = model == "mlp" ? 12 : 6;
    Job one = run_env(1, flags(model, 16, steps, model + "-one"), out_);
    Job two = run_env(2, flags(model, 8, steps, model + "-two"), out_);
    expect_ok(one);
    expect_ok(two);
    const TrainState a = load(model + "-one"), b = load(model + "-two");
    EXPECT_EQ(a.step, steps);
    EXPECT_EQ(b.step, steps);
    // Sensitivity: one rank with batch 8 trains on half the samples; its weights must be
    // far from both, or the comparison above would prove nothing.
    expect_ok(run_env(1, flags(model, 8, steps, model + "-half"), out_));
    const double same = max_diff(a.params, b.params), other = max_diff(a.params, load(model + "-half").params);
    EXPECT_LT(same, 2e-4);
    EXPECT_GT(other, 20 * same) << "2 ranks vs 1 rank: " << same << ", vs half the data: " << other;
    std::printf("%s: max |w(2 ranks x 8) - w(1 rank x 16)| = %.2e; with half the data: %.2e\n", model.c_str(), same,
                other);
    EXPECT_LT(max_diff(a.ema, b.ema), 2e-4);
    EXPECT_NE(two.log(0).find("2 ranks"), std::string::npos) << two.log(0);
  }
}

TEST_F(TrainJob, HostAverageGivesTheWeightsOfAccord) {
  std::vector<std::string> h = flags("mlp", 8, 10, "host"), a = flags("mlp", 8, 10, "accord");
  h.insert(h.end(), {"--sync", "host-average"});
  Job jh = run_env(2, h, out_), ja = run_env(2, a, out_);
  expect_ok(jh);
  expect_ok(ja);
  EXPECT_NE(jh.log(0).find("sync host-average"), std::string::npos) << jh.log(0);
  EXPECT_LT(max_diff(load("host").params, load("accord").params), 1e-5);
}

TEST_F(TrainJob, TwoRankResumeEqualsUninterrupted) {
  // 160 samples / 16 per step = 10 steps per epoch; stop at 13, resume to 3 epochs.
  std::vector<std::string> whole = flags("mlp", 8, 0, "whole"), part = flags("mlp", 8, 13, "part");
  expect_ok(run_env(2, whole, out_));
  expect_ok(run_env(2, part, out_));
  EXPECT_EQ(load("part").step, 13);
  part = flags("mlp", 8, 0, "part");
  part.push_back("--resume");
  Job resumed = run_env(2, part, out_);
  expect_ok(resumed);
  EXPECT_NE(resumed.log(0).find("resumed from"), std::string::npos) << resumed.log(0);
  const TrainState a = load("whole"), b = load("part");
  EXPECT_EQ(a.step, 30);
  EXPECT_EQ(b.step, 30);
  EXPECT_EQ(a.params, b.params);
  EXPECT_EQ(a.m, b.m);
  EXPECT_EQ(a.v, b.v);
  EXPECT_EQ(a.ema, b.ema);
}

TEST_F(TrainJob, OnlyRankZeroWritesMetricsAndEvents) {
  std::vector<std::string> f = flags("mlp", 8, 0, "out");
  f.insert(f.end(), {"--epochs", "2", "--metrics", out_ + "/m.jsonl", "--tensorboard", out_ + "/tb"});
  expect_ok(run_env(2, f, out_));
  std::ifstream m(out_ + "/m.jsonl");
  std::string line;
  int ends = 0;
  while (std::getline(m, line)) {
    const size_t p = line.find("\"test_accuracy\":");
    if (p == std::string::npos) continue;
    const double acc = std::atof(line.c_str() + p + 16);
    EXPECT_GE(acc, 0.0);
    EXPECT_LE(acc, 1.0);
    ++ends;
  }
  EXPECT_EQ(ends, 2);
  std::vector<std::string> files;
  for (const auto& e : std::filesystem::directory_iterator(out_ + "/tb")) files.push_back(e.path());
  ASSERT_EQ(files.size(), 1u) << "one event file (rank 0's)";
  std::string version;
  const auto scalars = testing::read_events(files[0], &version);
  EXPECT_EQ(version, "brain.Event:2");
  int test_acc = 0;
  for (const auto& s : scalars) test_acc += s.tag == "test/accuracy";
  EXPECT_EQ(test_acc, 2);
}

TEST_F(TrainJob, EventFileReadsInTensorBoardIfInstalled) {
  if (std::system("python3 -c 'import tensorboard' >/dev/null 2>&1") != 0)
    GTEST_SKIP() << "python3 tensorboard package not installed (the own reader is tested above)";
  std::vector<std::string> f = flags("mlp", 8, 6, "tbpy");
  f.insert(f.end(), {"--tensorboard", out_ + "/tbpy"});
  expect_ok(run_env(1, f, out_));
  const std::string cmd =
      "python3 -c \"import sys; from tensorboard.backend.event_processing.event_accumulator import "
      "EventAccumulator as E; a=E(sys.argv[1]); a.Reload(); s=a.Scalars('train/loss'); "
      "sys.exit(0 if len(s)>0 and a.Scalars('test/accuracy') else 1)\" " + out_ + "/tbpy";
  EXPECT_EQ(std::system(cmd.c_str()), 0);
}

TEST_F(TrainJob, BadInputEndsWithAClearMessage) {
  Job j = run_env(1, {"--batch", "-3"}, out_);
  EXPECT_EQ(j.codes[0], 2);
  EXPECT_NE(j.log(0).find("--batch: '-3' is not an integer"), std::string::npos) << j.log(0);
  j = run_env(1, {"--data", out_ + "/nowhere", "--threads", "1"}, out_);
  EXPECT_EQ(j.codes[0], 1);
  EXPECT_NE(j.log(0).find(out_ + "/nowhere/train-images-idx3-ubyte.gz: no such file"), std::string::npos) << j.log(0);
  j = run_env(1, {"--help"}, out_);
  EXPECT_EQ(j.codes[0], 0);
  EXPECT_NE(j.log(0).find("--max-steps"), std::string::npos);
}

// --device gpu on a machine without a GPU or driver (or a build without the GPU backend):
// exit 1 with a message that names the device flag, the reason and the way out, no crash.
TEST_F(TrainJob, DeviceGpuWithoutAGpuEndsWithAClearMessage) {
  Job j = run_env(1, {"--help"}, out_);
  EXPECT_EQ(j.codes[0], 0);
  EXPECT_NE(j.log(0).find("--device DEV"), std::string::npos) << j.log(0);
  std::vector<std::string> args = flags("mlp", 8, 2, "gpu");
  args.push_back("--device");
  args.push_back("gpu");
  j = run_env(1, args, out_);
  if (j.codes[0] == 0) GTEST_SKIP() << "this machine has a GPU: the run worked\n" << j.log(0);
  EXPECT_EQ(j.codes[0], 1) << j.log(0);
  const std::string log = j.log(0);
  EXPECT_EQ(log.rfind("accord-train: --device gpu: ", 0), 0u) << log;
  EXPECT_NE(log.find("use --device cpu"), std::string::npos) << log;
  // With the GPU backend built, the reason names the CUDA error (no device, or no driver).
  if (std::getenv("ACCORD_TRAIN_GPU") != nullptr && std::string(std::getenv("ACCORD_TRAIN_GPU")) == "1")
    EXPECT_NE(log.find("no CUDA device (cuda"), std::string::npos) << log;
  else
    EXPECT_NE(log.find("built without the GPU backend"), std::string::npos) << log;
  j = run_env(1, {"--device", "tpu"}, out_);
  EXPECT_EQ(j.codes[0], 2);
  EXPECT_NE(j.log(0).find("--device: 'tpu' is not one of cpu, gpu"), std::string::npos) << j.log(0);
}

TEST_F(TrainJob, MpirunTwoRanks) {
  const char* mpirun = std::getenv("ACCORD_MPIRUN");
  if (mpirun == nullptr || !std::filesystem::exists(mpirun)) GTEST_SKIP() << "mpirun not available";
  std::vector<std::string> args = {mpirun, "--allow-run-as-root", "--oversubscribe", "-np", "2", train_binary()};
  for (const std::string& f : flags("mlp", 8, 10, "mpi")) args.push_back(f);
  const std::string log = out_ + "/mpirun.log";
  const int code = wait_for(spawn(args, {}, log));
  ASSERT_EQ(code, 0) << slurp(log);
  EXPECT_NE(slurp(log).find("2 ranks"), std::string::npos) << slurp(log);
  // Same job as the torchrun-style launch: the same weights.
  expect_ok(run_env(2, flags("mlp", 8, 10, "env"), out_));
  EXPECT_EQ(load("mpi").params, load("env").params);
}

}  // namespace
}  // namespace accord::trainer
