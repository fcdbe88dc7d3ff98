// One rank of a multi-host job, for tests/tcp/netns/multihost_test.sh: run under mpirun
// ("mpi": the communicator comes from accord_comm_init_mpi) or with the torchrun-style
// RANK / WORLD_SIZE / MASTER_ADDR / MASTER_PORT ("env": accord_comm_init_from_env, no MPI).
// With ranks on several hosts the communicator must use shared memory inside a host and TCP
// between hosts; this checks the plan says so, then runs every collective, checked exactly
// (small integers, exact in every dtype and order): all-reduce with every algorithm (each a
// fresh communicator with ACCORD_ALGO set) over every dtype and op, reduce-scatter,
// all-gather, broadcast and reduce from the first and last rank, and a barrier.
// Prints "rank R (HOST): N checks, F failures" and exits non-zero on any failure. "probe" only
// says whether the mpi mode was built in; "hello" (under mpirun) is the trivial MPI job that
// shows mpirun works across the hosts: MPI_Init, a barrier, "hello: rank R of N on HOST". "gpu" (the env launch, with ACCORD_SIM_TOPO): all-reduce
// of GPU buffers, the library's choice and hierarchical, GPUs inside a host and TCP between hosts
// (Note [Device data over TCP]); then sends, receives and all-to-all of GPU buffers in groups
// that mix the two.
#include <accord/accord.h>
#include <accord/accord_device.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "tests/support/harness.hpp"

#ifdef MULTIHOST_WITH_MPI
#include <accord/accord_mpi.h>
#include <mpi.h>
#endif

using namespace accord::testing;

