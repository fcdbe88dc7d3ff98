// Collectives on device buffers of simulated GPUs, every rank in this process (init_all with a
// device list, one thread driving all of them through groups). Exact results for every
// collective over several dtypes, ops and sizes; the transport of every GPU pair; NCCL-style
// asynchrony (the call returns before the stream ran; later work sees the result); a failure
// in the device worker becomes the asynchronous error and does not hang the stream.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "api/handles.hpp"
#include "tests/gpu_path/elements.hpp"
#include "core/settings.hpp"
#include "include/accord/accord.h"
#include "include/accord/accord_device.h"
#include "topology/formats.hpp"
#include "transport/device/device_runtime.hpp"

namespace {

#define OK(call) ASSERT_EQ((call), ACCORD_SUCCESS) << accord_last_error(nullptr)

struct Job {
  int n = 0;
  std::vector<accord_comm_t> comms;
  std::vector<accord_stream_t> streams;
  void init() {
    OK(accord_device_count(&n));
    // The 'gpu' suite runs this binary without ACCORD_SIM_TOPO: real GPUs, or skip.
    if (n < 2 && std::getenv("ACCORD_SIM_TOPO") == nullptr)
      GTEST_SKIP() << "needs 2 real GPUs (found " << n << ")";
    ASSERT_GT(n, 1) << "ACCORD_SIM_TOPO must name a machine with GPUs";
    std::vector<int> devs(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) devs[static_cast<size_t>(i)] = i;
    comms.assign(static_cast<size_t>(n), nullptr);
    streams.assign(static_cast<size_t>(n), nullptr);
    OK(accord_comm_init_all(comms.data(), n, devs.data()));
    for (int i = 0; i < n; ++i) OK(accord_stream_create(&streams[static_cast<size_t>(i)], i));
  }
  ~Job() {
    for (accord_stream_t s : streams)
      if (s) accord_stream_destroy(s);
    for (accord_comm_t c : comms)
      if (c) accord_comm_destroy(c);
  }
};

size_t esize(accord_datatype_t d) { return accord_dtype_size(d); }

// Small integers, exact in every dtype used here and in any summation order.
double value(int rank, size_t i) { return static_cast<double>(1 + rank + static_cast<int>(i % 5)); }

using accord::testing::get_element;
using accord::testing::put_element;

double fold(accord_red_op_t op, int n, size_t i) {
  double r = value(0, i);
  for (int k = 1; k < n; ++k) {
    double v = value(k, i);
    r = op == ACCORD_SUM ? r + v : op == ACCORD_MAX ? std::max(r, v) : std::min(r, v);
  }
  return r;
}

enum class Coll { kAllReduce, kReduceScatter, kAllGather, kBroadcast, kReduce };
const char* coll_name(Coll c) {
  static const char* names[] = {"all_reduce", "reduce_scatter", "all_gather", "broadcast",
                                "reduce"};
  return names[static_cast<int>(c)];
}

// Runs one collective on every rank with device buffers (group, one thread), then checks the
// output of every rank bit for bit.
void check(Job& job, Coll coll, accord_datatype_t dtype, accord_red_op_t op, size_t count) {
  const int n = job.n;
  const size_t es = esize(dtype);
  const size_t in_count = coll == Coll::kReduceScatter ? count * static_cast<size_t>(n) : count;
  const size_t out_count = coll == Coll::kAllGather ? count * static_cast<size_t>(n) : count;
  const int root = coll == Coll::kBroadcast ? 1 : n - 1;
  std::vector<void*> in(static_cast<size_t>(n)), out(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) {
    OK(accord_device_alloc(&in[static_cast<size_t>(r)], in_count * es + 1, r));
    OK(accord_device_alloc(&out[static_cast<size_t>(r)], out_count * es + 1, r));
    std::vector<uint8_t> host(in_count * es + 1);
    for (size_t i = 0; i < in_count; ++i) ASSERT_TRUE(put_element(dtype, host.data(), i, value(r, i))) << dtype;
    OK(accord_device_memcpy(in[static_cast<size_t>(r)], host.data(), host.size()));
    std::vector<uint8_t> poison(out_count * es + 1, 0xee);
    OK(accord_device_memcpy(out[static_cast<size_t>(r)], poison.data(), poison.size()));
  }
  OK(accord_group_start());
  for (int r = 0; r < n; ++r) {
    const size_t u = static_cast<size_t>(r);
    accord_comm_t c = job.comms[u];
    accord_stream_t s = job.streams[u];
    switch (coll) {
      case Coll::kAllReduce:
        OK(accord_all_reduce(in[u], out[u], count, dtype, op, c, s));
        break;
      case Coll::kReduceScatter:
        OK(accord_reduce_scatter(in[u], out[u], count, dtype, op, c, s));
        break;
      case Coll::kAllGather:
        OK(accord_all_gather(in[u], out[u], count, dtype, c, s));
        break;
      case Coll::kBroadcast:
        OK(accord_broadcast(in[u], out[u], count, dtype, root, c, s));
        break;
      case Coll::kReduce:
        OK(accord_reduce(in[u], out[u], count, dtype, op, root, c, s));
        break;
    }
  }
  OK(accord_group_end());
  for (int r = 0; r < n; ++r) OK(accord_stream_synchronize(job.streams[static_cast<size_t>(r)]));
  for (int r = 0; r < n; ++r) {
    accord_status_t async = ACCORD_SUCCESS;
    OK(accord_comm_get_async_error(job.comms[static_cast<size_t>(r)], &async));
    ASSERT_EQ(async, ACCORD_SUCCESS) << accord_last_error(job.comms[static_cast<size_t>(r)]);
    std::vector<uint8_t> host(out_count * es + 1);
    OK(accord_device_memcpy(host.data(), out[static_cast<size_t>(r)], host.size()));
    ASSERT_EQ(host[out_count * es], 0xee) << "wrote past the end";
    if (coll == Coll::kReduce && r != root) continue;
    for (size_t i = 0; i < out_count; ++i) {
      double want = 0;
      switch (coll) {
        case Coll::kAllReduce:
        case Coll::kReduce:
          want = fold(op, n, i);
          break;
        case Coll::kReduceScatter:
          want = fold(op, n, static_cast<size_t>(r) * count + i);
          break;
        case Coll::kAllGather:
          want = value(static_cast<int>(i / count), i % count);
          break;
        case Coll::kBroadcast:
          want = value(root, i);
          break;
      }
      ASSERT_EQ(get_element(dtype, host.data(), i), want)
          << coll_name(coll) << " rank " << r << " element " << i << " of " << out_count
          << " dtype " << dtype << " op " << op;
    }
  }
  for (int r = 0; r < n; ++r) {
    OK(accord_device_free(in[static_cast<size_t>(r)]));
    OK(accord_device_free(out[static_cast<size_t>(r)]));
  }
}

TEST(GpuPath, EveryCollectiveExact) {
  Job job;
  ASSERT_NO_FATAL_FAILURE(job.init());
  if (testing::Test::IsSkipped()) return;
  // 0, 1, a prime, more than one 256 KiB slot per rank segment.
  const size_t sizes[] = {0, 1, 13, 70001};
  for (size_t count : sizes) {
    for (accord_datatype_t d : {ACCORD_FLOAT32, ACCORD_INT32, ACCORD_FLOAT64}) {
      for (accord_red_op_t op : {ACCORD_SUM, ACCORD_MAX})
        ASSERT_NO_FATAL_FAILURE(check(job, Coll::kAllReduce, d, op, count));
    }
    ASSERT_NO_FATAL_FAILURE(check(job, Coll::kReduceScatter, ACCORD_FLOAT32, ACCORD_SUM, count));
    ASSERT_NO_FATAL_FAILURE(check(job, Coll::kReduceScatter, ACCORD_INT32, ACCORD_MIN, count));
    ASSERT_NO_FATAL_FAILURE(check(job, Coll::kAllGather, ACCORD_UINT8, ACCORD_SUM, count));
    ASSERT_NO_FATAL_FAILURE(check(job, Coll::kBroadcast, ACCORD_FLOAT64, ACCORD_SUM, count));
    ASSERT_NO_FATAL_FAILURE(check(job, Coll::kReduce, ACCORD_FLOAT32, ACCORD_MAX, count));
  }
}

// Without a group: one thread calls each rank in turn; every call only enqueues.
TEST(GpuPath, OneThreadWithoutGroup) {
  Job job;
  ASSERT_NO_FATAL_FAILURE(job.init());
  if (testing::Test::IsSkipped()) return;
  const size_t count = 1031;
  std::vector<void*> buf(static_cast<size_t>(job.n));
  for (int r = 0; r < job.n; ++r) {
    OK(accord_device_alloc(&buf[static_cast<size_t>(r)], count * 4, r));
    std::vector<float> h(count, static_cast<float>(r + 1));
    OK(accord_device_memcpy(buf[static_cast<size_t>(r)], h.data(), count * 4));
  }
  for (int r = 0; r < job.n; ++r)
    OK(accord_all_reduce(buf[static_cast<size_t>(r)], buf[static_cast<size_t>(r)], count,
                         ACCORD_FLOAT32, ACCORD_SUM, job.comms[static_cast<size_t>(r)],
                         job.streams[static_cast<size_t>(r)]));
  const float want = static_cast<float>(job.n * (job.n + 1) / 2);
  for (int r = 0; r < job.n; ++r) {
    OK(accord_stream_synchronize(job.streams[static_cast<size_t>(r)]));
    std::vector<float> h(count);
    OK(accord_device_memcpy(h.data(), buf[static_cast<size_t>(r)], count * 4));
    for (size_t i = 0; i < count; ++i) ASSERT_EQ(h[i], want) << "rank " << r << " element " << i;
    OK(accord_device_free(buf[static_cast<size_t>(r)]));
  }
}

// Note [Kernel order]: a collective on a new stream after the caller destroyed the stream of
// the previous one (PyTorch's side stream per step). Nothing may touch the destroyed stream
// (undefined behaviour in CUDA; the simulation fails any call on a destroyed stream id, Note
// [Device runtime rules]), and both collectives give exact results.
TEST(GpuPath, NewStreamAfterTheOldOneIsDestroyed) {
  Job job;
  ASSERT_NO_FATAL_FAILURE(job.init());
  if (testing::Test::IsSkipped()) return;
  const size_t count = 1031;
  const size_t n = static_cast<size_t>(job.n);
  std::vector<void*> buf(n);
  for (size_t r = 0; r < n; ++r) OK(accord_device_alloc(&buf[r], count * 4, static_cast<int>(r)));
  const int32_t want = job.n * (job.n + 1) / 2;
  for (int round = 0; round < 2; ++round) {
    for (size_t r = 0; r < n; ++r) {
      std::vector<int32_t> h(count, static_cast<int32_t>(r) + 1 + 100 * round);
      OK(accord_device_memcpy(buf[r], h.data(), count * 4));
    }
    OK(accord_group_start());
    for (size_t r = 0; r < n; ++r)
      OK(accord_all_reduce(buf[r], buf[r], count, ACCORD_INT32, ACCORD_SUM, job.comms[r],
                           job.streams[r]));
    OK(accord_group_end());
    for (size_t r = 0; r < n; ++r) {
      OK(accord_stream_synchronize(job.streams[r]));
      accord_status_t async = ACCORD_SUCCESS;
      OK(accord_comm_get_async_error(job.comms[r], &async));
      ASSERT_EQ(async, ACCORD_SUCCESS)
          << "round " << round << ": " << accord_last_error(job.comms[r]);
      std::vector<int32_t> h(count);
      OK(accord_device_memcpy(h.data(), buf[r], count * 4));
      for (size_t i = 0; i < count; ++i)
        ASSERT_EQ(h[i], want + 100 * round * job.n)
            << "round " << round << " rank " << r << " element " << i;
    }
    // The streams of round 0 go; round 1 runs on new ones.
    for (size_t r = 0; r < n; ++r) {
      OK(accord_stream_destroy(job.streams[r]));
      job.streams[r] = nullptr;
      OK(accord_stream_create(&job.streams[r], static_cast<int>(r)));
    }
  }
  for (size_t r = 0; r < n; ++r) OK(accord_device_free(buf[r]));
}

// Note [One stream per rank]: two ranks of one communicator on one GPU in one process. The
// legacy stream (cudaStreamLegacy, 0x1) and the per-thread stream (0x2) are refused; so is a
// stream that carries the other rank's collective, which waits for this rank's (it would
// queue behind it for ever). The refusal is at once, and the waiting rank ends on abort.
TEST(GpuPath, RanksOfOneGpuNeedStreamsOfTheirOwn) {
  int gpus = 0;
  OK(accord_device_count(&gpus));
  if (gpus == 0) GTEST_SKIP() << "no GPU";
  accord_comm_t comms[2] = {nullptr, nullptr};
  const int devs[2] = {0, 0};
  OK(accord_comm_init_all(comms, 2, devs));
  void* buf[2] = {nullptr, nullptr};
  for (int r = 0; r < 2; ++r) OK(accord_device_alloc(&buf[r], 64 * 4, 0));
  for (uintptr_t special : {uintptr_t{1}, uintptr_t{2}}) {
    EXPECT_EQ(accord_all_reduce(buf[1], buf[1], 64, ACCORD_FLOAT32, ACCORD_SUM, comms[1],
                                reinterpret_cast<accord_stream_t>(special)),
              ACCORD_ERR_INVALID_USAGE);
    const std::string msg = accord_last_error(comms[1]);
    for (const char* want :
         {"rank 1: all_reduce on cuda", "ranks 0 and 1", "share GPU 0", "a stream of its own"})
      EXPECT_NE(msg.find(want), std::string::npos) << want << " in: " << msg;
  }
  accord_stream_t shared = nullptr;
  OK(accord_stream_create(&shared, 0));
  const auto start = std::chrono::steady_clock::now();
  OK(accord_all_reduce(buf[0], buf[0], 64, ACCORD_FLOAT32, ACCORD_SUM, comms[0], shared));
  EXPECT_EQ(accord_all_reduce(buf[1], buf[1], 64, ACCORD_FLOAT32, ACCORD_SUM, comms[1], shared),
            ACCORD_ERR_INVALID_USAGE);
  const std::string msg = accord_last_error(comms[1]);
  for (const char* want : {"rank 1: all_reduce: stream", "rank 0's collective (seq 1)",
                           "a stream of its own", "accord_comm_abort"})
    EXPECT_NE(msg.find(want), std::string::npos) << want << " in: " << msg;
  // Rank 0's kernel waits for rank 1's, which never comes: abort ends it at once (not after
  // ACCORD_TIMEOUT_MS, 30 s here), and the stream goes on.
  OK(accord_comm_abort(comms[0]));
  OK(accord_stream_synchronize(shared));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
  OK(accord_stream_destroy(shared));
  accord_comm_destroy(comms[1]);
  for (int r = 0; r < 2; ++r) OK(accord_device_free(buf[r]));
}

accord::DeviceRuntime* runtime() {
  accord::Settings s;
  EXPECT_TRUE(accord::load_settings(&s).ok());
  return accord::process_device_runtime(s);
}
accord::Stream as_stream(accord_stream_t s) {
  return accord::Stream{reinterpret_cast<uintptr_t>(s)};
}

void gate_fn(void* arg) {
  auto* open = static_cast<std::atomic<bool>*>(arg);
  while (!open->load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
}
struct Seen {
  const float* host;
  float value = -1;
};
void see_fn(void* arg) {
  auto* s = static_cast<Seen*>(arg);
  s->value = s->host[0];
}

// The call returns while the caller's stream is still held by a gate before it (so the
// collective cannot have run); work enqueued after the call sees the result.
TEST(GpuPath, AsyncOnTheCallersStream) {
  Job job;
  ASSERT_NO_FATAL_FAILURE(job.init());
  if (testing::Test::IsSkipped()) return;
  accord::DeviceRuntime* rt = runtime();
  ASSERT_NE(rt, nullptr);
  const size_t count = 257;
  std::vector<void*> buf(static_cast<size_t>(job.n));
  std::vector<float*> pinned(static_cast<size_t>(job.n));
  std::vector<Seen> seen(static_cast<size_t>(job.n));
  std::atomic<bool> open{false};
  for (int r = 0; r < job.n; ++r) {
    const size_t u = static_cast<size_t>(r);
    OK(accord_device_alloc(&buf[u], count * 4, r));
    std::vector<float> h(count, static_cast<float>(r + 1));
    OK(accord_device_memcpy(buf[u], h.data(), count * 4));
    void* p = nullptr;
    ASSERT_TRUE(rt->alloc_host_pinned(count * 4, &p).ok());
    pinned[u] = static_cast<float*>(p);
    pinned[u][0] = -7;
    ASSERT_TRUE(rt->launch_host_func(as_stream(job.streams[u]), gate_fn, &open).ok());
  }
  OK(accord_group_start());
  for (int r = 0; r < job.n; ++r)
    OK(accord_all_reduce(buf[static_cast<size_t>(r)], buf[static_cast<size_t>(r)], count,
                         ACCORD_FLOAT32, ACCORD_SUM, job.comms[static_cast<size_t>(r)],
                         job.streams[static_cast<size_t>(r)]));
  OK(accord_group_end());
  for (int r = 0; r < job.n; ++r) {
    const size_t u = static_cast<size_t>(r);
    ASSERT_TRUE(rt->copy_async(accord::CopyKind::kDeviceToHost, pinned[u], buf[u], count * 4,
                               as_stream(job.streams[u]))
                    .ok());
    seen[u].host = pinned[u];
    ASSERT_TRUE(rt->launch_host_func(as_stream(job.streams[u]), see_fn, &seen[u]).ok());
  }
  // Every call returned while the streams were held: nothing ran yet.
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  for (int r = 0; r < job.n; ++r) EXPECT_EQ(pinned[static_cast<size_t>(r)][0], -7);
  open.store(true);
  const float want = static_cast<float>(job.n * (job.n + 1) / 2);
  for (int r = 0; r < job.n; ++r) {
    const size_t u = static_cast<size_t>(r);
    OK(accord_stream_synchronize(job.streams[u]));
    EXPECT_EQ(seen[u].value, want) << "rank " << r;
    for (size_t i = 0; i < count; ++i)
      ASSERT_EQ(pinned[u][i], want) << "rank " << r << " element " << i;
    ASSERT_TRUE(rt->free_host_pinned(pinned[u]).ok());
    OK(accord_device_free(buf[u]));
  }
}

// One rank: in place every collective returns (with the stream held by a gate) and leaves the
// buffer alone; out of place it is one copy of the input.
TEST(GpuPath, OneRankIsACopyOrNothing) {
  int n = 0;
  OK(accord_device_count(&n));
  if (n < 1) GTEST_SKIP() << "needs a GPU";
  accord::DeviceRuntime* rt = runtime();
  ASSERT_NE(rt, nullptr);
  accord_comm_t comm = nullptr;
  int dev = 0;
  OK(accord_comm_init_all(&comm, 1, &dev));
  accord_stream_t stream = nullptr;
  OK(accord_stream_create(&stream, 0));
  const size_t count = 1031;
  void* in = nullptr;
  void* out = nullptr;
  OK(accord_device_alloc(&in, count * 4, 0));
  OK(accord_device_alloc(&out, count * 4, 0));
  std::vector<float> h(count), zero(count, 0.0f), got(count);
  for (size_t i = 0; i < count; ++i) h[i] = static_cast<float>(i % 7);
  OK(accord_device_memcpy(in, h.data(), count * 4));
  std::atomic<bool> open{false};
  ASSERT_TRUE(rt->launch_host_func(as_stream(stream), gate_fn, &open).ok());
  OK(accord_all_reduce(in, in, count, ACCORD_FLOAT32, ACCORD_AVG, comm, stream));
  OK(accord_broadcast(in, in, count, ACCORD_FLOAT32, 0, comm, stream));
  OK(accord_reduce(in, in, count, ACCORD_FLOAT32, ACCORD_SUM, 0, comm, stream));
  OK(accord_all_gather(in, in, count, ACCORD_FLOAT32, comm, stream));
  OK(accord_reduce_scatter(in, in, count, ACCORD_FLOAT32, ACCORD_SUM, comm, stream));
  open.store(true);
  OK(accord_stream_synchronize(stream));
  for (int c = 0; c < 5; ++c) {
    OK(accord_device_memcpy(out, zero.data(), count * 4));
    accord_status_t s = c == 0   ? accord_all_reduce(in, out, count, ACCORD_FLOAT32, ACCORD_AVG, comm, stream)
                        : c == 1 ? accord_broadcast(in, out, count, ACCORD_FLOAT32, 0, comm, stream)
                        : c == 2 ? accord_reduce(in, out, count, ACCORD_FLOAT32, ACCORD_MAX, 0, comm, stream)
                        : c == 3 ? accord_all_gather(in, out, count, ACCORD_FLOAT32, comm, stream)
                                 : accord_reduce_scatter(in, out, count, ACCORD_FLOAT32, ACCORD_SUM, comm, stream);
    OK(s);
    OK(accord_stream_synchronize(stream));
    OK(accord_device_memcpy(got.data(), out, count * 4));
    EXPECT_EQ(got, h) << "collective " << c;
  }
  OK(accord_device_memcpy(got.data(), in, count * 4));
  EXPECT_EQ(got, h) << "an in-place call changed the buffer";
  OK(accord_device_free(in));
  OK(accord_device_free(out));
  OK(accord_stream_destroy(stream));
  OK(accord_comm_destroy(comm));
}

// Rank 0 disagrees on the dtype (same bytes, so the same algorithm everywhere): the device workers
// fail (mismatch), the error is the communicator's asynchronous error, and the streams are released
// all the same.
TEST(GpuPath, WorkerErrorIsAsyncAndReleasesTheStream) {
  // Ranks not next to rank 0 wait for messages that never come: they time out (quickly here).
  setenv("ACCORD_TIMEOUT_MS", "1500", 1);
  Job job;
  ASSERT_NO_FATAL_FAILURE(job.init());
  if (testing::Test::IsSkipped()) return;
  setenv("ACCORD_TIMEOUT_MS", "30000", 1);
  std::vector<void*> buf(static_cast<size_t>(job.n));
  for (int r = 0; r < job.n; ++r)
    OK(accord_device_alloc(&buf[static_cast<size_t>(r)], 4096 * 4, r));
  OK(accord_group_start());
  for (int r = 0; r < job.n; ++r)
    OK(accord_all_reduce(buf[static_cast<size_t>(r)], buf[static_cast<size_t>(r)], 4096,
                         r == 0 ? ACCORD_INT32 : ACCORD_FLOAT32, ACCORD_SUM,
                         job.comms[static_cast<size_t>(r)], job.streams[static_cast<size_t>(r)]));
  OK(accord_group_end());
  int failed = 0, mismatched = 0;
  for (int r = 0; r < job.n; ++r) {
    OK(accord_stream_synchronize(job.streams[static_cast<size_t>(r)]));
    accord_status_t async = ACCORD_SUCCESS;
    OK(accord_comm_get_async_error(job.comms[static_cast<size_t>(r)], &async));
    if (async != ACCORD_SUCCESS) {
      ++failed;
      mismatched += async == ACCORD_ERR_MISMATCH;
      EXPECT_TRUE(async == ACCORD_ERR_MISMATCH || async == ACCORD_ERR_TIMEOUT)
          << accord_status_string(async);
      // The failure's message reaches the caller's thread, naming the rank.
      const std::string message = accord_last_error(job.comms[static_cast<size_t>(r)]);
      EXPECT_NE(message.find("rank " + std::to_string(r)), std::string::npos) << message;
    }
  }
  EXPECT_EQ(failed, job.n);
  EXPECT_GT(mismatched, 0);
  // A later call on a failed communicator is refused at once.
  for (int r = 0; r < job.n; ++r) {
    accord_status_t async = ACCORD_SUCCESS;
    OK(accord_comm_get_async_error(job.comms[static_cast<size_t>(r)], &async));
    if (async == ACCORD_SUCCESS) continue;
    EXPECT_NE(accord_all_reduce(buf[static_cast<size_t>(r)], buf[static_cast<size_t>(r)], 16,
                                ACCORD_FLOAT32, ACCORD_SUM, job.comms[static_cast<size_t>(r)],
                                job.streams[static_cast<size_t>(r)]),
              ACCORD_SUCCESS);
  }
  for (int r = 0; r < job.n; ++r) OK(accord_device_free(buf[static_cast<size_t>(r)]));
}

// Host buffers on communicators with a GPU keep the synchronous host path, queued behind the
// device calls made before them (here: a device all-reduce, then a host one, in one group).
TEST(GpuPath, HostBuffersAfterDeviceCalls) {
  Job job;
  ASSERT_NO_FATAL_FAILURE(job.init());
  if (testing::Test::IsSkipped()) return;
  const size_t count = 100;
  std::vector<void*> dbuf(static_cast<size_t>(job.n));
  std::vector<std::vector<int32_t>> hbuf(static_cast<size_t>(job.n), std::vector<int32_t>(count));
  for (int r = 0; r < job.n; ++r) {
    OK(accord_device_alloc(&dbuf[static_cast<size_t>(r)], count * 4, r));
    std::vector<int32_t> h(count, r + 1);
    OK(accord_device_memcpy(dbuf[static_cast<size_t>(r)], h.data(), count * 4));
    hbuf[static_cast<size_t>(r)].assign(count, 10 * (r + 1));
  }
  OK(accord_group_start());
  for (int r = 0; r < job.n; ++r) {
    const size_t u = static_cast<size_t>(r);
    OK(accord_all_reduce(dbuf[u], dbuf[u], count, ACCORD_INT32, ACCORD_SUM, job.comms[u],
                         job.streams[u]));
    OK(accord_all_reduce(hbuf[u].data(), hbuf[u].data(), count, ACCORD_INT32, ACCORD_SUM,
                         job.comms[u], nullptr));
  }
  OK(accord_group_end());
  const int32_t want = job.n * (job.n + 1) / 2;
  for (int r = 0; r < job.n; ++r) {
    const size_t u = static_cast<size_t>(r);
    OK(accord_stream_synchronize(job.streams[u]));
    std::vector<int32_t> h(count);
    OK(accord_device_memcpy(h.data(), dbuf[u], count * 4));
    for (size_t i = 0; i < count; ++i) {
      ASSERT_EQ(h[i], want) << "device, rank " << r;
      ASSERT_EQ(hbuf[u][i], 10 * want) << "host, rank " << r;
    }
    OK(accord_device_free(dbuf[u]));
  }
}

// A buffer of another GPU, or host and device mixed, is refused naming the buffer.
TEST(GpuPath, WrongMemoryIsRefused) {
  Job job;
  ASSERT_NO_FATAL_FAILURE(job.init());
  if (testing::Test::IsSkipped()) return;
  void* other = nullptr;
  void* mine = nullptr;
  OK(accord_device_alloc(&other, 64, 1));
  OK(accord_device_alloc(&mine, 64, 0));
  std::vector<float> host(16);
  EXPECT_EQ(
      accord_all_reduce(other, other, 16, ACCORD_FLOAT32, ACCORD_SUM, job.comms[0], job.streams[0]),
      ACCORD_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(accord_last_error(job.comms[0])).find("GPU 1"), std::string::npos)
      << accord_last_error(job.comms[0]);
  EXPECT_EQ(accord_all_reduce(mine, host.data(), 16, ACCORD_FLOAT32, ACCORD_SUM, job.comms[0],
                              job.streams[0]),
            ACCORD_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(accord_last_error(job.comms[0])).find("host"), std::string::npos);
  OK(accord_device_free(other));
  OK(accord_device_free(mine));
}

// A device list naming a GPU past the last one fails at once, naming it (the machine's GPUs
// plus one: on a real machine with one GPU that is devlist {0, 1}, as collectives_test's
// Group.OneThreadDrivesSeveralRanks asks).
TEST(GpuPath, InitAllNamesAMissingGpu) {
  int n = 0;
  OK(accord_device_count(&n));
  if (n == 0) GTEST_SKIP() << "no GPU (collectives_test checks that case)";
  accord_comm_t comms[2] = {nullptr, nullptr};
  const int devs[2] = {0, n};
  EXPECT_EQ(accord_comm_init_all(comms, 2, devs), ACCORD_ERR_INVALID_ARGUMENT);
  const std::string msg = accord_last_error(nullptr);
  const std::string want = "devlist[1] = GPU " + std::to_string(n) + " does not exist";
  EXPECT_NE(msg.find(want), std::string::npos) << msg;
  EXPECT_EQ(comms[0], nullptr);
  EXPECT_EQ(comms[1], nullptr);
}

// GPU buffers between ranks that reach each other over TCP (here ACCORD_SHM_DISABLE=1; also
// other hosts, or another /dev/shm) are staged through pinned host memory (Note [Device data
// over TCP]): an all-reduce of every GPU in one group, exact. They used to be refused
// (ACCORD_ERR_UNSUPPORTED); tests/gpu_path's gpu_procs_*_tcp run every collective so.
TEST(GpuPath, DeviceBuffersOverTcp) {
  Job job;
  setenv("ACCORD_SHM_DISABLE", "1", 1);
  job.init();
  unsetenv("ACCORD_SHM_DISABLE");
  if (testing::Test::IsSkipped() || testing::Test::HasFatalFailure()) return;
  const size_t count = 1031;
  std::vector<void*> bufs(static_cast<size_t>(job.n));
  for (int r = 0; r < job.n; ++r) {
    std::vector<int32_t> host(count);
    for (size_t i = 0; i < count; ++i) host[i] = static_cast<int32_t>(value(r, i));
    OK(accord_device_alloc(&bufs[static_cast<size_t>(r)], count * 4, r));
    OK(accord_device_memcpy(bufs[static_cast<size_t>(r)], host.data(), count * 4));
  }
  OK(accord_group_start());
  for (int r = 0; r < job.n; ++r)
    OK(accord_all_reduce(bufs[static_cast<size_t>(r)], bufs[static_cast<size_t>(r)], count, ACCORD_INT32, ACCORD_SUM,
                         job.comms[static_cast<size_t>(r)], job.streams[static_cast<size_t>(r)]));
  OK(accord_group_end());
  for (int r = 0; r < job.n; ++r) {
    OK(accord_stream_synchronize(job.streams[static_cast<size_t>(r)]));
    std::vector<int32_t> got(count);
    OK(accord_device_memcpy(got.data(), bufs[static_cast<size_t>(r)], count * 4));
    for (size_t i = 0; i < count; ++i) {
      double want = 0;
      for (int k = 0; k < job.n; ++k) want += value(k, i);
      ASSERT_EQ(got[i], static_cast<int32_t>(want)) << "rank " << r << ", element " << i;
    }
    OK(accord_device_free(bufs[static_cast<size_t>(r)]));
  }
}

std::string plan_of(accord_comm_t c) {
  size_t len = 0;
  EXPECT_EQ(accord_comm_plan(c, nullptr, &len), ACCORD_SUCCESS);
  std::string s(len, '\0');
  EXPECT_EQ(accord_comm_plan(c, s.data(), &len), ACCORD_SUCCESS);
  s.resize(std::strlen(s.c_str()));
  return s;
}

// Every GPU pair is listed with the route the topology implies: p2p (one process) where both
// GPUs peer, host-staged exactly where they cannot (on the 4-GPU machine: {0,1} x {2,3}; on the
// DGX-1, wherever the fixture says), and host-staged everywhere with ACCORD_P2P_DISABLE=1. The
// channels the device path really uses are checked too, not only the printed plan.
TEST(GpuPath, PlanNamesEveryGpuPair) {
  Job job;
  ASSERT_NO_FATAL_FAILURE(job.init());
  if (testing::Test::IsSkipped()) return;
  const char* file = std::getenv("ACCORD_SIM_TOPO");
  if (file == nullptr) GTEST_SKIP() << "the expected routes come from ACCORD_SIM_TOPO's topology";
  accord::topo::System sys;
  ASSERT_TRUE(accord::topo::load_system_file(file, &sys).ok());
  const std::string plan = plan_of(job.comms[0]);
  const char* topo = std::getenv("ACCORD_TEST_TOPO");
  const bool disabled = std::getenv("ACCORD_P2P_DISABLE") != nullptr;
  int staged = 0;
  for (int a = 0; a < job.n; ++a)
    for (int b = a + 1; b < job.n; ++b) {
      const std::string head = "pair " + std::to_string(a) + "-" + std::to_string(b) + ": ";
      size_t at = plan.find(head);
      ASSERT_NE(at, std::string::npos) << plan;
      const std::string line = plan.substr(at, plan.find('\n', at) - at);
      const bool peer = sys.p2p(a, b) && sys.p2p(b, a) && !disabled;
      EXPECT_EQ(line.rfind(head + (peer ? "p2p (" : "host-staged ("), 0), 0u) << line;
      staged += !peer;
      if (disabled) {
        EXPECT_NE(line.find("ACCORD_P2P_DISABLE"), std::string::npos) << line;
      } else if (topo != nullptr && std::string(topo) == "tf4") {
        const bool cross = (a < 2) != (b < 2);
        EXPECT_EQ(line.find("cannot peer") != std::string::npos, cross) << line;
        EXPECT_EQ(peer, !cross) << line;
      }
      for (auto [from, to] : {std::pair{a, b}, std::pair{b, a}}) {
        const char* channel = job.comms[from]->impl->device_channel(to);
        ASSERT_NE(channel, nullptr);
        EXPECT_STREQ(channel, peer ? "p2p" : "host-staged") << "rank " << from << " -> " << to;
      }
    }
  if (topo != nullptr && std::string(topo) == "tf4" && !disabled) {
    EXPECT_EQ(staged, 4) << plan;
  }
}

// The ring runs in the topology's best order: on the 4-GPU machine it crosses between {0,1}
// and {2,3} (pairs that cannot peer) exactly twice; on the DGX-1 it never uses a pair that
// cannot peer (NVLink only).
TEST(GpuPath, RingAvoidsSlowHops) {
  Job job;
  ASSERT_NO_FATAL_FAILURE(job.init());
  if (testing::Test::IsSkipped()) return;
  const std::string plan = plan_of(job.comms[0]);
  std::vector<int> ring;
  const size_t at = plan.find("ring order");
  if (at == std::string::npos) {
    for (int r = 0; r < job.n; ++r) ring.push_back(r);
  } else {
    const std::string line =
        plan.substr(plan.find(':', at) + 1, plan.find('\n', at) - plan.find(':', at) - 1);
    size_t pos = 0;
    while (pos < line.size()) {
      char* end = nullptr;
      long v = std::strtol(line.c_str() + pos, &end, 10);
      if (end == line.c_str() + pos) break;
      ring.push_back(static_cast<int>(v));
      pos = static_cast<size_t>(end - line.c_str());
    }
  }
  ASSERT_EQ(static_cast<int>(ring.size()), job.n) << plan;
  int slow = 0;
  for (int i = 0; i < job.n; ++i) {
    int a = ring[static_cast<size_t>(i)], b = ring[static_cast<size_t>((i + 1) % job.n)];
    if (a > b) std::swap(a, b);
    const std::string head = "pair " + std::to_string(a) + "-" + std::to_string(b) + ": ";
    const size_t p = plan.find(head);
    ASSERT_NE(p, std::string::npos) << plan;
    slow += plan.substr(p, plan.find('\n', p) - p).find("cannot peer") != std::string::npos;
  }
  const char* topo = std::getenv("ACCORD_TEST_TOPO");
  EXPECT_EQ(slow, topo != nullptr && std::string(topo) == "tf4" ? 2 : 0) << plan;
}

}  // namespace
