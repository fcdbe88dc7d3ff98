// Sends, receives and all-to-all of device buffers on simulated GPUs (ACCORD_SIM_TOPO), one
// communicator per rank (accord_comm_init_rank), the ranks as threads of this process or as
// forked processes, rank r on GPU r or every rank on GPU 0 (ACCORD_DEVICE=0); and
// pre-multiplied sums and averages of device buffers. Note [Point-to-point schedules].
//
// Checks, bit for bit: a ring of sends inside a group (rank r sends to r + 1 and receives from
// r - 1, the calls in either order), all-to-all as a group of a send to and a receive from
// every rank (itself included), several sends to one peer in one group with a send to and a
// receive from itself, and a send alone; sizes 0, 1, a prime, more than one 256 KiB FIFO slot
// and more than a whole FIFO (8 slots), where a group whose calls ran one after the other
// would deadlock (with ACCORD_DEVICE_P2P_BYTES small, many point-to-point FIFOs' worth too);
// nothing written outside the receive buffers. Mismatches: a receive of another count, a peer
// out of range, a send whose receive never comes (a timeout): errors that name the rank, the
// peer and the call, never a hang. The plan names the peers that send and receive on
// point-to-point FIFOs, and their slots (Note [Point-to-point FIFOs]).
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <csignal>
#include <new>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <iostream>
#include <string>
#include <vector>

#include "include/accord/accord.h"
#include "include/accord/accord_device.h"
#include "tests/gpu_path/elements.hpp"
#include "tests/support/harness.hpp"
#include "transport/device/sim_timeslice.hpp"

