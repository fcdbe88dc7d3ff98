// Note [Single copy] (collectives/single_copy.cpp) for the all-gather, broadcast and
// reduce-scatter: ranks as forked processes (process_vm_readv/writev) and as threads (plain
// copies), exact values, sizes at and around the window's edges, in place and out of place,
// unaligned buffers, every dtype at one size, broadcasts from the first and the last rank. Each
// rank's tune log proves which calls took the single copy, so that a silent fall back to the
// FIFOs fails the test. (The all-reduce's are in all_reduce_test.cpp; the FIFOs at these sizes
// in collectives_test.cpp, under ACCORD_SINGLE_COPY=0.)
#include <accord/accord.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/log.hpp"
#include "tests/support/harness.hpp"

namespace accord::testing {
namespace {

constexpr accord_datatype_t kDtypes[] = {
    ACCORD_INT8,   ACCORD_UINT8,   ACCORD_INT32,   ACCORD_UINT32,  ACCORD_INT64,
    ACCORD_UINT64, ACCORD_FLOAT16, ACCORD_FLOAT32, ACCORD_FLOAT64, ACCORD_BFLOAT16};
constexpr size_t kChunk = 256 << 10;  // kSingleCopyChunk
constexpr size_t kMin = 16 << 10;     // ACCORD_SINGLE_COPY_MIN as the tests set it (the built-in one)
constexpr size_t kFloor = 64 << 10;   // kSingleCopyFloor: broadcasts and reduce-scatters start there

// A byte of rank r's data at byte i: differs between ranks, and repeats only every 251 bytes,
// so a block at a wrong offset or from a wrong rank shows.
char pattern(int r, size_t i) { return static_cast<char>(r * 31 + 7 + static_cast<int>(i % 251)); }

std::string where(const char* coll, accord_datatype_t dt, size_t count, bool in_place, size_t offset) {
  return std::string(coll) + " " + dtype_name(dt) + " count " + std::to_string(count) +
         (in_place ? " in place" : " out of place") + " offset " + std::to_string(offset);
}

std::string failed(const std::string& what, accord_comm_t comm, accord_status_t s) {
  return what + ": " + accord_status_string(s) + ": " + accord_last_error(comm);
}

// An all-gather of `count` elements per rank, bit-exact, nothing written past the end. In place,
// sendbuf is recvbuf + rank * count (NCCL's layout); `offset` shifts the buffers off alignment.
std::string all_gather(accord_comm_t comm, int rank, int n, accord_datatype_t dt, size_t count, bool in_place,
                       size_t offset) {
  const size_t per = count * accord_dtype_size(dt), nn = static_cast<size_t>(n);
  std::vector<char> in(per + offset + 1), out(per * nn + offset + 64, 0x5a);
  char* recv = out.data() + offset;
  char* send = in_place ? recv + static_cast<size_t>(rank) * per : in.data() + offset;
  for (size_t i = 0; i < per; ++i) send[i] = pattern(rank, i);
  const std::string w = where("all_gather", dt, count, in_place, offset);
  const accord_status_t s = accord_all_gather(send, recv, count, dt, comm, nullptr);
  if (s != ACCORD_SUCCESS) return failed(w, comm, s);
  for (size_t r = 0; r < nn; ++r)
    for (size_t i = 0; i < per; ++i)
      if (recv[r * per + i] != pattern(static_cast<int>(r), i))
        return w + ": byte " + std::to_string(i) + " of rank " + std::to_string(r) + "'s block is wrong";
  if (out[offset + per * nn] != 0x5a) return w + ": wrote past the end";
  return "";
}

// A broadcast from `root`, bit-exact, nothing written past the end. Non-roots pass their output
// as sendbuf in place, NULL out of place.
std::string broadcast(accord_comm_t comm, int rank, accord_datatype_t dt, size_t count, int root, bool in_place,
                      size_t offset) {
  const size_t bytes = count * accord_dtype_size(dt);
  std::vector<char> in(bytes + offset + 1), out(bytes + offset + 64, 0x5a);
  char* recv = out.data() + offset;
  char* send = in_place ? recv : rank == root ? in.data() + offset : nullptr;
  if (rank == root)
    for (size_t i = 0; i < bytes; ++i) send[i] = pattern(root, i);
  const std::string w = where("broadcast", dt, count, in_place, offset) + " root " + std::to_string(root);
  const accord_status_t s = accord_broadcast(send, recv, count, dt, root, comm, nullptr);
  if (s != ACCORD_SUCCESS) return failed(w, comm, s);
  for (size_t i = 0; i < bytes; ++i)
    if (recv[i] != pattern(root, i)) return w + ": byte " + std::to_string(i) + " is wrong";
  if (out[offset + bytes] != 0x5a) return w + ": wrote past the end";
  return "";
}

// A reduce-scatter of `count` elements per rank, exact (every rank's operands are integers).
// In place, recvbuf is sendbuf + rank * count.
std::string reduce_scatter(accord_comm_t comm, int rank, int n, accord_datatype_t dt, accord_red_op_t op, size_t count,
                           bool in_place, size_t offset) {
  const size_t es = accord_dtype_size(dt), nn = static_cast<size_t>(n), per = count * es;
  std::vector<char> in(per * nn + offset + 1), out(per + offset + 64, 0x5a), want(per * nn + 1);
  char* send = in.data() + offset;
  char* recv = in_place ? send + static_cast<size_t>(rank) * per : out.data() + offset;
  fill_input(send, count * nn, dt, op, rank, n);
  fill_expected(want.data(), count * nn, dt, op, n);
  const std::string w = where("reduce_scatter", dt, count, in_place, offset) + " " + op_name(op);
  const accord_status_t s = accord_reduce_scatter(send, recv, count, dt, op, comm, nullptr);
  if (s != ACCORD_SUCCESS) return failed(w, comm, s);
  const size_t bad = count_mismatches(recv, want.data() + static_cast<size_t>(rank) * per, count, dt);
  if (bad != 0) return w + ": " + std::to_string(bad) + " wrong elements";
  if (!in_place && out[offset + per] != 0x5a) return w + ": wrote past the end";
  return "";
}

// Every collective at one count, in and out of place, broadcasts from the first and last rank.
std::string each(accord_comm_t comm, int rank, int n, accord_datatype_t dt, size_t ag, size_t bc, size_t rs) {
  for (bool in_place : {false, true}) {
    const size_t offset = in_place ? 1 : 3;
    std::string e = ag == 0 ? "" : all_gather(comm, rank, n, dt, ag, in_place, offset);
    for (int root : {0, n - 1})
      if (e.empty() && bc != 0) e = broadcast(comm, rank, dt, bc, root, in_place, offset);
    if (e.empty() && rs != 0) e = reduce_scatter(comm, rank, n, dt, ACCORD_SUM, rs, in_place, offset);
    if (!e.empty()) return e;
  }
  return "";
}

// The sweep. The calls at a window's edge come first, so that each is the first of its size
// class in the tune log (which names one call per collective and power of two).
std::string sweep(accord_comm_t comm, int rank, int n) {
  // At the edges, int32: the all-gather's 16 KiB and one element less, the broadcast's and
  // reduce-scatter's 64 KiB and one element less.
  std::string e = each(comm, rank, n, ACCORD_INT32, kMin / 4, kFloor / 4, kFloor / 4);
  if (e.empty()) e = each(comm, rank, n, ACCORD_INT32, kMin / 4 - 1, kFloor / 4 - 1, kFloor / 4 - 1);
  // Primes, around a chunk, several chunks with a tail (counts not divisible by the ranks).
  for (size_t count : {size_t{16411}, kChunk / 4 - 1, kChunk / 4 + 1, 3 * kChunk / 4 + 5})
    if (e.empty()) e = each(comm, rank, n, ACCORD_INT32, count, count, count);
  if (e.empty()) e = each(comm, rank, n, ACCORD_INT8, 3 * kChunk + 7, 3 * kChunk + 7, 3 * kChunk + 7);
  // Every dtype at one size past the floor, every op for the reduce-scatter.
  for (accord_datatype_t dt : kDtypes) {
    const size_t count = kFloor / accord_dtype_size(dt) + 13;
    if (e.empty()) e = each(comm, rank, n, dt, count, count, 0);
    for (int o = 0; o < ACCORD_NUM_OPS && e.empty(); ++o)
      for (bool in_place : {false, true})
        if (e.empty())
          e = reduce_scatter(comm, rank, n, dt, static_cast<accord_red_op_t>(o), count, in_place, in_place ? 0 : 5);
  }
  return e;
}

// What the tune log says of one size of one collective.
struct Expect {
  const char* coll;
  size_t bytes;
  bool single_copy;
};

// Runs `body` in `nranks` processes with a tune log each (and `env` set in every rank), then
// checks that every rank's log says that each of `expect` took the single copy or did not.
void run_and_check_log(int nranks, const RankBody& body, const std::vector<Expect>& expect,
                       const std::vector<std::pair<const char*, const char*>>& env = {}) {
  char dir[] = "/tmp/accord-single-copy-colls-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string log = std::string(dir) + "/log-%p";
  ScopedEnv level("ACCORD_LOG", "warn,tune:info");
  ScopedEnv file("ACCORD_LOG_FILE", log.c_str());
  auto failures = run_processes(nranks, body, 300, [&](int) {
    for (const auto& kv : env) setenv(kv.first, kv.second, 1);
    log_reconfigure();  // this process's log, as set above
  });
  for (const auto& f : failures) ADD_FAILURE() << f;
  int logs = 0;
  for (const std::string& name : files_in(dir)) {
    const std::string text = take_file(std::string(dir) + "/" + name);
    if (text.find("single copy") == std::string::npos) continue;  // the test process's own log
    ++logs;
    for (const Expect& x : expect) {
      const std::string line = std::string(x.coll) + " of " + std::to_string(x.bytes) + " bytes (" +
                               std::to_string(nranks) + " ranks): single copy";
      EXPECT_EQ(text.find(line) != std::string::npos, x.single_copy)
          << "'" << line << "' " << (x.single_copy ? "missing" : "there") << " in " << name << ":\n" << text;
    }
  }
  rmdir(dir);
  EXPECT_EQ(logs, nranks) << "one log per rank process";
}

class SingleCopyProcesses : public ::testing::TestWithParam<int> {};

TEST_P(SingleCopyProcesses, EverySizeAndDtypeExactAndTaken) {
  run_and_check_log(GetParam(), sweep,
                    {{"all_gather", kMin, true},
                     {"all_gather", kMin - 4, false},
                     {"broadcast", kFloor, true},
                     {"broadcast", kFloor - 4, false},
                     {"reduce_scatter", kFloor, true},
                     {"reduce_scatter", kFloor - 4, false},
                     {"all_gather", 3 * kChunk + 20, true},
                     {"broadcast", 3 * kChunk + 20, true},
                     {"reduce_scatter", 3 * kChunk + 20, true}},
                    // The built-in 256 KiB where ranks outnumber CPUs (3 and 4 on 2 vCPUs) would hide
                    // the edges tested here.
                    {{"ACCORD_SINGLE_COPY_MIN", "16K"}});
}

INSTANTIATE_TEST_SUITE_P(Ranks, SingleCopyProcesses, ::testing::Values(2, 3, 4));

// Ranks that are threads of one process copy with plain loads and stores.
TEST(SingleCopyThreads, EverySizeAndDtypeExact) {
  for (const auto& f : run_threads(3, sweep)) ADD_FAILURE() << f;
}

// An all-gather's output and a reduce-scatter's input (nranks blocks) must fit under
// ACCORD_SINGLE_COPY_MAX too: with 1 MiB and 3 ranks, 128 KiB per rank takes it, 512 KiB does not.
TEST(SingleCopyProcessesWindow, WholeBufferUnderTheMax) {
  run_and_check_log(
      3,
      [](accord_comm_t comm, int rank, int n) {
        std::string e = each(comm, rank, n, ACCORD_INT32, (128 << 10) / 4, (512 << 10) / 4, (128 << 10) / 4);
        if (e.empty()) e = each(comm, rank, n, ACCORD_INT32, (512 << 10) / 4, 0, (512 << 10) / 4);
        return e;
      },
      {{"all_gather", 128 << 10, true},
       {"reduce_scatter", 128 << 10, true},
       {"broadcast", 512 << 10, true},
       {"all_gather", 512 << 10, false},
       {"reduce_scatter", 512 << 10, false}},
      {{"ACCORD_SINGLE_COPY_MAX", "1M"}, {"ACCORD_SINGLE_COPY_MIN", "16K"}});
}

// Ranks that make different single-copy calls fail with a mismatch naming the other rank, at
// once, not at the timeout: other counts, another root, another collective of as many bytes.
TEST(SingleCopyProcessesErrors, CallsThatDifferFailWithAMismatch) {
  ScopedEnv timeout("ACCORD_TIMEOUT_MS", "60000");
  for (int what = 0; what < 3; ++what) {
    SCOPED_TRACE(what);
    auto failures = run_processes(2, [what](accord_comm_t comm, int rank, int) -> std::string {
      const size_t count = (1u << 16) + 1;
      std::vector<int32_t> in(count * 2, 1), out(count * 2, 0);
      const auto start = std::chrono::steady_clock::now();
      accord_status_t s = ACCORD_SUCCESS;
      if (what == 0)
        s = accord_all_gather(in.data(), out.data(), count - static_cast<size_t>(rank), ACCORD_INT32, comm, nullptr);
      else if (what == 1)
        s = accord_broadcast(in.data(), out.data(), count, ACCORD_INT32, rank, comm, nullptr);
      else if (rank == 0)
        s = accord_reduce_scatter(in.data(), out.data(), count, ACCORD_INT32, ACCORD_SUM, comm, nullptr);
      else
        s = accord_all_gather(in.data(), out.data(), count, ACCORD_INT32, comm, nullptr);
      const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      const std::string msg = accord_last_error(comm);
      if (s != ACCORD_ERR_MISMATCH)
        return std::string("expected a mismatch, got ") + accord_status_string(s) + ": " + msg;
      if (msg.find(rank == 0 ? "rank 1" : "rank 0") == std::string::npos) return "does not name the peer: " + msg;
      const char* mine = what == 1 ? "broadcast" : what == 2 && rank == 0 ? "reduce_scatter" : "all_gather";
      if (msg.find(mine) == std::string::npos) return std::string("does not name the ") + mine + ": " + msg;
      if (took > 30) return "took " + std::to_string(took) + " s";
      return std::string();
    });
    for (const auto& f : failures) ADD_FAILURE() << f;
  }
}

}  // namespace
}  // namespace accord::testing
