// Reduce-scatter, all-gather, broadcast, reduce and barrier through the C API, exact values,
// 1 to 5 ranks as threads and 3 as processes, sizes around chunk boundaries, in place.
#include <accord/accord.h>
#include <accord/accord_device.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "tests/support/harness.hpp"

namespace accord::testing {
namespace {

constexpr size_t kChunkF32 = (256 << 10) / 4;

std::string fail(const char* what, size_t count, accord_comm_t comm, accord_status_t s) {
  return std::string(what) + " count " + std::to_string(count) + ": " + accord_status_string(s) + ": " +
         accord_last_error(comm);
}

std::string reduce_scatter(accord_comm_t comm, int rank, int n, size_t count, accord_datatype_t dt, accord_red_op_t op,
                           bool in_place) {
  const size_t es = accord_dtype_size(dt), nn = static_cast<size_t>(n);
  std::vector<char> in(count * nn * es + 1), out(count * es + 1), want(count * nn * es + 1);
  fill_input(in.data(), count * nn, dt, op, rank, n);
  fill_expected(want.data(), count * nn, dt, op, n);
  char* recv = in_place ? in.data() + static_cast<size_t>(rank) * count * es : out.data();
  accord_status_t s = accord_reduce_scatter(in.data(), recv, count, dt, op, comm, nullptr);
  if (s != ACCORD_SUCCESS) return fail("reduce_scatter", count, comm, s);
  if (count_mismatches(recv, want.data() + static_cast<size_t>(rank) * count * es, count, dt))
    return "reduce_scatter count " + std::to_string(count) + ": wrong values";
  return "";
}

std::string all_gather(accord_comm_t comm, int rank, int n, size_t count, bool in_place) {
  const size_t nn = static_cast<size_t>(n);
  std::vector<int32_t> mine(count), out(count * nn), want(count * nn);
  for (size_t i = 0; i < count; ++i) mine[i] = rank * 100000 + static_cast<int32_t>(i);
  for (size_t r = 0; r < nn; ++r)
    for (size_t i = 0; i < count; ++i) want[r * count + i] = static_cast<int32_t>(r) * 100000 + static_cast<int32_t>(i);
  const int32_t* send = mine.data();
  if (in_place) {
    std::copy(mine.begin(), mine.end(), out.begin() + static_cast<long>(static_cast<size_t>(rank) * count));
    send = out.data() + static_cast<size_t>(rank) * count;
  }
  accord_status_t s = accord_all_gather(send, out.data(), count, ACCORD_INT32, comm, nullptr);
  if (s != ACCORD_SUCCESS) return fail("all_gather", count, comm, s);
  if (out != want) return "all_gather count " + std::to_string(count) + ": wrong values";
  return "";
}

std::string broadcast(accord_comm_t comm, int rank, int n, size_t count, int root, bool in_place) {
  (void)n;
  std::vector<double> src(count), out(count, -1.0);
  for (size_t i = 0; i < count; ++i) src[i] = static_cast<double>(i) * 0.5 + root;
  const double* send = rank == root ? src.data() : nullptr;
  if (in_place && rank == root) {
    out = src;
    send = out.data();
  }
  accord_status_t s = accord_broadcast(send, out.data(), count, ACCORD_FLOAT64, root, comm, nullptr);
  if (s != ACCORD_SUCCESS) return fail("broadcast", count, comm, s);
  if (out != src) return "broadcast count " + std::to_string(count) + " root " + std::to_string(root) + ": wrong";
  return "";
}

std::string reduce(accord_comm_t comm, int rank, int n, size_t count, int root, accord_red_op_t op) {
  std::vector<float> in(count), out(count, -1.0f), want(count);
  fill_input(in.data(), count, ACCORD_FLOAT32, op, rank, n);
  fill_expected(want.data(), count, ACCORD_FLOAT32, op, n);
  accord_status_t s = accord_reduce(in.data(), rank == root ? out.data() : nullptr, count, ACCORD_FLOAT32, op, root,
                                    comm, nullptr);
  if (s != ACCORD_SUCCESS) return fail("reduce", count, comm, s);
  if (rank == root && count_mismatches(out.data(), want.data(), count, ACCORD_FLOAT32))
    return "reduce count " + std::to_string(count) + " root " + std::to_string(root) + ": wrong values";
  return "";
}

std::string all_collectives(accord_comm_t comm, int rank, int n) {
  for (size_t count : {size_t{0}, size_t{1}, size_t{7}, size_t{1031}, kChunkF32 + 1}) {
    for (bool in_place : {false, true}) {
      for (accord_red_op_t op : {ACCORD_SUM, ACCORD_MAX, ACCORD_AVG}) {
        std::string e = reduce_scatter(comm, rank, n, count, ACCORD_FLOAT32, op, in_place);
        if (!e.empty()) return e;
      }
      std::string e = reduce_scatter(comm, rank, n, count, ACCORD_INT8, ACCORD_SUM, in_place);
      if (e.empty()) e = all_gather(comm, rank, n, count, in_place);
      for (int root = 0; root < n && e.empty(); ++root) e = broadcast(comm, rank, n, count, root, in_place);
      for (int root = 0; root < n && e.empty(); ++root) e = reduce(comm, rank, n, count, root, root % 2 ? ACCORD_AVG : ACCORD_SUM);
      if (e.empty() && accord_barrier(comm, nullptr) != ACCORD_SUCCESS) e = fail("barrier", 0, comm, ACCORD_ERR_INTERNAL);
      if (!e.empty()) return e;
    }
  }
  return "";
}

// Every dtype, and every op for the reductions, at a prime count and one above a chunk.
std::string every_dtype_and_op(accord_comm_t comm, int rank, int n) {
  for (int d = 0; d < ACCORD_NUM_DTYPES; ++d) {
    const auto dt = static_cast<accord_datatype_t>(d);
    const size_t es = accord_dtype_size(dt);
    for (size_t count : {size_t{13}, kChunkF32 * 4 / es + 1}) {
      for (int o = 0; o < ACCORD_NUM_OPS; ++o) {
        for (bool in_place : {false, true}) {
          std::string e = reduce_scatter(comm, rank, n, count, dt, static_cast<accord_red_op_t>(o), in_place);
          if (!e.empty()) return std::string(dtype_name(dt)) + " " + e;
        }
        // reduce to each root, any dtype
        std::vector<char> in(count * es), out(count * es), want(count * es);
        fill_input(in.data(), count, dt, static_cast<accord_red_op_t>(o), rank, n);
        fill_expected(want.data(), count, dt, static_cast<accord_red_op_t>(o), n);
        for (int root = 0; root < n; ++root) {
          accord_status_t s = accord_reduce(in.data(), out.data(), count, dt, static_cast<accord_red_op_t>(o), root, comm,
                                            nullptr);
          if (s != ACCORD_SUCCESS) return fail("reduce", count, comm, s);
          if (rank == root && count_mismatches(out.data(), want.data(), count, dt))
            return std::string("reduce ") + dtype_name(dt) + " " + op_name(static_cast<accord_red_op_t>(o)) + ": wrong";
        }
      }
      // gathers and broadcasts move bytes: any dtype, bit-exact
      std::vector<char> mine(count * es), all(count * es * static_cast<size_t>(n));
      for (size_t i = 0; i < mine.size(); ++i) mine[i] = static_cast<char>(rank * 31 + static_cast<int>(i % 251));
      if (accord_all_gather(mine.data(), all.data(), count, dt, comm, nullptr) != ACCORD_SUCCESS)
        return fail("all_gather", count, comm, ACCORD_ERR_INTERNAL);
      for (int r = 0; r < n; ++r)
        for (size_t i = 0; i < mine.size(); ++i)
          if (all[static_cast<size_t>(r) * mine.size() + i] != static_cast<char>(r * 31 + static_cast<int>(i % 251)))
            return std::string("all_gather ") + dtype_name(dt) + ": wrong";
      for (int root = 0; root < n; ++root) {
        std::vector<char> b = mine;
        if (accord_broadcast(b.data(), b.data(), count, dt, root, comm, nullptr) != ACCORD_SUCCESS)
          return fail("broadcast", count, comm, ACCORD_ERR_INTERNAL);
        for (size_t i = 0; i < b.size(); ++i)
          if (b[i] != static_cast<char>(root * 31 + static_cast<int>(i % 251)))
            return std::string("broadcast ") + dtype_name(dt) + ": wrong";
      }
    }
  }
  return "";
}

class CollectivesEveryDtype : public ::testing::TestWithParam<int> {};
TEST_P(CollectivesEveryDtype, ExactResults) {
  for (const auto& f : run_threads(GetParam(), every_dtype_and_op)) ADD_FAILURE() << f;
}
INSTANTIATE_TEST_SUITE_P(Ranks, CollectivesEveryDtype,
                         ::testing::ValuesIn(kThreadSanitizer ? std::vector<int>{1, 3} : std::vector<int>{1, 2, 3, 5}));

TEST(CollectivesProcesses, EveryDtypeThreeRanks) {
  if (kThreadSanitizer) GTEST_SKIP() << "processes share no memory ThreadSanitizer can see; the thread ranks cover it";
  for (const auto& f : run_processes(3, every_dtype_and_op, 300)) ADD_FAILURE() << f;
}

class CollectivesThreads : public ::testing::TestWithParam<int> {};
TEST_P(CollectivesThreads, ExactResults) {
  for (const auto& f : run_threads(GetParam(), all_collectives)) ADD_FAILURE() << f;
}
INSTANTIATE_TEST_SUITE_P(Ranks, CollectivesThreads, ::testing::Values(1, 2, 3, 4, 5));

TEST(CollectivesProcesses, ExactResultsThreeRanks) {
  for (const auto& f : run_processes(3, all_collectives)) ADD_FAILURE() << f;
}

// The same through the shared-memory FIFOs (ACCORD_SINGLE_COPY=0): the all-gathers, broadcasts
// and reduce-scatters of 16 KiB-16 MiB above take Note [Single copy] otherwise
// (single_copy_test.cpp covers that).
TEST(CollectivesProcesses, ExactResultsThreeRanksFifos) {
  ScopedEnv fifos("ACCORD_SINGLE_COPY", "0");
  for (const auto& f : run_processes(3, all_collectives)) ADD_FAILURE() << f;
}

TEST(CollectivesProcesses, EveryDtypeThreeRanksFifos) {
  if (kThreadSanitizer) GTEST_SKIP() << "processes share no memory ThreadSanitizer can see; the thread ranks cover it";
  ScopedEnv fifos("ACCORD_SINGLE_COPY", "0");
  for (const auto& f : run_processes(3, every_dtype_and_op, 300)) ADD_FAILURE() << f;
}

}  // namespace
}  // namespace accord::testing

