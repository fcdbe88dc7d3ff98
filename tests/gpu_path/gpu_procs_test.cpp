// Collectives on device buffers of simulated GPUs (ACCORD_SIM_TOPO) with one communicator per
// rank (accord_comm_init_rank), the ranks as threads of this process or as forked processes,
// rank r on GPU r. Checks: exact results for every collective over several dtypes, ops and
// sizes, in place and out of place, on unaligned buffers; the plan's transport for every GPU
// pair is what the topology implies (host-staged exactly for the pairs that cannot peer, else
// p2p between threads of one process and ipc between processes; host-staged everywhere with
// ACCORD_P2P_DISABLE=1); the ring order has no slow hop on the DGX-1 (NVLink only) and
// exactly two on the 4-GPU machine whose halves cannot peer.
//
// The device runtime is chosen once per process and its simulated streams are threads, so a
// process that forks ranks must not have started it: the parent learns the machine from the
// fixture through the topology parser, and the process tests come before the thread tests
// (meson runs them as separate tests anyway, to keep each short).
#include <gtest/gtest.h>
#include <sched.h>
#include <signal.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <iostream>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "api/handles.hpp"
#include "core/log.hpp"
#include "core/settings.hpp"
#include "include/accord/accord.h"
#include "include/accord/accord_device.h"
#include "tests/support/harness.hpp"
#include "topology/formats.hpp"
#include "topology/system.hpp"
#include "transport/device/device_runtime.hpp"
#include "transport/device/sim_memory.hpp"
#include "transport/device/sim_timeslice.hpp"

