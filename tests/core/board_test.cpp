// The shared-memory board (transport/shm/board.hpp, Note [Board]) on its own, ranks as threads
// over one zero-filled buffer, and the CPU count behind the wait policy (Note [Oversubscribed]).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "transport/shm/board.hpp"
#include "transport/wait.hpp"

namespace accord {
namespace {

struct Boards {
  explicit Boards(int nranks) : memory(static_cast<size_t>(nranks) * kBoardBytes / 64 + 1) {
    for (int r = 0; r < nranks; ++r)
      areas.push_back(reinterpret_cast<uint8_t*>(memory.data()) + static_cast<size_t>(r) * kBoardBytes);
  }
  struct alignas(64) Line {
    uint8_t b[64];
  };
  std::vector<Line> memory;  // zero-filled, as a new segment
  std::vector<uint8_t*> areas;
};

// Every rank posts (rank, round) for `rounds` calls and checks every peer's line each call:
// payloads of 8 bytes up to the whole block (kBoardPayloadBytes), across its cache lines.
// `delay_ms` > 0: rank 0 sleeps that long before each post, so the others wait on the futex.
std::vector<std::string> exchange(int nranks, int rounds, WaitPolicy policy, int delay_ms) {
  Boards mem(nranks);
  std::vector<std::string> errors(static_cast<size_t>(nranks));
  std::vector<std::thread> threads;
  for (int rank = 0; rank < nranks; ++rank) {
    threads.emplace_back([&, rank] {
      Board board(mem.areas, rank, &policy);
      WaitContext ctx;
      ctx.deadline = Deadline::after_ms(20000);
      ctx.self_rank = rank;
      for (uint32_t seq = 1; seq <= static_cast<uint32_t>(rounds); ++seq) {
        if (rank == 0 && delay_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
        constexpr size_t kSizes[] = {8, 52, 53, 64, 65, 128, 200, 256, 257, 436, kBoardPayloadBytes};
        const size_t bytes = kSizes[seq % (sizeof kSizes / sizeof kSizes[0])];
        auto pattern = [seq, bytes](int r, uint8_t* p) {
          const uint32_t head[2] = {static_cast<uint32_t>(r), seq};
          std::memcpy(p, head, sizeof head);
          for (size_t i = sizeof head; i < bytes; ++i)
            p[i] = static_cast<uint8_t>(r * 31 + seq * 7 + i);
        };
        uint8_t mine[kBoardPayloadBytes];
        pattern(rank, mine);
        board.post(seq, mine, bytes, 1000 + seq);
        for (int peer = 0; peer < nranks; ++peer) {
          const BoardLine* line = board.line(peer, seq);
          if (!Board::ready(line, seq)) {
            ctx.peer_rank = peer;
            Status s = board.wait(line, peer, seq, ctx);
            if (!s.ok()) {
              errors[static_cast<size_t>(rank)] = s.message();
              return;
            }
          }
          uint8_t want[kBoardPayloadBytes];
          pattern(peer, want);
          if (std::memcmp(line->data, want, bytes) != 0 || line->tag != 1000 + seq ||
              line->bytes != bytes) {
            errors[static_cast<size_t>(rank)] = "round " + std::to_string(seq) + ": rank " + std::to_string(rank) +
                                                " read a wrong line of rank " + std::to_string(peer);
            return;
          }
        }
        board.wake_readers(seq);
      }
    });
  }
  for (auto& t : threads) t.join();
  std::vector<std::string> out;
  for (auto& e : errors)
    if (!e.empty()) out.push_back(e);
  return out;
}

TEST(Board, EveryRankReadsEveryLineOfEveryCallWithoutAcknowledgements) {
  WaitPolicy spin;  // the default: spin, then sleep
  WaitPolicy yield;  // more threads than cores: as make_wait_policy does
  yield.spin_ns = 0;
  yield.yields = 32;
  for (int n : {2, 3, 5}) {
    auto errors = exchange(n, n == 2 ? 20000 : 5000, n == 2 ? spin : yield, 0);
    for (const auto& e : errors) ADD_FAILURE() << "n=" << n << ": " << e;
  }
}

// Readers that sleep must be woken by the owner's wake_readers, not by the end of their 20 ms
// futex slice: 100 calls with a 2 ms delay take about 0.2 s, 2 s if every wake were lost. A
// busy machine (tests running beside this one) can make one run slow; lost wakes make every
// run slow, so the best of three runs is what is checked.
TEST(Board, SleepingReadersAreWokenByThePost) {
  WaitPolicy sleepy;
  sleepy.spin_ns = 0;
  sleepy.yields = 0;
  double secs = 1e9;
  for (int attempt = 0; attempt < 3 && secs >= 1.2; ++attempt) {
    auto start = std::chrono::steady_clock::now();
    auto errors = exchange(3, 100, sleepy, 2);
    const auto took = std::chrono::steady_clock::now() - start;
    secs = std::min(secs, std::chrono::duration<double>(took).count());
    for (const auto& e : errors) ADD_FAILURE() << e;
  }
  EXPECT_LT(secs, 1.2) << "sleeping readers waited for their futex timeouts";
  std::vector<std::string> errors;
  // And with sleeping at every wait (no delay), many calls still go through.
  errors = exchange(4, 3000, sleepy, 0);
  for (const auto& e : errors) ADD_FAILURE() << e;
}

TEST(Board, AMissingPeerIsATimeoutNamingIt) {
  Boards mem(2);
  WaitPolicy policy;
  policy.spin_ns = 1000;
  Board board(mem.areas, 0, &policy);
  const uint32_t x = 7;
  board.post(1, &x, sizeof x, 1);
  WaitContext ctx;
  ctx.deadline = Deadline::after_ms(100);
  ctx.self_rank = 0;
  ctx.peer_rank = 1;
  ctx.operation = "all_reduce";
  auto start = std::chrono::steady_clock::now();
  Status s = board.wait(board.line(1, 1), 1, 1, ctx);
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(s.code(), ACCORD_ERR_TIMEOUT);
  EXPECT_NE(s.message().find("rank 1"), std::string::npos) << s.message();
  EXPECT_LT(secs, 1.0);
}

TEST(Oversubscribed, JobCpusIsTheUnionOfTheRanksMasks) {
  EXPECT_EQ(job_cpus({"1", "2"}), 2);        // mpirun -np 2: each rank bound to its own core
  EXPECT_EQ(job_cpus({"1", "1"}), 1);        // both on CPU 0
  EXPECT_EQ(job_cpus({"3", "3", "3"}), 2);   // 3 ranks free on 2 CPUs
  EXPECT_EQ(job_cpus({"0,1", "1"}), 2);      // CPU 64 and CPU 0
  EXPECT_EQ(job_cpus({"ff,0,f0"}), 12);      // 8 + 4 in the third word
  const long online = sysconf(_SC_NPROCESSORS_ONLN);
  EXPECT_EQ(job_cpus({"", ""}), static_cast<int>(online));  // unreadable masks: every CPU online
  // This thread's own mask reads back as the CPUs it may use.
  cpu_set_t set;
  ASSERT_EQ(sched_getaffinity(0, sizeof set, &set), 0);
  EXPECT_EQ(job_cpus({cpu_mask()}), CPU_COUNT(&set)) << cpu_mask();
}

}  // namespace
}  // namespace accord
