// libaccord_nccl.so as a drop-in for the NCCL that PyTorch 2.11 loads: a program compiled
// against the toolkit's nccl.h (and nccl_device/core.h) that references all 38 names
// libtorch_cuda.so imports and calls each on host-memory ranks where that has a meaning:
// ranks are threads of this process (ncclGetUniqueId + ncclCommInitRank, one per thread) or
// one thread driving ncclCommInitAll's ranks inside groups. Inputs are small integers, so
// every result is checked exactly: every dtype x every op (PreMulSum with its scalar on the
// host and "on the device"), send/recv in groups, all-to-all, bcast, split (NOCOLOR too),
// shrink, non-blocking init polled with ncclCommGetAsyncError, abort of a stuck rank,
// finalize, registration, group simulation, and the calls Accord refuses (window, DevComm,
// ncclMemAlloc without a GPU) with NCCL's status and a message.
#include <accord/accord_device.h>
#include <nccl.h>
#include <nccl_device/core.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

namespace {

// Every NCCL name libtorch_cuda.so of PyTorch 2.11.0+cu130 imports (nm -D --undefined-only).
// Taking their addresses makes the link fail if one is missing.
const void* const kTorchImports[] = {
    (const void*)&ncclAllGather,
    (const void*)&ncclAllReduce,
    (const void*)&ncclAlltoAll,
    (const void*)&ncclBcast,
    (const void*)&ncclBroadcast,
    (const void*)&ncclCommAbort,
    (const void*)&ncclCommCount,
    (const void*)&ncclCommDeregister,
    (const void*)&ncclCommDestroy,
    (const void*)&ncclCommFinalize,
    (const void*)&ncclCommGetAsyncError,
    (const void*)&ncclCommInitAll,
    (const void*)&ncclCommInitRank,
    (const void*)&ncclCommInitRankConfig,
    (const void*)&ncclCommInitRankScalable,
    (const void*)&ncclCommRegister,
    (const void*)&ncclCommShrink,
    (const void*)&ncclCommSplit,
    (const void*)&ncclCommUserRank,
    (const void*)&ncclCommWindowDeregister,
    (const void*)&ncclCommWindowRegister,
    (const void*)&ncclDevCommCreate,
    (const void*)&ncclDevCommDestroy,
    (const void*)&ncclGetErrorString,
    (const void*)&ncclGetLastError,
    (const void*)&ncclGetUniqueId,
    (const void*)&ncclGetVersion,
    (const void*)&ncclGroupEnd,
    (const void*)&ncclGroupSimulateEnd,
    (const void*)&ncclGroupStart,
    (const void*)&ncclMemAlloc,
    (const void*)&ncclMemFree,
    (const void*)&ncclRecv,
    (const void*)&ncclRedOpCreatePreMulSum,
    (const void*)&ncclRedOpDestroy,
    (const void*)&ncclReduce,
    (const void*)&ncclReduceScatter,
    (const void*)&ncclSend,
};
static_assert(sizeof kTorchImports / sizeof kTorchImports[0] == 38,
              "PyTorch 2.11 imports 38 NCCL names");

std::atomic<int> g_failures{0};
void fail(const std::string& what) {
  if (g_failures++ < 30) std::fprintf(stderr, "FAIL %s\n", what.c_str());
}
#define EXPECT_OK(call)                                                                            \
  do {                                                                                             \
    ncclResult_t r_ = (call);                                                                      \
    if (r_ != ncclSuccess)                                                                         \
      fail(std::string(#call) + ": " + ncclGetErrorString(r_) + ": " + ncclGetLastError(nullptr)); \
  } while (0)

// A refused call: NCCL's status, and a message that names the call.
void expect_status(ncclResult_t got, ncclResult_t want, const char* what, const char* mentions) {
  const std::string msg = ncclGetLastError(nullptr);
  if (got != want)
    fail(std::string(what) + " returned " + std::to_string(got) + ", not " + std::to_string(want) +
         " (" + msg + ")");
  else if (msg.find(mentions) == std::string::npos)
    fail(std::string(what) + ": the message does not name " + mentions + ": " + msg);
}

// Runs fn(rank) on n threads.
void on_ranks(int n, const std::function<void(int)>& fn) {
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) threads.emplace_back(fn, r);
  for (auto& t : threads) t.join();
}

// n ranks, one per thread, from one unique id.
std::vector<ncclComm_t> thread_comms(int n) {
  ncclUniqueId id;
  EXPECT_OK(ncclGetUniqueId(&id));
  std::vector<ncclComm_t> comms(static_cast<size_t>(n));
  on_ranks(n,
           [&](int r) { EXPECT_OK(ncclCommInitRank(&comms[static_cast<size_t>(r)], n, id, r)); });
  return comms;
}

void destroy_all(const std::vector<ncclComm_t>& comms) {
  for (ncclComm_t c : comms)
    if (c != nullptr) EXPECT_OK(ncclCommDestroy(c));
}

// ---- elements of every dtype as doubles ----

uint16_t to_half(double v) {  // exact for the small integers and halves used here
  float f = static_cast<float>(v);
  if (f == 0) return 0;
  int e;
  float m = std::frexp(std::fabs(f), &e);  // f = m * 2^e, m in [0.5, 1)
  uint16_t man = static_cast<uint16_t>((m * 2 - 1) * 1024);
  return static_cast<uint16_t>((f < 0 ? 0x8000 : 0) | ((e - 1 + 15) << 10) | man);
}
double from_half(uint16_t h) {
  int e = (h >> 10) & 0x1f;
  double m = (h & 0x3ff) / 1024.0;
  double v = e == 0 ? std::ldexp(m, -14) : std::ldexp(1 + m, e - 15);
  return (h & 0x8000) ? -v : v;
}
uint16_t to_bf16(double v) {
  float f = static_cast<float>(v);
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return static_cast<uint16_t>(b >> 16);
}
double from_bf16(uint16_t h) {
  uint32_t b = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}

size_t size_of(ncclDataType_t t) {
  switch (t) {
    case ncclInt8:
    case ncclUint8:
      return 1;
    case ncclFloat16:
    case ncclBfloat16:
      return 2;
    case ncclInt32:
    case ncclUint32:
    case ncclFloat32:
      return 4;
    default:
      return 8;
  }
}

void put(ncclDataType_t t, void* base, size_t i, double v) {
  unsigned char* p = static_cast<unsigned char*>(base) + i * size_of(t);
  switch (t) {
    case ncclInt8: {
      int8_t x = static_cast<int8_t>(v);
      std::memcpy(p, &x, 1);
      break;
    }
    case ncclUint8: {
      uint8_t x = static_cast<uint8_t>(v);
      std::memcpy(p, &x, 1);
      break;
    }
    case ncclInt32: {
      int32_t x = static_cast<int32_t>(v);
      std::memcpy(p, &x, 4);
      break;
    }
    case ncclUint32: {
      uint32_t x = static_cast<uint32_t>(v);
      std::memcpy(p, &x, 4);
      break;
    }
    case ncclInt64: {
      int64_t x = static_cast<int64_t>(v);
      std::memcpy(p, &x, 8);
      break;
    }
    case ncclUint64: {
      uint64_t x = static_cast<uint64_t>(v);
      std::memcpy(p, &x, 8);
      break;
    }
    case ncclFloat16: {
      uint16_t x = to_half(v);
      std::memcpy(p, &x, 2);
      break;
    }
    case ncclBfloat16: {
      uint16_t x = to_bf16(v);
      std::memcpy(p, &x, 2);
      break;
    }
    case ncclFloat32: {
      float x = static_cast<float>(v);
      std::memcpy(p, &x, 4);
      break;
    }
    default: {
      double x = v;
      std::memcpy(p, &x, 8);
      break;
    }
  }
}

double get(ncclDataType_t t, const void* base, size_t i) {
  const unsigned char* p = static_cast<const unsigned char*>(base) + i * size_of(t);
  switch (t) {
    case ncclInt8: {
      int8_t x;
      std::memcpy(&x, p, 1);
      return x;
    }
    case ncclUint8: {
      uint8_t x;
      std::memcpy(&x, p, 1);
      return x;
    }
    case ncclInt32: {
      int32_t x;
      std::memcpy(&x, p, 4);
      return x;
    }
    case ncclUint32: {
      uint32_t x;
      std::memcpy(&x, p, 4);
      return x;
    }
    case ncclInt64: {
      int64_t x;
      std::memcpy(&x, p, 8);
      return static_cast<double>(x);
    }
    case ncclUint64: {
      uint64_t x;
      std::memcpy(&x, p, 8);
      return static_cast<double>(x);
    }
    case ncclFloat16: {
      uint16_t x;
      std::memcpy(&x, p, 2);
      return from_half(x);
    }
    case ncclBfloat16: {
      uint16_t x;
      std::memcpy(&x, p, 2);
      return from_bf16(x);
    }
    case ncclFloat32: {
      float x;
      std::memcpy(&x, p, 4);
      return x;
    }
    default: {
      double x;
      std::memcpy(&x, p, 8);
      return x;
    }
  }
}

bool is_int(ncclDataType_t t) { return t <= ncclUint64; }

const ncclDataType_t kTypes[] = {ncclInt8,   ncclUint8,   ncclInt32,   ncclUint32,  ncclInt64,
                                 ncclUint64, ncclFloat16, ncclFloat32, ncclFloat64, ncclBfloat16};

// Rank r's element i: r + 1 + i % 3 (at most 5 with 3 ranks: products fit int8).
double value(int r, size_t i) { return r + 1 + static_cast<double>(i % 3); }

// ---- the checks ----

// Every dtype x every op, ncclCommInitAll's 3 ranks driven by this thread in groups:
// all-reduce with ncclSum, ncclProd, ncclMax, ncclMin, ncclAvg and PreMulSum (scalar on the
// host, and "on the device": a pointer read when the group runs, changed after creation);
// reduce and reduce-scatter with PreMulSum.
void check_every_dtype_and_op() {
  const int n = 3;
  std::vector<ncclComm_t> comms(n);
  EXPECT_OK(ncclCommInitAll(comms.data(), n, nullptr));
  const size_t count = 1009;
  for (ncclDataType_t t : kTypes) {
    const double factor = is_int(t) ? 3 : 0.5;
    std::vector<std::vector<unsigned char>> scalar_host(n), scalar_dev(n);
    std::vector<ncclRedOp_t> pre_host(n), pre_dev(n);
    for (int r = 0; r < n; ++r) {
      scalar_host[r].resize(8);
      scalar_dev[r].resize(8);
      put(t, scalar_host[r].data(), 0, factor);
      put(t, scalar_dev[r].data(), 0, 1);  // set to factor after creation: read at run time
      EXPECT_OK(ncclRedOpCreatePreMulSum(&pre_host[r], scalar_host[r].data(), t,
                                         ncclScalarHostImmediate, comms[r]));
      put(t, scalar_host[r].data(), 0, 99);  // host immediate: already read
      EXPECT_OK(ncclRedOpCreatePreMulSum(&pre_dev[r], scalar_dev[r].data(), t, ncclScalarDevice,
                                         comms[r]));
      put(t, scalar_dev[r].data(), 0, factor);
    }
    struct Case {
      const char* name;
      int op;  // 0..4 built in, 5 premul host, 6 premul device
    };
    for (Case c : {Case{"sum", 0}, Case{"prod", 1}, Case{"max", 2}, Case{"min", 3}, Case{"avg", 4},
                   Case{"premulsum(host)", 5}, Case{"premulsum(device)", 6}}) {
      std::vector<std::vector<unsigned char>> in(n), out(n);
      EXPECT_OK(ncclGroupStart());
      for (int r = 0; r < n; ++r) {
        in[r].resize(count * size_of(t));
        out[r].assign(count * size_of(t), 0);
        for (size_t i = 0; i < count; ++i) put(t, in[r].data(), i, value(r, i));
        ncclRedOp_t op = c.op < 5    ? static_cast<ncclRedOp_t>(c.op)
                         : c.op == 5 ? pre_host[r]
                                     : pre_dev[r];
        EXPECT_OK(ncclAllReduce(in[r].data(), out[r].data(), count, t, op, comms[r], nullptr));
      }
      EXPECT_OK(ncclGroupEnd());
      for (int r = 0; r < n; ++r)
        for (size_t i = 0; i < count; ++i) {
          double want = c.op == 1 ? 1 : c.op == 2 ? -1e9 : c.op == 3 ? 1e9 : 0;
          for (int q = 0; q < n; ++q) {
            const double v = value(q, i);
            want = c.op == 1   ? want * v
                   : c.op == 2 ? std::max(want, v)
                   : c.op == 3 ? std::min(want, v)
                               : want + v;
          }
          if (c.op == 4) want = is_int(t) ? std::trunc(want / n) : want / n;
          if (c.op >= 5) want *= factor;
          if (get(t, out[r].data(), i) != want) {
            fail("all-reduce dtype " + std::to_string(t) + " " + c.name + " rank " +
                 std::to_string(r) + " element " + std::to_string(i) + ": " +
                 std::to_string(get(t, out[r].data(), i)) + " != " + std::to_string(want));
            break;
          }
        }
    }
    // PreMulSum in reduce (root 1, in place) and reduce-scatter (out of place).
    std::vector<std::vector<unsigned char>> buf(n), rs_out(n);
    EXPECT_OK(ncclGroupStart());
    for (int r = 0; r < n; ++r) {
      buf[r].resize(count * n * size_of(t));
      rs_out[r].assign(count * size_of(t), 0);
      for (size_t i = 0; i < count * n; ++i) put(t, buf[r].data(), i, value(r, i));
      EXPECT_OK(ncclReduceScatter(buf[r].data(), rs_out[r].data(), count, t, pre_host[r], comms[r],
                                  nullptr));
      EXPECT_OK(
          ncclReduce(buf[r].data(), buf[r].data(), count, t, pre_dev[r], 1, comms[r], nullptr));
    }
    EXPECT_OK(ncclGroupEnd());
    for (int r = 0; r < n; ++r)
      for (size_t i = 0; i < count; ++i) {
        double rs = 0, red = 0;
        for (int q = 0; q < n; ++q) rs += value(q, count * r + i), red += value(q, i);
        if (get(t, rs_out[r].data(), i) != rs * factor) {
          fail("premulsum reduce-scatter dtype " + std::to_string(t));
          break;
        }
        if (r == 1 && get(t, buf[r].data(), i) != red * factor) {
          fail("premulsum reduce dtype " + std::to_string(t));
          break;
        }
      }
    for (int r = 0; r < n; ++r) {
      EXPECT_OK(ncclRedOpDestroy(pre_host[r], comms[r]));
      EXPECT_OK(ncclRedOpDestroy(pre_dev[r], comms[r]));
    }
  }
  // Ops that are not (or no longer) there.
  float f = 1;
  ncclRedOp_t op;
  EXPECT_OK(ncclRedOpCreatePreMulSum(&op, &f, ncclFloat32, ncclScalarHostImmediate, comms[0]));
  expect_status(ncclAllReduce(&f, &f, 1, ncclFloat64, op, comms[0], nullptr), ncclInvalidArgument,
                "PreMulSum with another dtype", "ncclAllReduce");
  EXPECT_OK(ncclRedOpDestroy(op, comms[0]));
  expect_status(ncclAllReduce(&f, &f, 1, ncclFloat32, op, comms[0], nullptr), ncclInvalidArgument,
                "a destroyed PreMulSum op", "ncclRedOpCreatePreMulSum");
  expect_status(ncclRedOpDestroy(ncclSum, comms[0]), ncclInvalidArgument,
                "ncclRedOpDestroy(ncclSum)", "built in");
  expect_status(ncclAllReduce(&f, &f, 1, ncclFloat8e4m3, ncclSum, comms[0], nullptr),
                ncclInvalidUsage, "float8 all-reduce", "float8");
  destroy_all(comms);
}

// Send/recv in groups: a ring shift and a pairwise exchange, each larger than the channel's
// FIFO, so the sends and receives must progress together; all-to-all; bcast.
void check_point_to_point() {
  const int n = 3;
  std::vector<ncclComm_t> comms(n);
  EXPECT_OK(ncclCommInitAll(comms.data(), n, nullptr));
  const size_t count = (size_t{9} << 20) / 4 + 7;  // 9 MiB + 28 bytes of int32
  std::vector<std::vector<int32_t>> send(n), recv(n), back(n);
  for (int r = 0; r < n; ++r) {
    send[r].resize(count);
    for (size_t i = 0; i < count; ++i) send[r][i] = static_cast<int32_t>(r * 100000000 + i);
    recv[r].assign(count, -1);
    back[r].assign(count, -1);
  }
  EXPECT_OK(ncclGroupStart());
  for (int r = 0; r < n; ++r) {
    EXPECT_OK(ncclSend(send[r].data(), count, ncclInt32, (r + 1) % n, comms[r], nullptr));
    EXPECT_OK(ncclRecv(recv[r].data(), count, ncclInt32, (r + n - 1) % n, comms[r], nullptr));
  }
  EXPECT_OK(ncclGroupEnd());
  for (int r = 0; r < n; ++r)
    if (recv[r] != send[(r + n - 1) % n]) fail("ring send/recv at rank " + std::to_string(r));
  // Ranks 0 and 1 swap, each sending first; rank 2 sends to itself.
  EXPECT_OK(ncclGroupStart());
  for (int r = 0; r < n; ++r) {
    const int peer = r == 2 ? 2 : 1 - r;
    EXPECT_OK(ncclSend(send[r].data(), count, ncclInt32, peer, comms[r], nullptr));
    EXPECT_OK(ncclRecv(back[r].data(), count, ncclInt32, peer, comms[r], nullptr));
  }
  EXPECT_OK(ncclGroupEnd());
  for (int r = 0; r < n; ++r)
    if (back[r] != send[r == 2 ? 2 : 1 - r])
      fail("pairwise send/recv at rank " + std::to_string(r));

  // All-to-all: rank r sends block p (value r * 1000 + p * 10 + i % 7) to rank p.
  for (size_t per : {size_t{0}, size_t{1}, size_t{70001}}) {
    std::vector<std::vector<int64_t>> in(n), out(n);
    EXPECT_OK(ncclGroupStart());
    for (int r = 0; r < n; ++r) {
      in[r].resize(per * n);
      out[r].assign(per * n, -1);
      for (int p = 0; p < n; ++p)
        for (size_t i = 0; i < per; ++i)
          in[r][p * per + i] = r * 1000 + p * 10 + static_cast<int64_t>(i % 7);
      EXPECT_OK(ncclAlltoAll(in[r].data(), out[r].data(), per, ncclInt64, comms[r], nullptr));
    }
    EXPECT_OK(ncclGroupEnd());
    for (int r = 0; r < n; ++r)
      for (int q = 0; q < n; ++q)
        for (size_t i = 0; i < per; ++i)
          if (out[r][q * per + i] != q * 1000 + r * 10 + static_cast<int64_t>(i % 7)) {
            fail("ncclAlltoAll count " + std::to_string(per) + " at rank " + std::to_string(r));
            q = n;
            break;
          }
  }
  int64_t x[3] = {};
  expect_status(ncclAlltoAll(x, x, 1, ncclInt64, comms[0], nullptr), ncclInvalidArgument,
                "in-place all-to-all", "overlap");

  // ncclBcast (in place) from rank 1, and ncclBroadcast, in one group.
  std::vector<std::vector<double>> b(n), c(n);
  EXPECT_OK(ncclGroupStart());
  for (int r = 0; r < n; ++r) {
    b[r].assign(5003, r == 1 ? 0 : -1);
    if (r == 1)
      for (size_t i = 0; i < b[r].size(); ++i) b[r][i] = static_cast<double>(i) * 0.5;
    c[r].assign(5003, -1);
    EXPECT_OK(ncclBcast(b[r].data(), b[r].size(), ncclFloat64, 1, comms[r], nullptr));
    EXPECT_OK(
        ncclBroadcast(b[r].data(), c[r].data(), c[r].size(), ncclFloat64, 1, comms[r], nullptr));
  }
  EXPECT_OK(ncclGroupEnd());
  for (int r = 0; r < n; ++r)
    if (b[r] != b[1] || c[r] != b[1]) fail("ncclBcast/ncclBroadcast at rank " + std::to_string(r));
  destroy_all(comms);
}

// All-reduce (int32 sum of rank + 1) on comm, expected total.
void expect_sum(ncclComm_t comm, int rank, int want, const char* what) {
  int32_t v[4] = {rank + 1, rank + 1, rank + 1, rank + 1};
  EXPECT_OK(ncclAllReduce(v, v, 4, ncclInt32, ncclSum, comm, nullptr));
  if (v[3] != want)
    fail(std::string(what) + ": all-reduce gave " + std::to_string(v[3]) + ", not " +
         std::to_string(want));
}

// Split (threads: colors by parity, keys reversed, NOCOLOR), split inside a group (one thread,
// ncclCommInitAll ranks), shrink.
void check_split_and_shrink() {
  const int n = 4;
  std::vector<ncclComm_t> comms = thread_comms(n);
  std::vector<ncclComm_t> halves(n), solo(n), shrunk(n);
  on_ranks(n, [&](int r) {
    ncclComm_t parent = comms[static_cast<size_t>(r)];
    EXPECT_OK(ncclCommSplit(parent, r % 2, -r, &halves[static_cast<size_t>(r)], nullptr));
    int rank = -1, count = -1;
    EXPECT_OK(ncclCommUserRank(halves[static_cast<size_t>(r)], &rank));
    EXPECT_OK(ncclCommCount(halves[static_cast<size_t>(r)], &count));
    // keys -r: the higher parent rank comes first.
    const int want_rank = r >= 2 ? 0 : 1;
    if (rank != want_rank || count != 2)
      fail("ncclCommSplit rank " + std::to_string(r) + ": new rank " + std::to_string(rank) +
           " of " + std::to_string(count));
    // (ranks 0 and 2) and (1 and 3): sums 1 + 3 and 2 + 4.
    expect_sum(halves[static_cast<size_t>(r)], r, r % 2 == 0 ? 4 : 6, "split by parity");
    // Only rank 3 gets a communicator; the others pass NCCL_SPLIT_NOCOLOR.
    EXPECT_OK(ncclCommSplit(parent, r == 3 ? 7 : NCCL_SPLIT_NOCOLOR, 0,
                            &solo[static_cast<size_t>(r)], nullptr));
    if ((solo[static_cast<size_t>(r)] == nullptr) != (r != 3))
      fail("NCCL_SPLIT_NOCOLOR at rank " + std::to_string(r));
    if (r == 3) expect_sum(solo[3], 0, 1, "a one-rank split");
    // Shrink without rank 2: ranks 0, 1, 3 become 0, 1, 2.
    if (r == 2) {
      int excluded = 2;
      ncclComm_t none = nullptr;
      expect_status(ncclCommShrink(parent, &excluded, 1, &none, nullptr, NCCL_SHRINK_DEFAULT),
                    ncclInvalidArgument, "ncclCommShrink by an excluded rank", "excludeRanksList");
      return;
    }
    int excluded = 2;
    EXPECT_OK(ncclCommShrink(parent, &excluded, 1, &shrunk[static_cast<size_t>(r)], nullptr,
                             NCCL_SHRINK_DEFAULT));
    int rank2 = -1;
    EXPECT_OK(ncclCommUserRank(shrunk[static_cast<size_t>(r)], &rank2));
    if (rank2 != (r == 3 ? 2 : r))
      fail("ncclCommShrink: rank " + std::to_string(r) + " became " + std::to_string(rank2));
    expect_sum(shrunk[static_cast<size_t>(r)], r, 1 + 2 + 4, "shrink without rank 2");
  });
  destroy_all(halves);
  destroy_all(solo);
  destroy_all(shrunk);
  destroy_all(comms);

  // One thread, three ranks: the splits wait for ncclGroupEnd, as NCCL's do.
  std::vector<ncclComm_t> all(3), sub(3);
  EXPECT_OK(ncclCommInitAll(all.data(), 3, nullptr));
  EXPECT_OK(ncclGroupStart());
  for (int r = 0; r < 3; ++r)
    EXPECT_OK(ncclCommSplit(all[r], r == 1 ? NCCL_SPLIT_NOCOLOR : 0, r, &sub[r], nullptr));
  EXPECT_OK(ncclGroupEnd());
  if (sub[1] != nullptr || sub[0] == nullptr || sub[2] == nullptr)
    fail("ncclCommSplit in a group: handles");
  int c0 = 0, c2 = 0;
  EXPECT_OK(ncclCommCount(sub[0], &c0));
  EXPECT_OK(ncclCommCount(sub[2], &c2));
  if (c0 != 2 || c2 != 2) fail("ncclCommSplit in a group: counts");
  destroy_all(sub);
  destroy_all(all);
}

// Non-blocking init (polled), a config without NCCL_CONFIG_INITIALIZER, scalable init, init
// of several ranks from one thread in a group, finalize.
void check_init_forms() {
  ncclUniqueId id;
  EXPECT_OK(ncclGetUniqueId(&id));
  std::vector<ncclComm_t> comms(2);
  std::atomic<int> saw_in_progress{0};
  on_ranks(2, [&](int r) {
    // Rank 1 starts only once rank 0 has seen ncclInProgress (an order, not a sleep that a
    // loaded machine can outlast); at most 30 s, so that an init that blocks rank 0 until
    // rank 1 comes fails the check below instead of hanging.
    for (int i = 0; r == 1 && !saw_in_progress && i < 30000; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    ncclResult_t st = ncclCommInitRankConfig(&comms[static_cast<size_t>(r)], 2, id, r, &config);
    if (st != ncclInProgress && st != ncclSuccess)
      fail("non-blocking ncclCommInitRankConfig returned " + std::to_string(st));
    ncclResult_t state = ncclInProgress;
    for (int polls = 0; state == ncclInProgress && polls < 60000; ++polls) {
      EXPECT_OK(ncclCommGetAsyncError(comms[static_cast<size_t>(r)], &state));
      if (state == ncclInProgress) {
        if (r == 0) saw_in_progress = 1;
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
    }
    if (state != ncclSuccess)
      fail("non-blocking init ended in " + std::to_string(state) + ": " +
           ncclGetLastError(nullptr));
    expect_sum(comms[static_cast<size_t>(r)], r, 3, "after non-blocking init");
    EXPECT_OK(ncclCommFinalize(comms[static_cast<size_t>(r)]));
    int32_t v = 0;
    expect_status(
        ncclAllReduce(&v, &v, 1, ncclInt32, ncclSum, comms[static_cast<size_t>(r)], nullptr),
        ncclInvalidUsage, "a collective after ncclCommFinalize", "ncclCommFinalize");
  });
  if (!saw_in_progress)
    fail("non-blocking init: rank 0 never saw ncclInProgress while rank 1 was late");
  destroy_all(comms);

  ncclConfig_t bad{};
  ncclComm_t c = nullptr;
  expect_status(ncclCommInitRankConfig(&c, 1, id, 0, &bad), ncclInvalidArgument,
                "a zeroed ncclConfig_t", "NCCL_CONFIG_INITIALIZER");

  // Scalable init with two ids (every rank holds both).
  ncclUniqueId ids[2];
  EXPECT_OK(ncclGetUniqueId(&ids[0]));
  EXPECT_OK(ncclGetUniqueId(&ids[1]));
  std::vector<ncclComm_t> scal(3);
  on_ranks(3, [&](int r) {
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    EXPECT_OK(ncclCommInitRankScalable(&scal[static_cast<size_t>(r)], 3, r, 2, ids, &config));
    expect_sum(scal[static_cast<size_t>(r)], r, 6, "after ncclCommInitRankScalable");
  });
  destroy_all(scal);

  // ncclCommInitRank for three ranks from one thread, inside a group.
  ncclUniqueId gid;
  EXPECT_OK(ncclGetUniqueId(&gid));
  std::vector<ncclComm_t> grouped(3);
  EXPECT_OK(ncclGroupStart());
  for (int r = 0; r < 3; ++r) EXPECT_OK(ncclCommInitRank(&grouped[r], 3, gid, r));
  EXPECT_OK(ncclGroupEnd());
  for (int r = 0; r < 3; ++r) {
    int rank = -1;
    EXPECT_OK(ncclCommUserRank(grouped[r], &rank));
    if (rank != r) fail("grouped ncclCommInitRank: rank");
  }
  destroy_all(grouped);
}

// Abort of a rank stuck in an all-reduce that its peer never joins.
void check_abort() {
  std::vector<ncclComm_t> comms = thread_comms(2);
  std::atomic<bool> returned{false};
  ncclResult_t stuck = ncclSuccess;
  std::thread t([&] {
    std::vector<float> v(1 << 16, 1.0f);
    stuck = ncclAllReduce(v.data(), v.data(), v.size(), ncclFloat32, ncclSum, comms[0], nullptr);
    returned = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  if (returned) fail("the all-reduce returned although rank 1 never joined it");
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_OK(ncclCommAbort(comms[0]));
  t.join();
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  if (stuck == ncclSuccess) fail("the aborted all-reduce returned ncclSuccess");
  // Without the abort the all-reduce would end at ACCORD_TIMEOUT_MS (300 s by default); a tenth
  // of that tells the two apart on a loaded machine.
  if (ms > 30000) fail("ncclCommAbort took " + std::to_string(ms) + " ms");
  int n = 0;
  expect_status(ncclCommCount(comms[0], &n), ncclInvalidUsage, "a call on an aborted communicator",
                "aborted");
  EXPECT_OK(ncclCommDestroy(comms[1]));

  // Abort during a non-blocking init that cannot finish (rank 1 never comes): at once, and
  // the handle is dead. The init gives up after ACCORD_INIT_TIMEOUT_MS on its own thread, so an
  // abort that waited for it would return after that: the abort must return before the init's
  // timeout has passed since the init began (an order, with no margin to guess).
  constexpr int kInitTimeoutMs = 4000;
  setenv("ACCORD_INIT_TIMEOUT_MS", std::to_string(kInitTimeoutMs).c_str(), 1);
  ncclUniqueId id;
  EXPECT_OK(ncclGetUniqueId(&id));
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclComm_t lonely = nullptr;
  const auto t1 = std::chrono::steady_clock::now();
  if (ncclCommInitRankConfig(&lonely, 2, id, 0, &config) != ncclInProgress)
    fail("a non-blocking init that waits for a missing rank did not return ncclInProgress");
  ncclResult_t state = ncclSuccess;
  EXPECT_OK(ncclCommGetAsyncError(lonely, &state));
  if (state != ncclInProgress) fail("ncclCommGetAsyncError during init: " + std::to_string(state));
  EXPECT_OK(ncclCommAbort(lonely));
  const auto aborted_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t1).count();
  if (aborted_ms >= kInitTimeoutMs)
    fail("ncclCommAbort waited for the init: it returned " + std::to_string(aborted_ms) +
         " ms after the init began, past the init's own timeout of " + std::to_string(kInitTimeoutMs) +
         " ms");
  expect_status(ncclCommGetAsyncError(lonely, &state), ncclInvalidUsage,
                "a call after aborting an init", "aborted");
  // The init's thread gives up at its timeout.
  std::this_thread::sleep_until(t1 + std::chrono::milliseconds(kInitTimeoutMs + 1000));
  unsetenv("ACCORD_INIT_TIMEOUT_MS");
}

// Registration (a record), group simulation, and what Accord refuses.
void check_memory_and_refusals() {
  std::vector<ncclComm_t> comms(2);
  EXPECT_OK(ncclCommInitAll(comms.data(), 2, nullptr));
  std::vector<float> buf(1024);
  void* handle = nullptr;
  EXPECT_OK(ncclCommRegister(comms[0], buf.data(), buf.size() * 4, &handle));
  if (handle == nullptr) fail("ncclCommRegister gave no handle");
  EXPECT_OK(ncclCommDeregister(comms[0], handle));
  expect_status(ncclCommDeregister(comms[0], handle), ncclInvalidArgument, "deregistering twice",
                "ncclCommRegister");

  // Simulated group: an estimate, and nothing runs (the buffers keep their values).
  std::vector<std::vector<float>> v(2, std::vector<float>(256, 2.0f));
  EXPECT_OK(ncclGroupStart());
  for (int r = 0; r < 2; ++r)
    EXPECT_OK(
        ncclAllReduce(v[r].data(), v[r].data(), 256, ncclFloat32, ncclSum, comms[r], nullptr));
  ncclSimInfo_t sim = NCCL_SIM_INFO_INITIALIZER;
  EXPECT_OK(ncclGroupSimulateEnd(&sim));
  if (!(sim.estimatedTime > 0)) fail("ncclGroupSimulateEnd: no estimate");
  if (v[0][0] != 2.0f || v[1][255] != 2.0f) fail("ncclGroupSimulateEnd ran the all-reduce");
  EXPECT_OK(ncclGroupStart());
  for (int r = 0; r < 2; ++r)
    EXPECT_OK(
        ncclAllReduce(v[r].data(), v[r].data(), 256, ncclFloat32, ncclSum, comms[r], nullptr));
  EXPECT_OK(ncclGroupEnd());
  if (v[0][0] != 4.0f || v[1][255] != 4.0f) fail("the all-reduce after a simulated group");
  ncclSimInfo_t zero{};
  EXPECT_OK(ncclGroupStart());
  expect_status(ncclGroupSimulateEnd(&zero), ncclInvalidArgument,
                "ncclGroupSimulateEnd without the initializer", "NCCL_SIM_INFO_INITIALIZER");
  expect_status(ncclGroupEnd(), ncclInvalidUsage, "ncclGroupEnd without ncclGroupStart",
                "ncclGroupStart");

  ncclWindow_t win = reinterpret_cast<ncclWindow_t>(&buf);
  expect_status(ncclCommWindowRegister(comms[0], buf.data(), 4096, &win, NCCL_WIN_COLL_SYMMETRIC),
                ncclInvalidUsage, "ncclCommWindowRegister", "rank 0");
  if (win != nullptr) fail("ncclCommWindowRegister left a window handle");
  expect_status(ncclCommWindowDeregister(comms[0], win), ncclInvalidArgument,
                "ncclCommWindowDeregister", "ncclCommWindowRegister");
  ncclDevCommRequirements_t reqs{};  // 2.28.9 has no initializer macro yet
  alignas(64) unsigned char devcomm[4096] = {};
  expect_status(ncclDevCommCreate(comms[0], &reqs, reinterpret_cast<ncclDevComm_t*>(devcomm)),
                ncclInvalidUsage, "ncclDevCommCreate", "device communicators");
  expect_status(ncclDevCommDestroy(comms[0], reinterpret_cast<ncclDevComm_t*>(devcomm)),
                ncclInvalidArgument, "ncclDevCommDestroy", "ncclDevCommCreate");
  // Point-to-point with a stream on a host rank: refused, not run.
  float f = 0;
  expect_status(ncclSend(&f, 1, ncclFloat32, 1, comms[0], reinterpret_cast<cudaStream_t>(&f)),
                ncclInvalidUsage, "ncclSend with a stream on a host rank", "stream");

  int gpus = 0;
  accord_device_count(&gpus);
  void* p = nullptr;
  if (gpus == 0) {
    expect_status(ncclMemAlloc(&p, 1 << 20), ncclInvalidUsage, "ncclMemAlloc without a GPU",
                  "no GPU");
    if (p != nullptr) fail("ncclMemAlloc without a GPU set a pointer");
  } else {
    EXPECT_OK(ncclMemAlloc(&p, 1 << 20));
    EXPECT_OK(ncclMemFree(p));
  }
  expect_status(ncclMemFree(buf.data()), ncclInvalidArgument, "ncclMemFree of host memory",
                "ncclMemAlloc");
  destroy_all(comms);
  expect_status(ncclCommDestroy(comms[0]), ncclInvalidUsage, "destroying twice", "destroyed");
}

void check_version_and_strings() {
  int version = 0;
  EXPECT_OK(ncclGetVersion(&version));
  if (version != NCCL_VERSION_CODE) fail("ncclGetVersion: " + std::to_string(version));
  std::vector<std::string> seen;
  for (int r = ncclSuccess; r < ncclNumResults; ++r) {
    std::string s = ncclGetErrorString(static_cast<ncclResult_t>(r));
    if (s.empty() || s == "unknown result code")
      fail("ncclGetErrorString(" + std::to_string(r) + ")");
    for (const std::string& other : seen)
      if (other == s)
        fail("ncclGetErrorString(" + std::to_string(r) + ") repeats another code's text");
    seen.push_back(s);
  }
  if (std::string(ncclGetErrorString(ncclNumResults)) != "unknown result code")
    fail("ncclGetErrorString(8)");
}

}  // namespace

int main() {
  for (const void* p : kTorchImports)
    if (p == nullptr) fail("a name PyTorch imports resolved to NULL");
  check_version_and_strings();
  check_every_dtype_and_op();
  check_point_to_point();
  check_split_and_shrink();
  check_init_forms();
  check_abort();
  check_memory_and_refusals();
  std::printf(
      g_failures == 0
          ? "nccl_dropin_check: ok (38 names, every dtype x op, p2p, split, shrink, abort)\n"
          : "nccl_dropin_check: %d failures\n",
      g_failures.load());
  return g_failures == 0 ? 0 : 1;
}