namespace {

int g_rank = 0, g_checks = 0, g_failures = 0;
char g_host[256] = "?";

void fail(const std::string& what, const char* detail) {
  std::printf("rank %d (%s): FAIL %s: %s\n", g_rank, g_host, what.c_str(), detail);
  ++g_failures;
}

bool call_ok(accord_status_t st, accord_comm_t comm, const std::string& what) {
  ++g_checks;
  if (st == ACCORD_SUCCESS) return true;
  fail(what, accord_last_error(comm));
  return false;
}

void expect_same(const void* got, const void* want, size_t count, accord_datatype_t dt, const std::string& what) {
  if (size_t bad = count_mismatches(got, want, count, dt)) fail(what, (std::to_string(bad) + " elements wrong").c_str());
}

accord_status_t make_comm(const std::string& mode, accord_comm_t* comm) {
#ifdef MULTIHOST_WITH_MPI
  if (mode == "mpi") return accord_comm_init_mpi(comm, MPI_COMM_WORLD);
#endif
  (void)mode;
  return accord_comm_init_from_env(comm);
}

// Pairs on one host must use shm, pairs across hosts tcp: the host of every rank comes from
// a broadcast of each rank's hostname through the communicator itself.
void check_plan(accord_comm_t comm, int nranks) {
  std::vector<char> names(static_cast<size_t>(nranks) * 64, 0);
  std::memcpy(names.data() + static_cast<size_t>(g_rank) * 64, g_host, std::min<size_t>(63, std::strlen(g_host)));
  if (!call_ok(accord_all_gather(names.data() + static_cast<size_t>(g_rank) * 64, names.data(), 64, ACCORD_INT8, comm,
                                 nullptr), comm, "all_gather of hostnames"))
    return;
  size_t len = 0;
  accord_comm_plan(comm, nullptr, &len);
  std::string plan(len, '\0');
  if (!call_ok(accord_comm_plan(comm, plan.data(), &len), comm, "accord_comm_plan")) return;
  if (g_rank == 0) std::printf("plan:\n%s", plan.c_str());
  for (int a = 0; a < nranks; ++a)
    for (int b = a + 1; b < nranks; ++b) {
      const bool same = std::strcmp(&names[static_cast<size_t>(a) * 64], &names[static_cast<size_t>(b) * 64]) == 0;
      const std::string want = "pair " + std::to_string(a) + "-" + std::to_string(b) + (same ? ": shm (" : ": tcp (");
      ++g_checks;
      if (plan.find(want) == std::string::npos) fail("plan", ("no line '" + want + "...'").c_str());
    }
}

void check_all_reduce(accord_comm_t comm, int nranks, const char* algo) {
  struct Size { size_t count; bool all_types; };
  // 4099: a few chunks; 1000003: several hierarchical blocks, uneven segments.
  const Size sizes[] = {{0, false}, {1, false}, {7, true}, {4099, true}, {1000003, false}};
  for (const Size& sz : sizes)
    for (int d = 0; d < ACCORD_NUM_DTYPES; ++d)
      for (int o = 0; o < ACCORD_NUM_OPS; ++o) {
        auto dt = static_cast<accord_datatype_t>(d);
        auto op = static_cast<accord_red_op_t>(o);
        // Every dtype and op for the library's choice and hier (the multi-host algorithm);
        // the single-host algorithms get float32 sum, enough to show they run over TCP.
        const bool full = std::strcmp(algo, "default") == 0 || std::strcmp(algo, "hier") == 0;
        const bool basic = dt == ACCORD_FLOAT32 && op == ACCORD_SUM;
        if (!full && (!basic || sz.count > 4099)) continue;
        if (!sz.all_types && !(basic || (dt == ACCORD_FLOAT32 && op == ACCORD_AVG) ||
                               (dt == ACCORD_INT64 && op == ACCORD_MAX)))
          continue;
        const size_t es = accord_dtype_size(dt), n = sz.count;
        std::vector<char> in(n * es + 1), out(n * es + 1), want(n * es + 1);
        for (bool in_place : {false, true}) {
          fill_input(in.data(), n, dt, op, g_rank, nranks, n);
          fill_expected(want.data(), n, dt, op, nranks, n);
          void* recv = in_place ? in.data() : out.data();
          const std::string what = std::string("all_reduce ") + algo + " " + dtype_name(dt) + " " + op_name(op) +
                                   " count " + std::to_string(n) + (in_place ? " in place" : "");
          if (call_ok(accord_all_reduce(in.data(), recv, n, dt, op, comm, nullptr), comm, what))
            expect_same(recv, want.data(), n, dt, what);
        }
      }
}

void check_others(accord_comm_t comm, int nranks) {
  const size_t nn = static_cast<size_t>(nranks);
  for (size_t count : {size_t{0}, size_t{5}, size_t{300001}}) {
    const accord_datatype_t dt = ACCORD_INT32;
    std::vector<int32_t> in(count * nn + 1), out(count * nn + 1), want(count * nn + 1), all(count * nn + 1);
    const std::string c = " count " + std::to_string(count);
    // Reduce-scatter: this rank's block of the reduced whole.
    fill_input(in.data(), count * nn, dt, ACCORD_SUM, g_rank, nranks, 1);
    fill_expected(all.data(), count * nn, dt, ACCORD_SUM, nranks, 1);
    if (call_ok(accord_reduce_scatter(in.data(), out.data(), count, dt, ACCORD_SUM, comm, nullptr), comm,
                "reduce_scatter" + c))
      expect_same(out.data(), all.data() + static_cast<size_t>(g_rank) * count, count, dt, "reduce_scatter" + c);
    // All-gather: every rank's input in rank order.
    fill_input(in.data(), count, dt, ACCORD_SUM, g_rank, nranks, 2);
    for (int r = 0; r < nranks; ++r) fill_input(want.data() + static_cast<size_t>(r) * count, count, dt, ACCORD_SUM, r, nranks, 2);
    if (call_ok(accord_all_gather(in.data(), out.data(), count, dt, comm, nullptr), comm, "all_gather" + c))
      expect_same(out.data(), want.data(), count * nn, dt, "all_gather" + c);
    for (int root : {0, nranks - 1}) {
      const std::string rc = c + " root " + std::to_string(root);
      fill_input(in.data(), count, dt, ACCORD_SUM, g_rank, nranks, 3);
      fill_input(want.data(), count, dt, ACCORD_SUM, root, nranks, 3);
      if (call_ok(accord_broadcast(in.data(), out.data(), count, dt, root, comm, nullptr), comm, "broadcast" + rc))
        expect_same(out.data(), want.data(), count, dt, "broadcast" + rc);
      fill_input(in.data(), count, dt, ACCORD_MAX, g_rank, nranks, 4);
      fill_expected(want.data(), count, dt, ACCORD_MAX, nranks, 4);
      if (call_ok(accord_reduce(in.data(), out.data(), count, dt, ACCORD_MAX, root, comm, nullptr), comm, "reduce" + rc) &&
          g_rank == root)
        expect_same(out.data(), want.data(), count, dt, "reduce" + rc);
    }
  }
  call_ok(accord_barrier(comm, nullptr), comm, "barrier");
}

// All-reduce of GPU buffers on this rank's GPU, checked exactly, and the plan's pairs between
// hosts staged over TCP.
void check_gpu(accord_comm_t comm, int nranks, const char* algo) {
  int dev = -1;
  if (!call_ok(accord_comm_device(comm, &dev), comm, "accord_comm_device")) return;
  ++g_checks;
  if (dev < 0) return fail("gpu", "the communicator has no GPU (is ACCORD_SIM_TOPO set?)");
  size_t len = 0;
  accord_comm_plan(comm, nullptr, &len);
  std::string plan(len, '\0');
  if (!call_ok(accord_comm_plan(comm, plan.data(), &len), comm, "accord_comm_plan")) return;
  ++g_checks;
  if (plan.find("tcp (different hosts") != std::string::npos &&
      plan.find("GPU buffers staged through pinned host memory") == std::string::npos)
    fail("gpu plan", ("pairs between hosts do not stage GPU buffers:\n" + plan).c_str());
  // Inside a host the GPU path (p2p, ipc or host-staged over this host's shared memory), not
  // TCP: the launch puts ranks 2h and 2h + 1 on host h.
  ++g_checks;
  if (plan.find("pair 0-1: tcp") != std::string::npos)
    fail("gpu plan", ("ranks 0 and 1 share a host but their pair is TCP:\n" + plan).c_str());
  accord_stream_t stream = nullptr;
  if (!call_ok(accord_stream_create(&stream, dev), comm, "accord_stream_create")) return;
  for (size_t n : {size_t{1}, size_t{4099}, size_t{1000003}})
    for (accord_datatype_t dt : {ACCORD_FLOAT32, ACCORD_INT32})
      for (accord_red_op_t op : {ACCORD_SUM, ACCORD_MAX}) {
        const size_t bytes = n * accord_dtype_size(dt);
        std::vector<char> in(bytes), got(bytes), want(bytes);
        fill_input(in.data(), n, dt, op, g_rank, nranks, n);
        fill_expected(want.data(), n, dt, op, nranks, n);
        const std::string what = std::string("gpu all_reduce ") + algo + " " + dtype_name(dt) + " " + op_name(op) +
                                 " count " + std::to_string(n);
        void* buf = nullptr;
        if (!call_ok(accord_device_alloc(&buf, bytes, dev), comm, what + ": alloc")) continue;
        if (call_ok(accord_device_memcpy(buf, in.data(), bytes), comm, what + ": copy in") &&
            call_ok(accord_all_reduce(buf, buf, n, dt, op, comm, stream), comm, what) &&
            call_ok(accord_stream_synchronize(stream), comm, what + ": synchronize") &&
            call_ok(accord_device_memcpy(got.data(), buf, bytes), comm, what + ": copy out"))
          expect_same(got.data(), want.data(), n, dt, what);
        // Freeing waits for the device (cudaFree): after every rank's collective has ended.
        call_ok(accord_barrier(comm, nullptr), comm, what + ": barrier");
        accord_device_free(buf);
      }
  accord_stream_destroy(stream);
}

// Sends and receives of GPU buffers in groups that mix this host's GPU route with TCP: a ring
// (to r + 1, from r - 1) and an all-to-all (a send to and a receive from every rank, itself
// included), checked exactly, at sizes of one element to several FIFO slots.
void check_gpu_p2p(accord_comm_t comm, int nranks) {
  int dev = -1;
  if (!call_ok(accord_comm_device(comm, &dev), comm, "accord_comm_device") || dev < 0) return;
  accord_stream_t stream = nullptr;
  if (!call_ok(accord_stream_create(&stream, dev), comm, "accord_stream_create")) return;
  const size_t nn = static_cast<size_t>(nranks);
  const int to = (g_rank + 1) % nranks, from = (g_rank + nranks - 1) % nranks;
  // What rank `src` sends to rank `dst`, element i: exact in int32.
  auto word = [](int src, int dst, size_t i) { return static_cast<int32_t>(src * 1000003 + dst * 10007 + i); };
  for (size_t count : {size_t{1}, size_t{4099}, size_t{300007}}) {
    const std::string c = " count " + std::to_string(count);
    const size_t bytes = count * nn * sizeof(int32_t);
    std::vector<int32_t> in(count * nn), got(count * nn);
    for (size_t q = 0; q < nn; ++q)
      for (size_t i = 0; i < count; ++i) in[q * count + i] = word(g_rank, static_cast<int>(q), i);
    void *din = nullptr, *dout = nullptr;
    if (!call_ok(accord_device_alloc(&din, bytes, dev), comm, "gpu p2p alloc" + c)) break;
    if (!call_ok(accord_device_alloc(&dout, bytes, dev), comm, "gpu p2p alloc" + c)) {
      accord_device_free(din);
      break;
    }
    auto* inp = static_cast<int32_t*>(din);
    auto* outp = static_cast<int32_t*>(dout);
    auto run = [&](const std::string& what, bool all_to_all) {
      bool ok = call_ok(accord_device_memcpy(din, in.data(), bytes), comm, what + ": copy in") &&
                call_ok(accord_barrier(comm, nullptr), comm, what + ": barrier before") &&
                call_ok(accord_group_start(), comm, what + ": group start");
      for (int q = 0; ok && q < nranks; ++q) {
        if (!all_to_all && q != to && q != from) continue;
        const size_t at = static_cast<size_t>(q) * count;
        if (all_to_all || q == from)
          ok = call_ok(accord_recv(outp + at, count, ACCORD_INT32, q, comm, stream), comm, what + ": recv");
        if (ok && (all_to_all || q == to))
          ok = call_ok(accord_send(inp + at, count, ACCORD_INT32, q, comm, stream), comm, what + ": send");
      }
      ok = call_ok(accord_group_end(), comm, what + ": group end") && ok;
      accord_status_t async = ACCORD_SUCCESS;
      ok = ok && call_ok(accord_stream_synchronize(stream), comm, what + ": synchronize") &&
           call_ok(accord_comm_get_async_error(comm, &async), comm, what + ": async error") &&
           call_ok(async, comm, what + " (asynchronous error)") &&
           call_ok(accord_device_memcpy(got.data(), dout, bytes), comm, what + ": copy out");
      for (int q = 0; ok && q < nranks; ++q) {
        if (!all_to_all && q != from) continue;
        size_t bad = 0;
        for (size_t i = 0; i < count; ++i) bad += got[static_cast<size_t>(q) * count + i] != word(q, g_rank, i);
        ++g_checks;
        if (bad) fail(what, (std::to_string(bad) + " elements from rank " + std::to_string(q) + " wrong").c_str());
      }
      call_ok(accord_barrier(comm, nullptr), comm, what + ": barrier after");
    };
    run("gpu send/recv ring" + c, false);
    run("gpu all-to-all" + c, true);
    accord_device_free(din);
    accord_device_free(dout);
  }
  accord_stream_destroy(stream);
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "env";
  // For multihost_test.sh: whether the mpi mode exists, with no MPI_Init and no collective.
  if (mode == "probe") {
#ifdef MULTIHOST_WITH_MPI
    std::printf("multihost_prog: built with MPI\n");
#else
    std::printf("multihost_prog: built without MPI\n");
#endif
    return 0;
  }
#ifdef MULTIHOST_WITH_MPI
  if (mode == "hello") {
    MPI_Init(&argc, &argv);
    int rank = -1, size = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    const int rc = MPI_Barrier(MPI_COMM_WORLD);
    gethostname(g_host, sizeof g_host - 1);
    std::printf("hello: rank %d of %d on %s%s\n", rank, size, g_host, rc == MPI_SUCCESS ? "" : " (barrier failed)");
    MPI_Finalize();
    return rc == MPI_SUCCESS ? 0 : 1;
  }
  if (mode == "mpi") MPI_Init(&argc, &argv);
#else
  if (mode == "mpi" || mode == "hello") {
    std::fprintf(stderr, "%s: built without MPI; use the env mode\n", argv[0]);
    return 2;
  }
#endif
  gethostname(g_host, sizeof g_host - 1);
  // The algorithms to force in turn; "" is the library's own choice (hier for large sizes).
  const char* algos[] = {"", "hier", "ring", "tree", "direct", "rd"};
  int nranks = 0;
  // env mode: a fresh port for every communicator, so that no rank can meet the previous
  // communicator's bootstrap server while it shuts down.
  const char* port_text = getenv("MASTER_PORT");
  const int base_port = port_text != nullptr ? std::atoi(port_text) : 0;
  int index = 0;
  for (const char* algo : algos) {
    if (mode == "gpu" && *algo && std::strcmp(algo, "hier") != 0) continue;
    if (*algo) setenv("ACCORD_ALGO", algo, 1);
    else unsetenv("ACCORD_ALGO");
    if (mode != "mpi" && base_port > 0) setenv("MASTER_PORT", std::to_string(base_port + index++).c_str(), 1);
    accord_comm_t comm = nullptr;
    accord_status_t st = make_comm(mode, &comm);
    if (st != ACCORD_SUCCESS) {
      fail(std::string("init (") + mode + ", ACCORD_ALGO=" + algo + ")", accord_last_error(nullptr));
      break;
    }
    accord_comm_rank(comm, &g_rank);
    accord_comm_count(comm, &nranks);
    if (mode == "gpu") {
      check_gpu(comm, nranks, *algo ? algo : "default");
      if (*algo == '\0') check_gpu_p2p(comm, nranks);
    } else {
      if (*algo == '\0') {
        check_plan(comm, nranks);
        check_others(comm, nranks);
      }
      check_all_reduce(comm, nranks, *algo ? algo : "default");
    }
    accord_comm_destroy(comm);
  }
  std::printf("rank %d (%s): %d checks, %d failures\n", g_rank, g_host, g_checks, g_failures);
#ifdef MULTIHOST_WITH_MPI
  if (mode == "mpi") MPI_Finalize();
#endif
  return g_failures == 0 ? 0 : 1;
}
