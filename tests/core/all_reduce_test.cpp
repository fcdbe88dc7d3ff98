// All-reduce end to end through the public C API: ranks as threads and as forked processes,
// every dtype x op, sizes that break things, in place and out of place, unaligned buffers,
// exact expected values (so every rank is also bitwise identical to every other).
#include <accord/accord.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <tuple>
#include <vector>

#include "core/log.hpp"
#include "tests/support/harness.hpp"

namespace accord::testing {
namespace {

constexpr accord_datatype_t kDtypes[] = {
    ACCORD_INT8,   ACCORD_UINT8,   ACCORD_INT32,   ACCORD_UINT32,  ACCORD_INT64,
    ACCORD_UINT64, ACCORD_FLOAT16, ACCORD_FLOAT32, ACCORD_FLOAT64, ACCORD_BFLOAT16};
constexpr accord_red_op_t kOps[] = {ACCORD_SUM, ACCORD_PROD, ACCORD_MAX, ACCORD_MIN, ACCORD_AVG};
constexpr size_t kChunkElemsF32 = (256 << 10) / 4;      // default shm slot / sizeof(float)
constexpr size_t kHostChunkElemsF32 = (64 << 10) / 4;   // Note [Host chunk] / sizeof(float)

// One all-reduce, checked exactly. `offset` shifts both buffers off their natural alignment.
std::string check(accord_comm_t comm, int rank, int nranks, accord_datatype_t dt,
                  accord_red_op_t op, size_t count, bool in_place, size_t offset, size_t seed = 0) {
  const size_t es = accord_dtype_size(dt);
  std::vector<char> in(count * es + offset + 64), out(count * es + offset + 64, 0x5a),
      want(count * es + 1);
  char* send = in.data() + offset;
  char* recv = in_place ? send : out.data() + offset;
  fill_input(send, count, dt, op, rank, nranks, seed);
  fill_expected(want.data(), count, dt, op, nranks, seed);
  accord_status_t s = accord_all_reduce(send, recv, count, dt, op, comm, nullptr);
  std::string where = std::string(dtype_name(dt)) + " " + op_name(op) + " count " +
                      std::to_string(count) + (in_place ? " in place" : " out of place") +
                      " offset " + std::to_string(offset);
  if (s != ACCORD_SUCCESS)
    return where + ": " + accord_status_string(s) + ": " + accord_last_error(comm);
  size_t bad = count_mismatches(recv, want.data(), count, dt);
  if (bad != 0) return where + ": " + std::to_string(bad) + " wrong elements";
  // Nothing written past the end.
  if (!in_place && static_cast<unsigned char>(out[offset + count * es]) != 0x5a)
    return where + ": wrote past the end";
  return "";
}

std::string sweep(accord_comm_t comm, int rank, int nranks) {
  const size_t n = static_cast<size_t>(nranks);
  std::vector<size_t> sizes = {0, 1, 2, 7, n - 1 > 0 ? n - 1 : 3, n + 1, 1031};
  for (accord_datatype_t dt : kDtypes)
    for (accord_red_op_t op : kOps)
      for (size_t count : sizes)
        for (bool in_place : {false, true}) {
          std::string e = check(comm, rank, nranks, dt, op, count, in_place, in_place ? 0 : 3);
          if (!e.empty()) return e;
        }
  // Just past 16 KiB, where Note [Single copy] starts between processes: every dtype and op.
  for (accord_datatype_t dt : kDtypes)
    for (accord_red_op_t op : kOps)
      for (bool in_place : {false, true}) {
        std::string e = check(comm, rank, nranks, dt, op, (16 << 10) / accord_dtype_size(dt) + 13, in_place,
                              in_place ? 0 : 5);
        if (!e.empty()) return e;
      }
  // Around one chunk and several chunks, unaligned, float32 and a 2-byte type.
  for (size_t count : {kHostChunkElemsF32 - 1, kHostChunkElemsF32 + 1, kHostChunkElemsF32 * n + 3,
                       kChunkElemsF32 - 1, kChunkElemsF32, kChunkElemsF32 + 1,
                       3 * kChunkElemsF32 * n + 5}) {
    for (bool in_place : {false, true}) {
      std::string e = check(comm, rank, nranks, ACCORD_FLOAT32, ACCORD_SUM, count, in_place, 4);
      if (e.empty()) e = check(comm, rank, nranks, ACCORD_BFLOAT16, ACCORD_AVG, count, in_place, 1);
      if (!e.empty()) return e;
    }
  }
  return "";
}

class AllReduceThreads : public ::testing::TestWithParam<int> {};

TEST_P(AllReduceThreads, EveryDtypeOpAndSizeExact) {
  auto failures = run_threads(GetParam(), sweep);
  for (const auto& f : failures) ADD_FAILURE() << f;
}

INSTANTIATE_TEST_SUITE_P(Ranks, AllReduceThreads, ::testing::Values(1, 2, 3, 4, 5));

class AllReduceProcesses : public ::testing::TestWithParam<int> {};

TEST_P(AllReduceProcesses, EveryDtypeOpAndSizeExact) {
  auto failures = run_processes(GetParam(), sweep);
  for (const auto& f : failures) ADD_FAILURE() << f;
}

INSTANTIATE_TEST_SUITE_P(Ranks, AllReduceProcesses, ::testing::Values(2, 3, 4));

// The same through the shared-memory FIFOs (ACCORD_SINGLE_COPY=0), which the sizes from 16 KiB
// to 16 MiB take otherwise only when a rank cannot read its peers' memory.
class AllReduceProcessesFifos : public ::testing::TestWithParam<int> {};

TEST_P(AllReduceProcessesFifos, EveryDtypeOpAndSizeExact) {
  ScopedEnv fifos("ACCORD_SINGLE_COPY", "0");
  auto failures = run_processes(GetParam(), sweep);
  for (const auto& f : failures) ADD_FAILURE() << f;
}

INSTANTIATE_TEST_SUITE_P(Ranks, AllReduceProcessesFifos, ::testing::Values(2, 4));

class AllReduceAlgorithms : public ::testing::TestWithParam<std::tuple<const char*, int>> {};

TEST_P(AllReduceAlgorithms, EveryDtypeOpAndSizeExact) {
  setenv("ACCORD_ALGO", std::get<0>(GetParam()), 1);
  auto failures = run_threads(std::get<1>(GetParam()), sweep);
  unsetenv("ACCORD_ALGO");
  for (const auto& f : failures) ADD_FAILURE() << f;
}

INSTANTIATE_TEST_SUITE_P(Forced, AllReduceAlgorithms,
                         ::testing::Combine(::testing::Values("ring", "tree", "direct", "rd"),
                                            ::testing::ValuesIn(kThreadSanitizer
                                                                    ? std::vector<int>{3}
                                                                    : std::vector<int>{2, 3, 5})));

TEST(AllReduce, LargePrimeCountAndAlgorithmsAgreeOnExactInputs) {
  for (const char* algo : {"ring", "tree", "direct", "rd"}) {
    setenv("ACCORD_ALGO", algo, 1);
    auto failures = run_threads(3, [](accord_comm_t comm, int rank, int nranks) {
      return check(comm, rank, nranks, ACCORD_FLOAT32, ACCORD_SUM, 1000003, false, 0, 7);
    });
    for (const auto& f : failures) ADD_FAILURE() << algo << ": " << f;
  }
  unsetenv("ACCORD_ALGO");
}

// Inexact inputs (random floats): any rank-dependent summation order would show up as ranks
// disagreeing in the last bits. Every algorithm must give every rank the same bits, and the
// same bits on a second run.
TEST(AllReduce, BitwiseIdenticalOnEveryRankAndRunWithInexactFloats) {
  for (const char* algo : {"ring", "tree", "direct", "rd"}) {
    setenv("ACCORD_ALGO", algo, 1);
    for (int n : {3, 4, 5}) {
      std::vector<uint64_t> first(static_cast<size_t>(n));
      for (int run = 0; run < 2; ++run) {
        std::vector<uint64_t> hashes(static_cast<size_t>(n));
        auto failures =
            run_threads(n, [&](accord_comm_t comm, int rank, int nranks) -> std::string {
              std::vector<float> v(70001);
              uint32_t x = 12345u + static_cast<uint32_t>(rank) * 7919u;
              for (float& f : v) {
                x = x * 1664525u + 1013904223u;
                f = static_cast<float>(x >> 8) / 16777216.0f - 0.5f;
              }
              if (accord_all_reduce(v.data(), v.data(), v.size(), ACCORD_FLOAT32, ACCORD_AVG, comm,
                                    nullptr) != ACCORD_SUCCESS)
                return accord_last_error(comm);
              uint64_t h = 1469598103934665603ULL;
              for (float f : v) {
                uint32_t b;
                std::memcpy(&b, &f, 4);
                h = (h ^ b) * 1099511628211ULL;
              }
              hashes[static_cast<size_t>(rank)] = h;
              (void)nranks;
              return "";
            });
        for (const auto& f : failures) ADD_FAILURE() << algo << ": " << f;
        for (int r = 1; r < n; ++r)
          EXPECT_EQ(hashes[static_cast<size_t>(r)], hashes[0])
              << algo << " n=" << n << " rank " << r;
        if (run == 0)
          first = hashes;
        else
          EXPECT_EQ(hashes[0], first[0]) << algo << " n=" << n << ": a second run gave other bits";
      }
    }
  }
  unsetenv("ACCORD_ALGO");
}

// Note [Board]: a direct all-reduce of at most 500 bytes among ranks of one host runs on the
// board, a larger one through the FIFOs; both must give the bits of the left fold in rank
// order, (x0 op x1) op x2 ..., then / nranks for avg, on inexact floats, in place or not.
std::string fold_check(accord_comm_t comm, int rank, int nranks, size_t count, accord_red_op_t op, bool in_place) {
  auto input = [count](int r) {
    std::vector<float> v(count);
    uint32_t x = 777u + static_cast<uint32_t>(r) * 104729u;
    for (float& f : v) {
      x = x * 1664525u + 1013904223u;
      f = static_cast<float>(x >> 8) / 16777216.0f + 0.25f;
    }
    return v;
  };
  std::vector<float> want = input(0);
  for (int r = 1; r < nranks; ++r) {
    std::vector<float> x = input(r);
    for (size_t i = 0; i < count; ++i) want[i] = op == ACCORD_PROD ? want[i] * x[i] : want[i] + x[i];
  }
  if (op == ACCORD_AVG)
    for (float& w : want) w /= static_cast<float>(nranks);
  std::vector<float> send = input(rank), out(count + 4, -3.0f);
  float* recv = in_place ? send.data() : out.data();
  if (accord_all_reduce(send.data(), recv, count, ACCORD_FLOAT32, op, comm, nullptr) != ACCORD_SUCCESS)
    return accord_last_error(comm);
  if (std::memcmp(recv, want.data(), count * sizeof(float)) != 0)
    return "count " + std::to_string(count) + ": not the bits of the rank-order fold";
  if (!in_place && out[count] != -3.0f) return "wrote past the end";
  return "";
}

TEST(AllReduce, DirectOnTheBoardAndThroughFifosGivesTheRankOrderFold) {
  ScopedEnv a("ACCORD_ALGO", "direct");
  auto body = [](accord_comm_t comm, int rank, int nranks) -> std::string {
    // 13 floats = 52 bytes, the board's first cache line; 125 = 500 bytes, its largest
    for (size_t count : {1, 2, 12, 13, 14, 16, 29, 61, 64, 124, 125, 126, 200})
      for (accord_red_op_t op : {ACCORD_SUM, ACCORD_PROD, ACCORD_AVG})
        for (bool in_place : {false, true}) {
          // Twice: the board's two lines alternate between calls.
          for (int again = 0; again < 2; ++again) {
            std::string e = fold_check(comm, rank, nranks, count, op, in_place);
            if (!e.empty()) return e;
          }
        }
    return "";
  };
  for (int n : {2, 3, 5}) {
    for (const auto& f : run_threads(n, body)) ADD_FAILURE() << "threads n=" << n << ": " << f;
  }
  for (const auto& f : run_processes(3, body)) ADD_FAILURE() << "processes: " << f;
}

// 256 MiB (32 MiB under ThreadSanitizer, where it would take minutes).
TEST(AllReduce, TwoHundredFiftySixMiBOfFloat32InProcesses) {
  // Under ThreadSanitizer, slot-sized chunks (Note [Host chunk]: 64 KiB took it from 11 to 26 s).
  ScopedEnv chunk("ACCORD_CHUNK_BYTES", kThreadSanitizer ? "256K" : "0");
  auto failures = run_processes(2, [](accord_comm_t comm, int rank, int nranks) {
    const size_t count = (kThreadSanitizer ? 32u << 20 : 256u << 20) / 4;
    std::string e = check(comm, rank, nranks, ACCORD_FLOAT32, ACCORD_SUM, count, false, 0);
    if (e.empty()) e = check(comm, rank, nranks, ACCORD_FLOAT32, ACCORD_AVG, count, true, 0, 3);
    return e;
  });
  for (const auto& f : failures) ADD_FAILURE() << f;
}

// Note [Store mode probe] (collectives/store_probe.cpp): the kind of store for large outputs is
// decided at init, once, from the probes of every rank of the host, so every rank logs one
// line with the same decision from the same numbers (the lines differ only in the rank and
// this rank's probe time); with ACCORD_NT_THRESHOLD set, no probe and the threshold given.
// Calls from the first one on are exact whichever kind was chosen (4 MiB and a little more:
// all-reduces out of place at three alignments, and all-gathers).
TEST(AllReduce, StoreModeIsDecidedAtInitAlikeOnEveryRankOfAHost) {
  char dir[] = "/tmp/accord-store-mode-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const size_t count = (4u << 20) / 4 + 3;     // just over the threshold, odd
  for (const char* threshold : {"0", "4M"}) {  // 0: the probe decides
    SCOPED_TRACE(std::string("ACCORD_NT_THRESHOLD='") + threshold + "'");
    const std::string log =
        std::string(dir) + "/log" + (std::strcmp(threshold, "0") != 0 ? "-set" : "") + "-%p";
    ScopedEnv level("ACCORD_LOG", "warn,init:info");
    ScopedEnv file("ACCORD_LOG_FILE", log.c_str());
    ScopedEnv nt("ACCORD_NT_THRESHOLD", threshold);
    ScopedEnv chunk("ACCORD_CHUNK_BYTES", "256K");  // fewer hand-offs under ThreadSanitizer
    ScopedEnv fifos("ACCORD_SINGLE_COPY", "0");  // the FIFOs' stores (Note [Single copy] takes these sizes)
    auto failures = run_processes(
        2,
        [&](accord_comm_t comm, int rank, int nranks) {
          const size_t part = count / static_cast<size_t>(nranks) + 1;
          std::vector<int32_t> mine(part), all(part * static_cast<size_t>(nranks) + 1, -1);
          for (int i = 0; i < 6; ++i) {
            std::string e = check(comm, rank, nranks, ACCORD_FLOAT32, ACCORD_SUM, count, false,
                                  i % 3 * 4, static_cast<size_t>(i));
            if (!e.empty()) return "call " + std::to_string(i) + ": " + e;
            for (size_t k = 0; k < part; ++k) mine[k] = static_cast<int32_t>(k) * 3 + rank + i;
            if (accord_all_gather(mine.data(), all.data(), part, ACCORD_INT32, comm, nullptr) !=
                ACCORD_SUCCESS)
              return "all_gather " + std::to_string(i) + ": " + accord_last_error(comm);
            for (int r = 0; r < nranks; ++r)
              for (size_t k = 0; k < part; ++k)
                if (all[static_cast<size_t>(r) * part + k] != static_cast<int32_t>(k) * 3 + r + i)
                  return "all_gather " + std::to_string(i) + ": wrong element " +
                         std::to_string(k) + " of rank " + std::to_string(r);
            if (all.back() != -1) return "all_gather " + std::to_string(i) + ": wrote past the end";
          }
          return std::string();
        },
        120, [](int) { log_reconfigure(); });  // this process's log, as set above
    for (const auto& f : failures) ADD_FAILURE() << f;
  }
  // Each rank's line, from "store mode:" to the end of the line, less this rank's probe time.
  std::vector<std::string> probed, set;
  for (const std::string& name : files_in(dir)) {
    const std::string text = take_file(std::string(dir) + "/" + name);
    const size_t at = text.find("store mode: ");
    if (at == std::string::npos) continue;  // the test process's own log
    EXPECT_EQ(text.find("store mode: ", at + 1), std::string::npos) << "one line; " << name << ":\n"
                                                                    << text;
    std::string line = text.substr(at, text.find('\n', at) - at);
    const size_t took = line.find("; this rank's probe took ");
    if (took != std::string::npos) line.erase(took);
    (name.rfind("log-set-", 0) == 0 ? set : probed).push_back(line);
  }
  rmdir(dir);
  ASSERT_EQ(probed.size(), 2u) << "one log per rank process";
  ASSERT_EQ(set.size(), 2u) << "one log per rank process";
  EXPECT_EQ(probed[0], probed[1]) << "every rank of the host decides alike, from the same numbers";
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  EXPECT_NE(probed[0].find("a sanitizer build: no probe"), std::string::npos) << probed[0];
#else
  EXPECT_NE(probed[0].find("(probe at init, 2 ranks of this host at once, "), std::string::npos)
      << probed[0];
#endif
  for (const std::string& line : set) {
    EXPECT_NE(line.find("store mode: non-temporal stores for out-of-place outputs from 4194304 "
                        "bytes (set by ACCORD_NT_THRESHOLD=4194304)"),
              std::string::npos)
        << line;
    EXPECT_EQ(line.find("probe at init"), std::string::npos) << line;
  }
}

// Note [Host chunk]: host calls with every rank on one host cut their messages at 64 KiB;
// ACCORD_CHUNK_BYTES, and a tune file's measured chunk, still decide where given. Read from
// the tuner's log line for each call's plan; every call exact (1 MiB and a little more, out of
// place and in place; a reduce-scatter and an all-gather of the same size).
TEST(AllReduce, HostCallsCutAtSixtyFourKiBUnlessToldOtherwise) {
  char dir[] = "/tmp/accord-chunk-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string tune = std::string(dir) + "/tune";
  {
    std::ofstream f(tune);
    f << "accord-tune 1\nall_reduce 2 ring 262144 8 2.0\nall_reduce 2 ring 262144 67108864 10000\n";
  }
  struct Case {
    const char* name;
    const char* chunk_env;  // ACCORD_CHUNK_BYTES
    bool tune_file;
    const char* want;  // in the all-reduce's plan line
  };
  const Case cases[] = {{"default", "0", false, "chunk 64 KiB"},
                        {"env-256K", "256K", false, "chunk 256 KiB"},
                        {"env-32K", "32K", false, "chunk 32 KiB"},
                        {"tune-file", "0", true, "ring, chunk 256 KiB"}};
  const size_t count = (1u << 20) / 4 + 5;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string log = std::string(dir) + "/log-" + c.name + "-%p";
    ScopedEnv level("ACCORD_LOG", "warn,tune:info");
    ScopedEnv fifos("ACCORD_SINGLE_COPY", "0");  // the FIFOs' chunks (Note [Single copy] takes these sizes)
    ScopedEnv file("ACCORD_LOG_FILE", log.c_str());
    ScopedEnv chunk("ACCORD_CHUNK_BYTES", c.chunk_env);
    ScopedEnv tuned("ACCORD_TUNE_FILE", c.tune_file ? tune.c_str() : "");
    auto failures = run_processes(2, [&](accord_comm_t comm, int rank, int nranks) {
      log_reconfigure();  // this process's log, as set above
      for (bool in_place : {false, true}) {
        std::string e = check(comm, rank, nranks, ACCORD_FLOAT32, ACCORD_SUM, count, in_place, 4);
        if (!e.empty()) return e;
      }
      const size_t part = count / 2;
      std::vector<int32_t> in(2 * part), out(2 * part, -1);
      for (size_t k = 0; k < in.size(); ++k) in[k] = static_cast<int32_t>(k) + rank;
      if (accord_reduce_scatter(in.data(), out.data(), part, ACCORD_INT32, ACCORD_SUM, comm, nullptr) !=
          ACCORD_SUCCESS)
        return std::string("reduce_scatter: ") + accord_last_error(comm);
      for (size_t k = 0; k < part; ++k)
        if (out[k] != 2 * static_cast<int32_t>(rank * part + k) + 1)
          return "reduce_scatter: wrong element " + std::to_string(k);
      if (accord_all_gather(in.data(), out.data(), part, ACCORD_INT32, comm, nullptr) != ACCORD_SUCCESS)
        return std::string("all_gather: ") + accord_last_error(comm);
      for (size_t k = 0; k < 2 * part; ++k)
        if (out[k] != static_cast<int32_t>(k % part) + static_cast<int32_t>(k / part))
          return "all_gather: wrong element " + std::to_string(k);
      return std::string();
    });
    for (const auto& f : failures) ADD_FAILURE() << f;
  }
  const std::vector<std::string> names = files_in(dir);
  int logs = 0;
  const std::string plan_line = "tune all_reduce of " + std::to_string(count * 4) + " bytes (2 ranks): ";
  for (const std::string& name : names) {
    const std::string text = take_file(std::string(dir) + "/" + name);
    const size_t at = text.find(plan_line);
    if (name.rfind("log-", 0) != 0 || at == std::string::npos) continue;  // the test process's own
    ++logs;
    const std::string line = text.substr(at, text.find('\n', at) - at);
    for (const Case& c : cases) {
      if (name.rfind(std::string("log-") + c.name + "-", 0) == 0) {
        EXPECT_NE(line.find(c.want), std::string::npos) << name << ": " << line;
      }
    }
  }
  rmdir(dir);
  EXPECT_EQ(logs, 8) << "one log per rank process and case";
}

// Note [Host chunk]: from the streaming threshold (here ACCORD_NT_THRESHOLD=4M, as the probe sets
// it where non-temporal stores win), host all-reduces keep the slot (256 KiB), in place too;
// below it, and at every size where ordinary stores were chosen (a threshold of 1 GiB), 64 KiB.
// Read from the tuner's plan line; every call exact (4 MiB and a little more, 1 MiB and a
// little more, out of place and in place).
TEST(AllReduce, HostAllReducesFromTheStreamingThresholdKeepTheSlot) {
  char dir[] = "/tmp/accord-chunk-nt-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const size_t big = (4u << 20) / 4 + 5, small = (1u << 20) / 4 + 5;
  struct Case {
    const char* name;
    const char* threshold;  // ACCORD_NT_THRESHOLD
    const char* want_big;   // in the plan line of the 4 MiB all-reduce
  };
  const Case cases[] = {{"streaming", "4M", "chunk 256 KiB"}, {"ordinary", "1G", "chunk 64 KiB"}};
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string log = std::string(dir) + "/log-" + c.name + "-%p";
    ScopedEnv level("ACCORD_LOG", "warn,tune:info");
    ScopedEnv fifos("ACCORD_SINGLE_COPY", "0");  // the FIFOs' chunks (Note [Single copy] takes these sizes)
    ScopedEnv file("ACCORD_LOG_FILE", log.c_str());
    ScopedEnv chunk("ACCORD_CHUNK_BYTES", "0");
    ScopedEnv nt("ACCORD_NT_THRESHOLD", c.threshold);
    auto failures = run_processes(2, [&](accord_comm_t comm, int rank, int nranks) {
      log_reconfigure();  // this process's log, as set above
      for (size_t count : {big, small})
        for (bool in_place : {false, true}) {
          std::string e = check(comm, rank, nranks, ACCORD_FLOAT32, ACCORD_SUM, count, in_place, 4);
          if (!e.empty()) return e;
        }
      return std::string();
    });
    for (const auto& f : failures) ADD_FAILURE() << f;
  }
  int logs = 0;
  for (const std::string& name : files_in(dir)) {
    const std::string text = take_file(std::string(dir) + "/" + name);
    for (const Case& c : cases) {
      if (name.rfind(std::string("log-") + c.name + "-", 0) != 0) continue;
      ++logs;
      for (size_t count : {big, small}) {
        const std::string plan =
            "tune all_reduce of " + std::to_string(count * 4) + " bytes (2 ranks): ";
        const size_t at = text.find(plan);
        ASSERT_NE(at, std::string::npos)
            << name << " has no plan line for " << count * 4 << " bytes";
        const std::string line = text.substr(at, text.find('\n', at) - at);
        EXPECT_NE(line.find(count == big ? c.want_big : "chunk 64 KiB"), std::string::npos)
            << name << ": " << line;
      }
    }
  }
  rmdir(dir);
  EXPECT_EQ(logs, 4) << "one log per rank process and case";
}

