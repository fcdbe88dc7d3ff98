// TCP transport between threads of one process over loopback: message sizes around every
// boundary (empty, inline-sized, piece size, slot size), long runs checking order and tags,
// 1, 2 and 4 sockets per pair, three ranks, interface selection, and failure paths that need
// no second process: abort, a silent peer (timeout), a peer that closed cleanly, and strangers
// that connect to the listener with garbage or a wrong secret.
#include <gtest/gtest.h>
#include <poll.h>
#include <unistd.h>

#include <thread>

#include "core/crypto.hpp"
#include "tcp_test_util.hpp"
#include "transport/tcp/interface.hpp"

namespace accord {
namespace {

using namespace tcptest;

// Runs body(rank) on nranks threads, each with its own transport, and returns their statuses.
template <typename Body>
std::vector<Status> run_ranks(int nranks, const TcpOptions& options, Body body,
                              std::function<void(int, TcpOptions*)> tweak = nullptr) {
  StoreEndpoint ep;
  Status s = start_store("127.0.0.1:0", &ep);
  if (!s.ok()) return {s};
  std::vector<Status> result(static_cast<size_t>(nranks));
  std::vector<std::thread> threads;
  for (int r = 0; r < nranks; ++r)
    threads.emplace_back([&, r] {
      TcpOptions o = options;
      if (tweak) tweak(r, &o);
      Rank rank;
      Status st = open_rank(ep, r, nranks, o, &rank);
      if (st.ok()) st = body(r, rank);
      result[static_cast<size_t>(r)] = st;
    });
  for (auto& t : threads) t.join();
  return result;
}

void expect_all_ok(const std::vector<Status>& v) {
  for (size_t i = 0; i < v.size(); ++i) EXPECT_TRUE(v[i].ok()) << "rank " << i << ": " << v[i].message();
}

class TcpSockets : public ::testing::TestWithParam<int> {};

TEST_P(TcpSockets, BoundarySizesBothWays) {
  TcpOptions o;
  o.nsocks = GetParam();
  o.slot_bytes = 256 << 10;
  const size_t max = o.slot_bytes;
  const std::vector<size_t> sizes = {0, 1, 56, 57, 4095, 65535, 65536, 65537, 131073, 200003, max - 1, max, 0, 7};
  expect_all_ok(run_ranks(2, o, [&](int r, Rank& rank) -> Status {
    const int peer = 1 - r;
    SendChannel* tx = rank.tcp->sender(peer);
    RecvChannel* rx = rank.tcp->receiver(peer);
    if (tx == nullptr || rx == nullptr || tx->max_bytes() != max)
      return error(ACCORD_ERR_INTERNAL, "channels missing or wrong size");
    for (size_t i = 0; i < sizes.size(); ++i) {
      ACCORD_TRY(send_msg(tx, sizes[i], 1000 + i + 100 * r, i * 2 + r, wait_ctx(r, peer, 10000)));
      ACCORD_TRY(recv_msg(rx, sizes[i], 1000 + i + 100 * peer, i * 2 + peer, wait_ctx(r, peer, 10000)));
    }
    return Status::success();
  }));
}

TEST_P(TcpSockets, ThousandsInOrderWithTags) {
  TcpOptions o;
  o.nsocks = GetParam();
  o.slot_bytes = 192 << 10;
  const int kMessages = 3000;
  auto size_of = [&](int i) { return static_cast<size_t>(mix(i) % (o.slot_bytes + 1)) >> (i % 7); };
  expect_all_ok(run_ranks(2, o, [&](int r, Rank& rank) -> Status {
    if (r == 0) {
      for (int i = 0; i < kMessages; ++i)
        ACCORD_TRY(send_msg(rank.tcp->sender(1), size_of(i), 0xA0000000u + i, i, wait_ctx(0, 1, 10000)));
    } else {
      for (int i = 0; i < kMessages; ++i)
        ACCORD_TRY(recv_msg(rank.tcp->receiver(0), size_of(i), 0xA0000000u + i, i, wait_ctx(1, 0, 10000)));
    }
    return Status::success();
  }));
}

// The receiver starts late: the sender fills its ring and the kernel buffers, the receiver's
// sockets block on a full receive ring (Note [TCP framing]) and resume as slots are released,
// including empty messages whose header was read while blocked.
TEST_P(TcpSockets, SlowReceiverBoundedRings) {
  TcpOptions o;
  o.nsocks = GetParam();
  o.slot_bytes = 128 << 10;
  o.nslots = 4;
  const int kMessages = 400;
  auto size_of = [&](int i) { return i % 3 == 0 ? size_t{0} : o.slot_bytes - (i % 5); };
  expect_all_ok(run_ranks(2, o, [&](int r, Rank& rank) -> Status {
    if (r == 0) {
      for (int i = 0; i < kMessages; ++i)
        ACCORD_TRY(send_msg(rank.tcp->sender(1), size_of(i), i, i, wait_ctx(0, 1, 10000)));
      return Status::success();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    for (int i = 0; i < kMessages; ++i) {
      ACCORD_TRY(recv_msg(rank.tcp->receiver(0), size_of(i), i, i, wait_ctx(1, 0, 10000)));
      if (i % 50 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return Status::success();
  }));
}

INSTANTIATE_TEST_SUITE_P(Nsocks, TcpSockets, ::testing::Values(1, 2, 4));

TEST(TcpTransport, ThreeRanksAllPairs) {
  TcpOptions o;
  o.nsocks = 3;
  expect_all_ok(run_ranks(3, o, [&](int r, Rank& rank) -> Status {
    for (int i = 0; i < 50; ++i) {
      for (int p = 0; p < 3; ++p)
        if (p != r) ACCORD_TRY(send_msg(rank.tcp->sender(p), 1000 * i, r * 10 + p, i * 9 + r * 3 + p, wait_ctx(r, p, 10000)));
      for (int p = 0; p < 3; ++p)
        if (p != r) ACCORD_TRY(recv_msg(rank.tcp->receiver(p), 1000 * i, p * 10 + r, i * 9 + p * 3 + r, wait_ctx(r, p, 10000)));
    }
    if (rank.tcp->sender(r) != nullptr) return error(ACCORD_ERR_INTERNAL, "a channel to itself");
    return Status::success();
  }));
}

TEST(TcpTransport, AbortWakesWait) {
  std::atomic<bool> abort{false};
  auto res = run_ranks(2, TcpOptions{}, [&](int r, Rank& rank) -> Status {
    if (r == 1) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      abort.store(true);
      std::this_thread::sleep_for(std::chrono::milliseconds(400));  // stay connected
      return Status::success();
    }
    const int64_t t0 = now_ns();
    const void* d;
    size_t b;
    uint32_t tag;
    Status s = rank.tcp->receiver(1)->wait(&d, &b, &tag, wait_ctx(0, 1, 10000, &abort));
    if (s.code() != ACCORD_ERR_ABORTED) return error(ACCORD_ERR_INTERNAL, "want ABORTED, got: %s", s.message().c_str());
    if (now_ns() - t0 > 400 * 1000000LL) return error(ACCORD_ERR_INTERNAL, "abort took too long");
    return Status::success();
  });
  expect_all_ok(res);
}

TEST(TcpTransport, SilentPeerTimesOut) {
  auto res = run_ranks(2, TcpOptions{}, [&](int r, Rank& rank) -> Status {
    if (r == 1) {
      std::this_thread::sleep_for(std::chrono::milliseconds(700));
      return Status::success();
    }
    const int64_t t0 = now_ns();
    const void* d;
    size_t b;
    uint32_t tag;
    Status s = rank.tcp->receiver(1)->wait(&d, &b, &tag, wait_ctx(0, 1, 300));
    const int64_t ms = (now_ns() - t0) / 1000000;
    if (s.code() != ACCORD_ERR_TIMEOUT) return error(ACCORD_ERR_INTERNAL, "want TIMEOUT, got: %s", s.message().c_str());
    if (ms < 290 || ms > 600) return error(ACCORD_ERR_INTERNAL, "timeout after %lld ms, want ~300", (long long)ms);
    return Status::success();
  });
  expect_all_ok(res);
}

TEST(TcpTransport, PeerThatLeftCleanlyIsNamed) {
  auto res = run_ranks(2, TcpOptions{}, [&](int r, Rank& rank) -> Status {
    if (r == 1) {
      // One message, then destroy: it must still arrive, and the next wait must fail at once.
      ACCORD_TRY(send_msg(rank.tcp->sender(0), 100, 5, 1, wait_ctx(1, 0, 1000)));
      rank.tcp.reset();
      return Status::success();
    }
    ACCORD_TRY(recv_msg(rank.tcp->receiver(1), 100, 5, 1, wait_ctx(0, 1, 5000)));
    const int64_t t0 = now_ns();
    const void* d;
    size_t b;
    uint32_t tag;
    Status s = rank.tcp->receiver(1)->wait(&d, &b, &tag, wait_ctx(0, 1, 5000));
    if (s.code() != ACCORD_ERR_REMOTE || s.message().find("rank 1") == std::string::npos ||
        s.message().find("cleanly") == std::string::npos)
      return error(ACCORD_ERR_INTERNAL, "want REMOTE naming rank 1 and a clean close, got: %s", s.message().c_str());
    if (now_ns() - t0 > 1000 * 1000000LL) return error(ACCORD_ERR_INTERNAL, "took over 1 s");
    // Sending to it fails too, once the ring has no room or at once.
    void* slot;
    s = rank.tcp->sender(1)->acquire(10, &slot, wait_ctx(0, 1, 1000));
    if (s.code() != ACCORD_ERR_REMOTE) return error(ACCORD_ERR_INTERNAL, "acquire: %s", s.message().c_str());
    return Status::success();
  });
  expect_all_ok(res);
}

// ---- strangers -------------------------------------------------------------------------------

// Connects to `addr`, does `what`, and reports whether the listener then closed on it within 1.5 s.
bool stranger(const SockAddr& addr, const std::string& what) {
  Fd fd;
  if (!tcp_connect(addr, Deadline::after_ms(2000), "listener", &fd).ok()) return false;
  if (what == "garbage") {
    std::string junk(300, 'x');
    (void)send_all(fd.get(), junk.data(), junk.size(), Deadline::after_ms(500), "listener");
  } else if (what == "wrong-mac") {
    uint8_t challenge[20];
    if (!recv_all(fd.get(), challenge, 20, Deadline::after_ms(1000), "listener").ok()) return false;
    uint8_t claim[80] = {'A', 'C', 'T', '2'};
    uint32_t fields[7] = {1, 0, 1, 2, 0, 1, 128 << 10};
    std::memcpy(claim + 4, fields, sizeof fields);
    Secret wrong{};
    wrong[0] = 42;
    Digest mac = hmac_sha256(wrong.data(), wrong.size(), claim, 48);
    std::memcpy(claim + 48, mac.data(), 32);
    (void)send_all(fd.get(), claim, sizeof claim, Deadline::after_ms(500), "listener");
  }  // "idle": say nothing
  const int64_t until = now_ns() + 1500 * 1000000LL;
  char buf[256];
  while (now_ns() < until) {
    pollfd p{fd.get(), POLLIN, 0};
    poll(&p, 1, 50);
    ssize_t n = recv(fd.get(), buf, sizeof buf, MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EAGAIN)) return true;
  }
  return false;
}

TEST(TcpTransport, StrangersAreDroppedAndTheJobWorks) {
  std::atomic<int> ready{0};
  std::vector<std::thread> strangers;
  std::vector<int> closed(3, 0);
  const char* kinds[3] = {"garbage", "wrong-mac", "idle"};
  SockAddr rank1_addr;
  TcpOptions o;
  o.nsocks = 2;
  auto res = run_ranks(2, o, [&](int r, Rank& rank) -> Status {
    for (int i = 0; i < 20; ++i) {
      ACCORD_TRY(send_msg(rank.tcp->sender(1 - r), 70000, i, i * 2 + r, wait_ctx(r, 1 - r, 5000)));
      ACCORD_TRY(recv_msg(rank.tcp->receiver(1 - r), 70000, i, i * 2 + 1 - r, wait_ctx(r, 1 - r, 5000)));
    }
    if (r == 1 && rank.tcp->dropped_connections() < 2)
      return error(ACCORD_ERR_INTERNAL, "dropped %d connections, want >= 2", rank.tcp->dropped_connections());
    if (r == 1) {
      // After setup the listener is gone: nobody can connect any more.
      Fd fd;
      Status late = tcp_connect(rank.tcp->listen_address(), Deadline::after_ms(200), "closed listener", &fd);
      if (late.ok()) return error(ACCORD_ERR_INTERNAL, "the listener still accepts after setup");
    }
    return Status::success();
  }, [&](int r, TcpOptions* opts) {
    if (r == 1) {
      opts->after_listen = [&](const SockAddr& addr) {
        rank1_addr = addr;
        for (int i = 0; i < 3; ++i)
          strangers.emplace_back([&, i] {
            ready.fetch_add(1);
            closed[static_cast<size_t>(i)] = stranger(rank1_addr, kinds[i]);
          });
        while (ready.load() < 3) std::this_thread::yield();
        std::this_thread::sleep_for(std::chrono::milliseconds(50));  // let them arrive first
      };
    }
  });
  for (auto& t : strangers) t.join();
  expect_all_ok(res);
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(closed[static_cast<size_t>(i)]) << kinds[i] << " stranger was not dropped";
}

TEST(TcpTransport, WrongSecretRankIsRefused) {
  StoreEndpoint ep;
  ASSERT_TRUE(start_store("127.0.0.1:0", &ep).ok());
  Status s0, s1;
  std::thread t0([&] {
    Rank r;
    TcpOptions o;
    s0 = open_rank(ep, 0, 2, o, &r, 1500);
  });
  std::thread t1([&] {
    Rank r;
    Deadline d = Deadline::after_ms(1500);
    s1 = StoreClient::connect(ep, 1, 2, d, &r.store);
    if (!s1.ok()) return;
    TcpOptions o;
    o.secret = ep.secret;
    o.secret[5] ^= 1;  // a process that reached the store but holds another job's secret
    o.bootstrap_addr = ep.addr;
    s1 = TcpTransport::setup(r.store.get(), 1, 2, {0}, o, d, &r.tcp);
  });
  t0.join();
  t1.join();
  EXPECT_EQ(s0.code(), ACCORD_ERR_INVALID_USAGE) << s0.message();
  EXPECT_NE(s0.message().find("secret"), std::string::npos) << s0.message();
  EXPECT_EQ(s1.code(), ACCORD_ERR_TIMEOUT) << s1.message();
}

// ---- interfaces ------------------------------------------------------------------------------

TEST(TcpInterface, NameMatching) {
  EXPECT_TRUE(interface_matches("eth", "eth0"));
  EXPECT_TRUE(interface_matches("eth0", "eth0"));
  EXPECT_FALSE(interface_matches("=eth", "eth0"));
  EXPECT_TRUE(interface_matches("=eth0", "eth0"));
  EXPECT_TRUE(interface_matches("ib,eth", "eth1"));
  EXPECT_FALSE(interface_matches("^lo,docker", "lo"));
  EXPECT_FALSE(interface_matches("^lo,docker", "docker0"));
  EXPECT_TRUE(interface_matches("^lo,docker", "eth0"));
  EXPECT_FALSE(interface_matches("ib", "eth0"));
}

TEST(TcpInterface, Choice) {
  LocalInterface i;
  ASSERT_TRUE(choose_local_address("lo", nullptr, &i).ok());
  EXPECT_EQ(i.name, "lo");
  SockAddr boot;
  ASSERT_TRUE(parse_address("127.0.0.1:1234", 0, &boot).ok());
  ASSERT_TRUE(choose_local_address("", &boot, &i).ok());
  EXPECT_EQ(i.addr.to_string(), "127.0.0.1:0");
  Status s = choose_local_address("nosuchif", nullptr, &i);
  EXPECT_EQ(s.code(), ACCORD_ERR_INVALID_ARGUMENT);
  EXPECT_NE(s.message().find("lo (127.0.0.1"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace accord