namespace accord::testing {
namespace {

constexpr size_t kSlotElems = (256 << 10) / 4;  // int32 elements in one default FIFO slot
// 0, 1, a prime, a prime above one slot, a prime above a whole FIFO (8 slots of 256 KiB: the
// collectives' FIFOs, which host-staged and TCP pairs send on; pairs on point-to-point FIFOs
// cycle theirs with ACCORD_DEVICE_P2P_BYTES=65536, the gpu_p2p_small_fifos_* tests).
const size_t kSizes[] = {0, 1, 1031, kSlotElems + 17,
                         kThreadSanitizer ? 4099 : 8 * kSlotElems + 77};
constexpr size_t kTail = 16;  // poisoned int32s after every receive buffer
// A default point-to-point FIFO (Note [Point-to-point FIFOs]: 8 MiB), in bytes and int32s.
constexpr size_t kP2pFifoBytes = size_t{8} << 20;
constexpr size_t kP2pFifoElems = kP2pFifoBytes / 4;
// This run's point-to-point FIFO: ACCORD_DEVICE_P2P_BYTES (plain bytes, as the meson tests set
// it), or the default.
size_t p2p_fifo_bytes() {
  const char* bytes = std::getenv("ACCORD_DEVICE_P2P_BYTES");
  return bytes != nullptr ? std::strtoull(bytes, nullptr, 10) : kP2pFifoBytes;
}
constexpr int32_t kPoison = static_cast<int32_t>(0xeeeeeeee);

std::string api_error(const std::string& what, accord_comm_t comm, accord_status_t s) {
  return what + ": " + accord_status_string(s) + ": " + accord_last_error(comm);
}

// The communicator's plan ("" if it cannot be read).
std::string plan_of(accord_comm_t comm) {
  size_t len = 0;
  accord_comm_plan(comm, nullptr, &len);
  std::string plan(len, '\0');
  if (accord_comm_plan(comm, plan.data(), &len) != ACCORD_SUCCESS) return "";
  return plan;
}

// Every rank is past its calls before any frees (freeing drains the simulated GPUs).
std::string final_barrier(accord_comm_t comm, accord_stream_t stream, const std::string& name) {
  accord_status_t s = accord_barrier(comm, stream);
  if (s == ACCORD_SUCCESS) s = accord_stream_synchronize(stream);
  return s == ACCORD_SUCCESS ? "" : api_error(name + ": final barrier", comm, s);
}

// body(stream, GPU) on this rank's GPU, with a stream of its own.
std::string on_own_stream(accord_comm_t comm,
                          const std::function<std::string(accord_stream_t, int)>& body) {
  int dev = -1;
  accord_status_t s = accord_comm_device(comm, &dev);
  if (s != ACCORD_SUCCESS) return api_error("accord_comm_device", comm, s);
  accord_stream_t stream = nullptr;
  if ((s = accord_stream_create(&stream, dev)) != ACCORD_SUCCESS)
    return api_error("accord_stream_create", comm, s);
  std::string failure = body(stream, dev);
  (void)accord_stream_destroy(stream);
  return failure;
}

// One call of a rank's pattern: a send to or a receive from `peer` of `count` int32s.
struct Call {
  bool send;
  int peer;
  size_t count;
};

// What rank `from` sends to rank `to` in its k-th send to it, element i.
int32_t word(int from, int to, size_t k, size_t i) {
  return static_cast<int32_t>(static_cast<size_t>(from) * 1000003u +
                              static_cast<size_t>(to) * 10007u + k * 101u + i);
}

// The patterns, each a list of calls per rank in call order.
using Pattern = std::vector<Call>;
Pattern ring(int r, int n, size_t count, bool recv_first) {
  Pattern p{{true, (r + 1) % n, count}, {false, (r + n - 1) % n, count}};
  if (recv_first) std::swap(p[0], p[1]);
  return p;
}
Pattern all_to_all(int, int n, size_t count) {
  Pattern p;
  for (int q = 0; q < n; ++q) {
    p.push_back({true, q, count});
    p.push_back({false, q, count});
  }
  return p;
}
// Two sends of different sizes to the next rank, two receives from the previous one, and a
// send to and a receive from itself, interleaved.
Pattern several(int r, int n, size_t count) {
  const size_t half = count / 2 + 1;
  return Pattern{{false, (r + n - 1) % n, count}, {true, r, half},
                 {true, (r + 1) % n, count},      {false, r, half},
                 {true, (r + 1) % n, half},       {false, (r + n - 1) % n, half}};
}

// Runs `calls` on this rank with device buffers (in a group unless `alone`), then checks every
// receive buffer and its poisoned tail.
std::string run_calls(accord_comm_t comm, accord_stream_t stream, int dev, int rank,
                      const Pattern& calls, bool alone, const std::string& name) {
  std::vector<size_t> at(calls.size());
  size_t total = 0;
  for (size_t j = 0; j < calls.size(); ++j) {
    at[j] = total;
    total += calls[j].count + kTail;
  }
  void* mem = nullptr;
  accord_status_t s = accord_device_alloc(&mem, std::max<size_t>(total, 1) * 4, dev);
  if (s != ACCORD_SUCCESS) return api_error(name + ": accord_device_alloc", nullptr, s);
  std::vector<int32_t> image(total, kPoison);
  std::vector<size_t> sends_to(64, 0), recvs_from(64, 0);
  std::vector<size_t> k_of(calls.size());
  for (size_t j = 0; j < calls.size(); ++j) {
    const Call& c = calls[j];
    k_of[j] = (c.send ? sends_to : recvs_from)[static_cast<size_t>(c.peer)]++;
    if (c.send)
      for (size_t i = 0; i < c.count; ++i) image[at[j] + i] = word(rank, c.peer, k_of[j], i);
  }
  std::string failure;
  // Every rank has its memory before any launches (allocation may wait for the GPU).
  s = accord_device_memcpy(mem, image.data(), total * 4);
  if (s == ACCORD_SUCCESS) s = accord_barrier(comm, nullptr);
  if (s != ACCORD_SUCCESS) failure = api_error(name + ": set up", comm, s);
  auto* base = static_cast<int32_t*>(mem);
  if (failure.empty() && !alone && (s = accord_group_start()) != ACCORD_SUCCESS)
    failure = api_error(name + ": group start", comm, s);
  for (size_t j = 0; j < calls.size() && failure.empty(); ++j) {
    const Call& c = calls[j];
    s = c.send ? accord_send(base + at[j], c.count, ACCORD_INT32, c.peer, comm, stream)
               : accord_recv(base + at[j], c.count, ACCORD_INT32, c.peer, comm, stream);
    if (s != ACCORD_SUCCESS)
      failure = api_error(
          name + ": " + (c.send ? "send to " : "recv from ") + std::to_string(c.peer), comm, s);
  }
  if (!alone && (s = accord_group_end()) != ACCORD_SUCCESS && failure.empty())
    failure = api_error(name + ": group end", comm, s);
  if (failure.empty() && (s = accord_stream_synchronize(stream)) != ACCORD_SUCCESS)
    failure = api_error(name + ": stream synchronize", comm, s);
  accord_status_t async = ACCORD_SUCCESS;
  if (failure.empty() && accord_comm_get_async_error(comm, &async) == ACCORD_SUCCESS &&
      async != ACCORD_SUCCESS)
    failure = api_error(name + " (asynchronous error)", comm, async);
  std::vector<int32_t> got(total);
  if (failure.empty() && (s = accord_device_memcpy(got.data(), mem, total * 4)) != ACCORD_SUCCESS)
    failure = api_error(name + ": copying out", comm, s);
  for (size_t j = 0; j < calls.size() && failure.empty(); ++j) {
    const Call& c = calls[j];
    for (size_t i = 0; i < c.count + kTail && failure.empty(); ++i) {
      const int32_t want =
          c.send || i >= c.count ? image[at[j] + i] : word(c.peer, rank, k_of[j], i);
      if (got[at[j] + i] != want)
        failure = name + ": call " + std::to_string(j) + " (" +
                  (c.send ? "send to " : "recv from ") + std::to_string(c.peer) + ", " +
                  std::to_string(c.count) + " elements): element " + std::to_string(i) + " is " +
                  std::to_string(got[at[j] + i]) + ", expected " + std::to_string(want);
    }
  }
  const std::string end = final_barrier(comm, stream, name);
  if (failure.empty()) failure = end;
  (void)accord_device_free(mem);
  return failure;
}

// Every pattern at every size on one rank.
std::string every_pattern(accord_comm_t comm, int rank, int n) {
  return on_own_stream(comm, [&](accord_stream_t stream, int dev) {
    std::string failure;
    const std::string ranks = std::to_string(n) + " ranks, ";
    for (size_t count : kSizes) {
      const std::string size = " of " + std::to_string(count);
      struct Named {
        std::string name;
        Pattern calls;
        bool alone;
      };
      std::vector<Named> cases = {
          {"ring" + size, ring(rank, n, count, false), false},
          {"ring, receives first" + size, ring(rank, n, count, true), false},
          {"all-to-all" + size, all_to_all(rank, n, count), false},
          {"several calls to one peer" + size, several(rank, n, count), false},
      };
      Pattern one;  // a send alone from rank 0 to rank n - 1, and its receive alone
      if (rank == 0) one.push_back({true, n - 1, count});
      if (rank == n - 1) one.push_back({false, 0, count});
      cases.push_back({"a send alone" + size, one, true});
      for (const Named& c : cases) {
        failure = run_calls(comm, stream, dev, rank, c.calls, c.alone, ranks + c.name);
        if (!failure.empty()) break;
      }
      if (!failure.empty()) break;
    }
    return failure;
  });
}

// ---- over TCP (Note [Device data over TCP]) ----

// Whether this rank's plan shows every pair with `peer`s in `tcp_peers` as TCP with GPU
// buffers staged, and every other pair with another route: "" or what differs.
std::string plan_routes(accord_comm_t comm, int rank, int n, const std::function<bool(int, int)>& over_tcp) {
  size_t len = 0;
  accord_comm_plan(comm, nullptr, &len);
  std::string plan(len, '\0');
  accord_status_t s = accord_comm_plan(comm, plan.data(), &len);
  if (s != ACCORD_SUCCESS) return api_error("accord_comm_plan", comm, s);
  for (int a = 0; a < n; ++a)
    for (int b = a + 1; b < n; ++b) {
      const std::string key = "pair " + std::to_string(a) + "-" + std::to_string(b) + ": ";
      const size_t at = plan.find(key);
      if (at == std::string::npos) return "rank " + std::to_string(rank) + ": the plan has no " + key + "\n" + plan;
      const std::string line = plan.substr(at + key.size(), plan.find('\n', at) - at - key.size());
      const bool staged = line.rfind("tcp (", 0) == 0 &&
                          line.find("GPU buffers staged through pinned host memory") != std::string::npos;
      if (staged != over_tcp(a, b))
        return key + "expected " + (over_tcp(a, b) ? "TCP with GPU buffers staged" : "a GPU route") +
               ", the plan says: " + line;
    }
  return "";
}

// Before a forked rank's init: every pair TCP, rank r on GPU r; or, where the parent has
// ACCORD_DEVICE set (a machine with one real GPU: scripts/gpu-check.sh's tcp2p2p step), every
// rank on that GPU.
void over_tcp_env(int r) {
  setenv("ACCORD_SHM_DISABLE", "1", 1);
  setenv("ACCORD_DEVICE", std::to_string(r).c_str(), 0);
}

// Byte i of what rank `from` sends to rank `to`: every byte value, shifted per pair.
uint8_t tcp_byte(int from, int to, size_t i) {
  return static_cast<uint8_t>(static_cast<size_t>(from) * 37u + static_cast<size_t>(to) * 11u + i + i / 251u);
}

// A ring in a group (send to r + 1, receive from r - 1) of `count` elements of `dt`, checked byte
// for byte with a poisoned tail: the sizes that cut the TCP staging path's messages and pieces.
std::string ring_bytes(accord_comm_t comm, accord_stream_t stream, int dev, int rank, int n,
                       accord_datatype_t dt, size_t count) {
  const size_t es = accord_dtype_size(dt), bytes = count * es, tail = 64;
  const int to = (rank + 1) % n, from = (rank + n - 1) % n;
  const std::string name = std::to_string(n) + " ranks, ring of " + std::to_string(count) + " x dtype " +
                           std::to_string(dt) + " (" + std::to_string(bytes) + " bytes)";
  void *din = nullptr, *dout = nullptr;
  accord_status_t s = accord_device_alloc(&din, bytes + 1, dev);
  if (s == ACCORD_SUCCESS) s = accord_device_alloc(&dout, bytes + tail, dev);
  std::vector<uint8_t> in(bytes + 1), out(bytes + tail, 0xee);
  for (size_t i = 0; i < bytes; ++i) in[i] = tcp_byte(rank, to, i);
  if (s == ACCORD_SUCCESS) s = accord_device_memcpy(din, in.data(), in.size());
  if (s == ACCORD_SUCCESS) s = accord_device_memcpy(dout, out.data(), out.size());
  if (s == ACCORD_SUCCESS) s = accord_barrier(comm, nullptr);
  std::string failure;
  if (s != ACCORD_SUCCESS) failure = api_error(name + ": set up", comm, s);
  if (failure.empty()) {
    s = accord_group_start();
    if (s == ACCORD_SUCCESS) s = accord_recv(dout, count, dt, from, comm, stream);
    if (s == ACCORD_SUCCESS) s = accord_send(din, count, dt, to, comm, stream);
    const accord_status_t end = accord_group_end();
    if (s == ACCORD_SUCCESS) s = end;
    if (s == ACCORD_SUCCESS) s = accord_stream_synchronize(stream);
    accord_status_t async = ACCORD_SUCCESS;
    if (s == ACCORD_SUCCESS) s = accord_comm_get_async_error(comm, &async);
    if (s == ACCORD_SUCCESS) s = async;
    if (s != ACCORD_SUCCESS) failure = api_error(name, comm, s);
  }
  if (failure.empty() && (s = accord_device_memcpy(out.data(), dout, out.size())) != ACCORD_SUCCESS)
    failure = api_error(name + ": copying out", comm, s);
  for (size_t i = 0; i < bytes + tail && failure.empty(); ++i) {
    const uint8_t want = i < bytes ? tcp_byte(from, rank, i) : 0xee;
    if (out[i] != want)
      failure = name + ": byte " + std::to_string(i) + " is " + std::to_string(out[i]) + ", expected " +
                std::to_string(want) + (i >= bytes ? " (written past the receive buffer)" : "");
  }
  const std::string end = final_barrier(comm, stream, name);
  if (failure.empty()) failure = end;
  (void)accord_device_free(din);
  (void)accord_device_free(dout);
  return failure;
}

// Every dtype at the sizes that cut the staging path: 0, 1, 7 (unaligned bytes), a prime,
// exactly one FIFO slot (the staging path's chunk), one element more, and many slots.
// Note [Point-to-point FIFOs]: the plan's line of sends and receives, for rank `rank` of `n` on
// GPUs 0..n-1 (as threads or processes): every peer that can address this rank's GPU (on the
// DGX-1's GPUs 0-3, all; on tf4, the other GPU of this rank's half; none with
// ACCORD_P2P_DISABLE=1) on point-to-point FIFOs of 4 slots of a quarter of
// ACCORD_DEVICE_P2P_BYTES (8 MiB by default), the others on the collectives' FIFOs (8 x 256
// KiB). "" or what differs.
std::string p2p_fifo_plan(accord_comm_t comm, int rank, int n) {
  auto env_is = [](const char* name, const char* value) {
    const char* v = std::getenv(name);
    return v != nullptr && std::string(v) == value;
  };
  const bool off = env_is("ACCORD_P2P_DISABLE", "1");
  const bool tf4 = env_is("ACCORD_TEST_TOPO", "tf4");
  const size_t slot_kib = p2p_fifo_bytes() / 4 >> 10;
  int mine = 0;
  for (int q = 0; q < n; ++q)
    if (q != rank && !off && (!tf4 || (q < 2) == (rank < 2))) ++mine;
  std::string want = "sends and receives of GPU buffers: " + std::to_string(mine) + (mine == 1 ? " peer" : " peers") +
                     " on FIFOs of 4 x " + std::to_string(slot_kib) + " KiB in GPU memory (ACCORD_DEVICE_P2P_BYTES)";
  if (n - 1 - mine > 0)
    want += ", " + std::to_string(n - 1 - mine) + " on the collectives' FIFOs of 8 x 256 KiB (host-staged or TCP)";
  const std::string plan = plan_of(comm);
  const size_t at = plan.find("sends and receives of GPU buffers: ");
  const std::string line = at == std::string::npos ? "(none)" : plan.substr(at, plan.find('\n', at) - at);
  if (line != want) return "rank " + std::to_string(rank) + ": the plan's line is\n  " + line + "\nexpected\n  " + want;
  return "";
}

std::string every_dtype_and_size(accord_comm_t comm, int rank, int n) {
  return on_own_stream(comm, [&](accord_stream_t stream, int dev) {
    const size_t slot = 256 << 10;
    for (accord_datatype_t dt : {ACCORD_INT8, ACCORD_UINT8, ACCORD_INT32, ACCORD_UINT32, ACCORD_INT64,
                                 ACCORD_UINT64, ACCORD_FLOAT16, ACCORD_FLOAT32, ACCORD_FLOAT64, ACCORD_BFLOAT16}) {
      const size_t es = accord_dtype_size(dt);
      std::vector<size_t> counts = {0, 1, 7, 1031, slot / es, slot / es + 1};
      // Many slots for a few dtypes (the bytes, not the dtype, decide the cutting).
      if (dt == ACCORD_UINT8 || dt == ACCORD_FLOAT32 || dt == ACCORD_BFLOAT16)
        counts.push_back((kThreadSanitizer ? 3 : 19) * slot / es + 3);
      for (size_t count : counts) {
        std::string failure = ring_bytes(comm, stream, dev, rank, n, dt, count);
        if (!failure.empty()) return failure;
      }
    }
    return std::string();
  });
}

// Rank 0 sends 1000 int32s of `buf` to rank 1, which receives 999: the receiver's asynchronous
// error is a mismatch naming it, the peer and the call; the sender's call succeeds. "" or what
// differs.
std::string short_receive(accord_comm_t comm, int rank, accord_stream_t stream, void* buf) {
  accord_status_t s = ACCORD_SUCCESS;
  if (rank == 0) s = accord_send(buf, 1000, ACCORD_INT32, 1, comm, stream);
  if (rank == 1) s = accord_recv(buf, 999, ACCORD_INT32, 0, comm, stream);
  if (s == ACCORD_SUCCESS) s = accord_stream_synchronize(stream);
  accord_status_t async = ACCORD_SUCCESS;
  (void)accord_comm_get_async_error(comm, &async);
  const std::string text = accord_last_error(comm);
  if (rank == 1 && (async != ACCORD_ERR_MISMATCH || text.find("rank 1") == std::string::npos ||
                    text.find("peer rank 0") == std::string::npos || text.find("recv") == std::string::npos ||
                    text.find("same count and dtype") == std::string::npos))
    return std::string("a receive of 999 for a send of 1000: ") + accord_status_string(async) + ": " + text;
  if (rank == 0 && async != ACCORD_SUCCESS) return "the sender of 1000 elements: " + text;
  return "";
}

// A word shared by forked ranks (made before the fork).
struct SharedWord {
  SharedWord() {
    void* p = mmap(nullptr, sizeof(std::atomic<int>), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    word = p == MAP_FAILED ? nullptr : new (p) std::atomic<int>(0);
  }
  ~SharedWord() {
    if (word != nullptr) munmap(word, sizeof(std::atomic<int>));
  }
  // Waits up to 60 s for the word to be set.
  void wait() const {
    for (int i = 0; i < 60000 && word->load() == 0; ++i) usleep(1000);
  }
  std::atomic<int>* word;
};

// A mismatch over TCP: a receive of fewer elements than the send; the receiver's asynchronous
// error names it, the peer and the call. The sender stays until the receiver has looked (its
// exit would otherwise race the kernel's check: a closed peer is an error of its own).
std::string tcp_mismatches(accord_comm_t comm, int rank, const SharedWord& checked) {
  return on_own_stream(comm, [&](accord_stream_t stream, int dev) -> std::string {
    void* buf = nullptr;
    accord_status_t s = accord_device_alloc(&buf, 4000, dev);
    if (s == ACCORD_SUCCESS) s = accord_barrier(comm, nullptr);
    if (s != ACCORD_SUCCESS) return api_error("set up", comm, s);
    std::string failure = short_receive(comm, rank, stream, buf);
    if (!failure.empty()) failure = "over TCP: " + failure;
    if (rank == 1) checked.word->store(1);
    if (rank == 0) checked.wait();
    (void)accord_device_free(buf);
    return failure;
  });
}

// Rank 0's send to (or receive from) rank 1 of `count` int32s of `buf`, which it then frees:
// the communicator's asynchronous error once the stream is through, and *text its last error.
accord_status_t one_call_to_rank1(accord_comm_t comm, accord_stream_t stream, void* buf, size_t count, bool send,
                                  std::string* text) {
  accord_status_t s = send ? accord_send(buf, count, ACCORD_INT32, 1, comm, stream)
                           : accord_recv(buf, count, ACCORD_INT32, 1, comm, stream);
  if (s == ACCORD_SUCCESS) s = accord_stream_synchronize(stream);
  accord_status_t async = ACCORD_SUCCESS;
  (void)accord_comm_get_async_error(comm, &async);
  *text = accord_last_error(comm);
  (void)accord_device_free(buf);
  return async;
}

// ---- pre-multiplied sums and averages of device buffers ----

double input(int r, size_t i) { return static_cast<double>(1 + r + static_cast<int>(i % 7)); }
double scalar_of(int r) { return static_cast<double>(1 << (r % 3)); }  // 1, 2, 4: exact

enum class Red { kAllReduce, kReduceScatter, kReduce };

// One reducing collective on device buffers with op `how` (0: avg; 1: pre-multiplied sum,
// scalar on the host; 2: the same, scalar in device memory), checked exactly.
std::string premul_case(accord_comm_t comm, accord_stream_t stream, int dev, int rank, int n,
                        Red red, accord_datatype_t dt, int how, size_t count, bool in_place) {
  const std::string name = std::string(red == Red::kAllReduce ? "all_reduce"
                                       : red == Red::kReduce  ? "reduce"
                                                              : "reduce_scatter") +
                           (how == 0   ? " avg"
                            : how == 1 ? " premul (host scalar)"
                                       : " premul (device scalar)") +
                           " dtype " + std::to_string(dt) + " count " + std::to_string(count) +
                           (in_place ? " in place" : "");
  const size_t es = accord_dtype_size(dt), nn = static_cast<size_t>(n);
  const size_t in_count = red == Red::kReduceScatter ? count * nn : count;
  std::vector<uint8_t> in(in_count * es + 8), scalar(8);
  bool known = put_element(dt, scalar.data(), 0, scalar_of(rank));
  for (size_t i = 0; known && i < in_count; ++i) known = put_element(dt, in.data(), i, input(rank, i));
  if (!known) return name + ": dtype not handled by the test";
  void *din = nullptr, *dout = nullptr, *dscalar = nullptr;
  accord_status_t s = accord_device_alloc(&din, in.size(), dev);
  if (s == ACCORD_SUCCESS) s = accord_device_alloc(&dout, in.size(), dev);
  if (s == ACCORD_SUCCESS) s = accord_device_alloc(&dscalar, 8, dev);
  if (s == ACCORD_SUCCESS) s = accord_device_memcpy(din, in.data(), in.size());
  if (s == ACCORD_SUCCESS) s = accord_device_memcpy(dscalar, scalar.data(), 8);
  std::vector<uint8_t> zero(in.size(), 0);
  if (s == ACCORD_SUCCESS) s = accord_device_memcpy(dout, zero.data(), zero.size());
  accord_red_op_t op = ACCORD_AVG;
  if (s == ACCORD_SUCCESS && how == 1)
    s = accord_red_op_create_pre_mul_sum(&op, scalar.data(), dt, ACCORD_SCALAR_HOST_IMMEDIATE,
                                         comm);
  if (s == ACCORD_SUCCESS && how == 2)
    s = accord_red_op_create_pre_mul_sum(&op, dscalar, dt, ACCORD_SCALAR_DEVICE, comm);
  if (s == ACCORD_SUCCESS) s = accord_barrier(comm, nullptr);
  std::string failure;
  if (s != ACCORD_SUCCESS) failure = api_error(name + ": set up", comm, s);
  auto* dinb = static_cast<uint8_t*>(din);
  void* recv =
      in_place ? (red == Red::kReduceScatter ? dinb + static_cast<size_t>(rank) * count * es : din)
               : dout;
  if (failure.empty()) {
    const int root = n - 1;
    s = red == Red::kAllReduce ? accord_all_reduce(din, recv, count, dt, op, comm, stream)
        : red == Red::kReduce  ? accord_reduce(din, recv, count, dt, op, root, comm, stream)
                               : accord_reduce_scatter(din, recv, count, dt, op, comm, stream);
    if (s == ACCORD_SUCCESS) s = accord_stream_synchronize(stream);
    accord_status_t async = ACCORD_SUCCESS;
    if (s == ACCORD_SUCCESS) s = accord_comm_get_async_error(comm, &async);
    if (s == ACCORD_SUCCESS) s = async;
    if (s != ACCORD_SUCCESS) failure = api_error(name, comm, s);
    std::vector<uint8_t> got(count * es + 8);
    if (failure.empty() &&
        (s = accord_device_memcpy(got.data(), recv, count * es)) != ACCORD_SUCCESS)
      failure = api_error(name + ": copying out", comm, s);
    const bool check = red != Red::kReduce || rank == root;
    for (size_t i = 0; i < count && failure.empty() && check; ++i) {
      const size_t at = red == Red::kReduceScatter ? static_cast<size_t>(rank) * count + i : i;
      double want = 0;
      for (int q = 0; q < n; ++q) want += (how == 0 ? 1 : scalar_of(q)) * input(q, at);
      if (how == 0) want = dt == ACCORD_INT32 ? std::trunc(want / n) : want / n;
      if (get_element(dt, got.data(), i) != want)
        failure = name + ": element " + std::to_string(i) + " is " +
                  std::to_string(get_element(dt, got.data(), i)) + ", expected " + std::to_string(want);
    }
  }
  if (how != 0) (void)accord_red_op_destroy(op, comm);
  const std::string end = final_barrier(comm, stream, name);
  if (failure.empty()) failure = end;
  (void)accord_device_free(din);
  (void)accord_device_free(dout);
  (void)accord_device_free(dscalar);
  return failure;
}

std::string every_premul(accord_comm_t comm, int rank, int n) {
  return on_own_stream(comm, [&](accord_stream_t stream, int dev) {
    std::string failure;
    for (size_t count : {size_t{1}, size_t{1031}, kSlotElems + 17})
      for (Red red : {Red::kAllReduce, Red::kReduceScatter, Red::kReduce})
        for (accord_datatype_t dt : {ACCORD_FLOAT32, ACCORD_INT32, ACCORD_FLOAT64})
          for (int how : {0, 1, 2})
            for (bool in_place : {false, true})
              if (failure.empty())
                failure = premul_case(comm, stream, dev, rank, n, red, dt, how, count, in_place);
    return failure;
  });
}

// ---- processes sharing a time-sliced GPU (Note [Shared GPU sync], Note [Simulated time slices]) ----

// `calls` pre-multiplied sums (all-reduce, reduce-scatter, reduce in turn; the scalar on the
// host and in device memory), exact; the plan must show the waiting protocol.
// The plan's hand-offs line of a job whose sends and receives wait at stream level: the
// waiting protocol's (direct, or on the FIFOs: ACCORD_DEVICE_PROTO=fifo), or
// (ACCORD_P2P_DISABLE=1: host-staged pairs) the staged protocol's.
bool p2p_waits_in_plan(const std::string& plan) {
  return plan.find("GPU hand-offs: wait: kernels never wait on a peer, the stream waits between them (") !=
             std::string::npos ||
         plan.find("GPU hand-offs: staged: the collectives' kernels never wait on a peer, the stream copies and waits "
                   "between them; sends and receives on the FIFOs wait at stream level too") != std::string::npos;
}

std::string sliced_premul(accord_comm_t comm, int rank, int n, int calls) {
  const std::string plan = plan_of(comm);
  if (!p2p_waits_in_plan(plan)) return "the plan should say that every hand-off waits at stream level; plan:\n" + plan;
  return on_own_stream(comm, [&](accord_stream_t stream, int dev) {
    std::string failure;
    const Red reds[] = {Red::kAllReduce, Red::kReduceScatter, Red::kReduce};
    for (int k = 0; k < calls && failure.empty(); ++k)
      failure = premul_case(comm, stream, dev, rank, n, reds[k % 3], ACCORD_FLOAT32, 1 + k % 2, 1031, k % 2 == 0);
    return failure;
  });
}

// `calls` exchanges between ranks 0 and 1, each a group of a send to and a receive from the
// peer (one kernel a rank when it spins), then as many ping-pongs (rank 0 sends, then
// receives; rank 1 the other way round; calls alone), checked exactly; the plan must say that
// sends and receives hand off through the stream.
std::string sliced_exchanges(accord_comm_t comm, int rank, int, int calls) {
  const std::string plan = plan_of(comm);
  if (!p2p_waits_in_plan(plan)) return "the plan should say that sends and receives wait at stream level; plan:\n" + plan;
  return on_own_stream(comm, [&](accord_stream_t stream, int dev) {
    std::string failure;
    const int peer = 1 - rank;
    for (int k = 0; k < calls && failure.empty(); ++k)
      failure = run_calls(comm, stream, dev, rank, Pattern{{true, peer, 1031}, {false, peer, 1031}}, false,
                          "exchange " + std::to_string(k));
    for (int k = 0; k < calls && failure.empty(); ++k) {
      Pattern p{{true, peer, 1031}, {false, peer, 1031}};
      if (rank == 1) std::swap(p[0], p[1]);
      failure = run_calls(comm, stream, dev, rank, p, true, "ping-pong " + std::to_string(k));
    }
    return failure;
  });
}

// ---- tests ----

// The device runtime is chosen once per process and its simulated streams are threads: forked
// ranks come before any thread test starts it (meson runs the two kinds as separate tests).
class GpuP2pProcesses : public ::testing::Test {
 protected:
  void SetUp() override {
    if (kThreadSanitizer) GTEST_SKIP() << "processes share no memory ThreadSanitizer can see";
  }
};
class GpuP2pThreads : public ::testing::Test {};

TEST_F(GpuP2pProcesses, EveryPatternExact) {
  for (int n : {2, 3, 4})
    for (const auto& f : run_processes(n, every_pattern, 300))
      ADD_FAILURE() << n << " ranks: " << f;
}

TEST_F(GpuP2pProcesses, EveryPatternOnOneGpu) {
  ScopedEnv one("ACCORD_DEVICE", "0");
  for (int n : {2, 3})
    for (const auto& f : run_processes(n, every_pattern, 300))
      ADD_FAILURE() << n << " ranks: " << f;
}

TEST_F(GpuP2pProcesses, PreMulSumAndAvgExact) {
  for (const auto& f : run_processes(3, every_premul, 300)) ADD_FAILURE() << f;
}

// 2 processes on GPU 0 sliced as without MPS (the table made here, before the ranks fork), with
// the waiting protocol. A pre-multiplied sum hands off through the stream, as the other
// collectives do, and so do sends and receives (Note [Waiting point-to-point]): not one slice
// expiry. On the FIFO kernel, which both used before, a call whose first kernel waits inside
// for the other process's pays an expiry: every all-reduce, every grouped exchange. Counts,
// not clocks.
TEST_F(GpuP2pProcesses, SlicedSharedGpuWithoutExpiries) {
  std::string why;
  const std::shared_ptr<sim::TimeSlices> table = sim::TimeSlices::process_table(&why);
  ASSERT_TRUE(table) << why;
  ScopedEnv one("ACCORD_DEVICE", "0");
  ScopedEnv slice("ACCORD_SIM_TIMESLICE_US", "1000");
  ScopedEnv sync("ACCORD_SHARED_GPU_SYNC", "wait");
  constexpr int kCalls = 6;
  sim::SliceCounts before = table->counts(0);
  for (const auto& f : run_processes(2, [](accord_comm_t c, int r, int n) { return sliced_premul(c, r, n, kCalls); },
                                     300))
    ADD_FAILURE() << "pre-multiplied sums: " << f;
  sim::SliceCounts after = table->counts(0);
  std::cout << kCalls << " pre-multiplied sums: " << after.expiries - before.expiries << " slice expiries, "
            << after.switches - before.switches << " switches\n";
  EXPECT_GT(after.switches - before.switches, 0u) << "the processes' kernels should have taken turns on GPU 0";
  EXPECT_EQ(after.expiries - before.expiries, 0u) << "a pre-multiplied sum's kernel waited for a peer inside";
  before = after;
  for (const auto& f : run_processes(
           2, [](accord_comm_t c, int r, int n) { return sliced_exchanges(c, r, n, kCalls); }, 300))
    ADD_FAILURE() << "exchanges: " << f;
  after = table->counts(0);
  std::cout << kCalls << " exchanges and ping-pongs: " << after.expiries - before.expiries << " slice expiries, "
            << after.switches - before.switches << " switches\n";
  EXPECT_GT(after.switches - before.switches, 0u) << "the processes' kernels should have taken turns on GPU 0";
  EXPECT_EQ(after.expiries - before.expiries, 0u) << "a send or receive kernel waited for a peer inside";
}

// Note [Waiting point-to-point]: a stream waiting for a peer that never sends (stopped) or has
// died ends with an error naming it, at ACCORD_TIMEOUT_MS or at the death, not a hang: the
// watchdog writes the words the stream waits on. A receive waits for the message; a send of
// more than the FIFO's 8 slots waits for a free slot. (The simulation's stall limit is set
// above the test's timeout, so only the watchdog can end the wait.)
TEST_F(GpuP2pProcesses, SlicedWaitEndsWhenAPeerStopsOrDies) {
  std::string why;
  ASSERT_TRUE(sim::TimeSlices::process_table(&why)) << why;
  ScopedEnv one("ACCORD_DEVICE", "0");
  ScopedEnv slice("ACCORD_SIM_TIMESLICE_US", "1000");
  ScopedEnv sync("ACCORD_SHARED_GPU_SYNC", "wait");
  ScopedEnv stall("ACCORD_SIM_STALL_MS", "600000");
  ScopedEnv timeout("ACCORD_TIMEOUT_MS", "3000");
  for (bool killed : {false, true})
    for (bool send : {false, true}) {
      const std::string what = std::string(killed ? "killed" : "stopped") + " peer, " + (send ? "send" : "receive");
      for (const auto& f : run_processes(
               2,
               [&](accord_comm_t comm, int rank, int) -> std::string {
                 return on_own_stream(comm, [&](accord_stream_t stream, int dev) -> std::string {
                   const size_t count = kP2pFifoElems + 9 * kSlotElems;  // more than either FIFO
                   void* buf = nullptr;
                   accord_status_t s = accord_device_alloc(&buf, count * 4, dev);
                   if (s == ACCORD_SUCCESS) s = accord_barrier(comm, nullptr);
                   if (s != ACCORD_SUCCESS) return api_error("set up", comm, s);
                   if (rank == 1) {
                     if (killed) raise(SIGKILL);
                     sleep(6);
                     (void)accord_device_free(buf);
                     return std::string();
                   }
                   std::string text;
                   const accord_status_t async = one_call_to_rank1(comm, stream, buf, count, send, &text);
                   if (async == ACCORD_SUCCESS || text.find("rank 1") == std::string::npos ||
                       (!killed && async != ACCORD_ERR_TIMEOUT))
                     return what + ": " + accord_status_string(async) + ": " + text;
                   return std::string();
                 });
               },
               120))
        if (!killed || f.rfind("rank 1: ", 0) != 0 || f.find("killed by signal 9") == std::string::npos)
          ADD_FAILURE() << what << ": " << f;
    }
}

TEST_F(GpuP2pThreads, EveryPatternExact) {
  for (int n : {2, 3, 4})
    for (const auto& f : run_threads(n, every_pattern)) ADD_FAILURE() << n << " ranks: " << f;
}

TEST_F(GpuP2pThreads, PlanNamesPointToPointFifos) {
  for (int n : {2, 4})
    for (const auto& f : run_threads(n, p2p_fifo_plan)) ADD_FAILURE() << n << " ranks: " << f;
}

// Note [Copy-engine messages]: with every pair host-staged (ACCORD_P2P_DISABLE=1: the staged
// protocol, whose hand-offs wait at stream level), sends and receives of 64 KiB or more through
// the FIFOs in shared memory are moved by copy engines, every pattern exact, and the plan
// counts them; with ACCORD_P2P_COPY_MIN_BYTES=-1 the kernel moves them, as the plan says; a
// job that spins on the FIFOs (ACCORD_DEVICE_PROTO=fifo, ACCORD_SHARED_GPU_SYNC=spin) keeps
// the kernel's loads and stores and has no such line.
TEST_F(GpuP2pThreads, HostMemoryFifosCopiedByCopyEngines) {
  ScopedEnv off("ACCORD_P2P_DISABLE", "1");
  const std::string head = "sends and receives through FIFOs in host memory: ";
  const std::string copied = head + "messages of 64 KiB or more moved by copy engines (";
  const std::string kernel = head + "by the kernel's loads and stores (ACCORD_P2P_COPY_MIN_BYTES=-1)";
  enum Form { kCopies, kKernel, kSpin };
  for (Form form : {kCopies, kKernel, kSpin}) {
    std::unique_ptr<ScopedEnv> fifo(form == kSpin ? new ScopedEnv("ACCORD_DEVICE_PROTO", "fifo") : nullptr);
    std::unique_ptr<ScopedEnv> sync(form == kSpin ? new ScopedEnv("ACCORD_SHARED_GPU_SYNC", "spin") : nullptr);
    std::unique_ptr<ScopedEnv> never(form == kKernel ? new ScopedEnv("ACCORD_P2P_COPY_MIN_BYTES", "-1") : nullptr);
    // The count of copied messages in the plan's line (0 without it).
    auto count = [&](const std::string& plan) -> uint64_t {
      const size_t at = plan.find(copied);
      return at == std::string::npos ? 0 : std::strtoull(plan.c_str() + at + copied.size(), nullptr, 10);
    };
    for (const auto& f : run_threads(2, [&](accord_comm_t comm, int rank, int n) -> std::string {
           std::string plan = plan_of(comm);
           const bool right = form == kSpin     ? plan.find(head) == std::string::npos
                              : form == kCopies ? plan.find(copied + "0 so far)") != std::string::npos
                                                : plan.find(kernel) != std::string::npos;
           if (!right) return "before any call, the plan's line on FIFOs in host memory is wrong; plan:\n" + plan;
           std::string failure = every_pattern(comm, rank, n);
           plan = plan_of(comm);
           if (failure.empty() && (form == kCopies) != (count(plan) > 0))
             failure = std::string(form == kCopies ? "no" : "some") +
                       " send or receive was moved by a copy engine; plan:\n" + plan;
           return failure;
         }))
      ADD_FAILURE() << (form == kCopies ? "staged: " : form == kKernel ? "ACCORD_P2P_COPY_MIN_BYTES=-1: " : "spinning: ")
                    << f;
  }
}

// Note [Point-to-point FIFOs]: a send of a whole point-to-point FIFO (8 MiB, or
// ACCORD_DEVICE_P2P_BYTES) between two ranks that address each other's GPU ends before its
// receive is posted: it is the FIFO's 4 slots, one message each. Cut at the collectives' slot
// (256 KiB) it would be 32 messages, or on the collectives' FIFO (8 x 256 KiB) it would not
// fit: either way the send would wait for the receive (here: time out). Then the receive gets
// it whole.
TEST_F(GpuP2pThreads, SendOfAWholeFifoEndsBeforeItsReceive) {
  ScopedEnv timeout("ACCORD_TIMEOUT_MS", "20000");
  const size_t count = p2p_fifo_bytes() / 4;
  std::atomic<int> sent{0};
  for (const auto& f : run_threads(2, [&](accord_comm_t comm, int rank, int) -> std::string {
         return on_own_stream(comm, [&](accord_stream_t stream, int dev) -> std::string {
           void* buf = nullptr;
           accord_status_t s = accord_device_alloc(&buf, (count + kTail) * 4, dev);
           std::vector<int32_t> image(count + kTail, kPoison);
           if (rank == 0)
             for (size_t i = 0; i < count; ++i) image[i] = word(0, 1, 0, i);
           if (s == ACCORD_SUCCESS) s = accord_device_memcpy(buf, image.data(), image.size() * 4);
           if (s == ACCORD_SUCCESS) s = accord_barrier(comm, nullptr);
           if (s != ACCORD_SUCCESS) return api_error("set up", comm, s);
           std::string failure;
           if (rank == 0) {
             s = accord_send(buf, count, ACCORD_INT32, 1, comm, stream);
             if (s == ACCORD_SUCCESS) s = accord_stream_synchronize(stream);
             accord_status_t async = ACCORD_SUCCESS;
             (void)accord_comm_get_async_error(comm, &async);
             if (s != ACCORD_SUCCESS || async != ACCORD_SUCCESS)
               failure = "a send of " + std::to_string(count) + " int32s before its receive: " +
                         accord_status_string(s != ACCORD_SUCCESS ? s : async) + ": " + accord_last_error(comm);
             sent = 1;
           } else {
             while (sent.load() == 0) usleep(1000);  // posts its receive only once the send has ended
             s = accord_recv(buf, count, ACCORD_INT32, 0, comm, stream);
             if (s == ACCORD_SUCCESS) s = accord_stream_synchronize(stream);
             std::vector<int32_t> got(count + kTail);
             if (s == ACCORD_SUCCESS) s = accord_device_memcpy(got.data(), buf, got.size() * 4);
             if (s != ACCORD_SUCCESS) failure = api_error("the receive", comm, s);
             for (size_t i = 0; i < got.size() && failure.empty(); ++i) {
               const int32_t want = i < count ? word(0, 1, 0, i) : kPoison;
               if (got[i] != want)
                 failure = "element " + std::to_string(i) + " is " + std::to_string(got[i]) + ", expected " +
                           std::to_string(want);
             }
           }
           const std::string end = final_barrier(comm, stream, "a whole FIFO");
           (void)accord_device_free(buf);
           return failure.empty() ? end : failure;
         });
       }))
    ADD_FAILURE() << f;
}

TEST_F(GpuP2pThreads, EveryPatternOnOneGpu) {
  ScopedEnv one("ACCORD_DEVICE", "0");
  for (int n : {2, 4})
    for (const auto& f : run_threads(n, every_pattern)) ADD_FAILURE() << n << " ranks: " << f;
}

TEST_F(GpuP2pThreads, PreMulSumAndAvgExact) {
  for (int n : {2, 4})
    for (const auto& f : run_threads(n, every_premul)) ADD_FAILURE() << n << " ranks: " << f;
}

// Sends, receives and all-to-all of device buffers between processes whose pairs are all TCP
// (ACCORD_SHM_DISABLE=1, rank r on GPU r): GPU buffers staged through pinned host FIFOs and the
// pump threads (Note [Device data over TCP]); every pattern of EveryPatternExact, then every
// dtype at the sizes that cut the staging path, 2, 3 and 4 ranks.
TEST_F(GpuP2pProcesses, EveryPatternOverTcp) {
  for (int n : {2, 3, 4})
    for (const auto& f : run_processes(
             n,
             [](accord_comm_t comm, int rank, int nr) -> std::string {
               std::string failure = plan_routes(comm, rank, nr, [](int, int) { return true; });
               if (failure.empty()) failure = every_pattern(comm, rank, nr);
               if (failure.empty()) failure = every_dtype_and_size(comm, rank, nr);
               return failure;
             },
             300, over_tcp_env))
      ADD_FAILURE() << n << " ranks over TCP: " << f;
}

// Two hosts (ACCORD_HOST_ID; 3 ranks: 2 + 1, 4 ranks: 2 + 2): one group mixes peers on this
// host (GPU routes: p2p, ipc or host-staged) with peers over TCP, as all-to-all does.
TEST_F(GpuP2pProcesses, EveryPatternTwoHosts) {
  for (int n : {3, 4})
    for (const auto& f : run_processes(
             n,
             [](accord_comm_t comm, int rank, int nr) -> std::string {
               std::string failure =
                   plan_routes(comm, rank, nr, [](int a, int b) { return (a < 2) != (b < 2); });
               if (failure.empty()) failure = every_pattern(comm, rank, nr);
               if (failure.empty()) failure = every_dtype_and_size(comm, rank, nr);
               return failure;
             },
             300,
             [](int r) {
               setenv("ACCORD_HOST_ID", r < 2 ? "host-a" : "host-b", 1);
               setenv("ACCORD_DEVICE", std::to_string(r).c_str(), 1);
             }))
      ADD_FAILURE() << n << " ranks on two hosts: " << f;
}

TEST_F(GpuP2pProcesses, MismatchesOverTcpNameRankPeerAndCall) {
  SharedWord checked;
  ASSERT_NE(checked.word, nullptr);
  for (const auto& f : run_processes(
           2, [&](accord_comm_t comm, int rank, int) { return tcp_mismatches(comm, rank, checked); }, 120,
           over_tcp_env))
    ADD_FAILURE() << f;
}

// A peer over TCP killed while this rank receives from it, or sends it more than every FIFO
// and ring on the way hold: the call ends with an error naming the peer and TCP (the send
// through the send pump's check of its unsent messages), not a hang or a timeout.
TEST_F(GpuP2pProcesses, KilledPeerOverTcpEndsTheCall) {
  ScopedEnv timeout("ACCORD_TIMEOUT_MS", "60000");
  for (bool send : {false, true}) {
    SharedWord past_barrier;  // rank 0 is past the barrier: rank 1 may die
    ASSERT_NE(past_barrier.word, nullptr);
    for (const auto& f : run_processes(
             2,
             [&](accord_comm_t comm, int rank, int) -> std::string {
               return on_own_stream(comm, [&](accord_stream_t stream, int dev) -> std::string {
                 const size_t count = 40 * kSlotElems;
                 void* buf = nullptr;
                 accord_status_t s = accord_device_alloc(&buf, count * 4, dev);
                 if (s == ACCORD_SUCCESS) s = accord_barrier(comm, nullptr);
                 if (s != ACCORD_SUCCESS) return api_error("set up", comm, s);
                 if (rank == 0) past_barrier.word->store(1);
                 if (rank == 1) {
                   past_barrier.wait();
                   raise(SIGKILL);  // before it sends or receives anything
                 }
                 std::string text;
                 const accord_status_t async = one_call_to_rank1(comm, stream, buf, count, send, &text);
                 if (async == ACCORD_SUCCESS || async == ACCORD_ERR_TIMEOUT ||
                     text.find("rank 1") == std::string::npos || text.find("TCP") == std::string::npos)
                   return std::string(send ? "a send" : "a receive") + " with a killed rank over TCP: " +
                          accord_status_string(async) + ": " + text;
                 return std::string();
               });
             },
             120, over_tcp_env))
      if (f.rfind("rank 1: ", 0) != 0 || f.find("killed by signal 9") == std::string::npos)
        ADD_FAILURE() << (send ? "send: " : "recv: ") << f;
  }
}

// The mismatches: errors naming the rank, the peer and the call, and no hang.
TEST_F(GpuP2pThreads, MismatchesNameRankPeerAndCall) {
  ScopedEnv timeout("ACCORD_TIMEOUT_MS", "5000");  // the timeout case waits this long
  std::atomic<int> timed_out{0};
  for (const auto& f : run_threads(2, [&](accord_comm_t comm, int rank, int n) -> std::string {
         int dev = -1;
         accord_status_t s = accord_comm_device(comm, &dev);
         accord_stream_t stream = nullptr;
         if (s == ACCORD_SUCCESS) s = accord_stream_create(&stream, dev);
         void* buf = nullptr;
         const size_t big = kP2pFifoElems + 9 * kSlotElems;  // more than either FIFO
         if (s == ACCORD_SUCCESS) s = accord_device_alloc(&buf, big * 4, dev);
         if (s == ACCORD_SUCCESS) s = accord_barrier(comm, nullptr);
         if (s != ACCORD_SUCCESS) return api_error("set up", comm, s);
         std::string failure;
         auto expect = [&](bool ok, const std::string& what) {
           if (!ok && failure.empty()) failure = what;
         };
         // A peer out of range: refused at the call.
         s = accord_send(buf, 4, ACCORD_INT32, n, comm, stream);
         const std::string msg = accord_last_error(comm);
         expect(s == ACCORD_ERR_INVALID_ARGUMENT &&
                    msg.find("rank " + std::to_string(rank)) != std::string::npos &&
                    msg.find("peer " + std::to_string(n)) != std::string::npos &&
                    msg.find("send") != std::string::npos,
                std::string("a send to rank ") + std::to_string(n) + ": " +
                    accord_status_string(s) + ": " + msg);
         // A receive of fewer elements than the send: the receiver's asynchronous error.
         const std::string shorter = short_receive(comm, rank, stream, buf);
         expect(shorter.empty(), shorter);
         (void)accord_device_free(buf);
         (void)accord_stream_destroy(stream);
         return failure;
       }))
    ADD_FAILURE() << f;
  // A send larger than the FIFO (either: the point-to-point FIFO or the collectives') that no
  // one receives: ACCORD_TIMEOUT_MS, not a hang.
  for (const auto& f : run_threads(2, [&](accord_comm_t comm, int rank, int) -> std::string {
         int dev = -1;
         accord_status_t s = accord_comm_device(comm, &dev);
         accord_stream_t stream = nullptr;
         if (s == ACCORD_SUCCESS) s = accord_stream_create(&stream, dev);
         void* buf = nullptr;
         const size_t big = kP2pFifoElems + 9 * kSlotElems;
         if (s == ACCORD_SUCCESS) s = accord_device_alloc(&buf, big * 4, dev);
         if (s == ACCORD_SUCCESS) s = accord_barrier(comm, nullptr);
         if (s != ACCORD_SUCCESS) return api_error("set up", comm, s);
         std::string failure;
         if (rank == 0) {
           s = accord_send(buf, big, ACCORD_INT32, 1, comm, stream);
           if (s == ACCORD_SUCCESS) s = accord_stream_synchronize(stream);
           accord_status_t async = ACCORD_SUCCESS;
           (void)accord_comm_get_async_error(comm, &async);
           const std::string text = accord_last_error(comm);
           if (async != ACCORD_ERR_TIMEOUT || text.find("rank 0") == std::string::npos ||
               text.find("rank 1") == std::string::npos || text.find("send") == std::string::npos)
             failure = std::string("a send no one receives: ") + accord_status_string(async) +
                       ": " + text;
           timed_out = 1;
         } else {
           while (timed_out.load() == 0) usleep(1000);  // alive, but never receives
         }
         (void)accord_device_free(buf);
         (void)accord_stream_destroy(stream);
         return failure;
       }))
    ADD_FAILURE() << f;
}

}  // namespace
}  // namespace accord::testing