// Note [Single copy] (collectives/single_copy.cpp): the job takes it only where every rank
// agreed at init, in the window of sizes all of them allow (the built-in largest is 32 MiB
// divided by the ranks), and every rank says so in its init log; each size that takes it says
// so in the tune log. Rank 1 turning it off turns it off for
// every rank (named as the reason), and the calls go through the FIFOs, exact either way.
TEST(AllReduce, SingleCopyIsAgreedAtInitAndSaysSo) {
  char dir[] = "/tmp/accord-single-copy-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  struct Case {
    const char* name;
    const char* rank1;  // ACCORD_SINGLE_COPY on rank 1
    const char* rank2;  // ACCORD_SINGLE_COPY_MAX on rank 2
    const char* init;   // in every rank's init line
    bool taken_1m;      // a 1 MiB all-reduce takes it
  };
  const Case cases[] = {
      // 32 MiB / 3 ranks, the built-in largest, below rank 2's 16 MiB
      {"on", "1", "16M", "single copy: collectives of 16384 to 11184810 bytes read and write the peers' buffers", true},
      {"window", "1", "512K", "single copy: collectives of 16384 to 524288 bytes", false},
      {"off", "0", "16M", "single copy: off (", false},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string log = std::string(dir) + "/log-" + c.name + "-%p";
    ScopedEnv level("ACCORD_LOG", "warn,init:info,tune:info");
    ScopedEnv file("ACCORD_LOG_FILE", log.c_str());
    ScopedEnv least("ACCORD_SINGLE_COPY_MIN", "16K");  // built in: 256 KiB if oversubscribed
    auto failures = run_processes(
        3,
        [&](accord_comm_t comm, int rank, int nranks) {
          for (size_t count : {size_t{(1u << 20) / 4 + 3}, size_t{(64u << 10) / 4 - 1}})
            for (bool in_place : {false, true}) {
              std::string e = check(comm, rank, nranks, ACCORD_INT32, ACCORD_SUM, count, in_place, 4);
              if (!e.empty()) return e;
            }
          return std::string();
        },
        120,
        [&](int rank) {
          if (rank == 1) setenv("ACCORD_SINGLE_COPY", c.rank1, 1);
          if (rank == 2) setenv("ACCORD_SINGLE_COPY_MAX", c.rank2, 1);
          log_reconfigure();  // this process's log, as set above
        });
    for (const auto& f : failures) ADD_FAILURE() << f;
    int logs = 0;
    for (const std::string& name : files_in(dir)) {
      if (name.rfind(std::string("log-") + c.name + "-", 0) != 0) continue;
      const std::string text = take_file(std::string(dir) + "/" + name);
      if (text.find("single copy") == std::string::npos) continue;  // the test process's own log
      ++logs;
      EXPECT_NE(text.find(c.init), std::string::npos) << name << ":\n" << text;
      if (std::strcmp(c.rank1, "0") == 0) {
        EXPECT_NE(text.find("single copy: off (rank 1: ACCORD_SINGLE_COPY=0)"), std::string::npos)
            << "names the reason; " << name << ":\n" << text;
      }
      // Above the window the line says "single copy if every rank is in place", a plan, not a take.
      const bool taken_1m = text.find("all_reduce of 1048588 bytes (3 ranks): single copy (") != std::string::npos;
      EXPECT_EQ(taken_1m, c.taken_1m) << name << ":\n" << text;
      const bool taken_64k = text.find("all_reduce of 65532 bytes (3 ranks): single copy (") != std::string::npos;
      EXPECT_EQ(taken_64k, std::strcmp(c.rank1, "1") == 0) << name << ":\n" << text;
    }
    EXPECT_EQ(logs, 3) << "one log per rank process";
  }
  rmdir(dir);
}