namespace accord::testing {
namespace {

// The machine ACCORD_SIM_TOPO describes, as the simulated runtime reads it.
struct Machine {
  topo::System sys;
  bool tf4 = false;  // ACCORD_TEST_TOPO=tf4: GPUs {0,1} and {2,3} cannot peer with each other
  int gpus() const { return sys.gpu_count(); }
  bool peer(int a, int b) const { return sys.p2p(a, b) && sys.p2p(b, a); }
  bool nvlink(int a, int b) const { return sys.path(a, b) == topo::PathClass::kNvLink; }
};

void load_machine(Machine* m) {
  const char* file = std::getenv("ACCORD_SIM_TOPO");
  const char* name = std::getenv("ACCORD_TEST_TOPO");
  ASSERT_TRUE(file != nullptr && name != nullptr)
      << "set ACCORD_SIM_TOPO (a topology fixture) and ACCORD_TEST_TOPO (dgx1 or tf4), as "
         "tests/gpu_path/meson.build does";
  const Status s = topo::load_system_file(file, &m->sys);
  ASSERT_TRUE(s.ok()) << s.message();
  m->tf4 = std::string(name) == "tf4";
  ASSERT_GT(m->gpus(), 1) << file << " describes no GPU pair";
}

bool p2p_disabled() {
  const char* v = std::getenv("ACCORD_P2P_DISABLE");
  return v != nullptr && std::string(v) != "0" && !std::string(v).empty();
}

// Set when a thread test has started the device runtime in this process: ranks forked after
// that would inherit a runtime whose stream threads do not exist in them.
bool g_runtime_started = false;

// ---------------------------------------------------------------------------------------------
// Exact results

enum class Coll { kAllReduce, kReduceScatter, kAllGather, kBroadcast, kReduce };
const char* coll_name(Coll c) {
  static const char* names[] = {"all_reduce", "reduce_scatter", "all_gather", "broadcast",
                                "reduce"};
  return names[static_cast<int>(c)];
}

struct Case {
  Coll coll;
  accord_datatype_t dtype;
  accord_red_op_t op;
  size_t count;
  bool in_place;
  int root = 0;
};

std::string describe(const Case& c) {
  std::string s = std::string(coll_name(c.coll)) + " " + dtype_name(c.dtype);
  if (c.coll != Coll::kAllGather && c.coll != Coll::kBroadcast)
    s += std::string(" ") + op_name(c.op);
  s += " count " + std::to_string(c.count) + (c.in_place ? " in place" : " out of place");
  if (c.coll == Coll::kBroadcast || c.coll == Coll::kReduce) s += " root " + std::to_string(c.root);
  return s;
}

// Sizes that break things: 1, a prime, and a prime whose float32 buffer (1 MiB + 12 bytes) is
// larger than a whole FIFO of 8 slots of 128 KiB and spans 5 slots of the default 256 KiB, with
// a remainder in the last. ThreadSanitizer instruments every load: smaller there.
constexpr size_t kPrime = 1031;
constexpr size_t kLarge = kThreadSanitizer ? 4099 : 262147;
// Above 8 slots of 256 KiB (the default FIFO) in float32: 2 MiB + 84 bytes.
constexpr size_t kHuge = kThreadSanitizer ? 0 : 524309;

std::vector<Case> every_case(int nranks) {
  std::vector<Case> cases;
  const int last = nranks - 1;
  for (size_t count : {size_t{1}, kPrime, kLarge}) {
    for (bool in_place : {false, true}) {
      auto add = [&](Coll coll, accord_datatype_t dtype, accord_red_op_t op, int root) {
        cases.push_back(Case{coll, dtype, op, count, in_place, root});
      };
      for (accord_datatype_t d : {ACCORD_FLOAT32, ACCORD_INT32})
        for (accord_red_op_t op : {ACCORD_SUM, ACCORD_PROD, ACCORD_MAX, ACCORD_MIN, ACCORD_AVG})
          add(Coll::kAllReduce, d, op, 0);
      for (accord_datatype_t d : {ACCORD_FLOAT16, ACCORD_BFLOAT16})
        for (accord_red_op_t op : {ACCORD_SUM, ACCORD_AVG}) add(Coll::kAllReduce, d, op, 0);
      add(Coll::kReduceScatter, ACCORD_FLOAT32, ACCORD_SUM, 0);
      add(Coll::kReduceScatter, ACCORD_FLOAT32, ACCORD_AVG, 0);
      add(Coll::kReduceScatter, ACCORD_INT32, ACCORD_MAX, 0);
      add(Coll::kReduceScatter, ACCORD_FLOAT16, ACCORD_SUM, 0);
      add(Coll::kReduceScatter, ACCORD_BFLOAT16, ACCORD_SUM, 0);
      add(Coll::kAllGather, ACCORD_FLOAT32, ACCORD_SUM, 0);
      add(Coll::kAllGather, ACCORD_FLOAT16, ACCORD_SUM, 0);
      add(Coll::kAllGather, ACCORD_UINT8, ACCORD_SUM, 0);
      add(Coll::kBroadcast, ACCORD_FLOAT32, ACCORD_SUM, 1);
      add(Coll::kBroadcast, ACCORD_INT32, ACCORD_SUM, last);
      add(Coll::kReduce, ACCORD_FLOAT32, ACCORD_SUM, 1);
      add(Coll::kReduce, ACCORD_INT32, ACCORD_PROD, last);
      add(Coll::kReduce, ACCORD_BFLOAT16, ACCORD_AVG, nranks / 2);
      add(Coll::kReduce, ACCORD_FLOAT16, ACCORD_MIN, (nranks / 2 + 1) % nranks);
    }
  }
  if (kHuge > 0) {
    cases.push_back(Case{Coll::kAllReduce, ACCORD_FLOAT32, ACCORD_SUM, kHuge, true, 0});
    cases.push_back(Case{Coll::kBroadcast, ACCORD_FLOAT32, ACCORD_SUM, kHuge, false, last});
  }
  return cases;
}

// One rank's device buffers, allocated once for every case and freed at the end. Not per case:
// the simulated runtime's free_device drains the streams of every GPU in the process (CUDA's
// cudaFree synchronizes only its own device), so a rank thread freeing memory while the other
// ranks wait in a collective for its next call would deadlock with them.
struct DeviceBuffers {
  void* out = nullptr;  // the recv allocation (in place: the only one)
  void* in = nullptr;   // out of place: the send buffer
  size_t out_bytes = 0, in_bytes = 0;
  ~DeviceBuffers() {
    (void)accord_device_free(out);
    (void)accord_device_free(in);
  }
};

constexpr char kPoison = static_cast<char>(0xee);
constexpr size_t kTail = 64;  // poisoned bytes after every buffer: nothing may write there

size_t first_mismatch(const char* got, const char* want, size_t count, size_t es) {
  for (size_t i = 0; i < count; ++i)
    if (std::memcmp(got + i * es, want + i * es, es) != 0) return i;
  return count;
}

std::string api_error(const std::string& what, accord_comm_t comm, accord_status_t s) {
  return what + ": " + accord_status_string(s) + ": " + accord_last_error(comm);
}

constexpr size_t kLead = 3 * 8;  // room before the buffer for the unaligned starts below

// The bytes of the send buffer and of the recv allocation (lead, buffer, tail) of a case.
size_t in_bytes_of(const Case& c, int nranks) {
  const size_t n = c.coll == Coll::kReduceScatter ? static_cast<size_t>(nranks) : 1;
  return c.count * n * accord_dtype_size(c.dtype);
}
size_t out_bytes_of(const Case& c, int nranks) {
  const size_t n = c.coll == Coll::kAllGather ? static_cast<size_t>(nranks) : 1;
  return kLead + std::max(in_bytes_of(c, nranks), c.count * n * accord_dtype_size(c.dtype)) + kTail;
}
// A stream on GPU `dev` and `bufs` for the largest of `cases` (allocated once: freeing waits
// for the device), then a barrier: every rank has its memory before any launches a collective,
// as allocating may wait for the device to go idle (cudaMalloc), which a GPU shared with a rank
// whose kernel waits for this one never does (Note [Simulated CUDA rules]; NCCL documents the
// same hazard). "" or what failed.
std::string stream_and_buffers(accord_comm_t c, int dev, const std::vector<Case>& cases, int n, accord_stream_t* stream,
                               DeviceBuffers* bufs) {
  accord_status_t s = accord_stream_create(stream, dev);
  if (s != ACCORD_SUCCESS) return api_error("accord_stream_create", c, s);
  for (const Case& k : cases) {
    bufs->out_bytes = std::max(bufs->out_bytes, out_bytes_of(k, n));
    bufs->in_bytes = std::max(bufs->in_bytes, in_bytes_of(k, n));
  }
  if ((s = accord_device_alloc(&bufs->out, bufs->out_bytes, dev)) != ACCORD_SUCCESS ||
      (s = accord_device_alloc(&bufs->in, bufs->in_bytes, dev)) != ACCORD_SUCCESS)
    return api_error("accord_device_alloc on GPU " + std::to_string(dev), nullptr, s);
  if ((s = accord_barrier(c, nullptr)) != ACCORD_SUCCESS) return api_error("barrier after allocating", c, s);
  return "";
}

// One rank's part of one case. The recv region starts poisoned; the buffers start one element
// (in place) or three (out of place: recv; send is aligned) into their allocations, so that
// they are not 16-byte aligned. Checked afterwards, bit for bit: the result, the poisoned
// bytes before and after the buffer, and (out of place) that the input is unchanged.
std::string run_case(accord_comm_t comm, accord_stream_t stream, const DeviceBuffers& bufs,
                     int rank, int nranks, const Case& c, size_t seed) {
  const std::string name = describe(c);
  const size_t es = accord_dtype_size(c.dtype), n = static_cast<size_t>(nranks);
  const size_t in_count = c.coll == Coll::kReduceScatter ? c.count * n : c.count;
  const size_t out_count = c.coll == Coll::kAllGather ? c.count * n : c.count;
  const size_t my_block = static_cast<size_t>(rank) * c.count * es;

  // Inputs and the expected output, small integers (harness.hpp): exact in every order.
  std::vector<char> input(in_count * es), want(out_count * es);
  const accord_red_op_t value_op =
      c.coll == Coll::kAllGather || c.coll == Coll::kBroadcast ? ACCORD_SUM : c.op;
  fill_input(input.data(), in_count, c.dtype, value_op, rank, nranks, seed);
  switch (c.coll) {
    case Coll::kAllReduce:
    case Coll::kReduce:
      fill_expected(want.data(), out_count, c.dtype, c.op, nranks, seed);
      break;
    case Coll::kReduceScatter: {
      std::vector<char> all(in_count * es);
      fill_expected(all.data(), in_count, c.dtype, c.op, nranks, seed);
      if (!want.empty()) std::memcpy(want.data(), all.data() + my_block, want.size());  // (null when empty)
      break;
    }
    case Coll::kAllGather:
      for (int r = 0; r < nranks; ++r)
        fill_input(want.data() + static_cast<size_t>(r) * c.count * es, c.count, c.dtype,
                   ACCORD_SUM, r, nranks, seed);
      break;
    case Coll::kBroadcast:
      fill_input(want.data(), out_count, c.dtype, ACCORD_SUM, c.root, nranks, seed);
      break;
  }

  // The recv allocation: lead | buffer (in place: the input's and output's) | tail.
  const size_t lead = (c.in_place ? 1 : 3) * es;
  const size_t buffer_bytes = std::max(input.size(), want.size());
  std::vector<char> image(lead + buffer_bytes + kTail, kPoison);
  const size_t input_at = lead + (c.in_place && c.coll == Coll::kAllGather ? my_block : 0);
  const size_t output_at = lead + (c.in_place && c.coll == Coll::kReduceScatter ? my_block : 0);
  if (c.in_place && !input.empty()) std::memcpy(image.data() + input_at, input.data(), input.size());
  if (image.size() > bufs.out_bytes || input.size() > bufs.in_bytes)
    return name + ": the rank's device buffers are too small (a bug in this test)";
  accord_status_t s = accord_device_memcpy(bufs.out, image.data(), image.size());
  if (s == ACCORD_SUCCESS && !c.in_place)
    s = accord_device_memcpy(bufs.in, input.data(), input.size());
  if (s != ACCORD_SUCCESS) return api_error(name + ": copying the input in", nullptr, s);
  char* const base = static_cast<char*>(bufs.out);
  const void* send = c.in_place ? base + input_at : bufs.in;
  void* recv = base + output_at;

  switch (c.coll) {
    case Coll::kAllReduce:
      s = accord_all_reduce(send, recv, c.count, c.dtype, c.op, comm, stream);
      break;
    case Coll::kReduceScatter:
      s = accord_reduce_scatter(send, recv, c.count, c.dtype, c.op, comm, stream);
      break;
    case Coll::kAllGather:
      s = accord_all_gather(send, recv, c.count, c.dtype, comm, stream);
      break;
    case Coll::kBroadcast:
      s = accord_broadcast(send, recv, c.count, c.dtype, c.root, comm, stream);
      break;
    case Coll::kReduce:
      s = accord_reduce(send, recv, c.count, c.dtype, c.op, c.root, comm, stream);
      break;
  }
  if (s != ACCORD_SUCCESS) return api_error(name, comm, s);
  s = accord_stream_synchronize(stream);
  if (s != ACCORD_SUCCESS) return api_error(name + ": stream synchronize", comm, s);
  accord_status_t async = ACCORD_SUCCESS;
  s = accord_comm_get_async_error(comm, &async);
  if (s != ACCORD_SUCCESS) return api_error(name + ": get_async_error", comm, s);
  if (async != ACCORD_SUCCESS) return api_error(name + " (asynchronous error)", comm, async);

  std::vector<char> got(image.size());
  s = accord_device_memcpy(got.data(), bufs.out, got.size());
  if (s != ACCORD_SUCCESS) return api_error(name + ": copying the result out", comm, s);
  for (size_t i = 0; i < image.size(); ++i) {
    if (i == lead) i = lead + buffer_bytes;
    if (got[i] != kPoison)
      return name + ": wrote byte " + std::to_string(i) + " of the recv allocation, outside the " +
             std::to_string(buffer_bytes) + "-byte buffer at offset " + std::to_string(lead);
  }
  if (c.coll != Coll::kReduce || rank == c.root) {
    const size_t bad = first_mismatch(got.data() + output_at, want.data(), out_count, es);
    if (bad < out_count)
      return name + ": " +
             std::to_string(
                 count_mismatches(got.data() + output_at, want.data(), out_count, c.dtype)) +
             " of " + std::to_string(out_count) + " elements wrong, the first at " +
             std::to_string(bad);
  }
  if (!c.in_place) {
    std::vector<char> kept(input.size());
    s = accord_device_memcpy(kept.data(), bufs.in, kept.size());
    if (s != ACCORD_SUCCESS) return api_error(name + ": copying the input out", comm, s);
    if (kept != input) return name + ": the send buffer was changed";
  }
  return "";
}

// Every case in turn on one rank's communicator (every `stride`-th case, from the first; or the cases of `only`), with
// a barrier on the stream now and then. The rank must run on GPU want_dev of the want_gpus its
// process sees.
std::string some_collectives(accord_comm_t comm, int rank, int nranks, int want_dev, int want_gpus,
                             size_t stride, const std::vector<Case>& only = {}) {
  int dev = -1, count = 0;
  accord_status_t s = accord_comm_device(comm, &dev);
  if (s != ACCORD_SUCCESS) return api_error("accord_comm_device", comm, s);
  if (dev != want_dev)
    return "runs on GPU " + std::to_string(dev) + ", expected GPU " + std::to_string(want_dev);
  s = accord_device_count(&count);
  if (s != ACCORD_SUCCESS || count != want_gpus)
    return "accord_device_count says " + std::to_string(count) + " GPUs, expected " +
           std::to_string(want_gpus);
  accord_stream_t stream = nullptr;
  std::vector<Case> cases = only;
  if (cases.empty()) {
    const std::vector<Case> all = every_case(nranks);
    for (size_t i = 0; i < all.size(); i += stride) cases.push_back(all[i]);
  }
  std::string failure;
  {
    DeviceBuffers bufs;
    failure = stream_and_buffers(comm, dev, cases, nranks, &stream, &bufs);
    for (size_t i = 0; i < cases.size() && failure.empty(); ++i) {
      failure = run_case(comm, stream, bufs, rank, nranks, cases[i], i);
      if (failure.empty() && i % 16 == 15) {
        s = accord_barrier(comm, stream);
        if (s == ACCORD_SUCCESS) s = accord_stream_synchronize(stream);
        if (s != ACCORD_SUCCESS)
          failure = api_error("barrier after case " + std::to_string(i), comm, s);
      }
    }
    // Every rank is past its last collective before any frees (see DeviceBuffers).
    if (failure.empty()) {
      s = accord_barrier(comm, stream);
      if (s == ACCORD_SUCCESS) s = accord_stream_synchronize(stream);
      if (s != ACCORD_SUCCESS) failure = api_error("final barrier", comm, s);
    }
  }
  if (stream != nullptr) {
    s = accord_stream_destroy(stream);
    if (failure.empty() && s != ACCORD_SUCCESS) failure = api_error("accord_stream_destroy", comm, s);
  }
  return failure;
}

// Every case; rank r on GPU r, or every rank on ACCORD_DEVICE's GPU (ranks sharing one GPU).
std::string every_collective(accord_comm_t comm, int rank, int nranks, int gpus,
                             const std::vector<Case>& cases = {}) {
  const char* fixed = std::getenv("ACCORD_DEVICE");
  return some_collectives(comm, rank, nranks, fixed != nullptr ? std::atoi(fixed) : rank, gpus, 1, cases);
}

// ---------------------------------------------------------------------------------------------
// The plan: transports per pair, ring order

std::string plan_of(accord_comm_t comm) {
  size_t len = 0;
  if (accord_comm_plan(comm, nullptr, &len) != ACCORD_SUCCESS) return "";
  std::string s(len, '\0');
  if (accord_comm_plan(comm, s.data(), &len) != ACCORD_SUCCESS) return "";
  s.resize(std::strlen(s.c_str()));
  return s;
}

// The text after "pair A-B: " up to the end of its line, or "" when the plan has no such line.
std::string pair_line(const std::string& plan, int a, int b) {
  const std::string head = "pair " + std::to_string(a) + "-" + std::to_string(b) + ": ";
  const size_t at = plan.find(head);
  if (at == std::string::npos) return "";
  const size_t from = at + head.size();
  return plan.substr(from, plan.find('\n', from) - from);
}

// What the topology implies for GPUs a and b: staged through host memory when the pair cannot
// peer (or peer access is disabled); else direct device FIFOs, opened with peer access inside
// one process (p2p) and through IPC handles between processes (ipc).
std::string expected_transport(const Machine& m, int a, int b, bool processes) {
  if (p2p_disabled() || !m.peer(a, b)) return "host-staged";
  return processes ? "ipc" : "p2p";
}

// Note [Direct or FIFO]: a job takes the direct protocol for its all-reduces only when every
// pair of its ranks addresses the other's GPU memory (ranks on one GPU, or GPUs that all peer),
// and not with ACCORD_DEVICE_PROTO=fifo. Note [Staged protocol]: a job with a host-staged pair
// (GPUs that cannot peer, ACCORD_P2P_DISABLE=1) stages its collectives through pinned host
// memory instead (auto or ACCORD_DEVICE_PROTO=staged; a forced direct form keeps the FIFOs).
std::string proto_env() {
  const char* v = std::getenv("ACCORD_DEVICE_PROTO");
  return v == nullptr ? "" : v;
}
bool proto_fifo_forced() { return proto_env() == "fifo"; }
bool all_direct(const Machine& m, int nranks, bool one_gpu) {
  if (p2p_disabled() || proto_fifo_forced() || proto_env() == "staged") return false;
  for (int a = 0; a < nranks && !one_gpu; ++a)
    for (int b = a + 1; b < nranks; ++b)
      if (!m.peer(a, b)) return false;
  return true;
}
// The job's all-reduce protocol: "direct", "staged" or "fifo".
std::string expected_proto(const Machine& m, int nranks, bool one_gpu) {
  if (proto_fifo_forced()) return "fifo";
  if (all_direct(m, nranks, one_gpu)) return "direct";
  const std::string forced = proto_env();
  return forced.empty() || forced == "auto" || forced == "staged" ? "staged" : "fifo";
}
// Why a job of ranks sharing GPU 0 here is not direct (empty: it is): the registration tests
// need the direct protocol, which alone maps user buffers into the peers.
std::string not_direct(const Machine& m) {
  return all_direct(m, 2, true) ? std::string()
                                : "user buffers are mapped in direct jobs only (this one is " + expected_proto(m, 2, true) + ")";
}
std::string check_proto(const std::string& plan, const std::string& proto) {
  const std::string head = "device protocol: ";
  const size_t at = plan.find(head);
  const std::string line =
      at == std::string::npos ? "" : plan.substr(at + head.size(), plan.find('\n', at) - at - head.size());
  const std::string want = proto == "direct"   ? "all_reduce direct"
                           : proto == "staged" ? "all_reduce, reduce_scatter, all_gather, broadcast and reduce staged "
                                                 "through pinned host memory by copy engines"
                                               : "fifo for every collective";
  if (line.rfind(want, 0) != 0) return "the plan's device protocol should start with '" + want + "'; plan:\n" + plan;
  // Note [Shared GPU sync], Note [Waiting FIFOs]: a job told how to hand off says so in its plan.
  const char* sync = std::getenv("ACCORD_SHARED_GPU_SYNC");
  if (proto != "staged" && sync != nullptr && *sync != 0 && std::string(sync) != "auto" &&
      plan.find("GPU hand-offs: " + std::string(sync)) == std::string::npos)
    return "the plan should say 'GPU hand-offs: " + std::string(sync) + "'; plan:\n" + plan;
  return "";
}

std::string check_plan(const Machine& m, bool processes, accord_comm_t comm, int rank, int nranks) {
  int dev = -1;
  if (accord_comm_device(comm, &dev) != ACCORD_SUCCESS || dev != rank)
    return "runs on GPU " + std::to_string(dev) + ", expected GPU " + std::to_string(rank);
  const std::string plan = plan_of(comm);
  std::string wrong;
  int nwrong = 0;
  for (int a = 0; a < nranks; ++a)
    for (int b = a + 1; b < nranks; ++b) {
      const std::string line = pair_line(plan, a, b);
      const std::string want = expected_transport(m, a, b, processes);
      if (line.substr(0, line.find(' ')) == want) continue;
      if (++nwrong <= 3)
        wrong += "\n  pair " + std::to_string(a) + "-" + std::to_string(b) + ": expected " + want +
                 ", plan says: " + (line.empty() ? "(no line)" : line);
    }
  if (nwrong == 0) return check_proto(plan, expected_proto(m, nranks, false));
  return std::to_string(nwrong) + " of " + std::to_string(nranks * (nranks - 1) / 2) +
         " GPU pairs have the wrong transport" + (nwrong > 3 ? " (the first 3):" : ":") + wrong;
}

// The ranks in ring order: the plan's "ring order ...:" line, or rank order when it has none.
std::vector<int> ring_of(const std::string& plan, int nranks) {
  std::vector<int> ring;
  const size_t at = plan.find("ring order");
  if (at == std::string::npos) {
    for (int r = 0; r < nranks; ++r) ring.push_back(r);
    return ring;
  }
  const size_t colon = plan.find(':', at);
  const std::string line = plan.substr(colon + 1, plan.find('\n', colon) - colon - 1);
  const char* p = line.c_str();
  for (;;) {
    char* end = nullptr;
    const long v = std::strtol(p, &end, 10);
    if (end == p) break;
    ring.push_back(static_cast<int>(v));
    p = end;
  }
  return ring;
}

// On the DGX-1 every hop is NVLink; on the 4-GPU machine the ring crosses between the halves
// that cannot peer exactly twice (the least any ring can).
std::string check_ring(const Machine& m, accord_comm_t comm, int rank, int nranks) {
  (void)rank;
  const std::string plan = plan_of(comm);
  const std::vector<int> ring = ring_of(plan, nranks);
  std::vector<int> sorted = ring;
  std::sort(sorted.begin(), sorted.end());
  for (int r = 0; r < nranks; ++r)
    if (static_cast<int>(sorted.size()) != nranks || sorted[static_cast<size_t>(r)] != r)
      return "the ring order is not a permutation of the ranks; plan:\n" + plan;
  int cannot_peer = 0, not_nvlink = 0;
  for (size_t i = 0; i < ring.size(); ++i) {
    const int a = ring[i], b = ring[(i + 1) % ring.size()];
    cannot_peer += !m.peer(a, b);
    not_nvlink += !m.nvlink(a, b);
  }
  if (m.tf4 && cannot_peer != 2)
    return "the ring has " + std::to_string(cannot_peer) +
           " hops between GPUs that cannot peer, expected 2; plan:\n" + plan;
  if (!m.tf4 && not_nvlink != 0)
    return "the ring has " + std::to_string(not_nvlink) + " hops that are not NVLink (" +
           std::to_string(cannot_peer) + " cannot peer), expected none; plan:\n" + plan;
  return "";
}

// ---------------------------------------------------------------------------------------------
// Tests. Process tests first: see the top of the file.

// Every rank, after destroying its communicator: no rule of the simulated GPUs was broken
// in its process (Note [Simulated IPC importers]: memory freed while a peer had it open).
std::string no_rule_broken() {
  std::string out;
  for (const std::string& v : accord::sim::rule_violations()) out += (out.empty() ? "" : "; ") + v;
  return out;
}

class GpuProcs : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(load_machine(&m_));
    set_after_destroy(no_rule_broken);
  }
  void TearDown() override { set_after_destroy(nullptr); }
  Machine m_;
};

