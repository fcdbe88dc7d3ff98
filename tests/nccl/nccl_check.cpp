// A program written against the real nccl.h of the CUDA toolkit, linked against
// libaccord_nccl.so. It runs on host-memory ranks (this build has no GPU path; stream 0 and
// host buffers): ncclCommInitAll ranks driven in one thread inside a group, and
// ncclGetUniqueId + ncclCommInitRank ranks in threads; every collective, exact inputs,
// compared bit for bit; then unsupported calls must return ncclInvalidUsage with a message.
// (nccl_dropin_check.cpp covers the rest of the 38 names PyTorch imports: send/recv, split,
// PreMulSum, non-blocking init...)
// With --dlopen DIR it instead loads DIR/libnccl.so.2 by name (the compat symlink) and checks
// that every NCCL name is there and works. With --sim-gpus N (and ACCORD_SIM_TOPO naming a
// topology file) it runs on N simulated GPUs: ncclCommInitAll with a device list, device
// buffers and streams (from accord_device.h: the simulated runtime's cudaMalloc and
// cudaStreamCreate), every collective enqueued in a group on the ranks' streams and checked
// exactly after the streams are synchronized, and ncclCommCuDevice.
#include <dlfcn.h>
#include <nccl.h>

#include <accord/accord_device.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#if NCCL_CHECK_FAKE_CUDA_GET_DEVICE
// The CUDA runtime's current device, for a build without CUDA: ncclCommInitRank must put its
// rank on it (NCCL's rule), which the NCCL layer asks with dlsym(RTLD_DEFAULT, ...).
int g_current_device = 0;
extern "C" cudaError_t cudaGetDevice(int* device) {
  *device = g_current_device;
  return cudaSuccess;
}
#endif