// Note [Single copy], in place above the window: an all-reduce larger than
// ACCORD_SINGLE_COPY_MAX takes the single copy when every rank calls it in place, and the
// FIFOs when any rank does not (every rank alike: the next calls stay in step); exact either
// way. The debug tune log says which, per call.
TEST(AllReduce, SingleCopyAboveTheWindowOnlyWhereEveryRankIsInPlace) {
  char dir[] = "/tmp/accord-single-copy-ip-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string log = std::string(dir) + "/log-%p";
  ScopedEnv level("ACCORD_LOG", "warn,tune:debug");
  ScopedEnv file("ACCORD_LOG_FILE", log.c_str());
  ScopedEnv least("ACCORD_SINGLE_COPY_MIN", "16K");
  ScopedEnv most("ACCORD_SINGLE_COPY_MAX", "64K");
  const size_t count = (192u << 10) / 4 + 5;  // above the window
  auto failures = run_processes(
      3,
      [&](accord_comm_t comm, int rank, int nranks) {
        // all in place, all out of place, only rank 0 in place, all in place again
        const bool places[4][3] = {{true, true, true}, {false, false, false}, {true, false, false}, {true, true, true}};
        for (int i = 0; i < 4; ++i) {
          std::string e = check(comm, rank, nranks, ACCORD_INT32, ACCORD_SUM, count, places[i][rank], 4,
                                static_cast<size_t>(i));
          if (!e.empty()) return "call " + std::to_string(i) + ": " + e;
        }
        return std::string();
      },
      120, [](int) { log_reconfigure(); });
  for (const auto& f : failures) ADD_FAILURE() << f;
  int logs = 0;
  for (const std::string& name : files_in(dir)) {
    const std::string text = take_file(std::string(dir) + "/" + name);
    if (text.find("in place") == std::string::npos) continue;  // the test process's own log
    ++logs;
    // One line per call, in call order.
    std::vector<std::string> said;
    for (size_t at = text.find("bytes: "); at != std::string::npos; at = text.find("bytes: ", at + 1))
      said.push_back(text.substr(at + 7, text.find('\n', at) - at - 7));
    const std::vector<std::string> want = {"single copy (every rank in place)", "the FIFOs (not every rank in place)",
                                           "the FIFOs (not every rank in place)", "single copy (every rank in place)"};
    EXPECT_EQ(said, want) << name << ":\n" << text;
  }
  rmdir(dir);
  EXPECT_EQ(logs, 3) << "one log per rank process";
}

