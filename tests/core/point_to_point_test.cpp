// accord_send / accord_recv (collectives/point_to_point.cpp): ranks as threads and as forked
// processes. Groups whose sends and receives are each larger than a channel's FIFO (so they
// must progress together: Note [Point-to-point progress]), sends to itself, lone calls,
// several calls for one peer matched in order, a count that differs from the peer's, and the
// argument checks.
#include <gtest/gtest.h>

#include <accord/accord.hpp>
#include <cstdint>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/harness.hpp"

namespace accord::testing {
namespace {

std::string check_ok(accord_status_t st, accord_comm_t comm, const char* what) {
  if (st == ACCORD_SUCCESS) return "";
  return std::string(what) + ": " + accord_status_string(st) + ": " + accord_last_error(comm);
}

// Every rank sends a different block to every rank (itself included) and receives one from
// each, in one group: an all-to-all of `count` int32 per pair.
std::string all_to_all(accord_comm_t comm, int rank, int nranks, size_t count) {
  std::vector<int32_t> send(count * nranks), recv(count * nranks, -1);
  for (int p = 0; p < nranks; ++p)
    for (size_t i = 0; i < count; ++i)
      send[p * count + i] = rank * 1000000 + p * 1000 + static_cast<int32_t>(i % 997);
  accord_group_start();
  for (int p = 0; p < nranks; ++p) {
    accord_send(send.data() + p * count, count, ACCORD_INT32, p, comm, nullptr);
    accord_recv(recv.data() + p * count, count, ACCORD_INT32, p, comm, nullptr);
  }
  std::string err = check_ok(accord_group_end(), comm, "accord_group_end");
  if (!err.empty()) return err;
  for (int q = 0; q < nranks; ++q)
    for (size_t i = 0; i < count; ++i)
      if (recv[q * count + i] != q * 1000000 + rank * 1000 + static_cast<int32_t>(i % 997))
        return "block from rank " + std::to_string(q) + " element " + std::to_string(i) +
               " is wrong";
  return "";
}

TEST(PointToPoint, AllToAllLargerThanTheFifosThreads) {
  // 3 MiB per pair: more than the FIFO holds (8 slots of 256 KiB).
  auto errors = run_threads(3, [](accord_comm_t comm, int rank, int nranks) {
    return all_to_all(comm, rank, nranks, (size_t{3} << 20) / 4 + 5);
  });
  EXPECT_TRUE(errors.empty()) << errors[0];
}

TEST(PointToPoint, AllToAllProcessesSmallSlots) {
  ScopedEnv slots("ACCORD_SHM_SLOT_BYTES", "4096");
  auto errors = run_processes(4, [](accord_comm_t comm, int rank, int nranks) {
    for (size_t count : {size_t{0}, size_t{1}, size_t{100003}}) {
      std::string err = all_to_all(comm, rank, nranks, count);
      if (!err.empty()) return "count " + std::to_string(count) + ": " + err;
    }
    return std::string();
  });
  EXPECT_TRUE(errors.empty()) << errors[0];
}

TEST(PointToPoint, LoneCallsAndOrderForOnePeer) {
  auto errors = run_threads(2, [](accord_comm_t comm, int rank, int) -> std::string {
    // Without a group: rank 0 sends two messages, rank 1 receives them in that order.
    double a[3] = {1, 2, 3}, b[5] = {4, 5, 6, 7, 8};
    if (rank == 0) {
      std::string err =
          check_ok(accord_send(a, 3, ACCORD_FLOAT64, 1, comm, nullptr), comm, "send a");
      if (err.empty())
        err = check_ok(accord_send(b, 5, ACCORD_FLOAT64, 1, comm, nullptr), comm, "send b");
      return err;
    }
    double ra[3] = {}, rb[5] = {};
    std::string err =
        check_ok(accord_recv(ra, 3, ACCORD_FLOAT64, 0, comm, nullptr), comm, "recv a");
    if (err.empty())
      err = check_ok(accord_recv(rb, 5, ACCORD_FLOAT64, 0, comm, nullptr), comm, "recv b");
    if (err.empty() && (std::memcmp(ra, a, sizeof a) != 0 || std::memcmp(rb, b, sizeof b) != 0))
      err = "messages arrived out of order or wrong";
    return err;
  });
  EXPECT_TRUE(errors.empty()) << errors[0];
}

TEST(PointToPoint, DifferentCountIsMismatch) {
  auto errors = run_threads(2, [](accord_comm_t comm, int rank, int) -> std::string {
    int32_t v[8] = {};
    accord_status_t st = rank == 0 ? accord_send(v, 8, ACCORD_INT32, 1, comm, nullptr)
                                   : accord_recv(v, 4, ACCORD_INT32, 0, comm, nullptr);
    if (rank == 0) return check_ok(st, comm, "send");
    if (st != ACCORD_ERR_MISMATCH)
      return std::string("recv of another count returned ") + accord_status_string(st);
    const std::string msg = accord_last_error(comm);
    if (msg.find("rank 1") == std::string::npos || msg.find("rank 0") == std::string::npos)
      return "the message names neither rank: " + msg;
    return "";
  });
  EXPECT_TRUE(errors.empty()) << errors[0];
}

TEST(PointToPoint, ArgumentChecks) {
  auto errors = run_threads(2, [](accord_comm_t comm, int rank, int) -> std::string {
    int32_t v = 0;
    if (accord_send(&v, 1, ACCORD_INT32, 2, comm, nullptr) != ACCORD_ERR_INVALID_ARGUMENT)
      return "peer 2 accepted";
    if (accord_recv(nullptr, 1, ACCORD_INT32, 0, comm, nullptr) != ACCORD_ERR_INVALID_ARGUMENT)
      return "NULL buffer accepted";
    if (accord_send(&v, 1, static_cast<accord_datatype_t>(42), 0, comm, nullptr) !=
        ACCORD_ERR_INVALID_ARGUMENT)
      return "dtype 42 accepted";
    // A send to itself needs its receive in the same group.
    if (accord_send(&v, 1, ACCORD_INT32, rank, comm, nullptr) != ACCORD_ERR_INVALID_USAGE)
      return "a lone send to itself accepted";
    return "";
  });
  EXPECT_TRUE(errors.empty()) << errors[0];
}

// accord.hpp's span overloads: a swap between two ranks in one group.
TEST(PointToPoint, CppSpans) {
  const accord::UniqueId id = accord::UniqueId::create();
  std::vector<std::string> errors(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      try {
        accord::Comm comm = accord::Comm::init_rank(2, id, r);
        std::vector<int64_t> mine(1000, r + 1), theirs(1000, 0);
        accord_group_start();
        comm.send(std::span<const int64_t>(mine), 1 - r);
        comm.recv(std::span<int64_t>(theirs), 1 - r);
        if (accord_group_end() != ACCORD_SUCCESS)
          errors[r] = accord_last_error(comm.get());
        else if (theirs[999] != 2 - r)
          errors[r] = "rank " + std::to_string(r) + " got the wrong values";
      } catch (const accord::Error& e) {
        errors[r] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(errors[0], "");
  EXPECT_EQ(errors[1], "");
}

}  // namespace
}  // namespace accord::testing
