// TCP transport between two forked processes over loopback: a large checksummed volume with
// 1 and 4 sockets, a peer killed with SIGKILL (the waiting side, receiving or blocked sending,
// gets ACCORD_ERR_REMOTE naming it within 1 s) and a peer stopped with SIGSTOP (the waiting
// side gets ACCORD_ERR_TIMEOUT at its deadline, not a false death).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <functional>
#include <thread>

#include "tcp_test_util.hpp"

namespace accord {
namespace {

using namespace tcptest;

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr size_t kVolumeBytes = size_t{64} << 20;  // sanitizers run ~10x slower
#else
constexpr size_t kVolumeBytes = size_t{1} << 30;
#endif

// Forks rank 1 running `child` (its exit code is the result), then sets up rank 0 here. The
// child runs the store and hands its endpoint over a pipe: the parent then starts no thread
// that outlives a test, so the next fork is from a single-threaded process (ThreadSanitizer
// cannot follow threads started after a multi-threaded fork).
struct Pair {
  pid_t pid = -1;
  Rank rank0;
  Status setup;

  Pair(const TcpOptions& options, const std::function<int(Rank&)>& child) {
    int fds[2];
    if (pipe(fds) != 0) std::abort();
    pid = fork();
    if (pid == 0) {
      ::close(fds[0]);
      StoreEndpoint ep;
      Status s = start_store("127.0.0.1:0", &ep);
      if (!s.ok() || write(fds[1], &ep, sizeof ep) != static_cast<ssize_t>(sizeof ep)) _exit(3);
      ::close(fds[1]);
      Rank r;
      s = open_rank(ep, 1, 2, options, &r);
      if (!s.ok()) {
        fprintf(stderr, "child setup: %s\n", s.message().c_str());
        _exit(2);
      }
      const int rc = child(r);
      r.tcp.reset();  // flushes what is queued and says goodbye; _exit alone would drop it
      _exit(rc);
    }
    ::close(fds[1]);
    StoreEndpoint ep;
    if (read(fds[0], &ep, sizeof ep) != static_cast<ssize_t>(sizeof ep))
      setup = error(ACCORD_ERR_SYSTEM, "the child did not start its store");
    ::close(fds[0]);
    if (setup.ok()) setup = open_rank(ep, 0, 2, options, &rank0);
  }
  int join() {
    int status = 0;
    waitpid(pid, &status, 0);
    pid = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }
  ~Pair() {
    if (pid > 0) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
  }
};

// Order-sensitive, vectorisable checksum of one message.
uint64_t checksum(const void* p, size_t bytes, uint64_t seq) {
  const uint64_t* w = static_cast<const uint64_t*>(p);
  uint64_t h = 0;
  for (size_t i = 0; i < bytes / 8; ++i) h += (w[i] ^ i) * 0x9E3779B97F4A7C15ULL;
  return mix(h + seq);
}

class TcpVolume : public ::testing::TestWithParam<int> {};

TEST_P(TcpVolume, ChecksummedOneWay) {
  TcpOptions o;
  o.nsocks = GetParam();
  o.slot_bytes = 1 << 20;
  const size_t n = kVolumeBytes / o.slot_bytes;
  Pair pair(o, [&](Rank& r) {
    // Sender: a pattern shifted per message (cheap to make), then its checksum as the last message.
    std::vector<uint64_t> pattern((o.slot_bytes >> 3) + 4096);
    for (size_t i = 0; i < pattern.size(); ++i) pattern[i] = mix(i);
    uint64_t total = 0;
    for (size_t m = 0; m < n; ++m) {
      void* slot;
      Status s = r.tcp->sender(0)->acquire(o.slot_bytes, &slot, wait_ctx(1, 0, 20000));
      if (!s.ok()) return fprintf(stderr, "%s\n", s.message().c_str()), 1;
      std::memcpy(slot, pattern.data() + (m * 131) % 4096, o.slot_bytes);
      total += checksum(slot, o.slot_bytes, m);
      r.tcp->sender(0)->post(o.slot_bytes, static_cast<uint32_t>(m));
    }
    void* slot;
    if (!r.tcp->sender(0)->acquire(8, &slot, wait_ctx(1, 0, 20000)).ok()) return 1;
    std::memcpy(slot, &total, 8);
    r.tcp->sender(0)->post(8, 0xC0FFEE);
    return 0;
  });
  ASSERT_TRUE(pair.setup.ok()) << pair.setup.message();
  uint64_t total = 0;
  const int64_t t0 = now_ns();
  for (size_t m = 0; m < n; ++m) {
    const void* data;
    size_t bytes;
    uint32_t tag;
    Status s = pair.rank0.tcp->receiver(1)->wait(&data, &bytes, &tag, wait_ctx(0, 1, 20000));
    ASSERT_TRUE(s.ok()) << s.message();
    ASSERT_EQ(bytes, o.slot_bytes);
    ASSERT_EQ(tag, static_cast<uint32_t>(m));
    total += checksum(data, bytes, m);
    pair.rank0.tcp->receiver(1)->release();
  }
  const double secs = (now_ns() - t0) / 1e9;
  const void* data;
  size_t bytes;
  uint32_t tag;
  ASSERT_TRUE(pair.rank0.tcp->receiver(1)->wait(&data, &bytes, &tag, wait_ctx(0, 1, 5000)).ok());
  ASSERT_EQ(tag, 0xC0FFEEu);
  uint64_t want;
  std::memcpy(&want, data, 8);
  pair.rank0.tcp->receiver(1)->release();
  EXPECT_EQ(total, want) << "checksum of " << n << " MiB differs";
  EXPECT_EQ(pair.join(), 0);
  printf("%zu MiB over %d socket(s) in %.2f s: %.2f GB/s\n", n, o.nsocks, secs, kVolumeBytes / secs / 1e9);
}

INSTANTIATE_TEST_SUITE_P(Nsocks, TcpVolume, ::testing::Values(1, 4));

// Kills the child 200 ms from now; returns when it was killed (ns).
std::thread kill_later(pid_t pid, int sig, std::atomic<int64_t>* at) {
  return std::thread([=] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    at->store(now_ns());
    kill(pid, sig);
  });
}

TEST(TcpLiveness, KilledPeerWhileReceiving) {
  TcpOptions o;
  o.nsocks = 2;
  Pair pair(o, [](Rank& r) {
    (void)send_msg(r.tcp->sender(0), 1000, 1, 1, wait_ctx(1, 0, 5000));
    pause();
    return 0;
  });
  ASSERT_TRUE(pair.setup.ok()) << pair.setup.message();
  ASSERT_TRUE(recv_msg(pair.rank0.tcp->receiver(1), 1000, 1, 1, wait_ctx(0, 1, 5000)).ok());
  std::atomic<int64_t> killed{0};
  std::thread killer = kill_later(pair.pid, SIGKILL, &killed);
  const void* d;
  size_t b;
  uint32_t tag;
  Status s = pair.rank0.tcp->receiver(1)->wait(&d, &b, &tag, wait_ctx(0, 1, 10000));
  const int64_t done = now_ns();
  killer.join();
  EXPECT_EQ(s.code(), ACCORD_ERR_REMOTE) << s.message();
  EXPECT_NE(s.message().find("rank 1"), std::string::npos) << s.message();
  EXPECT_LT(done - killed.load(), 1000 * 1000000LL);
  printf("detected %.1f ms after SIGKILL: %s\n", (done - killed.load()) / 1e6, s.message().c_str());
  EXPECT_EQ(pair.join(), 128 + SIGKILL);
}

TEST(TcpLiveness, KilledPeerWhileSending) {
  TcpOptions o;
  o.nsocks = 4;
  Pair pair(o, [](Rank&) {
    pause();  // never reads: the sender fills everything and blocks
    return 0;
  });
  ASSERT_TRUE(pair.setup.ok()) << pair.setup.message();
  std::atomic<int64_t> killed{0};
  std::thread killer = kill_later(pair.pid, SIGKILL, &killed);
  Status s;
  for (int i = 0; s.ok() && i < 100000; ++i)
    s = send_msg(pair.rank0.tcp->sender(1), o.slot_bytes, 1, i, wait_ctx(0, 1, 10000), false);
  const int64_t done = now_ns();
  killer.join();
  EXPECT_EQ(s.code(), ACCORD_ERR_REMOTE) << s.message();
  EXPECT_NE(s.message().find("rank 1"), std::string::npos) << s.message();
  EXPECT_LT(done - killed.load(), 1000 * 1000000LL);
  printf("detected %.1f ms after SIGKILL: %s\n", (done - killed.load()) / 1e6, s.message().c_str());
}

TEST(TcpLiveness, StoppedPeerTimesOut) {
  TcpOptions o;
  Pair pair(o, [](Rank& r) {
    (void)send_msg(r.tcp->sender(0), 10, 1, 1, wait_ctx(1, 0, 5000));
    pause();
    return 0;
  });
  ASSERT_TRUE(pair.setup.ok()) << pair.setup.message();
  ASSERT_TRUE(recv_msg(pair.rank0.tcp->receiver(1), 10, 1, 1, wait_ctx(0, 1, 5000)).ok());
  kill(pair.pid, SIGSTOP);
  const int64_t t0 = now_ns();
  const void* d;
  size_t b;
  uint32_t tag;
  Status s = pair.rank0.tcp->receiver(1)->wait(&d, &b, &tag, wait_ctx(0, 1, 500));
  const int64_t ms = (now_ns() - t0) / 1000000;
  EXPECT_EQ(s.code(), ACCORD_ERR_TIMEOUT) << s.message();
  EXPECT_GE(ms, 490);
  EXPECT_LT(ms, 900);
  kill(pair.pid, SIGKILL);
  kill(pair.pid, SIGCONT);
}

}  // namespace
}  // namespace accord