// Ranks that call a single-copy all-reduce with different counts fail with a mismatch naming
// the other rank, at once, not at the timeout.
TEST(AllReduce, SingleCopyCallsThatDifferFailWithAMismatch) {
  ScopedEnv timeout("ACCORD_TIMEOUT_MS", "60000");
  auto failures = run_processes(2, [](accord_comm_t comm, int rank, int) -> std::string {
    std::vector<float> buf((1u << 18) + 1, 1.0f);
    const auto start = std::chrono::steady_clock::now();
    accord_status_t s = accord_all_reduce(buf.data(), buf.data(), buf.size() - static_cast<size_t>(rank),
                                          ACCORD_FLOAT32, ACCORD_SUM, comm, nullptr);
    const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const std::string msg = accord_last_error(comm);
    if (s != ACCORD_ERR_MISMATCH) return std::string("expected a mismatch, got ") + accord_status_string(s) + ": " + msg;
    if (msg.find(rank == 0 ? "rank 1" : "rank 0") == std::string::npos) return "does not name the peer: " + msg;
    if (took > 30) return "took " + std::to_string(took) + " s";
    return std::string();
  });
  for (const auto& f : failures) ADD_FAILURE() << f;
}

TEST(AllReduce, RepeatedCallsStayInStep) {
  auto failures = run_processes(4, [](accord_comm_t comm, int rank, int nranks) {
    for (int i = 0; i < 300; ++i) {
      size_t count = static_cast<size_t>(i % 7 == 0 ? 70000 : i % 13 + 1);
      std::string e = check(comm, rank, nranks, ACCORD_INT32, ACCORD_SUM, count, i % 2 == 0, 0,
                            static_cast<size_t>(i));
      if (!e.empty()) return "iteration " + std::to_string(i) + ": " + e;
    }
    return std::string();
  });
  for (const auto& f : failures) ADD_FAILURE() << f;
}