// The fixture says what the checks below rely on: on the 4-GPU machine exactly the pairs
// between {0,1} and {2,3} cannot peer; on the DGX-1 exactly the pairs without NVLink (SYS),
// three per GPU.
TEST_F(GpuProcs, FixtureCannotPeerPairs) {
  int cannot = 0;
  for (int a = 0; a < m_.gpus(); ++a)
    for (int b = a + 1; b < m_.gpus(); ++b) {
      cannot += !m_.peer(a, b);
      if (m_.tf4)
        EXPECT_EQ(m_.peer(a, b), (a < 2) == (b < 2)) << "GPUs " << a << " and " << b;
      else
        EXPECT_EQ(m_.peer(a, b), m_.nvlink(a, b)) << "GPUs " << a << " and " << b;
    }
  EXPECT_EQ(m_.gpus(), m_.tf4 ? 4 : 8);
  EXPECT_EQ(cannot, m_.tf4 ? 4 : 12);
}

class GpuProcsProcesses : public GpuProcs {
 protected:
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(GpuProcs::SetUp());
    if (kThreadSanitizer)
      GTEST_SKIP()
          << "processes share no memory ThreadSanitizer can see; the thread ranks cover it";
    ASSERT_FALSE(g_runtime_started)
        << "a thread test started the device runtime in this process before these forked "
           "ranks; run the process tests first or alone (--gtest_filter=GpuProcsProcesses.*)";
    // Note [Simulated time slices]: ranks forked after the table exists share its slices.
    const char* slice = std::getenv("ACCORD_SIM_TIMESLICE_US");
    if (slice != nullptr && std::atoi(slice) > 0) {
      ASSERT_TRUE(sim::TimeSlices::process_table());
    }
  }
  static constexpr int kTimeoutS = 100;
};

TEST_F(GpuProcsProcesses, EveryCollectiveExact) {
  const int gpus = m_.gpus();
  for (const auto& f : run_processes(
           gpus, [&](accord_comm_t c, int r, int n) { return every_collective(c, r, n, gpus); },
           kTimeoutS))
    ADD_FAILURE() << f;
}

TEST_F(GpuProcsProcesses, PlanTransportsFollowTheTopology) {
  for (const auto& f : run_processes(
           m_.gpus(), [&](accord_comm_t c, int r, int n) { return check_plan(m_, true, c, r, n); },
           kTimeoutS))
    ADD_FAILURE() << f;
}

TEST_F(GpuProcsProcesses, RingAvoidsSlowHops) {
  for (const auto& f : run_processes(
           m_.gpus(), [&](accord_comm_t c, int r, int n) { return check_ring(m_, c, r, n); },
           kTimeoutS))
    ADD_FAILURE() << f;
}

// Ranks sharing one GPU (ACCORD_DEVICE=0 for all): the configuration of a machine with one GPU,
// where NCCL refuses ("Duplicate GPU detected"). Their FIFOs are in that GPU's memory: ipc
// between processes, p2p between threads. Every collective exact with 2 and 4 ranks.
std::string shared_gpu(accord_comm_t c, int r, int n, int gpus, const char* route) {
  std::string failure = every_collective(c, r, n, gpus);
  if (!failure.empty()) return failure;
  const std::string line = pair_line(plan_of(c), 0, 1);
  if (line.rfind(std::string(route) + " (GPU 0 shared by both ranks", 0) != 0)
    return std::string("pair 0-1 should be ") + route + " on the shared GPU 0; plan says: " + line;
  return check_proto(plan_of(c), proto_fifo_forced() ? "fifo" : p2p_disabled() ? "staged" : "direct");
}

// Note [Direct protocol]: all-reduces of every dtype over sum and avg, and the other ops over
// a few, at sizes 0, 1, 7 (no whole 16-byte vector), a prime, and 65537 (more than the
// scratch's half when ACCORD_DIRECT_SCRATCH_BYTES is small: many rounds), in and out of place,
// on unaligned buffers (run_case). The FIFO path runs the same cases where the job cannot go
// direct, so both are held to the same answers.
std::vector<Case> direct_cases() {
  std::vector<Case> cases;
  for (size_t count : {size_t{0}, size_t{1}, size_t{7}, kPrime, size_t{65537}})
    for (bool in_place : {false, true}) {
      for (accord_datatype_t d : {ACCORD_INT8, ACCORD_UINT8, ACCORD_INT32, ACCORD_UINT32, ACCORD_INT64,
                                  ACCORD_UINT64, ACCORD_FLOAT16, ACCORD_BFLOAT16, ACCORD_FLOAT32, ACCORD_FLOAT64})
        for (accord_red_op_t op : {ACCORD_SUM, ACCORD_AVG}) cases.push_back(Case{Coll::kAllReduce, d, op, count, in_place});
      for (accord_datatype_t d : {ACCORD_UINT8, ACCORD_INT32, ACCORD_FLOAT32})
        for (accord_red_op_t op : {ACCORD_MAX, ACCORD_MIN, ACCORD_PROD})
          cases.push_back(Case{Coll::kAllReduce, d, op, count, in_place});
      // Note [Direct collectives]: the other four, roots at both ends and in the middle.
      for (accord_datatype_t d : {ACCORD_INT8, ACCORD_FLOAT16, ACCORD_FLOAT32, ACCORD_INT64}) {
        for (accord_red_op_t op : {ACCORD_SUM, ACCORD_AVG, ACCORD_MAX}) {
          cases.push_back(Case{Coll::kReduceScatter, d, op, count, in_place});
          cases.push_back(Case{Coll::kReduce, d, op, count, in_place, op == ACCORD_SUM ? 0 : op == ACCORD_AVG ? -1 : -2});
        }
        cases.push_back(Case{Coll::kAllGather, d, ACCORD_SUM, count, in_place});
        cases.push_back(Case{Coll::kBroadcast, d, ACCORD_SUM, count, in_place, -1});
        cases.push_back(Case{Coll::kBroadcast, d, ACCORD_SUM, count, in_place, 0});
      }
    }
  return cases;
}

// Note [Staged protocol]: the staged form of the other four collectives (direct_staged.cpp,
// staged_in and staged_out: each rank copies in only what its kernel reads) over every dtype
// and op, roots first, last and in the middle, at direct_cases' sizes.
void add_staged_cases(std::vector<Case>* cases) {
  // Under ThreadSanitizer (every access checked, 10x slower) one dtype of each width: the
  // copies and waits are the same for all (the kernels' arithmetic is the direct cases').
  const std::vector<accord_datatype_t> dtypes =
      kThreadSanitizer ? std::vector<accord_datatype_t>{ACCORD_INT8, ACCORD_FLOAT16, ACCORD_FLOAT32, ACCORD_FLOAT64}
                       : std::vector<accord_datatype_t>{ACCORD_INT8, ACCORD_UINT8, ACCORD_INT32, ACCORD_UINT32,
                                                        ACCORD_INT64, ACCORD_UINT64, ACCORD_FLOAT16, ACCORD_BFLOAT16,
                                                        ACCORD_FLOAT32, ACCORD_FLOAT64};
  for (size_t count : {size_t{0}, size_t{1}, size_t{7}, kPrime, size_t{65537}})
    for (bool in_place : {false, true})
      for (accord_datatype_t d : dtypes) {
        int k = 0;  // the roots in turn
        for (accord_red_op_t op : {ACCORD_SUM, ACCORD_AVG, ACCORD_MAX, ACCORD_MIN, ACCORD_PROD}) {
          cases->push_back(Case{Coll::kReduceScatter, d, op, count, in_place});
          cases->push_back(Case{Coll::kReduce, d, op, count, in_place, -(k++ % 3)});
        }
        cases->push_back(Case{Coll::kAllGather, d, ACCORD_SUM, count, in_place});
        cases->push_back(Case{Coll::kBroadcast, d, ACCORD_SUM, count, in_place, -(k++ % 3)});
      }
}

// The direct cases, after the plan says which protocol the job took (a staged job: and
// add_staged_cases).
std::string direct_job(accord_comm_t c, int r, int n, int gpus, const std::string& proto) {
  const std::string wrong = check_proto(plan_of(c), proto);
  if (!wrong.empty()) return wrong;
  std::vector<Case> cases = direct_cases();
  if (proto == "staged") add_staged_cases(&cases);
  for (Case& k : cases) k.root = k.root == -1 ? n - 1 : k.root == -2 ? n / 2 : k.root;  // last, middle
  return every_collective(c, r, n, gpus, cases);
}

struct SharedGpuEnv {
  SharedGpuEnv() { setenv("ACCORD_DEVICE", "0", 1); }
  ~SharedGpuEnv() { unsetenv("ACCORD_DEVICE"); }
};

// Log lines go to a file while alive (ACCORD_LOG_FILE; forked ranks inherit it, opened for
// appending), so that a test can look for a warning.
class LogFile {
 public:
  LogFile() : path_("/tmp/accord-gpu-procs-" + std::to_string(getpid()) + ".log") {
    unlink(path_.c_str());
    setenv("ACCORD_LOG_FILE", path_.c_str(), 1);
    log_reconfigure();
  }
  ~LogFile() {
    unsetenv("ACCORD_LOG_FILE");
    log_reconfigure();
    unlink(path_.c_str());
  }
  std::string text() const {
    std::ifstream in(path_);
    std::stringstream out;
    out << in.rdbuf();
    return out.str();
  }

 private:
  std::string path_;
};