namespace {

int g_failures = 0;
void fail(const std::string& what) {
  if (g_failures++ < 20) std::fprintf(stderr, "FAIL %s\n", what.c_str());
}
#define EXPECT_OK(call)                                                                            \
  do {                                                                                             \
    ncclResult_t r_ = (call);                                                                      \
    if (r_ != ncclSuccess)                                                                         \
      fail(std::string(#call) + ": " + ncclGetErrorString(r_) + ": " + ncclGetLastError(nullptr)); \
  } while (0)

// Rank r contributes r + 1 + (i % 5): sums, products (of at most 4 ranks), minima and
// maxima are exact in every dtype here.
template <typename T>
void run_all(std::vector<ncclComm_t>& comms, ncclDataType_t type, size_t count, bool in_place) {
  const int n = static_cast<int>(comms.size());
  std::vector<std::vector<T>> in(n), out(n);
  for (int r = 0; r < n; ++r) {
    in[r].resize(count * n + 1);
    for (size_t i = 0; i < in[r].size(); ++i)
      in[r][i] = static_cast<T>(r + 1 + static_cast<int>(i % 5));
  }
  auto want = [&](ncclRedOp_t op, size_t i) {
    double acc = op == ncclProd ? 1 : op == ncclMin ? 1e9 : op == ncclMax ? -1e9 : 0;
    for (int r = 0; r < n; ++r) {
      double v = r + 1 + static_cast<int>(i % 5);
      acc = op == ncclSum    ? acc + v
            : op == ncclProd ? acc * v
            : op == ncclMin  ? std::min(acc, v)
                             : std::max(acc, v);
    }
    return static_cast<T>(acc);
  };
  const char* what = in_place ? "in-place" : "out-of-place";
  for (ncclRedOp_t op : {ncclSum, ncclProd, ncclMin, ncclMax}) {
    EXPECT_OK(ncclGroupStart());
    for (int r = 0; r < n; ++r) {
      out[r] = in_place ? in[r] : std::vector<T>(count + 1);
      EXPECT_OK(ncclAllReduce(in_place ? out[r].data() : in[r].data(), out[r].data(), count, type,
                              op, comms[r], 0));
    }
    EXPECT_OK(ncclGroupEnd());
    for (int r = 0; r < n; ++r)
      for (size_t i = 0; i < count; ++i)
        if (out[r][i] != want(op, i)) {
          fail("ncclAllReduce op " + std::to_string(op) + " count " + std::to_string(count) + " " +
               what);
          break;
        }
    // reduce-scatter: rank r gets block r of the reduction of the n*count inputs
    EXPECT_OK(ncclGroupStart());
    for (int r = 0; r < n; ++r) {
      out[r] = in_place ? in[r] : std::vector<T>(count + 1);
      const T* send = in_place ? out[r].data() : in[r].data();
      EXPECT_OK(ncclReduceScatter(send, out[r].data() + (in_place ? count * r : 0), count, type, op,
                                  comms[r], 0));
    }
    EXPECT_OK(ncclGroupEnd());
    for (int r = 0; r < n; ++r)
      for (size_t i = 0; i < count; ++i)
        if (out[r][(in_place ? count * r : 0) + i] != want(op, count * r + i)) {
          fail("ncclReduceScatter count " + std::to_string(count) + " " + what);
          break;
        }
  }
  // reduce to the last rank, broadcast from rank 0, all-gather
  const int root = n - 1;
  EXPECT_OK(ncclGroupStart());
  for (int r = 0; r < n; ++r) {
    out[r] = in_place ? in[r] : std::vector<T>(count + 1);
    EXPECT_OK(ncclReduce(in_place ? out[r].data() : in[r].data(), out[r].data(), count, type,
                         ncclSum, root, comms[r], 0));
  }
  EXPECT_OK(ncclGroupEnd());
  for (size_t i = 0; i < count; ++i)
    if (out[root][i] != want(ncclSum, i))
      fail("ncclReduce count " + std::to_string(count) + " " + what);
  EXPECT_OK(ncclGroupStart());
  for (int r = 0; r < n; ++r) {
    out[r] = r == 0 ? in[0] : std::vector<T>(count + 1);
    EXPECT_OK(ncclBroadcast(out[r].data(), out[r].data(), count, type, 0, comms[r], 0));
  }
  EXPECT_OK(ncclGroupEnd());
  for (int r = 0; r < n; ++r)
    if (count > 0 && std::memcmp(out[r].data(), in[0].data(), count * sizeof(T)) != 0)
      fail("ncclBroadcast count " + std::to_string(count));
  EXPECT_OK(ncclGroupStart());
  for (int r = 0; r < n; ++r) {
    out[r].assign(count * n + 1, T(0));
    if (in_place) std::memcpy(out[r].data() + count * r, in[r].data(), count * sizeof(T));
    EXPECT_OK(ncclAllGather(in_place ? out[r].data() + count * r : in[r].data(), out[r].data(),
                            count, type, comms[r], 0));
  }
  EXPECT_OK(ncclGroupEnd());
  for (int r = 0; r < n; ++r)
    for (int q = 0; q < n; ++q)
      if (count > 0 && std::memcmp(out[r].data() + count * q, in[q].data(), count * sizeof(T)) != 0)
        fail("ncclAllGather count " + std::to_string(count) + " " + what);
}

// --sim-gpus: the same inputs as run_all, in device memory, on each rank's stream.
template <typename T>
void run_on_gpus(std::vector<ncclComm_t>& comms, std::vector<cudaStream_t>& streams, ncclDataType_t type,
                 size_t count, bool in_place) {
  const int n = static_cast<int>(comms.size());
  const size_t bytes = (count * n + 1) * sizeof(T);
  std::vector<std::vector<T>> in(n);
  std::vector<void*> din(n), dout(n);
  for (int r = 0; r < n; ++r) {
    in[r].resize(count * n + 1);
    for (size_t i = 0; i < in[r].size(); ++i) in[r][i] = static_cast<T>(r + 1 + static_cast<int>(i % 5));
    if (accord_device_alloc(&din[r], bytes, r) != ACCORD_SUCCESS ||
        accord_device_alloc(&dout[r], bytes, r) != ACCORD_SUCCESS) {
      fail("accord_device_alloc");
      return;
    }
  }
  auto reset = [&] {
    // accord_device_memcpy does not wait for streams: every rank's earlier work must be done
    // before its buffers are rewritten (ranks whose results were not fetched included).
    for (int r = 0; r < n; ++r)
      if (accord_stream_synchronize(reinterpret_cast<accord_stream_t>(streams[r])) != ACCORD_SUCCESS)
        fail("accord_stream_synchronize before reset");
    for (int r = 0; r < n; ++r) {
      if (accord_device_memcpy(din[r], in[r].data(), bytes) != ACCORD_SUCCESS) fail("memcpy h2d");
      std::vector<T> zero(count * n + 1, T(0));
      if (accord_device_memcpy(dout[r], zero.data(), bytes) != ACCORD_SUCCESS) fail("memcpy h2d");
    }
  };
  auto fetch = [&](int r, void* d) {
    std::vector<T> h(count * n + 1);
    if (accord_stream_synchronize(reinterpret_cast<accord_stream_t>(streams[r])) != ACCORD_SUCCESS)
      fail(std::string("accord_stream_synchronize: ") + ncclGetLastError(nullptr));
    if (accord_device_memcpy(h.data(), d, bytes) != ACCORD_SUCCESS) fail("memcpy d2h");
    return h;
  };
  auto value = [&](int r, size_t i) { return static_cast<double>(r + 1 + static_cast<int>(i % 5)); };
  const std::string what = std::string(in_place ? " in place" : " out of place") + " count " + std::to_string(count);
  for (ncclRedOp_t op : {ncclSum, ncclProd, ncclMin, ncclMax}) {
    reset();
    EXPECT_OK(ncclGroupStart());
    for (int r = 0; r < n; ++r)
      EXPECT_OK(ncclAllReduce(in_place ? din[r] : din[r], in_place ? din[r] : dout[r], count, type, op, comms[r],
                              streams[r]));
    EXPECT_OK(ncclGroupEnd());
    for (int r = 0; r < n; ++r) {
      std::vector<T> got = fetch(r, in_place ? din[r] : dout[r]);
      for (size_t i = 0; i < count; ++i) {
        double acc = op == ncclProd ? 1 : op == ncclMin ? 1e9 : op == ncclMax ? -1e9 : 0;
        for (int q = 0; q < n; ++q)
          acc = op == ncclSum ? acc + value(q, i) : op == ncclProd ? acc * value(q, i)
                : op == ncclMin ? std::min(acc, value(q, i)) : std::max(acc, value(q, i));
        if (got[i] != static_cast<T>(acc)) {
          fail("GPU ncclAllReduce op " + std::to_string(op) + what);
          break;
        }
      }
    }
  }
  // broadcast from the last rank, reduce (sum) to rank 0, all-gather
  reset();
  EXPECT_OK(ncclGroupStart());
  for (int r = 0; r < n; ++r)
    EXPECT_OK(ncclBroadcast(din[r], in_place ? din[r] : dout[r], count, type, n - 1, comms[r], streams[r]));
  EXPECT_OK(ncclGroupEnd());
  for (int r = 0; r < n; ++r) {
    std::vector<T> got = fetch(r, in_place ? din[r] : dout[r]);
    if (count > 0 && std::memcmp(got.data(), in[n - 1].data(), count * sizeof(T)) != 0)
      fail("GPU ncclBroadcast" + what);
  }
  reset();
  EXPECT_OK(ncclGroupStart());
  for (int r = 0; r < n; ++r)
    EXPECT_OK(ncclReduce(din[r], in_place ? din[r] : dout[r], count, type, ncclSum, 0, comms[r], streams[r]));
  EXPECT_OK(ncclGroupEnd());
  {
    std::vector<T> got = fetch(0, in_place ? din[0] : dout[0]);
    for (size_t i = 0; i < count; ++i) {
      double acc = 0;
      for (int q = 0; q < n; ++q) acc += value(q, i);
      if (got[i] != static_cast<T>(acc)) {
        fail("GPU ncclReduce" + what);
        break;
      }
    }
  }
  reset();
  EXPECT_OK(ncclGroupStart());
  for (int r = 0; r < n; ++r) {
    if (in_place) {
      // all-gather in place: this rank's block already sits at its place in the output
      std::vector<T> h(count * n + 1, T(0));
      std::memcpy(h.data() + count * r, in[r].data(), count * sizeof(T));
      if (accord_device_memcpy(dout[r], h.data(), bytes) != ACCORD_SUCCESS) fail("memcpy h2d");
    }
    EXPECT_OK(ncclAllGather(in_place ? static_cast<T*>(dout[r]) + count * r : din[r], dout[r], count, type,
                            comms[r], streams[r]));
  }
  EXPECT_OK(ncclGroupEnd());
  for (int r = 0; r < n; ++r) {
    std::vector<T> got = fetch(r, dout[r]);
    for (int q = 0; q < n; ++q)
      if (count > 0 && std::memcmp(got.data() + count * q, in[q].data(), count * sizeof(T)) != 0)
        fail("GPU ncclAllGather" + what);
  }
  reset();
  EXPECT_OK(ncclGroupStart());
  for (int r = 0; r < n; ++r)
    EXPECT_OK(ncclReduceScatter(din[r], in_place ? static_cast<T*>(din[r]) + count * r : dout[r], count, type,
                                ncclMax, comms[r], streams[r]));
  EXPECT_OK(ncclGroupEnd());
  for (int r = 0; r < n; ++r) {
    std::vector<T> got = fetch(r, in_place ? din[r] : dout[r]);
    const size_t base = in_place ? count * r : 0;
    for (size_t i = 0; i < count; ++i) {
      double acc = -1e9;
      for (int q = 0; q < n; ++q) acc = std::max(acc, value(q, count * r + i));
      if (got[base + i] != static_cast<T>(acc)) {
        fail("GPU ncclReduceScatter" + what);
        break;
      }
    }
  }
  for (int r = 0; r < n; ++r) {
    accord_stream_synchronize(reinterpret_cast<accord_stream_t>(streams[r]));
    accord_device_free(din[r]);
    accord_device_free(dout[r]);
  }
}

// --sim-gpus: point-to-point on device buffers (a ring of ncclSend/ncclRecv in a group, as
// PyTorch's batch_isend_irecv issues it, and ncclAlltoAll, each larger than a FIFO), and
// ncclAvg and pre-multiplied sums (scalar on the host and in device memory) of device buffers.
void p2p_and_premul_on_gpus(std::vector<ncclComm_t>& comms, std::vector<cudaStream_t>& streams, size_t count) {
  const int n = static_cast<int>(comms.size());
  const size_t bytes = (count * n + 1) * sizeof(int32_t);
  std::vector<void*> din(n), dout(n), dscalar(n);
  std::vector<std::vector<int32_t>> in(n);
  for (int r = 0; r < n; ++r) {
    in[r].resize(count * n + 1);
    for (size_t i = 0; i < in[r].size(); ++i) in[r][i] = static_cast<int32_t>(r * 100000 + i);
    const int32_t scalar = 1 << r;
    if (accord_device_alloc(&din[r], bytes, r) != ACCORD_SUCCESS || accord_device_alloc(&dout[r], bytes, r) != ACCORD_SUCCESS ||
        accord_device_alloc(&dscalar[r], sizeof scalar, r) != ACCORD_SUCCESS ||
        accord_device_memcpy(din[r], in[r].data(), bytes) != ACCORD_SUCCESS ||
        accord_device_memcpy(dscalar[r], &scalar, sizeof scalar) != ACCORD_SUCCESS) {
      fail("accord_device_alloc/memcpy for p2p");
      return;
    }
  }
  auto fetch = [&](int r) {
    std::vector<int32_t> h(count * n + 1);
    if (accord_stream_synchronize(reinterpret_cast<accord_stream_t>(streams[r])) != ACCORD_SUCCESS)
      fail(std::string("accord_stream_synchronize: ") + ncclGetLastError(nullptr));
    if (accord_device_memcpy(h.data(), dout[r], bytes) != ACCORD_SUCCESS) fail("memcpy d2h");
    return h;
  };
  const std::string what = " count " + std::to_string(count);
  // Ring: rank r sends to r + 1 and receives from r - 1 in one group.
  EXPECT_OK(ncclGroupStart());
  for (int r = 0; r < n; ++r) {
    EXPECT_OK(ncclRecv(dout[r], count, ncclInt32, (r + n - 1) % n, comms[r], streams[r]));
    EXPECT_OK(ncclSend(din[r], count, ncclInt32, (r + 1) % n, comms[r], streams[r]));
  }
  EXPECT_OK(ncclGroupEnd());
  for (int r = 0; r < n; ++r) {
    std::vector<int32_t> got = fetch(r);
    if (count > 0 && std::memcmp(got.data(), in[(r + n - 1) % n].data(), count * sizeof(int32_t)) != 0)
      fail("GPU ncclSend/ncclRecv ring" + what + " at rank " + std::to_string(r));
  }
  // All-to-all: block q of rank r's output is block r of rank q's input.
  EXPECT_OK(ncclGroupStart());
  for (int r = 0; r < n; ++r) EXPECT_OK(ncclAlltoAll(din[r], dout[r], count, ncclInt32, comms[r], streams[r]));
  EXPECT_OK(ncclGroupEnd());
  for (int r = 0; r < n; ++r) {
    std::vector<int32_t> got = fetch(r);
    for (int q = 0; q < n; ++q)
      if (count > 0 && std::memcmp(got.data() + count * q, in[q].data() + count * r, count * sizeof(int32_t)) != 0)
        fail("GPU ncclAlltoAll" + what + " at rank " + std::to_string(r) + " block " + std::to_string(q));
  }
  // ncclAvg, and PreMulSum with rank r's scalar 2^r on the host and in device memory.
  for (int how = 0; how < 3; ++how) {
    std::vector<ncclRedOp_t> ops(n, ncclAvg);
    EXPECT_OK(ncclGroupStart());
    for (int r = 0; r < n; ++r) {
      int32_t scalar = 1 << r;
      if (how == 1) EXPECT_OK(ncclRedOpCreatePreMulSum(&ops[r], &scalar, ncclInt32, ncclScalarHostImmediate, comms[r]));
      if (how == 2) EXPECT_OK(ncclRedOpCreatePreMulSum(&ops[r], dscalar[r], ncclInt32, ncclScalarDevice, comms[r]));
      EXPECT_OK(ncclAllReduce(din[r], dout[r], count, ncclInt32, ops[r], comms[r], streams[r]));
    }
    EXPECT_OK(ncclGroupEnd());
    for (int r = 0; r < n; ++r) {
      std::vector<int32_t> got = fetch(r);
      for (size_t i = 0; i < count; ++i) {
        int64_t want = 0;
        for (int q = 0; q < n; ++q) want += (how == 0 ? 1 : (1 << q)) * static_cast<int64_t>(in[q][i]);
        if (how == 0) want /= n;
        if (got[i] != static_cast<int32_t>(want)) {
          fail(std::string("GPU ncclAllReduce ") + (how == 0 ? "ncclAvg" : how == 1 ? "PreMulSum (host scalar)" : "PreMulSum (device scalar)") + what);
          break;
        }
      }
      if (how > 0) EXPECT_OK(ncclRedOpDestroy(ops[r], comms[r]));
    }
  }
  for (int r = 0; r < n; ++r) {
    accord_stream_synchronize(reinterpret_cast<accord_stream_t>(streams[r]));
    accord_device_free(din[r]);
    accord_device_free(dout[r]);
    accord_device_free(dscalar[r]);
  }
}

void expect_invalid_usage(ncclResult_t r, const char* what) {
  if (r != ncclInvalidUsage)
    fail(std::string(what) + " returned " + std::to_string(r) + ", not ncclInvalidUsage");
  else if (std::strlen(ncclGetLastError(nullptr)) == 0)
    fail(std::string(what) + ": no message in ncclGetLastError");
  else
    std::printf("%s -> ncclInvalidUsage: %s\n", what, ncclGetLastError(nullptr));
}

int sim_gpus_check(int n) {
  int have = 0;
  if (accord_device_count(&have) != ACCORD_SUCCESS || have < n) {
    std::fprintf(stderr, "--sim-gpus %d: %d GPUs (set ACCORD_SIM_TOPO to a topology file with enough)\n", n, have);
    return 1;
  }
  std::vector<int> devs(n);
  for (int r = 0; r < n; ++r) devs[r] = r;
  std::vector<ncclComm_t> comms(n);
  EXPECT_OK(ncclCommInitAll(comms.data(), n, devs.data()));
  std::vector<cudaStream_t> streams(n);
  for (int r = 0; r < n; ++r) {
    int dev = -1;
    EXPECT_OK(ncclCommCuDevice(comms[r], &dev));
    if (dev != r) fail("ncclCommCuDevice of rank " + std::to_string(r) + " is " + std::to_string(dev));
    accord_stream_t s = nullptr;
    if (accord_stream_create(&s, r) != ACCORD_SUCCESS) fail("accord_stream_create");
    streams[r] = reinterpret_cast<cudaStream_t>(s);
  }
  for (size_t count : {size_t{0}, size_t{1}, size_t{1009}, size_t{70001}})
    for (bool in_place : {false, true}) {
      run_on_gpus<float>(comms, streams, ncclFloat32, count, in_place);
      run_on_gpus<int32_t>(comms, streams, ncclInt32, count, in_place);
      if (!in_place) p2p_and_premul_on_gpus(comms, streams, count);
    }
  run_on_gpus<double>(comms, streams, ncclFloat64, 1009, false);
  run_on_gpus<uint8_t>(comms, streams, ncclUint8, 1009, true);
  // Mistakes are refused at the call with a message, and nothing is enqueued (the collectives
  // after them still work): a send of device buffers to a rank that does not exist, and a
  // group whose sends on one communicator name two streams.
  {
    void* d = nullptr;
    void* e = nullptr;
    if (accord_device_alloc(&d, 4096, 0) != ACCORD_SUCCESS || accord_device_alloc(&e, 4096, 0) != ACCORD_SUCCESS)
      fail("accord_device_alloc");
    ncclResult_t r = ncclSend(d, 16, ncclFloat32, n, comms[0], streams[0]);
    std::string msg = ncclGetLastError(nullptr);
    if (r != ncclInvalidArgument || msg.find("peer " + std::to_string(n)) == std::string::npos)
      fail("ncclSend of device buffers to rank " + std::to_string(n) + " returned " + std::to_string(r) + " (" + msg + ")");
    accord_stream_t other = nullptr;
    if (accord_stream_create(&other, 0) != ACCORD_SUCCESS) fail("accord_stream_create");
    EXPECT_OK(ncclGroupStart());
    EXPECT_OK(ncclSend(d, 16, ncclFloat32, 1, comms[0], streams[0]));
    EXPECT_OK(ncclRecv(e, 16, ncclFloat32, 1, comms[0], reinterpret_cast<cudaStream_t>(other)));
    expect_invalid_usage(ncclGroupEnd(), "a group of sends and receives of one rank on two streams");
    accord_stream_destroy(other);
    // Stream 0 is CUDA's legacy default stream to NCCL (and PyTorch passes it for every
    // async_op=False collective): it reaches Accord as cudaStreamLegacy, which the simulation
    // does not have, instead of as "no stream" (Note [Stream 0] in nccl_layer.hpp).
    {
      const ncclResult_t r = ncclAllReduce(d, d, 16, ncclFloat32, ncclSum, comms[0], nullptr);
      const std::string msg = ncclGetLastError(nullptr);
      if (r != ncclInvalidArgument || msg.find("legacy default") == std::string::npos)
        fail("ncclAllReduce on device buffers with stream 0 returned " + std::to_string(r) + " (" + msg +
             "), not ncclInvalidArgument naming CUDA's legacy default stream");
      else
        std::printf("stream 0 -> cudaStreamLegacy: %s\n", msg.c_str());
    }
    accord_device_free(d);
    accord_device_free(e);
  }
  run_on_gpus<float>(comms, streams, ncclFloat32, 1009, false);
  // ncclMemAlloc'ed memory registered with a communicator (Note [User buffers mapped into
  // peers]): ncclMemFree refuses it until ncclCommDeregister, then frees it.
  {
    void* m = nullptr;
    void* h = nullptr;
    EXPECT_OK(ncclMemAlloc(&m, 1 << 16));
    EXPECT_OK(ncclCommRegister(comms[0], static_cast<char*>(m) + 256, 4096, &h));
    if (h == nullptr) fail("ncclCommRegister of ncclMemAlloc'ed memory gave no handle");
    const ncclResult_t r = ncclMemFree(m);
    const std::string msg = ncclGetLastError(nullptr);
    if (r != ncclInvalidUsage || msg.find("still registered") == std::string::npos)
      fail("ncclMemFree of registered memory returned " + std::to_string(r) + " (" + msg + ")");
    EXPECT_OK(ncclCommDeregister(comms[0], h));
    EXPECT_OK(ncclMemFree(m));
  }
#if NCCL_CHECK_FAKE_CUDA_GET_DEVICE
  // ncclCommInitRank puts its rank on the current CUDA device.
  {
    g_current_device = n - 1;
    ncclUniqueId id;
    EXPECT_OK(ncclGetUniqueId(&id));
    ncclComm_t one = nullptr;
    EXPECT_OK(ncclCommInitRank(&one, 1, id, 0));
    int dev = -1;
    EXPECT_OK(ncclCommCuDevice(one, &dev));
    if (dev != n - 1) fail("ncclCommInitRank on current device " + std::to_string(n - 1) + " made a rank on GPU " + std::to_string(dev));
    EXPECT_OK(ncclCommDestroy(one));
    g_current_device = 0;
  }
#endif
  for (int r = 0; r < n; ++r) {
    ncclResult_t async = ncclInternalError;
    EXPECT_OK(ncclCommGetAsyncError(comms[r], &async));
    if (async != ncclSuccess) fail("ncclCommGetAsyncError after GPU collectives");
    accord_stream_destroy(reinterpret_cast<accord_stream_t>(streams[r]));
    EXPECT_OK(ncclCommDestroy(comms[r]));
  }
  if (g_failures == 0) std::printf("nccl_check --sim-gpus %d: every collective exact on simulated GPUs\n", n);
  return g_failures == 0 ? 0 : 1;
}


int dlopen_check(const char* dir) {
  std::string path = std::string(dir) + "/libnccl.so.2";
  void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (h == nullptr) return std::fprintf(stderr, "FAIL dlopen %s: %s\n", path.c_str(), dlerror()), 1;
  // ncclCommCuDevice, and the 38 names PyTorch 2.11's libtorch_cuda.so imports.
  const char* names[] = {
      "ncclCommCuDevice",       "ncclAllGather",          "ncclAllReduce",
      "ncclAlltoAll",           "ncclBcast",              "ncclBroadcast",
      "ncclCommAbort",          "ncclCommCount",          "ncclCommDeregister",
      "ncclCommDestroy",        "ncclCommFinalize",       "ncclCommGetAsyncError",
      "ncclCommInitAll",        "ncclCommInitRank",       "ncclCommInitRankConfig",
      "ncclCommInitRankScalable", "ncclCommRegister",     "ncclCommShrink",
      "ncclCommSplit",          "ncclCommUserRank",       "ncclCommWindowDeregister",
      "ncclCommWindowRegister", "ncclDevCommCreate",      "ncclDevCommDestroy",
      "ncclGetErrorString",     "ncclGetLastError",       "ncclGetUniqueId",
      "ncclGetVersion",         "ncclGroupEnd",           "ncclGroupSimulateEnd",
      "ncclGroupStart",         "ncclMemAlloc",           "ncclMemFree",
      "ncclRecv",               "ncclRedOpCreatePreMulSum", "ncclRedOpDestroy",
      "ncclReduce",             "ncclReduceScatter",      "ncclSend"};
  static_assert(sizeof names / sizeof names[0] == 39, "ncclCommCuDevice + PyTorch's 38");
  for (const char* name : names)
    if (dlsym(h, name) == nullptr)
      return std::fprintf(stderr, "FAIL %s lacks %s\n", path.c_str(), name), 1;
  auto init_all = reinterpret_cast<decltype(&ncclCommInitAll)>(dlsym(h, "ncclCommInitAll"));
  auto all_reduce = reinterpret_cast<decltype(&ncclAllReduce)>(dlsym(h, "ncclAllReduce"));
  auto group_start = reinterpret_cast<decltype(&ncclGroupStart)>(dlsym(h, "ncclGroupStart"));
  auto group_end = reinterpret_cast<decltype(&ncclGroupEnd)>(dlsym(h, "ncclGroupEnd"));
  auto destroy = reinterpret_cast<decltype(&ncclCommDestroy)>(dlsym(h, "ncclCommDestroy"));
  ncclComm_t comms[2];
  if (init_all(comms, 2, nullptr) != ncclSuccess)
    return std::fprintf(stderr, "FAIL init through dlopen\n"), 1;
  int a[3] = {1, 2, 3}, b[3] = {10, 20, 30};
  group_start();
  all_reduce(a, a, 3, ncclInt32, ncclSum, comms[0], 0);
  all_reduce(b, b, 3, ncclInt32, ncclSum, comms[1], 0);
  if (group_end() != ncclSuccess || a[2] != 33 || b[0] != 11)
    return std::fprintf(stderr, "FAIL dlopen sum\n"), 1;
  destroy(comms[0]);
  destroy(comms[1]);
  std::printf("nccl_check: %s has all 39 names and runs an all-reduce: ok\n", path.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 2 && std::strcmp(argv[1], "--dlopen") == 0) return dlopen_check(argv[2]);
  if (argc > 2 && std::strcmp(argv[1], "--sim-gpus") == 0) return sim_gpus_check(std::atoi(argv[2]));
  int version = 0;
  EXPECT_OK(ncclGetVersion(&version));
  if (version != NCCL_VERSION_CODE) fail("ncclGetVersion");

  for (int n : {2, 3}) {
    std::vector<ncclComm_t> comms(n);
    EXPECT_OK(ncclCommInitAll(comms.data(), n, nullptr));
    for (int r = 0; r < n; ++r) {
      int rank = -1, count = -1;
      EXPECT_OK(ncclCommUserRank(comms[r], &rank));
      EXPECT_OK(ncclCommCount(comms[r], &count));
      if (rank != r || count != n) fail("ncclCommUserRank / ncclCommCount");
    }
    for (size_t count : {size_t{0}, size_t{1}, size_t{1009}, size_t{70001}})
      for (bool in_place : {false, true}) {
        run_all<float>(comms, ncclFloat32, count, in_place);
        run_all<int32_t>(comms, ncclInt32, count, in_place);
        run_all<double>(comms, ncclFloat64, count, in_place);
        run_all<uint8_t>(comms, ncclUint8, count, in_place);
        run_all<int64_t>(comms, ncclInt64, count, in_place);
      }
    ncclResult_t async = ncclInternalError;
    EXPECT_OK(ncclCommGetAsyncError(comms[0], &async));
    if (async != ncclSuccess) fail("ncclCommGetAsyncError");

    // Unsupported calls: ncclInvalidUsage and a message, never a crash.
    int device = 0;
    expect_invalid_usage(ncclCommCuDevice(comms[0], &device), "ncclCommCuDevice (host ranks)");
    float f = 1;
    expect_invalid_usage(ncclAllReduce(&f, &f, 1, ncclFloat8e4m3, ncclSum, comms[0], 0),
                         "float8 all-reduce");
    // An op that ncclRedOpCreatePreMulSum did not make: NCCL's ncclInvalidArgument.
    if (ncclAllReduce(&f, &f, 1, ncclFloat32, static_cast<ncclRedOp_t>(ncclNumOps), comms[0], 0) !=
        ncclInvalidArgument)
      fail("an op never created is not ncclInvalidArgument");
    expect_invalid_usage(ncclGroupEnd(), "ncclGroupEnd without ncclGroupStart");
    if (ncclAllReduce(&f, &f, 1, ncclFloat32, ncclSum, nullptr, 0) != ncclInvalidArgument)
      fail("NULL comm is not ncclInvalidArgument");
    for (ncclComm_t c : comms) EXPECT_OK(ncclCommDestroy(c));
  }

  // One rank per thread: unique id + ncclCommInitRank, as one process per GPU would.
  ncclUniqueId id;
  EXPECT_OK(ncclGetUniqueId(&id));
  const int n = 3;
  std::vector<std::thread> threads;
  std::vector<int> sums(n, 0);
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      ncclComm_t comm;
      EXPECT_OK(ncclCommInitRank(&comm, n, id, r));
      std::vector<int64_t> v(1000, r + 1);
      EXPECT_OK(ncclAllReduce(v.data(), v.data(), v.size(), ncclInt64, ncclSum, comm, 0));
      sums[r] = static_cast<int>(v[999]);
      EXPECT_OK(ncclCommDestroy(comm));
    });
  for (auto& t : threads) t.join();
  for (int r = 0; r < n; ++r)
    if (sums[r] != 6) fail("ncclCommInitRank threads all-reduce");

  std::printf(g_failures == 0 ? "nccl_check: ok\n" : "nccl_check: %d failures\n", g_failures);
  return g_failures == 0 ? 0 : 1;
}