// Note [Repeated calls]: a call identical to the previous one reuses its plan. Fixed buffers
// (the case that reuses it) with new data every time, then calls that differ from the last in
// one argument each, a bad call between good ones, and more distinct calls than the schedule
// cache holds (which drops the plan's schedule): every result exact, every bad call refused.
TEST(AllReduce, RepeatedIdenticalCallsReusePlanSafely) {
  auto failures = run_threads(3, [](accord_comm_t comm, int rank, int nranks) -> std::string {
    const size_t kMax = 4096;
    std::vector<char> in(kMax * 8), out(kMax * 8), want(kMax * 8);
    auto once = [&](accord_datatype_t dt, accord_red_op_t op, size_t count, size_t seed,
                    const std::string& what) -> std::string {
      fill_input(in.data(), count, dt, op, rank, nranks, seed);
      fill_expected(want.data(), count, dt, op, nranks, seed);
      accord_status_t s = accord_all_reduce(in.data(), out.data(), count, dt, op, comm, nullptr);
      if (s != ACCORD_SUCCESS)
        return what + ": " + accord_status_string(s) + ": " + accord_last_error(comm);
      if (count_mismatches(out.data(), want.data(), count, dt) != 0) return what + ": wrong result";
      return "";
    };
    std::string e;
    for (size_t i = 0; i < 50 && e.empty(); ++i)
      e = once(ACCORD_FLOAT32, ACCORD_SUM, 2, i, "same call " + std::to_string(i));
    if (e.empty()) e = once(ACCORD_INT32, ACCORD_SUM, 2, 1, "other dtype");
    if (e.empty()) e = once(ACCORD_INT32, ACCORD_MAX, 2, 2, "other op");
    if (e.empty()) e = once(ACCORD_INT32, ACCORD_MAX, 3, 3, "other count");
    if (!e.empty()) return e;
    if (accord_all_reduce(in.data(), nullptr, 3, ACCORD_INT32, ACCORD_MAX, comm, nullptr) !=
        ACCORD_ERR_INVALID_ARGUMENT)
      return "recvbuf NULL after the same call with a buffer was not refused";
    if (accord_all_reduce(in.data(), out.data(), 3, ACCORD_INT32, static_cast<accord_red_op_t>(99),
                          comm, nullptr) != ACCORD_ERR_INVALID_ARGUMENT)
      return "unknown op after a good call was not refused";
    if (accord_all_reduce(in.data(), in.data() + 4, 3, ACCORD_INT32, ACCORD_MAX, comm, nullptr) !=
        ACCORD_ERR_INVALID_ARGUMENT)
      return "overlapping buffers were not refused";
    for (size_t i = 0; i < 3 && e.empty(); ++i)
      e = once(ACCORD_INT32, ACCORD_MAX, 3, 10 + i, "after refusals");
    for (size_t c = 1; c <= 70 && e.empty(); ++c)
      e = once(ACCORD_INT64, ACCORD_SUM, c * 17, c, "distinct call");
    for (size_t i = 0; i < 3 && e.empty(); ++i)
      e = once(ACCORD_INT32, ACCORD_MAX, 3, 20 + i, "after 70 distinct calls");
    return e;
  });
  for (const auto& f : failures) ADD_FAILURE() << f;
}

}  // namespace
}  // namespace accord::testing