size_t occurrences(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// Note [Staged protocol]: every rank logs (at info level, DirectEngine::log_choice) which form
// each collective took: while one lives, its lines go to a file, and staged_everywhere says
// whether every rank's calls of all five collectives were staged (none on the FIFOs).
class GpuInfoLog {
 public:
  std::string text() const { return file_.text(); }

 private:
  struct Reconfigure {
    ~Reconfigure() { log_reconfigure(); }  // last: ACCORD_LOG restored
  } again_;
  ScopedEnv level_{"ACCORD_LOG", "warn,gpu:info"};
  LogFile file_;
};

std::string staged_everywhere(const std::string& text, int n) {
  for (int r = 0; r < n; ++r)
    for (const char* coll : {"all_reduce", "reduce_scatter", "all_gather", "broadcast", "reduce"}) {
      const std::string head = "rank " + std::to_string(r) + ": " + coll + " of ";
      size_t staged = 0;
      for (size_t at = text.find(head); at != std::string::npos; at = text.find(head, at + 1)) {
        const std::string line = text.substr(at, text.find('\n', at) - at);
        if (line.find(" bytes: staged") == std::string::npos)
          return std::string(coll) + " did not take the staged form: " + line;
        ++staged;
      }
      if (staged == 0) return "rank " + std::to_string(r) + " logged no " + coll + " (ACCORD_LOG=gpu:info)";
    }
  return "";
}

std::string rank_list(int n) {  // "0 and 1", "0, 1, 2 and 3"
  std::string out;
  for (int r = 0; r < n; ++r)
    out += (r == 0 ? "" : r + 1 == n ? " and " : ", ") + std::to_string(r);
  return out;
}

// Note [Shared GPU warnings]: the time-slice warning, once, from rank 0, naming the ranks, the
// GPU and MPS, where the simulated GPU is time-sliced (ACCORD_SIM_TIMESLICE_US, the table made
// here before the ranks fork) and the job spins. Without ACCORD_SIM_TIMESLICE_US a simulated
// GPU runs every process's kernels at once, as under MPS: no warning (it said "MPS does not
// run" there too).
TEST_F(GpuProcsProcesses, RanksSharingOneGpu) {
  if (p2p_disabled()) GTEST_SKIP() << "with ACCORD_P2P_DISABLE=1 the pairs are host-staged";
  const int gpus = m_.gpus();
  SharedGpuEnv env;
  std::string why;
  ASSERT_TRUE(sim::TimeSlices::process_table(&why)) << why;
  ScopedEnv spin("ACCORD_SHARED_GPU_SYNC", "spin");
  // Sliced, the spinning job pays a slice a hand-off: 2 and 3 ranks (the rank list's forms).
  for (int n : {2, 3, 4}) {
    for (bool sliced : {true, false}) {
      if (sliced != (n < 4)) continue;
      ScopedEnv slice("ACCORD_SIM_TIMESLICE_US", sliced ? "1000" : "0");
      LogFile log;
      for (const auto& f : run_processes(
               n, [&](accord_comm_t c, int r, int nr) { return shared_gpu(c, r, nr, gpus, "ipc"); }, kTimeoutS))
        ADD_FAILURE() << n << " ranks" << (sliced ? ", sliced" : "") << ": " << f;
      const std::string text = log.text();
      const std::string want =
          "rank 0: GPU 0 is shared by ranks " + rank_list(n) + " in different processes (pids ";
      EXPECT_EQ(occurrences(text, want), sliced ? 1u : 0u) << n << " ranks; log:\n" << text;
      EXPECT_EQ(occurrences(text, "time-sliced as a GPU without MPS is (simulated: ACCORD_SIM_TIMESLICE_US=1000)"),
                sliced ? 1u : 0u) << text;
      EXPECT_EQ(occurrences(text, "MPS does not run"), 0u) << text;
      if (sliced) {
        EXPECT_NE(text.find("nvidia-cuda-mps-control -d"), std::string::npos) << text;
      }
      EXPECT_EQ(occurrences(text, "are threads of one process"), 0u) << text;
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Identity as clusters give it: per-rank CUDA_VISIBLE_DEVICES (Note [GPU identity]) and ranks in
// pid namespaces of their own (Note [Process identity]).

// Rank r runs with CUDA_VISIBLE_DEVICES=visible[r]: it must see count[r] GPUs and run on its
// ordinal dev[r], which is GPU physical[r] of the machine.
struct VisibleJob {
  std::vector<std::string> visible;
  std::vector<int> dev, count, physical;
};

// Every pair's route follows the physical pair: "shared by both ranks" (ipc between processes)
// exactly where the two GPUs are one, else what the topology implies for the two GPUs.
std::string check_physical_routes(const Machine& m, const std::vector<int>& physical, accord_comm_t comm,
                                  int nranks) {
  const std::string plan = plan_of(comm);
  std::string wrong;
  int nwrong = 0;
  for (int a = 0; a < nranks; ++a)
    for (int b = a + 1; b < nranks; ++b) {
      const int pa = physical[static_cast<size_t>(a)], pb = physical[static_cast<size_t>(b)];
      const std::string line = pair_line(plan, a, b);
      const std::string want =
          pa == pb ? (p2p_disabled() ? "host-staged" : "ipc") : expected_transport(m, pa, pb, true);
      const bool shared = line.find("shared by both ranks") != std::string::npos;
      if (line.substr(0, line.find(' ')) == want && shared == (pa == pb && !p2p_disabled())) continue;
      if (++nwrong <= 3)
        wrong += "\n  pair " + std::to_string(a) + "-" + std::to_string(b) + " (GPUs " + std::to_string(pa) +
                 " and " + std::to_string(pb) + " of the machine): expected " + want +
                 (pa == pb ? " on the one GPU" : " between two GPUs") + ", plan says: " +
                 (line.empty() ? "(no line)" : line);
    }
  if (nwrong == 0) return "";
  return std::to_string(nwrong) + " of " + std::to_string(nranks * (nranks - 1) / 2) +
         " pairs have the wrong route" + (nwrong > 3 ? " (the first 3):" : ":") + wrong;
}

// Every 6th case of every_case: the routes are what this checks, and 8 processes run it.
constexpr size_t kCaseStride = 6;

void run_visible_job(const Machine& m, const VisibleJob& job, int timeout_s) {
  const int n = static_cast<int>(job.visible.size());
  for (const auto& f : run_processes(
           n,
           [&](accord_comm_t c, int r, int nr) {
             std::string failure = check_physical_routes(m, job.physical, c, nr);
             if (!failure.empty()) return failure;
             return some_collectives(c, r, nr, job.dev[static_cast<size_t>(r)],
                                     job.count[static_cast<size_t>(r)], kCaseStride);
           },
           timeout_s, [&](int r) { setenv("CUDA_VISIBLE_DEVICES", job.visible[static_cast<size_t>(r)].c_str(), 1); }))
    ADD_FAILURE() << f;
}

// Slurm's --gpus-per-task=1: each rank sees one GPU, its own, as "GPU 0". Before GPUs were
// told apart by UUID, every pair looked like one shared GPU.
TEST_F(GpuProcsProcesses, OneVisibleGpuPerRank) {
  VisibleJob job;
  for (int r = 0; r < m_.gpus(); ++r) {
    job.visible.push_back(std::to_string(r));
    job.dev.push_back(0);
    job.count.push_back(1);
    job.physical.push_back(r);
  }
  run_visible_job(m_, job, kTimeoutS);
}

// 4 ranks whose visible lists are the machine's GPUs rotated by the rank: rank r runs on its
// ordinal r (local rank), which is GPU 2r mod the GPUs of the machine. On the 4-GPU machine
// ranks 0 and 2 share GPU 0 and ranks 1 and 3 GPU 2, under different ordinals; on the DGX-1
// the GPUs are 0, 2, 4 and 6.
TEST_F(GpuProcsProcesses, RotatedVisibleDevices) {
  const int g = m_.gpus();
  VisibleJob job;
  for (int r = 0; r < 4; ++r) {
    std::string list;
    for (int i = 0; i < g; ++i) list += (i ? "," : "") + std::to_string((r + i) % g);
    job.visible.push_back(list);
    job.dev.push_back(r);
    job.count.push_back(g);
    job.physical.push_back((2 * r) % g);
  }
  run_visible_job(m_, job, kTimeoutS);
}

// Runs in each forked rank before its communicator exists: the rank goes on in a child that is
// pid 1 of a new pid namespace (as in a container of its own, sharing this /dev/shm), while
// this process waits for it and exits with its status.
void into_own_pid_namespace(int) {
  if (unshare(CLONE_NEWPID) != 0) _exit(5);
  const pid_t child = fork();
  if (child < 0) _exit(6);
  if (child == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);  // killed with its parent (the harness's timeout)
    return;
  }
  int status = 0;
  while (waitpid(child, &status, 0) < 0 && errno == EINTR) {
  }
  _exit(WIFEXITED(status) ? WEXITSTATUS(status) : 1);
}

bool can_unshare_pid() {
  const pid_t probe = fork();
  if (probe == 0) _exit(unshare(CLONE_NEWPID) == 0 ? 0 : 1);
  int status = 1;
  if (probe < 0 || waitpid(probe, &status, 0) != probe) return false;
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

// Every rank is pid 1 of its own namespace: the ranks are still told apart (Note [Process
// identity]); no pair is routed as one process, and, as CUDA IPC between pid namespaces is not
// relied on, every GPU pair is host-staged through the /dev/shm they share. Collectives on
// device and host buffers exact. Before, equal pids made them "one process": p2p routes that
// passed raw pointers between processes.
std::string apart(const Machine& m, accord_comm_t c, int r, int n, int want_dev, int gpus) {
  const std::string plan = plan_of(c);
  const char* fixed = std::getenv("ACCORD_DEVICE");
  for (int a = 0; a < n; ++a)
    for (int b = a + 1; b < n; ++b) {
      const std::string line = pair_line(plan, a, b);
      // Where the GPUs cannot peer that is the reason given; else the namespaces.
      const bool could = fixed != nullptr || m.peer(a, b);
      if (line.rfind("host-staged", 0) != 0 ||
          (!p2p_disabled() && could && line.find("different pid namespaces") == std::string::npos))
        return "pair " + std::to_string(a) + "-" + std::to_string(b) +
               " should be host-staged between pid namespaces; plan says: " + line;
    }
  if (getpid() != 1) return "not pid 1 of a pid namespace of its own (pid " + std::to_string(getpid()) + ")";
  std::vector<int32_t> in(kPrime), out(kPrime, -1);
  for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<int32_t>(i % 7) + r;
  accord_status_t s = accord_all_reduce(in.data(), out.data(), in.size(), ACCORD_INT32, ACCORD_SUM, c, nullptr);
  if (s != ACCORD_SUCCESS) return api_error("all_reduce on host buffers", c, s);
  for (size_t i = 0; i < out.size(); ++i)
    if (out[i] != static_cast<int32_t>(n * (i % 7)) + n * (n - 1) / 2)
      return "all_reduce on host buffers: element " + std::to_string(i) + " is " + std::to_string(out[i]);
  return some_collectives(c, r, n, want_dev, gpus, kCaseStride);
}

TEST_F(GpuProcsProcesses, SeparatePidNamespacesSharingOneGpu) {
  if (!can_unshare_pid()) GTEST_SKIP() << "unshare(CLONE_NEWPID) is not allowed here (needs root)";
  const int gpus = m_.gpus();
  SharedGpuEnv env;
  // The simulated GPU sliced, and the job spinning on the FIFOs, so that init warns (the ranks,
  // each pid 1 of its own namespace, cannot share a slice table: each keeps its own, with a
  // warning). A staged job, the default here, waits at stream level and has nothing to warn of.
  ScopedEnv slice("ACCORD_SIM_TIMESLICE_US", "1000");
  ScopedEnv fifo("ACCORD_DEVICE_PROTO", "fifo");
  ScopedEnv spin("ACCORD_SHARED_GPU_SYNC", "spin");
  LogFile log;
  for (const auto& f : run_processes(
           2, [&](accord_comm_t c, int r, int n) { return apart(m_, c, r, n, 0, gpus); }, kTimeoutS,
           into_own_pid_namespace))
    ADD_FAILURE() << f;
  // The time-slice warning tells the two processes apart: both are pid 1, so each pid comes
  // with its namespace (it said "pids 1, 1").
  const std::string text = log.text();
  EXPECT_NE(text.find("time-sliced as a GPU without MPS"), std::string::npos) << "the log:\n" << text;
  EXPECT_EQ(occurrences(text, "1 in pid namespace "), 2u) << "the log:\n" << text;
}

TEST_F(GpuProcsProcesses, SeparatePidNamespacesOwnGpus) {
  if (!can_unshare_pid()) GTEST_SKIP() << "unshare(CLONE_NEWPID) is not allowed here (needs root)";
  const int gpus = m_.gpus();
  for (const auto& f : run_processes(
           4, [&](accord_comm_t c, int r, int n) { return apart(m_, c, r, n, r, gpus); }, kTimeoutS,
           into_own_pid_namespace))
    ADD_FAILURE() << f;
}

// ---------------------------------------------------------------------------------------------
// GPU buffers between ranks whose pair is TCP (Note [Device data over TCP]): ACCORD_SHM_DISABLE=1,
// rank r on GPU r (ACCORD_DEVICE per rank: without shared memory every rank is its host's only
// one). Every pair is TCP with GPU buffers staged through pinned host memory; every collective
// exact. Before, such calls were refused (ACCORD_ERR_UNSUPPORTED).
TEST_F(GpuProcsProcesses, GpuBuffersOverTcp) {
  const int gpus = m_.gpus();
  const int n = std::min(gpus, 4);
  for (const auto& f : run_processes(
           n,
           [&](accord_comm_t c, int r, int nr) -> std::string {
             const std::string plan = plan_of(c);
             for (int a = 0; a < nr; ++a)
               for (int b = a + 1; b < nr; ++b) {
                 const std::string line = pair_line(plan, a, b);
                 if (line.rfind("tcp (", 0) != 0 ||
                     line.find("GPU buffers staged through pinned host memory") == std::string::npos)
                   return "pair " + std::to_string(a) + "-" + std::to_string(b) +
                          " should be TCP with GPU buffers staged; plan says: " + line;
               }
             return some_collectives(c, r, nr, r, gpus, 2);
           },
           kTimeoutS,
           [](int r) {
             setenv("ACCORD_SHM_DISABLE", "1", 1);
             setenv("ACCORD_DEVICE", std::to_string(r).c_str(), 1);
           }))
    ADD_FAILURE() << f;
}

// Note [Departures] (transport/wait.hpp): rank 0 broadcasts one element (it owes rank 1
// nothing more once it is posted), destroys its communicator and exits, while rank 1's
// broadcast is still in flight: its stream is held by a host function until rank 0's process
// has exited, and then a while longer, until rank 1's watchdog has had its chance to act
// (it looks every millisecond; the gate waits up to 2 s, and returns as soon as the
// communicator has an error). Before departures were published the watchdog took the exit
// for a death and rank 1 failed with "peer rank 0 died during broadcast"; now rank 1's
// broadcast completes, exact.
struct ExitGate {
  std::atomic<pid_t> rank0{0};
  accord_comm_t comm = nullptr;  // rank 1's, set in rank 1 only
};
void wait_for_rank0_exit(void* arg) {
  auto* g = static_cast<ExitGate*>(arg);
  const int fd = static_cast<int>(syscall(SYS_pidfd_open, g->rank0.load(), 0));
  if (fd >= 0) {
    pollfd p{fd, POLLIN, 0};
    (void)poll(&p, 1, 60000);
    close(fd);
  }
  for (int i = 0; i < 2000; ++i) {
    accord_status_t async = ACCORD_SUCCESS;
    if (accord_comm_get_async_error(g->comm, &async) != ACCORD_SUCCESS || async != ACCORD_SUCCESS) return;
    usleep(1000);
  }
}

TEST_F(GpuProcsProcesses, PeerThatExitedAfterTheLastCollectiveIsNotDead) {
  void* shared = mmap(nullptr, sizeof(ExitGate), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(shared, MAP_FAILED);
  auto* gate = new (shared) ExitGate;
  for (const auto& f : run_processes(
           2,
           [&](accord_comm_t c, int r, int) -> std::string {
             int dev = -1;
             accord_status_t s = accord_comm_device(c, &dev);
             if (s != ACCORD_SUCCESS) return api_error("accord_comm_device", c, s);
             accord_stream_t stream = nullptr;
             s = accord_stream_create(&stream, dev);
             if (s != ACCORD_SUCCESS) return api_error("accord_stream_create", c, s);
             void* buf = nullptr;
             s = accord_device_alloc(&buf, sizeof(int32_t), dev);
             if (s != ACCORD_SUCCESS) return api_error("accord_device_alloc", c, s);
             int32_t value = r == 0 ? 41 : -1;
             s = accord_device_memcpy(buf, &value, sizeof value);
             if (s == ACCORD_SUCCESS) s = accord_barrier(c, nullptr);
             if (s != ACCORD_SUCCESS) return api_error("setting up", c, s);
             if (r == 0) {
               gate->rank0.store(getpid());
             } else {
               while (gate->rank0.load() == 0) usleep(1000);
               gate->comm = c;
               Settings settings;
               if (!load_settings(&settings).ok()) return "load_settings failed";
               DeviceRuntime* rt = process_device_runtime(settings);
               if (rt == nullptr) return "no device runtime";
               if (!rt->launch_host_func(Stream{reinterpret_cast<uintptr_t>(stream)}, wait_for_rank0_exit, gate).ok())
                 return "launch_host_func failed";
             }
             s = accord_broadcast(buf, buf, 1, ACCORD_INT32, 0, c, stream);
             if (s == ACCORD_SUCCESS) s = accord_stream_synchronize(stream);
             accord_status_t async = ACCORD_SUCCESS;
             if (s == ACCORD_SUCCESS) s = accord_comm_get_async_error(c, &async);
             if (s != ACCORD_SUCCESS) return api_error("broadcast", c, s);
             if (async != ACCORD_SUCCESS) return api_error("broadcast (asynchronous error)", c, async);
             s = accord_device_memcpy(&value, buf, sizeof value);
             if (s != ACCORD_SUCCESS) return api_error("copying the result out", c, s);
             if (value != 41) return "broadcast gave " + std::to_string(value) + ", expected 41";
             (void)accord_device_free(buf);
             s = accord_stream_destroy(stream);
             return s == ACCORD_SUCCESS ? std::string() : api_error("accord_stream_destroy", c, s);
           },
           kTimeoutS,
           [](int r) {
             setenv("ACCORD_DEVICE", std::to_string(r).c_str(), 1);
             // The FIFO broadcast lets the root finish without its peer (the message waits in
             // the peer's FIFO), which is the race this checks; a direct job's root may wait for
             // the gated peer instead.
             setenv("ACCORD_DEVICE_PROTO", "fifo", 1);
           }))
    ADD_FAILURE() << f;
  munmap(shared, sizeof(ExitGate));
}

// Two hosts of two ranks (ACCORD_HOST_ID), rank r on GPU r: inside a host the GPU routes,
// between hosts TCP with GPU buffers staged; every collective exact with the tuner's choices,
// and the hierarchical all-reduce forced (ACCORD_ALGO=hier: intra-host on the GPU path,
// inter-host over TCP).
TEST_F(GpuProcsProcesses, GpuBuffersOverTcpTwoHosts) {
  const int gpus = m_.gpus();
  for (const char* algo : {"", "hier"}) {
    for (const auto& f : run_processes(
             4,
             [&](accord_comm_t c, int r, int nr) -> std::string {
               const std::string plan = plan_of(c);
               const std::string across = pair_line(plan, 1, 2), inside = pair_line(plan, 2, 3);
               if (across.rfind("tcp (different hosts", 0) != 0 ||
                   across.find("GPU buffers staged through pinned host memory") == std::string::npos)
                 return "pair 1-2 should be TCP between hosts with GPU buffers staged; plan says: " + across;
               if (inside.rfind(expected_transport(m_, 2, 3, true), 0) != 0)
                 return "pair 2-3 should be " + expected_transport(m_, 2, 3, true) + "; plan says: " + inside;
               return some_collectives(c, r, nr, r, gpus, 3);
             },
             kTimeoutS,
             [&](int r) {
               setenv("ACCORD_HOST_ID", r < 2 ? "host-a" : "host-b", 1);
               setenv("ACCORD_DEVICE", std::to_string(r).c_str(), 1);
               if (*algo) setenv("ACCORD_ALGO", algo, 1);
             }))
      ADD_FAILURE() << (*algo ? "ACCORD_ALGO=hier: " : "") << f;
  }
}

// 2, 3 and 4 ranks sharing GPU 0, then 2 and 4 ranks on GPUs 0..n-1: direct where every pair
// peers (the DGX-1's GPUs 0-3 are all NVLink; on the 4-GPU machine 0-1 peer, 0-2 cannot, so 4
// ranks keep the FIFOs, every rank alike).
// n ranks on GPU 0 (one_gpu) or on GPUs 0..n-1 run the direct cases through `run`
// (run_processes or run_threads); a staged job (Note [Staged protocol]) also shows in its log
// that every collective took that form.
template <class Run>
void direct_exact(const Machine& m, int n, bool one_gpu, const Run& run) {
  std::unique_ptr<SharedGpuEnv> env(one_gpu ? new SharedGpuEnv : nullptr);
  const std::string proto = expected_proto(m, n, one_gpu);
  std::unique_ptr<GpuInfoLog> log(proto == "staged" ? new GpuInfoLog : nullptr);
  const std::string where = one_gpu ? " ranks on GPU 0: " : " ranks on GPUs 0.." + std::to_string(n - 1) + ": ";
  const int gpus = m.gpus();
  for (const auto& f : run(n, [&](accord_comm_t c, int r, int nr) { return direct_job(c, r, nr, gpus, proto); }))
    ADD_FAILURE() << n << where << f;
  if (log != nullptr)
    if (const std::string f = staged_everywhere(log->text(), n); !f.empty()) ADD_FAILURE() << n << where << f;
}

TEST_F(GpuProcsProcesses, DirectAllReduceExact) {
  auto run = [](int n, const RankBody& body) { return run_processes(n, body, kTimeoutS); };
  for (int n : {2, 3, 4}) direct_exact(m_, n, true, run);
  for (int n : {2, 4}) direct_exact(m_, n, false, run);
}

// A direct wait polls the abort word as the FIFO waits do: a rank that never comes (stopped)
// makes the others' all-reduce end at ACCORD_TIMEOUT_MS with an error naming it, and a rank
// that dies makes them end with an error naming it; no hang in either case.
std::string survivor(accord_comm_t c, int r, int missing) {
  int dev = -1;
  accord_status_t s = accord_comm_device(c, &dev);
  if (s != ACCORD_SUCCESS) return api_error("accord_comm_device", c, s);
  accord_stream_t stream = nullptr;
  void* buf = nullptr;
  if ((s = accord_stream_create(&stream, dev)) != ACCORD_SUCCESS) return api_error("accord_stream_create", c, s);
  if ((s = accord_device_alloc(&buf, 4096, dev)) != ACCORD_SUCCESS) return api_error("accord_device_alloc", c, s);
  std::string failure;
  if ((s = accord_barrier(c, nullptr)) != ACCORD_SUCCESS) failure = api_error("barrier", c, s);
  if (failure.empty() && r != missing) {
    s = accord_all_reduce(buf, buf, 1024, ACCORD_FLOAT32, ACCORD_SUM, c, stream);
    if (s == ACCORD_SUCCESS) (void)accord_stream_synchronize(stream);
    accord_status_t async = ACCORD_SUCCESS;
    (void)accord_comm_get_async_error(c, &async);
    const std::string text = accord_last_error(c);
    if (s == ACCORD_SUCCESS && async == ACCORD_SUCCESS)
      failure = "the all-reduce succeeded without rank " + std::to_string(missing);
    else if (text.find("rank " + std::to_string(missing)) == std::string::npos)
      failure = "the error does not name rank " + std::to_string(missing) + ": " + text;
  }
  (void)accord_device_free(buf);
  (void)accord_stream_destroy(stream);
  return failure;
}

TEST_F(GpuProcsProcesses, DirectWaitEndsWhenAPeerStopsOrDies) {
  // Note [Waiting FIFOs]: a job on the FIFOs waits at stream level too when told to.
  const char* sync = std::getenv("ACCORD_SHARED_GPU_SYNC");
  if (expected_proto(m_, 3, true) == "fifo" && (sync == nullptr || std::string(sync) != "wait"))
    GTEST_SKIP() << "the job's hand-offs would not wait at stream level";
  SharedGpuEnv env;
  ScopedEnv timeout("ACCORD_TIMEOUT_MS", "3000");
  // Stopped: rank 1 of 2 sleeps past the timeout instead of calling.
  for (const auto& f : run_processes(2, [&](accord_comm_t c, int r, int) {
         if (r == 1) {
           (void)accord_barrier(c, nullptr);
           sleep(6);
           return std::string();
         }
         return survivor(c, r, 1);
       }, kTimeoutS))
    ADD_FAILURE() << "stopped rank: " << f;
  // Killed: rank 2 of 3 dies instead of calling.
  for (const auto& f : run_processes(3, [&](accord_comm_t c, int r, int) {
         if (r == 2) {
           (void)accord_barrier(c, nullptr);
           raise(SIGKILL);
         }
         return survivor(c, r, 2);
       }, kTimeoutS))
    if (f.rfind("rank 2: ", 0) != 0 || f.find("killed by signal 9") == std::string::npos)
      ADD_FAILURE() << "killed rank: " << f;
}

// Note [Freeing memory peers map]: a rank that destroys its communicator while a peer still
// maps its scratch (here: the peer is slow to destroy, as a peer whose last kernel still reads
// would be) must wait before freeing it. On the old destroy, rank 0 freed its scratch at once,
// which the simulation reports (Note [Simulated IPC importers]) through the check every rank
// runs after destroy (no_rule_broken). Both protocols: direct scratch and device FIFOs.
TEST_F(GpuProcsProcesses, DestroyWaitsUntilPeersLetGo) {
  const int gpus = m_.gpus();
  for (const char* proto : {"auto", "fifo", "staged"}) {  // Note [Staged protocol]: its memory in the FIFOs' hold
    ScopedEnv env_proto("ACCORD_DEVICE_PROTO", proto);
    SharedGpuEnv env;
    for (const auto& f : run_processes(2, [&](accord_comm_t c, int r, int n) {
           const std::vector<Case> cases = {Case{Coll::kAllReduce, ACCORD_FLOAT32, ACCORD_SUM, kPrime, false}};
           std::string failure = every_collective(c, r, n, gpus, cases);
           if (r == 1) usleep(300 * 1000);  // rank 0 destroys first
           return failure;
         }, kTimeoutS))
      ADD_FAILURE() << "ACCORD_DEVICE_PROTO=" << proto << ": " << f;
  }
}

// ---------------------------------------------------------------------------------------------
// Note [User buffers mapped into peers]: registration maps each rank's buffer into its peers.
// ---------------------------------------------------------------------------------------------

// The plan's "user buffers" line, or "" when it has none.
std::string users_line(accord_comm_t c) {
  const std::string plan = plan_of(c);
  const size_t at = plan.find("user buffers: ");
  return at == std::string::npos ? "" : plan.substr(at, plan.find('\n', at) - at);
}

std::string expect_users(accord_comm_t c, size_t live, size_t opened, size_t reused, const std::string& when) {
  const std::string want = "user buffers: " + std::to_string(live) + " registered, " + std::to_string(opened) +
                           " peer allocations opened, " + std::to_string(reused) + " found open";
  const std::string line = users_line(c);
  return line.rfind(want, 0) == 0 ? "" : when + ": the plan should say '" + want + "'; it says: '" + line + "'";
}

uint8_t pattern(int rank, size_t i, int which) { return static_cast<uint8_t>(rank * 31 + which * 7 + i * 13); }

// Rank p's buffer of registration h, read through this rank's mapping, holds p's pattern
// from `from` for `bytes` bytes (the buffer starts at byte `from` of p's allocation).
std::string check_mapped(accord_comm_t c, void* h, int p, size_t from, size_t bytes, int which) {
  const void* at = c->impl->registered_buffer(reinterpret_cast<uintptr_t>(h), p);
  if (at == nullptr) return "rank " + std::to_string(p) + "'s buffer of registration " + std::to_string(reinterpret_cast<uintptr_t>(h)) + " is not mapped";
  std::vector<uint8_t> got(bytes);
  accord_status_t s = accord_device_memcpy(got.data(), at, bytes);
  if (s != ACCORD_SUCCESS) return api_error("reading rank " + std::to_string(p) + "'s mapped buffer", nullptr, s);
  for (size_t i = 0; i < bytes; ++i)
    if (got[i] != pattern(p, from + i, which))
      return "rank " + std::to_string(p) + "'s mapped buffer differs at byte " + std::to_string(i);
  return "";
}

thread_local void* g_free_after_destroy = nullptr;  // a rank's registered buffer, freed after destroy

// Each rank registers part of one allocation, then all of it (the peers find it open: one
// IPC open per allocation), then rank 0 alone a second allocation (the others register
// nothing at that point: registration is collective, the sizes are each rank's own). Every
// peer reads each buffer's bytes through its mapping; the collectives stay exact with the
// registrations live; the first two are deregistered and their allocation freed before
// destroy, the third is left registered, and its allocation is freed after destroy (which
// waits until the peers let go: the simulation's rule check after destroy fails otherwise).
std::string registered_job(accord_comm_t c, int r, int n, int gpus, bool processes) {
  const std::string wrong = check_proto(plan_of(c), "direct");
  if (!wrong.empty()) return wrong;
  int dev = -1;
  accord_status_t s = accord_comm_device(c, &dev);
  if (s != ACCORD_SUCCESS) return api_error("accord_comm_device", c, s);
  const size_t a_bytes = 4096 + 64 * static_cast<size_t>(r), b_bytes = 1000;
  void* a = nullptr;
  void* b = nullptr;
  if ((s = accord_device_alloc(&a, a_bytes, dev)) != ACCORD_SUCCESS ||
      (s = accord_device_alloc(&b, b_bytes, dev)) != ACCORD_SUCCESS)
    return api_error("accord_device_alloc", c, s);
  g_free_after_destroy = b;
  std::vector<uint8_t> fill(a_bytes);
  for (size_t i = 0; i < a_bytes; ++i) fill[i] = pattern(r, i, 0);
  s = accord_device_memcpy(a, fill.data(), a_bytes);
  for (size_t i = 0; i < b_bytes; ++i) fill[i] = pattern(r, i, 1);
  if (s == ACCORD_SUCCESS) s = accord_device_memcpy(b, fill.data(), b_bytes);
  if (s == ACCORD_SUCCESS) s = accord_barrier(c, nullptr);
  if (s != ACCORD_SUCCESS) return api_error("filling the buffers", c, s);
  const size_t peers = processes ? static_cast<size_t>(n - 1) : 0;  // threads: pointers, nothing opened
  std::string f = expect_users(c, 0, 0, 0, "at init");
  void *h1 = nullptr, *h2 = nullptr, *h3 = nullptr;
  if (f.empty() && (s = accord_comm_register(c, static_cast<char*>(a) + 16, 512, &h1)) != ACCORD_SUCCESS)
    f = api_error("registering part of a", c, s);
  if (f.empty()) f = expect_users(c, 1, peers, 0, "after the first registration");
  if (f.empty() && (s = accord_comm_register(c, a, a_bytes, &h2)) != ACCORD_SUCCESS)
    f = api_error("registering all of a", c, s);
  if (f.empty()) f = expect_users(c, 2, peers, peers, "after registering a's allocation again");
  if (f.empty() && (s = accord_comm_register(c, r == 0 ? b : nullptr, r == 0 ? b_bytes : 0, &h3)) != ACCORD_SUCCESS)
    f = api_error("registering b on rank 0 only", c, s);
  if (f.empty()) f = expect_users(c, 3, r == 0 || !processes ? peers : peers + 1, peers, "after rank 0 registered b");
  if (f.empty() && (h1 == nullptr || h2 == nullptr || h3 == nullptr || h1 == h2 || h2 == h3))
    f = "the registrations' handles are null or equal";
  for (int p = 0; p < n && f.empty(); ++p) {
    if (processes || p == r) {
      f = check_mapped(c, h1, p, 16, 512, 0);
      if (f.empty()) f = check_mapped(c, h2, p, 0, 4096 + 64 * static_cast<size_t>(p), 0);
    }
    if (f.empty() && p == 0 && (processes || r == 0)) f = check_mapped(c, h3, 0, 0, b_bytes, 1);
    if (f.empty() && p != 0 && c->impl->registered_buffer(reinterpret_cast<uintptr_t>(h3), p) != nullptr)
      f = "rank " + std::to_string(p) + " registered nothing as b, yet a buffer is mapped";
  }
  if (!f.empty()) return f;
  std::vector<Case> cases;
  for (size_t count : {size_t{0}, size_t{1}, size_t{7}, kPrime, size_t{65537}})
    for (bool in_place : {false, true}) {
      cases.push_back(Case{Coll::kAllReduce, ACCORD_FLOAT32, ACCORD_SUM, count, in_place});
      cases.push_back(Case{Coll::kReduceScatter, ACCORD_INT32, ACCORD_MAX, count, in_place});
    }
  f = every_collective(c, r, n, gpus, cases);
  if (!f.empty()) return "with buffers registered: " + f;
  if ((s = accord_comm_deregister(c, h1)) != ACCORD_SUCCESS) return api_error("deregistering h1", c, s);
  if ((s = accord_comm_deregister(c, h2)) != ACCORD_SUCCESS) return api_error("deregistering h2", c, s);
  if ((s = accord_comm_deregister(c, h2)) == ACCORD_SUCCESS) return "deregistering h2 twice succeeded";
  f = expect_users(c, 1, r == 0 || !processes ? peers : peers + 1, peers, "after two deregistrations");
  if (!f.empty()) return f;
  // No peer maps a any more: freeing it now breaks no rule (checked after destroy).
  if ((s = accord_device_free(a)) != ACCORD_SUCCESS) return api_error("freeing a", c, s);
  return "";
}

// The count of calls the plan says the peers read from a registered input.
long direct_calls(accord_comm_t c) {
  const std::string line = users_line(c);
  const size_t at = line.find(" found open, ");
  return at == std::string::npos ? -1 : std::atol(line.c_str() + at + 13);
}

// Note [Registered inputs]: all-reduces whose input lies in a registered buffer, every dtype
// with sum and avg and three dtypes with max, min and prod, at sizes 1, 7, a prime and 40009
// (more than a round of a 64 KiB scratch), in and out of place, one element into the buffer
// (unaligned); first with every rank's input registered, then with the even ranks' only (the
// others register nothing at that point). Exact every time, and the plan counts exactly the
// calls of this rank whose input was registered, out of place (one-shot) or also in place
// (ACCORD_DEVICE_PROTO=twoshot), so a silent fallback to the scratch copy fails.
std::string registered_inputs_job(accord_comm_t c, int r, int n) {
  int dev = -1;
  accord_status_t s = accord_comm_device(c, &dev);
  if (s != ACCORD_SUCCESS) return api_error("accord_comm_device", c, s);
  const size_t most = 40009, es_most = 8, bytes = (most + 1) * es_most + 64;
  void *x = nullptr, *y = nullptr, *out = nullptr;
  accord_stream_t stream = nullptr;
  if ((s = accord_device_alloc(&x, bytes, dev)) != ACCORD_SUCCESS || (s = accord_device_alloc(&y, bytes, dev)) != ACCORD_SUCCESS ||
      (s = accord_device_alloc(&out, bytes, dev)) != ACCORD_SUCCESS || (s = accord_stream_create(&stream, dev)) != ACCORD_SUCCESS ||
      (s = accord_barrier(c, nullptr)) != ACCORD_SUCCESS)
    return api_error("allocating", c, s);
  const bool even = r % 2 == 0;
  void *hx = nullptr, *hy = nullptr;
  if ((s = accord_comm_register(c, x, bytes, &hx)) != ACCORD_SUCCESS ||
      (s = accord_comm_register(c, even ? y : nullptr, even ? bytes : 0, &hy)) != ACCORD_SUCCESS)
    return api_error("registering", c, s);
  // The waiting protocol keeps the scratch (Note [Registered inputs]); two-shot reads a
  // registered input in place too (the sizes here are one-shot's unless forced).
  const std::string plan = plan_of(c);
  const bool waiting = plan.find("GPU hand-offs: wait") != std::string::npos;
  const bool two_shot = plan.find("two-shot at every size") != std::string::npos;
  const long before = direct_calls(c);
  long want = before;
  std::string f;
  size_t seed = 0;
  for (void* buf : {x, y})
    for (size_t count : {size_t{1}, size_t{7}, kPrime, most})
      for (bool in_place : {false, true}) {
        std::vector<std::pair<accord_datatype_t, accord_red_op_t>> kinds;
        for (accord_datatype_t d : {ACCORD_INT8, ACCORD_UINT8, ACCORD_INT32, ACCORD_UINT32, ACCORD_INT64, ACCORD_UINT64,
                                    ACCORD_FLOAT16, ACCORD_BFLOAT16, ACCORD_FLOAT32, ACCORD_FLOAT64})
          for (accord_red_op_t op : {ACCORD_SUM, ACCORD_AVG}) kinds.push_back({d, op});
        for (accord_datatype_t d : {ACCORD_UINT8, ACCORD_INT32, ACCORD_FLOAT32})
          for (accord_red_op_t op : {ACCORD_MAX, ACCORD_MIN, ACCORD_PROD}) kinds.push_back({d, op});
        for (const auto& [dtype, op] : kinds) {
          const size_t es = accord_dtype_size(dtype);
          char* send = static_cast<char*>(buf) + es;  // one element in: unaligned
          void* recv = in_place ? static_cast<void*>(send) : out;
          std::vector<char> input(count * es), expect(count * es), got(count * es);
          fill_input(input.data(), count, dtype, op, r, n, ++seed);
          fill_expected(expect.data(), count, dtype, op, n, seed);
          const std::string name = std::string(buf == x ? "every rank registered" : "even ranks registered") +
                                   ", dtype " + std::to_string(dtype) + " op " + std::to_string(op) + " count " +
                                   std::to_string(count) + (in_place ? " in place" : " out of place");
          if ((s = accord_device_memcpy(send, input.data(), input.size())) != ACCORD_SUCCESS ||
              (s = accord_all_reduce(send, recv, count, dtype, op, c, stream)) != ACCORD_SUCCESS ||
              (s = accord_stream_synchronize(stream)) != ACCORD_SUCCESS ||
              (s = accord_device_memcpy(got.data(), recv, got.size())) != ACCORD_SUCCESS)
            return api_error(name, c, s);
          accord_status_t async = ACCORD_SUCCESS;
          (void)accord_comm_get_async_error(c, &async);
          if (async != ACCORD_SUCCESS) return api_error(name + " (asynchronous error)", c, async);
          const size_t bad = count_mismatches(got.data(), expect.data(), count, dtype);
          if (bad != 0) return name + ": " + std::to_string(bad) + " of " + std::to_string(count) + " elements wrong";
          if ((!in_place || two_shot) && (buf == x || even) && !waiting) ++want;
          // The next call overwrites this input: every rank is done with it (the end-of-round
          // exchange), which the exact results of the next call check.
        }
      }
  const long have = direct_calls(c);
  if (have != want)
    f = "the plan counts " + std::to_string(have) + " calls read from a registered input, expected " +
        std::to_string(want) + ": " + users_line(c);
  if (f.empty() && (s = accord_comm_deregister(c, hx)) != ACCORD_SUCCESS) f = api_error("deregistering x", c, s);
  if (f.empty() && (s = accord_comm_deregister(c, hy)) != ACCORD_SUCCESS) f = api_error("deregistering y", c, s);
  (void)accord_stream_destroy(stream);
  if (f.empty()) {
    (void)accord_device_free(x);
    (void)accord_device_free(y);
    (void)accord_device_free(out);
  }
  return f;
}

// Note [Registered inputs]: whether the peers read rank r's input of case k where it lies (where
// it may: registered, or any input of a job of threads), in a spinning direct job of n <= 8
// ranks whose plan is `plan`: an all-reduce two-shot (which form, as DirectEngine::choose
// decides) or out of place; a broadcast at its root; every other collective, in place too.
bool read_where_it_lies(const Case& k, int r, int n, const std::string& plan) {
  const bool one_shot = plan.find("one-shot at every size") != std::string::npos;
  const bool two_shot = plan.find("two-shot at every size") != std::string::npos;
  const size_t bytes = k.count * accord_dtype_size(k.dtype);
  switch (k.coll) {
    case Coll::kAllReduce:
      return two_shot || (!one_shot && n > 2 && bytes > (n <= 4 ? 512u << 10 : 256u << 10)) || !k.in_place;
    case Coll::kBroadcast:
      return r == k.root;
    default:
      return true;
  }
}

// Note [Registered inputs], every collective: every case of every_case (each collective, in
// place and out, unaligned, 1 element to more than a round) with both of the rank's buffers
// registered, exact (out of place, the input unchanged); and the plan counts exactly the calls
// the peers read from this rank's registered input (read_where_it_lies), so a silent fallback
// to the scratch copy fails. The waiting protocol's calls go through the scratch.
std::string registered_collectives_job(accord_comm_t c, int r, int n) {
  int dev = -1;
  accord_status_t s = accord_comm_device(c, &dev);
  if (s != ACCORD_SUCCESS) return api_error("accord_comm_device", c, s);
  const std::string plan = plan_of(c);
  const bool waiting = plan.find("GPU hand-offs: wait") != std::string::npos;  // keeps the scratch
  auto read_here = [&](const Case& k) { return !waiting && read_where_it_lies(k, r, n, plan); };
  accord_stream_t stream = nullptr;
  const std::vector<Case> cases = every_case(n);
  std::string f;
  {
    DeviceBuffers bufs;
    f = stream_and_buffers(c, dev, cases, n, &stream, &bufs);
    void *hin = nullptr, *hout = nullptr;
    if (f.empty() && ((s = accord_comm_register(c, bufs.in, bufs.in_bytes, &hin)) != ACCORD_SUCCESS ||
                      (s = accord_comm_register(c, bufs.out, bufs.out_bytes, &hout)) != ACCORD_SUCCESS))
      f = api_error("registering", c, s);
    long want = direct_calls(c);
    for (size_t i = 0; i < cases.size() && f.empty(); ++i) {
      f = run_case(c, stream, bufs, r, n, cases[i], i);
      if (read_here(cases[i])) ++want;
    }
    const long have = direct_calls(c);
    if (f.empty() && have != want)
      f = "the plan counts " + std::to_string(have) + " calls read from a registered input, expected " +
          std::to_string(want) + ": " + users_line(c);
    if (f.empty() && (s = accord_comm_deregister(c, hin)) != ACCORD_SUCCESS) f = api_error("deregistering in", c, s);
    if (f.empty() && (s = accord_comm_deregister(c, hout)) != ACCORD_SUCCESS) f = api_error("deregistering out", c, s);
    if (f.empty() && (s = accord_barrier(c, nullptr)) != ACCORD_SUCCESS) f = api_error("final barrier", c, s);
  }
  (void)accord_stream_destroy(stream);
  return f;
}

// `job` on 2, 3 and 4 processes sharing GPU 0 on the direct protocol, with the default scratch
// and a 64 KiB one (many rounds a call).
void on_gpu0_direct(const std::function<std::string(accord_comm_t, int, int)>& job, int timeout_s) {
  SharedGpuEnv env;
  for (const char* scratch : {"8388608", "65536"}) {
    ScopedEnv bytes("ACCORD_DIRECT_SCRATCH_BYTES", scratch);
    for (int n : {2, 3, 4})
      for (const auto& f : run_processes(n, [&](accord_comm_t c, int r, int nr) {
             const std::string wrong = check_proto(plan_of(c), "direct");
             return wrong.empty() ? job(c, r, nr) : wrong;
           }, timeout_s))
        ADD_FAILURE() << n << " ranks on GPU 0, ACCORD_DIRECT_SCRATCH_BYTES=" << scratch << ": " << f;
  }
}

TEST_F(GpuProcsProcesses, DirectRegisteredCollectivesExact) {
  if (const std::string why = not_direct(m_); !why.empty()) GTEST_SKIP() << why;
  on_gpu0_direct(registered_collectives_job, kTimeoutS);
}

TEST_F(GpuProcsProcesses, DirectRegisteredInputsExact) {
  if (const std::string why = not_direct(m_); !why.empty()) GTEST_SKIP() << why;
  on_gpu0_direct(registered_inputs_job, kTimeoutS);
}

class RegisteredBuffers {  // frees each rank's b after destroy, then checks the rules
 public:
  RegisteredBuffers() {
    set_after_destroy([] {
      (void)accord_device_free(g_free_after_destroy);
      g_free_after_destroy = nullptr;
      return no_rule_broken();
    });
  }
  ~RegisteredBuffers() { set_after_destroy(no_rule_broken); }
};

TEST_F(GpuProcsProcesses, DirectRegisteredBuffersMapped) {
  if (const std::string why = not_direct(m_); !why.empty()) GTEST_SKIP() << why;
  const int gpus = m_.gpus();
  SharedGpuEnv env;
  RegisteredBuffers after;
  for (int n : {2, 3, 4})
    for (const auto& f : run_processes(
             n, [&](accord_comm_t c, int r, int nr) {
               std::string failure = registered_job(c, r, nr, gpus, true);
               if (r == 1) usleep(200 * 1000);  // rank 0 destroys first, with b still mapped
               return failure;
             }, kTimeoutS))
      ADD_FAILURE() << n << " ranks on GPU 0: " << f;
}

// Registration is collective between processes: a rank at another registration call is named
// (here rank 1 registers while rank 0 deregisters), and one that makes no call at all (it
// destroys its communicator) fails the registration at once (Note [Departures]), not after
// ACCORD_TIMEOUT_MS.
TEST_F(GpuProcsProcesses, DirectRegistrationMismatchNamed) {
  if (const std::string why = not_direct(m_); !why.empty()) GTEST_SKIP() << why;
  SharedGpuEnv env;
  ScopedEnv timeout("ACCORD_TIMEOUT_MS", "60000");
  for (const auto& f : run_processes(2, [&](accord_comm_t c, int r, int) -> std::string {
         int dev = -1;
         (void)accord_comm_device(c, &dev);
         void* a = nullptr;
         accord_status_t s = accord_device_alloc(&a, 4096, dev);
         if (s == ACCORD_SUCCESS) s = accord_barrier(c, nullptr);
         if (s != ACCORD_SUCCESS) return api_error("allocating", c, s);
         void* h = nullptr;
         if ((s = accord_comm_register(c, a, 4096, &h)) != ACCORD_SUCCESS) return api_error("registering", c, s);
         void* h2 = nullptr;
         s = r == 0 ? accord_comm_deregister(c, h) : accord_comm_register(c, a, 4096, &h2);
         if (s == ACCORD_SUCCESS) return std::string("a mismatched registration succeeded");
         const std::string text = accord_last_error(c);
         const std::string want = r == 0 ? "rank 1 was registering" : "rank 0 was deregistering";
         if (text.find(want) == std::string::npos || text.find("collective on Accord") == std::string::npos)
           return "the error should say '" + want + "' and that registration is collective: " + text;
         // The communicator is broken (its ranks are at different calls): later calls say so.
         if ((s = accord_barrier(c, nullptr)) == ACCORD_SUCCESS) return std::string("a barrier after the mismatch succeeded");
         if (std::string(accord_last_error(c)).find(want) == std::string::npos)
           return "a call after the mismatch should repeat it: " + std::string(accord_last_error(c));
         g_free_after_destroy = a;  // still mapped by the peer: freed after destroy
         return std::string();
       }, kTimeoutS))
    ADD_FAILURE() << f;
  RegisteredBuffers after;
  for (const auto& f : run_processes(2, [&](accord_comm_t c, int r, int) -> std::string {
         if (r == 1) return std::string();  // destroys without registering
         int dev = -1;
         (void)accord_comm_device(c, &dev);
         void* a = nullptr;
         accord_status_t s = accord_device_alloc(&a, 4096, dev);
         if (s != ACCORD_SUCCESS) return api_error("allocating", c, s);
         g_free_after_destroy = a;
         const auto start = std::chrono::steady_clock::now();
         void* h = nullptr;
         s = accord_comm_register(c, a, 4096, &h);
         const auto waited = std::chrono::steady_clock::now() - start;
         if (s == ACCORD_SUCCESS) return std::string("registering without the peer succeeded");
         const std::string text = accord_last_error(c);
         if (text.find("collective on Accord") == std::string::npos)
           return "the error should say that registration is collective: " + text;
         if (waited > std::chrono::seconds(30)) return "the registration failed only after 30 s: " + text;
         return std::string();
       }, kTimeoutS))
    ADD_FAILURE() << "a peer that never registers: " << f;
}

// Note [Freeing memory peers map]: two processes of two ranks each (threads) on the shared
// GPU 0, each destroying its communicators one after the other from one thread. A rank that
// waited in destroy for the other process's ranks to let go deadlocked them: process 0's
// first destroy waited for rank 3, which process 1 destroys only after rank 2, whose destroy
// waited for rank 1. The FIFO protocol waited out ACCORD_TIMEOUT_MS that way and then left the
// memory allocated with a warning (the direct engine's scratch already went to the last rank
// of each process). Now the last rank of each process waits for both, once: no warning, and
// every free is one the simulation allows (no_rule_broken, after the destroys).
TEST_F(GpuProcsProcesses, SequentialDestroysInEachProcess) {
  const int gpus = m_.gpus();
  SharedGpuEnv env;
  ScopedEnv timeout("ACCORD_TIMEOUT_MS", "20000");  // the old deadlock's length: more than a slow call
  for (const char* proto : {"fifo", "auto", "staged"}) {
    ScopedEnv env_proto("ACCORD_DEVICE_PROTO", proto);
    LogFile log;
    for (const auto& f : run_process_groups(2, 2, [&](accord_comm_t c, int r, int n) {
           const std::vector<Case> cases = {Case{Coll::kAllReduce, ACCORD_FLOAT32, ACCORD_SUM, kPrime, false}};
           return every_collective(c, r, n, gpus, cases);
         }, kTimeoutS))
      ADD_FAILURE() << "ACCORD_DEVICE_PROTO=" << proto << ": " << f;
    const std::string text = log.text();
    EXPECT_EQ(text.find("has not let go"), std::string::npos) << "ACCORD_DEVICE_PROTO=" << proto << "; log:\n" << text;
  }
}

// A rank that waits in destroy for a peer to let go has already said it left (Note
// [Departures]): the peer, stuck in a call this rank never makes, fails at once instead of
// waiting ACCORD_TIMEOUT_MS (60 s here) while this rank waits for it.
TEST_F(GpuProcsProcesses, DestroyingRankHasDepartedWhileItWaits) {
  const int gpus = m_.gpus();
  SharedGpuEnv env;
  ScopedEnv timeout("ACCORD_TIMEOUT_MS", "60000");
  for (const auto& f : run_processes(2, [&](accord_comm_t c, int r, int n) {
         const std::vector<Case> cases = {Case{Coll::kAllReduce, ACCORD_INT32, ACCORD_SUM, 1, false}};
         std::string failure = every_collective(c, r, n, gpus, cases);
         if (r == 0 || !failure.empty()) return failure;
         const auto start = std::chrono::steady_clock::now();
         const accord_status_t s = accord_barrier(c, nullptr);  // rank 0 never calls it
         const auto waited = std::chrono::steady_clock::now() - start;
         if (s == ACCORD_SUCCESS) return std::string("the barrier succeeded without rank 0");
         if (waited > std::chrono::seconds(30))
           return "the barrier failed only after " +
                  std::to_string(std::chrono::duration_cast<std::chrono::seconds>(waited).count()) +
                  " s: " + accord_last_error(c);
         return std::string();
       }, kTimeoutS))
    ADD_FAILURE() << f;
}

// Note [Shared GPU sync], Note [Simulated time slices]: 2 and 4 processes on GPU 0 sliced as
// without MPS (the table made here, before the ranks fork). A kernel that spins on its peer's flag gets
// it only when its slice expires, so every all-reduce of the spinning protocol costs at least
// one expiry (the first kernel to run waits for the other, which cannot run before the slice
// changes). The waiting protocol's kernels never wait inside, and its streams wait without the
// slice: not one expiry, however many calls. auto picks it, as the plan says. Counts, not
// clocks.
std::string sliced_job(accord_comm_t c, int r, int n, int gpus, int calls, const char* want_sync) {
  const std::string plan = plan_of(c);
  if (plan.find(std::string("GPU hand-offs: ") + want_sync) == std::string::npos)
    return std::string("the plan should say 'GPU hand-offs: ") + want_sync + "'; plan:\n" + plan;
  std::vector<Case> cases;
  for (int i = 0; i < calls; ++i) cases.push_back(Case{Coll::kAllReduce, ACCORD_FLOAT32, ACCORD_SUM, kPrime, i % 2 == 0});
  return every_collective(c, r, n, gpus, cases);
}

// What a run did to GPU 0's time slices and the log, printed and checked: the processes'
// kernels took turns; spinning, at least `spin_expiries` slice expiries and exactly
// `spin_warnings` time-slice warnings (Note [Shared GPU warnings]: one from the lowest rank on
// the GPU of each host); waiting, neither.
void expect_slices(const std::string& where, const sim::SliceCounts& before, const sim::SliceCounts& after,
                   bool spin, uint64_t spin_expiries, size_t spin_warnings, const std::string& log) {
  const uint64_t expiries = after.expiries - before.expiries, switches = after.switches - before.switches;
  std::cout << where << ": " << expiries << " slice expiries, " << switches << " switches, "
            << after.yields - before.yields << " early yields\n";
  EXPECT_GT(switches, 0u) << where << ": the processes' kernels should have taken turns on GPU 0";
  if (spin)
    EXPECT_GE(expiries, spin_expiries) << where << ": spinning kernels should pay slice expiries (is the model on?)";
  else
    EXPECT_EQ(expiries, 0u) << where << ": a kernel waited for a peer inside its time slice";
  EXPECT_EQ(occurrences(log, "time-sliced as a GPU without MPS"), spin ? spin_warnings : 0u)
      << where << ": the log:\n" << log;
}

TEST_F(GpuProcsProcesses, SlicedSharedGpuHandOffsWithoutExpiries) {
  if (!all_direct(m_, 4, true)) GTEST_SKIP() << "the job would not use the direct protocol";
  std::string why;
  std::shared_ptr<sim::TimeSlices> table = sim::TimeSlices::process_table(&why);
  ASSERT_TRUE(table) << why;
  SharedGpuEnv env;
  ScopedEnv slice("ACCORD_SIM_TIMESLICE_US", "1000");
  constexpr int kCalls = 6;
  struct Run {
    const char* setting;  // ACCORD_SHARED_GPU_SYNC
    const char* want;     // what the plan must say
  };
  for (int n : {2, 4}) {
    for (const Run& run : {Run{"spin", "spin"}, Run{"auto", "wait"}, Run{"wait", "wait"}}) {
      ScopedEnv sync("ACCORD_SHARED_GPU_SYNC", run.setting);
      LogFile log;
      const sim::SliceCounts before = table->counts(0);
      auto job = [&](accord_comm_t c, int r, int nr) { return sliced_job(c, r, nr, m_.gpus(), kCalls, run.want); };
      for (const auto& f : run_processes(n, job, kTimeoutS))
        ADD_FAILURE() << n << " processes, ACCORD_SHARED_GPU_SYNC=" << run.setting << ": " << f;
      // The spinning protocol pays a slice expiry per all-reduce.
      expect_slices(std::to_string(n) + " processes, ACCORD_SHARED_GPU_SYNC=" + run.setting + ", " +
                        std::to_string(kCalls) + " all-reduces per rank",
                    before, table->counts(0), std::string(run.want) == "spin", kCalls, 1, log.text());
    }
  }
}

// Note [Waiting FIFOs]: the same on jobs that keep the FIFOs for every collective:
// ACCORD_DEVICE_PROTO=fifo (2 and 4 processes on GPU 0), and two hosts of two processes each
// (ACCORD_HOST_ID: pairs across hosts over TCP, GPU buffers staged through pinned host memory),
// every collective, one of them over several slots. Spinning, a FIFO kernel waits inside for its
// peer's and pays slice expiries; waiting (auto picks it), not one, and no time-slice warning.
TEST_F(GpuProcsProcesses, SlicedFifoJobsHandOffsWithoutExpiries) {
  std::string why;
  std::shared_ptr<sim::TimeSlices> table = sim::TimeSlices::process_table(&why);
  ASSERT_TRUE(table) << why;
  SharedGpuEnv env;
  ScopedEnv slice("ACCORD_SIM_TIMESLICE_US", "1000");
  std::vector<Case> cases;
  for (Coll coll : {Coll::kAllReduce, Coll::kReduceScatter, Coll::kAllGather, Coll::kBroadcast, Coll::kReduce})
    cases.push_back(Case{coll, ACCORD_FLOAT32, ACCORD_SUM, kPrime, coll == Coll::kAllReduce, 1});
  cases.push_back(Case{Coll::kAllReduce, ACCORD_INT32, ACCORD_SUM, kLarge, false});
  struct Form {
    const char* name;
    int n;
    bool two_hosts;
  };
  for (const Form& form : {Form{"ACCORD_DEVICE_PROTO=fifo", 2, false}, Form{"ACCORD_DEVICE_PROTO=fifo", 4, false},
                           Form{"two hosts", 4, true}}) {
    std::unique_ptr<ScopedEnv> fifo(form.two_hosts ? nullptr : new ScopedEnv("ACCORD_DEVICE_PROTO", "fifo"));
    for (const char* setting : {"spin", "auto", "wait"}) {
      ScopedEnv sync("ACCORD_SHARED_GPU_SYNC", setting);
      const std::string want = std::string(setting) == "spin" ? "spin" : "wait";
      const std::string where = std::to_string(form.n) + " processes, " + form.name + ", ACCORD_SHARED_GPU_SYNC=" + setting;
      LogFile log;
      const sim::SliceCounts before = table->counts(0);
      auto job = [&](accord_comm_t c, int r, int nr) -> std::string {
        const std::string plan = plan_of(c);
        if (plan.find("device protocol: fifo for every collective") == std::string::npos ||
            plan.find("GPU hand-offs: " + want) == std::string::npos)
          return "the plan should say 'device protocol: fifo' and 'GPU hand-offs: " + want + "'; plan:\n" + plan;
        return every_collective(c, r, nr, m_.gpus(), cases);
      };
      for (const auto& f : run_processes(form.n, job, kTimeoutS, [&](int r) {
             if (form.two_hosts) setenv("ACCORD_HOST_ID", r < 2 ? "host-a" : "host-b", 1);
           }))
        ADD_FAILURE() << where << ": " << f;
      expect_slices(where + ", " + std::to_string(cases.size()) + " collectives per rank", before, table->counts(0),
                    want == "spin", 1, form.two_hosts ? 2 : 1, log.text());
    }
  }
}

class GpuProcsThreads : public GpuProcs {
 protected:
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(GpuProcs::SetUp());
    g_runtime_started = true;
  }
};

TEST_F(GpuProcsThreads, EveryCollectiveExact) {
  const int gpus = m_.gpus();
  for (const auto& f : run_threads(
           gpus, [&](accord_comm_t c, int r, int n) { return every_collective(c, r, n, gpus); }))
    ADD_FAILURE() << f;
}

TEST_F(GpuProcsThreads, PlanTransportsFollowTheTopology) {
  for (const auto& f : run_threads(m_.gpus(), [&](accord_comm_t c, int r, int n) {
         return check_plan(m_, false, c, r, n);
       }))
    ADD_FAILURE() << f;
}

// A rank that allocates and frees device memory between collectives does not wait for the
// other ranks' streams (which are held until its own next collective): freeing waits only for
// its own GPU, as cudaFree. Used to deadlock until ACCORD_TIMEOUT_MS.
TEST_F(GpuProcsThreads, FreeBetweenCollectives) {
  for (const auto& f : run_threads(m_.gpus(), [&](accord_comm_t c, int r, int n) -> std::string {
         int dev = -1;
         accord_status_t s = accord_comm_device(c, &dev);
         if (s != ACCORD_SUCCESS) return api_error("accord_comm_device", c, s);
         accord_stream_t stream = nullptr;
         if ((s = accord_stream_create(&stream, dev)) != ACCORD_SUCCESS)
           return api_error("accord_stream_create", c, s);
         void* buf = nullptr;
         if ((s = accord_device_alloc(&buf, 64 * sizeof(int32_t), dev)) != ACCORD_SUCCESS)
           return api_error("accord_device_alloc", c, s);
         std::vector<int32_t> in(64, r + 1), out(64, 0);
         std::string failure;
         for (int round = 0; round < 3 && failure.empty(); ++round) {
           void* scratch = nullptr;
           if ((s = accord_device_alloc(&scratch, 64, dev)) != ACCORD_SUCCESS ||
               (s = accord_device_free(scratch)) != ACCORD_SUCCESS) {
             failure = api_error("alloc/free between collectives", c, s);
             break;
           }
           if ((s = accord_device_memcpy(buf, in.data(), in.size() * 4)) !=
                   ACCORD_SUCCESS ||
               (s = accord_all_reduce(buf, buf, 64, ACCORD_INT32, ACCORD_SUM, c, stream)) != ACCORD_SUCCESS ||
               (s = accord_stream_synchronize(stream)) != ACCORD_SUCCESS ||
               (s = accord_device_memcpy(out.data(), buf, out.size() * 4)) !=
                   ACCORD_SUCCESS) {
             failure = api_error("round " + std::to_string(round), c, s);
             break;
           }
           accord_status_t async = ACCORD_SUCCESS;
           (void)accord_comm_get_async_error(c, &async);
           if (async != ACCORD_SUCCESS) failure = api_error("round " + std::to_string(round), c, async);
           else if (out[0] != n * (n + 1) / 2 || out[63] != n * (n + 1) / 2)
             failure = "round " + std::to_string(round) + ": sum " + std::to_string(out[0]);
         }
         (void)accord_device_free(buf);
         (void)accord_stream_destroy(stream);
         return failure;
       }))
    ADD_FAILURE() << f;
}

TEST_F(GpuProcsThreads, RanksSharingOneGpu) {
  if (p2p_disabled()) GTEST_SKIP() << "with ACCORD_P2P_DISABLE=1 the pairs are host-staged";
  const int gpus = m_.gpus();
  SharedGpuEnv env;
  for (int n : {2, 4}) {
    LogFile log;
    for (const auto& f :
         run_threads(n, [&](accord_comm_t c, int r, int nr) { return shared_gpu(c, r, nr, gpus, "p2p"); }))
      ADD_FAILURE() << n << " ranks: " << f;
    // Note [Shared GPU warnings]: once, from rank 0, naming the ranks, the GPU and what to do.
    const std::string text = log.text();
    const std::string want =
        "rank 0: ranks " + rank_list(n) + " are threads of one process on GPU 0";
    EXPECT_EQ(occurrences(text, want), 1u) << n << " ranks; log:\n" << text;
    EXPECT_NE(text.find("CUDA_MODULE_LOADING=EAGER"), std::string::npos) << text;
    EXPECT_EQ(occurrences(text, "in different processes"), 0u) << text;
  }
}

// The direct cases with the ranks as threads of one process: plain pointers between them.
TEST_F(GpuProcsThreads, DirectAllReduceExact) {
  auto run = [](int n, const RankBody& body) { return run_threads(n, body); };
  for (int n : {2, 3}) direct_exact(m_, n, true, run);
  // 9 ranks: a fold of more sources than one move takes (Note [Folding in one pass]); the
  // direct form only (the staged form folds with the same code, and its cases are many more).
  // Not under ThreadSanitizer: 9 ranks' simulated kernels there take minutes. Point-to-point
  // FIFOs of 64 KiB, not 8 MiB: 72 pairs' worth of simulated GPU memory is real memory here.
  if (!kThreadSanitizer && expected_proto(m_, 9, true) != "staged") {
    ScopedEnv small("ACCORD_DEVICE_P2P_BYTES", "65536");
    direct_exact(m_, 9, true, run);
  }
  direct_exact(m_, 4, false, run);
}

// Note [Staged protocol]: a mismatched call of the other collectives is caught on the device
// (kDevBadTag: every rank writes its tag in every round, whatever it copies), not a hang or a
// wrong answer: 2 ranks on GPU 0 whose calls move the same bytes in the same rounds but differ
// (the broadcast's or the reduce's root, an all-gather against a broadcast). Each rank's
// asynchronous error is a mismatch naming its peer.
std::string staged_mismatch(accord_comm_t c, int r, int which) {
  int dev = -1;
  accord_status_t s = accord_comm_device(c, &dev);
  if (s != ACCORD_SUCCESS) return api_error("accord_comm_device", c, s);
  accord_stream_t stream = nullptr;
  void *in = nullptr, *out = nullptr;
  if ((s = accord_stream_create(&stream, dev)) != ACCORD_SUCCESS) return api_error("accord_stream_create", c, s);
  const size_t count = 1000;
  if ((s = accord_device_alloc(&in, count * 4, dev)) == ACCORD_SUCCESS) s = accord_device_alloc(&out, 2 * count * 4, dev);
  // Every rank has allocated before any calls (the simulation's allocations wait for the
  // process's streams: one rank's would wait for the other's call).
  if (s == ACCORD_SUCCESS) s = accord_barrier(c, nullptr);
  const char* what = which == 0 ? "broadcast, root 0 against root 1"
                     : which == 1 ? "reduce, root 0 against root 1"
                                  : "all_gather against broadcast";
  if (s == ACCORD_SUCCESS) {
    if (which == 0) s = accord_broadcast(in, out, count, ACCORD_FLOAT32, r, c, stream);
    else if (which == 1) s = accord_reduce(in, out, count, ACCORD_FLOAT32, ACCORD_SUM, r, c, stream);
    else if (r == 0) s = accord_all_gather(in, out, count, ACCORD_FLOAT32, c, stream);
    else s = accord_broadcast(in, out, count, ACCORD_FLOAT32, 0, c, stream);
  }
  if (s == ACCORD_SUCCESS) (void)accord_stream_synchronize(stream);
  accord_status_t async = ACCORD_SUCCESS;
  (void)accord_comm_get_async_error(c, &async);
  const std::string text = accord_last_error(c);
  std::string failure;
  if (s == ACCORD_SUCCESS && async == ACCORD_SUCCESS)
    failure = std::string(what) + ": the mismatched call succeeded";
  else if (s == ACCORD_SUCCESS && async != ACCORD_ERR_MISMATCH)
    failure = std::string(what) + ": expected a mismatch, got " + accord_status_string(async) + ": " + text;
  else if (text.find("rank " + std::to_string(1 - r)) == std::string::npos)
    failure = std::string(what) + ": the error does not name rank " + std::to_string(1 - r) + ": " + text;
  (void)accord_device_free(in);
  (void)accord_device_free(out);
  (void)accord_stream_destroy(stream);
  return failure;
}

TEST_F(GpuProcsThreads, DirectStagedMismatchCaught) {
  if (expected_proto(m_, 2, true) != "staged") GTEST_SKIP() << "the job would not be staged";
  SharedGpuEnv env;
  for (int which : {0, 1, 2})
    for (const auto& f : run_threads(2, [&](accord_comm_t c, int r, int) { return staged_mismatch(c, r, which); }))
      ADD_FAILURE() << f;
}

// Threads of one process address each other's pointers: registration exchanges and opens
// nothing (the plan says so), and the collectives stay exact.
TEST_F(GpuProcsThreads, DirectRegisteredBuffersAsPointers) {
  if (const std::string why = not_direct(m_); !why.empty()) GTEST_SKIP() << why;
  const int gpus = m_.gpus();
  SharedGpuEnv env;
  RegisteredBuffers after;
  for (int n : {2, 3})
    for (const auto& f : run_threads(n, [&](accord_comm_t c, int r, int nr) {
           std::string failure = registered_job(c, r, nr, gpus, false);
           if (failure.empty() && users_line(c).find("nothing exchanged") == std::string::npos)
             failure = "the plan should say that threads exchange nothing: " + users_line(c);
           return failure;
         }))
      ADD_FAILURE() << n << " ranks on GPU 0: " << f;
}

// The count of calls the plan says the peers read where they lie by address (-1: no such line).
long pointer_calls(accord_comm_t c) {
  const std::string plan = plan_of(c);
  const size_t at = plan.find("inputs read where they lie: ");
  if (at == std::string::npos) return -1;
  const size_t open = plan.find(" (", plan.find("bytes of input", at));
  return open == std::string::npos ? -1 : std::atol(plan.c_str() + open + 2);
}

// Note [Inputs read where they lie]: threads of one process on one GPU read each other's inputs
// by address, with no registration. With ACCORD_DIRECT_POINTER_MIN_BYTES=0 every case of
// every_case is exact (out of place, the input unchanged) and the plan counts exactly the
// calls read where they lie (read_where_it_lies), so a fallback to the scratch fails; with -1
// the plan says none; on GPUs of their own (`apart`), the plan has no such line.
std::string pointer_inputs_job(accord_comm_t c, int r, int n, bool never, bool apart) {
  int dev = -1;
  accord_status_t s = accord_comm_device(c, &dev);
  if (s != ACCORD_SUCCESS) return api_error("accord_comm_device", c, s);
  const std::string plan = plan_of(c);
  if (plan.find("GPU hand-offs: wait") != std::string::npos)  // keeps the scratch
    return plan.find("inputs read where they lie") == std::string::npos
               ? ""
               : "the waiting protocol keeps the scratch, but the plan says otherwise:\n" + plan;
  if (apart)
    return plan.find("inputs read where they lie") != std::string::npos
               ? "ranks on GPUs of their own keep the scratch, but the plan says otherwise:\n" + plan
               : "";
  if (never)
    return plan.find("inputs read where they lie: none (ACCORD_DIRECT_POINTER_MIN_BYTES=-1)") == std::string::npos
               ? "the plan should say that no input is read where it lies:\n" + plan
               : "";
  accord_stream_t stream = nullptr;
  const std::vector<Case> cases = every_case(n);
  std::string f;
  {
    DeviceBuffers bufs;
    f = stream_and_buffers(c, dev, cases, n, &stream, &bufs);
    long want = pointer_calls(c);
    if (f.empty() && want != 0) f = "before any call, the plan should count 0 calls read where they lie:\n" + plan;
    for (size_t i = 0; i < cases.size() && f.empty(); ++i) {
      f = run_case(c, stream, bufs, r, n, cases[i], i);
      if (read_where_it_lies(cases[i], r, n, plan)) ++want;
    }
    const long have = pointer_calls(c);
    if (f.empty() && have != want)
      f = "the plan counts " + std::to_string(have) + " calls read where they lie, expected " + std::to_string(want) +
          ":\n" + plan_of(c);
    if (f.empty() && (s = accord_barrier(c, nullptr)) != ACCORD_SUCCESS) f = api_error("final barrier", c, s);
  }
  (void)accord_stream_destroy(stream);
  return f;
}

TEST_F(GpuProcsThreads, DirectInputsReadWhereTheyLie) {
  if (const std::string why = not_direct(m_); !why.empty()) GTEST_SKIP() << why;
  for (const char* least : {"0", "-1"}) {
    ScopedEnv env_least("ACCORD_DIRECT_POINTER_MIN_BYTES", least);
    const bool never = std::string(least) == "-1";
    for (const char* scratch : {"65536", "8388608"}) {
      // Under ThreadSanitizer the many-round pass only: every case is slower there by ten.
      if (kThreadSanitizer && std::string(scratch) != "65536") continue;
      ScopedEnv bytes("ACCORD_DIRECT_SCRATCH_BYTES", scratch);
      {
        SharedGpuEnv env;
        auto job = [&](accord_comm_t c, int r, int nr) { return pointer_inputs_job(c, r, nr, never, false); };
        for (int n : {2, 3, 4})
          for (const auto& f : run_threads(n, job))
            ADD_FAILURE() << n << " ranks on GPU 0, ACCORD_DIRECT_POINTER_MIN_BYTES=" << least
                          << ", ACCORD_DIRECT_SCRATCH_BYTES=" << scratch << ": " << f;
      }
      // One rank a GPU, where every GPU peers with every other: the scratch (the plan's line).
      const int gpus = std::min(m_.gpus(), 4);
      auto apart = [&](accord_comm_t c, int r, int nr) { return pointer_inputs_job(c, r, nr, never, true); };
      if (gpus >= 2 && all_direct(m_, gpus, false) && std::string(scratch) == "8388608")
        for (const auto& f : run_threads(gpus, apart))
          ADD_FAILURE() << gpus << " ranks a GPU each, ACCORD_DIRECT_POINTER_MIN_BYTES=" << least
                        << ", ACCORD_DIRECT_SCRATCH_BYTES=" << scratch << ": " << f;
      if (never) break;  // -1: the plan's line is all it checks
    }
  }
}

TEST_F(GpuProcsThreads, RingAvoidsSlowHops) {
  for (const auto& f : run_threads(
           m_.gpus(), [&](accord_comm_t c, int r, int n) { return check_ring(m_, c, r, n); }))
    ADD_FAILURE() << f;
}

}  // namespace
}  // namespace accord::testing