namespace accord::testing {
namespace {

// One thread drives four ranks of one process through groups (the seeds' towers).
TEST(Group, OneThreadDrivesSeveralRanks) {
  constexpr int kRanks = 4;
  accord_comm_t comms[kRanks];
  ASSERT_EQ(accord_comm_init_all(comms, kRanks, nullptr), ACCORD_SUCCESS) << accord_last_error(nullptr);
  std::vector<std::vector<float>> grads(kRanks), params(kRanks);
  for (int r = 0; r < kRanks; ++r) {
    grads[static_cast<size_t>(r)].assign(100003, static_cast<float>(r + 1));
    params[static_cast<size_t>(r)].assign(1000, r == 2 ? 7.0f : 0.0f);
  }
  ASSERT_EQ(accord_group_start(), ACCORD_SUCCESS);
  ASSERT_EQ(accord_group_start(), ACCORD_SUCCESS);  // nested: only the outer end runs
  for (int r = 0; r < kRanks; ++r) {
    auto& g = grads[static_cast<size_t>(r)];
    auto& p = params[static_cast<size_t>(r)];
    // Two calls per communicator, run in order.
    ASSERT_EQ(accord_all_reduce(g.data(), g.data(), g.size(), ACCORD_FLOAT32, ACCORD_AVG, comms[r], nullptr),
              ACCORD_SUCCESS);
    ASSERT_EQ(accord_broadcast(p.data(), p.data(), p.size(), ACCORD_FLOAT32, 2, comms[r], nullptr), ACCORD_SUCCESS);
  }
  ASSERT_EQ(accord_group_end(), ACCORD_SUCCESS);
  EXPECT_EQ(grads[0][0], 1.0f) << "ran before the outer group end";
  ASSERT_EQ(accord_group_end(), ACCORD_SUCCESS) << accord_last_error(nullptr);
  for (int r = 0; r < kRanks; ++r) {
    for (float v : grads[static_cast<size_t>(r)]) ASSERT_EQ(v, 2.5f);  // (1+2+3+4)/4
    for (float v : params[static_cast<size_t>(r)]) ASSERT_EQ(v, 7.0f);
  }
  // Argument errors surface at the call, inside a group too, and nothing runs for them.
  float x = 0;
  ASSERT_EQ(accord_group_start(), ACCORD_SUCCESS);
  EXPECT_EQ(accord_all_reduce(nullptr, &x, 1, ACCORD_FLOAT32, ACCORD_SUM, comms[0], nullptr),
            ACCORD_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(accord_group_end(), ACCORD_SUCCESS);
  EXPECT_EQ(accord_group_end(), ACCORD_ERR_INVALID_USAGE);
  size_t len = 0;
  ASSERT_EQ(accord_comm_plan(comms[1], nullptr, &len), ACCORD_SUCCESS);
  std::string plan(len, '\0');
  ASSERT_EQ(accord_comm_plan(comms[1], plan.data(), &len), ACCORD_SUCCESS);
  EXPECT_NE(plan.find("pair 0-1: shm"), std::string::npos) << plan;
  EXPECT_NE(plan.find("pair 2-3: shm"), std::string::npos) << plan;
  EXPECT_EQ(std::count(plan.begin(), plan.end(), '\n'), 6) << plan;  // 4 choose 2
  for (auto c : comms) EXPECT_EQ(accord_comm_destroy(c), ACCORD_SUCCESS);
  // GPUs 0 and 1: refused, naming what is missing, unless this machine has both (gpu_path
  // tests init_all on GPUs; a missing one on simulated GPUs too).
  int gpus = 0;
  ASSERT_EQ(accord_device_count(&gpus), ACCORD_SUCCESS);
  const accord_status_t s = accord_comm_init_all(comms, 2, std::vector<int>{0, 1}.data());
  const std::string msg = accord_last_error(nullptr);
  if (gpus == 0) {
    EXPECT_EQ(s, ACCORD_ERR_UNSUPPORTED) << msg;
    EXPECT_NE(msg.find("devlist[0] = GPU 0, but there is no GPU"), std::string::npos) << msg;
  } else if (gpus == 1) {
    EXPECT_EQ(s, ACCORD_ERR_INVALID_ARGUMENT) << msg;
    EXPECT_NE(msg.find("devlist[1] = GPU 1 does not exist"), std::string::npos) << msg;
  } else {
    ASSERT_EQ(s, ACCORD_SUCCESS) << msg;
    for (auto c : comms) EXPECT_EQ(accord_comm_destroy(c), ACCORD_SUCCESS);
  }
}

}  // namespace
}  // namespace accord::testing
