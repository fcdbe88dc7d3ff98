// NCCL's collectives, point-to-point calls and groups on Accord (accord_nccl.cpp holds the
// communicator's life).
//
// Note [NCCL groups]: between ncclGroupStart and the outermost ncclGroupEnd this layer keeps
// the calls itself, on the calling thread, and replays them at the end: first every
// communicator creation of the group (init, split, shrink), each on its own thread since
// they wait for each other when one thread drives several ranks; then the collectives and
// point-to-point calls inside one accord_group_start/end, where each communicator's sends
// and receives progress together. Keeping them here is what lets ncclGroupSimulateEnd end a
// group without running it, and lets a pre-multiplied sum read its scalar (ncclScalarDevice)
// and scale its input when the group runs, as NCCL does.
#include <accord/accord.h>
#include <nccl.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "nccl_layer.hpp"

using namespace accord_nccl;

namespace {

struct Group {
  int depth = 0;
  std::vector<std::function<ncclResult_t()>> comm_jobs;
  std::vector<std::function<ncclResult_t()>> calls;
  std::vector<std::shared_ptr<std::vector<unsigned char>>>
      keep;  // scaled inputs, until the group ran
  double estimate_us = 0;
};
thread_local Group t_group;
thread_local bool t_replaying = false;  // inside end_group, running the group's calls

// ncclGroupSimulateEnd's model, per call: Accord's tuner is internal, so round, pessimistic
// host figures, 5 us plus the bytes at 5 GB/s (bench/README.md has measured ones). Not a
// GPU figure.
double estimate_us(size_t bytes) { return 5.0 + static_cast<double>(bytes) / 5000.0; }

// Runs `body` now, or at the outermost ncclGroupEnd inside a group (Note [NCCL groups]).
// The handle is checked now; its Accord communicator is looked up when the call runs.
template <typename Body>
ncclResult_t run_or_defer(ncclComm_t comm, const char* fn, size_t bytes, Body body) {
  ncclResult_t r = check_handle(comm, fn);
  if (r != ncclSuccess) return r;
  if (comm->finalized.load())
    return fail(ncclInvalidUsage,
                "%s: rank %d: called after ncclCommFinalize; only ncclCommDestroy may follow", fn,
                comm->rank);
  auto call = [comm, fn, body]() -> ncclResult_t {
    accord_comm_t c = nullptr;
    ncclResult_t res = ready(comm, fn, &c);
    return res != ncclSuccess ? res : body(c);
  };
  if (t_group.depth == 0) return call();
  t_group.calls.push_back(call);
  t_group.estimate_us += estimate_us(bytes);
  return ncclSuccess;
}

ncclResult_t end_group(ncclSimInfo_t* sim) {
  Group g = std::move(t_group);
  t_group = Group{};
  ncclResult_t first = ncclSuccess;
  if (!g.comm_jobs.empty()) {
    std::vector<ncclResult_t> results(g.comm_jobs.size(), ncclSuccess);
    std::vector<std::string> messages(g.comm_jobs.size());
    std::vector<std::thread> threads;
    for (size_t i = 0; i < g.comm_jobs.size(); ++i)
      threads.emplace_back([&, i] {
        results[i] = g.comm_jobs[i]();
        messages[i] = last_error();
      });
    for (auto& t : threads) t.join();
    for (size_t i = 0; i < results.size(); ++i)
      if (results[i] != ncclSuccess && first == ncclSuccess) {
        first = results[i];
        last_error() = messages[i];
      }
  }
  if (sim != nullptr) {
    sim->estimatedTime = static_cast<float>(g.estimate_us);  // the calls are dropped, not run
    return first;
  }
  if (g.calls.empty()) return first;
  accord_group_start();
  t_replaying = true;
  for (auto& call : g.calls) {
    ncclResult_t r = call();
    if (r != ncclSuccess && first == ncclSuccess) first = r;
  }
  t_replaying = false;
  const std::string queued_error = first != ncclSuccess ? last_error() : std::string();
  // The scaled inputs of pre-multiplied sums live in t_group.keep until the calls ran.
  ncclResult_t r = result(accord_group_end(), nullptr);
  t_group.keep.clear();
  if (first != ncclSuccess) {
    last_error() = queued_error;
    return first;
  }
  return r;
}

// ---- pre-multiplied sum ----

float half_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16, exp = (h >> 10) & 0x1f,
                 man = h & 0x3ff;
  uint32_t bits;
  if (exp == 0) {
    const float f = std::ldexp(static_cast<float>(man), -24);
    return sign ? -f : f;
  }
  bits = exp == 31 ? sign | 0x7f800000u | (man << 13) : sign | ((exp + 112) << 23) | (man << 13);
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

uint16_t float_to_half(float f) {  // round to nearest, ties to even
  uint32_t x;
  std::memcpy(&x, &f, sizeof x);
  const uint32_t sign = (x >> 16) & 0x8000;
  x &= 0x7fffffffu;
  if (x >= 0x7f800000u) return static_cast<uint16_t>(sign | (x > 0x7f800000u ? 0x7e00 : 0x7c00));
  if (x >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00);  // rounds past 65504
  if (x < 0x38800000u) {  // a half subnormal: units of 2^-24, scaling by 2^24 is exact
    float v;
    std::memcpy(&v, &x, sizeof v);
    return static_cast<uint16_t>(sign | static_cast<uint32_t>(std::nearbyint(v * 16777216.0f)));
  }
  const uint32_t man = x & 0x7fffff, rest = man & 0x1fff;
  uint32_t h = (((x >> 23) - 112) << 10) | (man >> 13);
  if (rest > 0x1000 || (rest == 0x1000 && (h & 1))) ++h;
  return static_cast<uint16_t>(sign | h);
}

float bf16_to_float(uint16_t b) {
  const uint32_t bits = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

uint16_t float_to_bf16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, sizeof x);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40);
  return static_cast<uint16_t>((x + 0x7fff + ((x >> 16) & 1)) >> 16);
}

// Integers multiply with wrap-around, as NCCL's kernels (two's complement).
template <typename T>
void scale_int(void* out, const void* in, size_t n, const void* scalar) {
  T s;
  std::memcpy(&s, scalar, sizeof s);
  const T* x = static_cast<const T*>(in);
  T* y = static_cast<T*>(out);
  for (size_t i = 0; i < n; ++i)
    y[i] = static_cast<T>(static_cast<uint64_t>(static_cast<int64_t>(x[i])) *
                          static_cast<uint64_t>(static_cast<int64_t>(s)));
}

template <typename T>
void scale_float(void* out, const void* in, size_t n, const void* scalar) {
  T s;
  std::memcpy(&s, scalar, sizeof s);
  const T* x = static_cast<const T*>(in);
  T* y = static_cast<T*>(out);
  for (size_t i = 0; i < n; ++i) y[i] = x[i] * s;
}

// Two 16-bit floats multiply exactly in float32 (11 + 11 and 8 + 8 significant bits), so
// rounding the product once gives the correctly rounded 16-bit product.
template <float (*ToFloat)(uint16_t), uint16_t (*FromFloat)(float)>
void scale_16(void* out, const void* in, size_t n, const void* scalar) {
  uint16_t s;
  std::memcpy(&s, scalar, sizeof s);
  const float fs = ToFloat(s);
  const uint16_t* x = static_cast<const uint16_t*>(in);
  uint16_t* y = static_cast<uint16_t*>(out);
  for (size_t i = 0; i < n; ++i) y[i] = FromFloat(ToFloat(x[i]) * fs);
}

void scale(ncclDataType_t t, void* out, const void* in, size_t n, const void* scalar) {
  switch (t) {
    case ncclInt8:
      return scale_int<int8_t>(out, in, n, scalar);
    case ncclUint8:
      return scale_int<uint8_t>(out, in, n, scalar);
    case ncclInt32:
      return scale_int<int32_t>(out, in, n, scalar);
    case ncclUint32:
      return scale_int<uint32_t>(out, in, n, scalar);
    case ncclInt64:
      return scale_int<int64_t>(out, in, n, scalar);
    case ncclUint64:
      return scale_int<uint64_t>(out, in, n, scalar);
    case ncclFloat16:
      return scale_16<half_to_float, float_to_half>(out, in, n, scalar);
    case ncclBfloat16:
      return scale_16<bf16_to_float, float_to_bf16>(out, in, n, scalar);
    case ncclFloat32:
      return scale_float<float>(out, in, n, scalar);
    case ncclFloat64:
      return scale_float<double>(out, in, n, scalar);
    default:
      return;
  }
}

enum class Reducing { kAllReduce, kReduce, kReduceScatter };

// A reducing collective. ncclSum..ncclAvg go straight to Accord; an op of
// ncclRedOpCreatePreMulSum scales this rank's input by its scalar into a buffer of its own,
// then sums: sum over ranks of (scalar * x), NCCL's definition.
ncclResult_t reduce_call(Reducing kind, const char* fn, const void* sendbuff, void* recvbuff,
                         size_t count, ncclDataType_t datatype, ncclRedOp_t op, int root,
                         ncclComm_t comm, cudaStream_t stream) {
  ncclResult_t r;
  if (!usable_dtype(datatype, fn, &r)) return r;
  if (int(op) < 0)
    return fail(ncclInvalidArgument,
                "%s: ncclRedOp_t %d is not an op; use ncclSum .. ncclAvg or one from "
                "ncclRedOpCreatePreMulSum",
                fn, static_cast<int>(op));
  const size_t in_count = kind == Reducing::kReduceScatter && comm != nullptr
                              ? count * static_cast<size_t>(comm->nranks)
                              : count;
  auto run = [=](accord_comm_t c, const void* send, accord_red_op_t aop) {
    const accord_stream_t stream_a = accord_stream(c, stream);
    const auto dt = static_cast<accord_datatype_t>(datatype);
    switch (kind) {
      case Reducing::kAllReduce:
        return result(accord_all_reduce(send, recvbuff, count, dt, aop, c, stream_a), c);
      case Reducing::kReduce:
        return result(accord_reduce(send, recvbuff, count, dt, aop, root, c, stream_a), c);
      case Reducing::kReduceScatter:
        return result(accord_reduce_scatter(send, recvbuff, count, dt, aop, c, stream_a), c);
    }
    return ncclInternalError;
  };
  if (int(op) < int(ncclNumOps))
    return run_or_defer(comm, fn, count * dtype_bytes(datatype), [=](accord_comm_t c) {
      return run(c, sendbuff, static_cast<accord_red_op_t>(op));
    });
  return run_or_defer(
      comm, fn, count * dtype_bytes(datatype), [=](accord_comm_t c) -> ncclResult_t {
        ncclComm::PreMulSum pm;
        {
          std::lock_guard<std::mutex> lock(comm->mutex);
          const size_t i = static_cast<size_t>(op) - ncclNumOps;
          if (i >= comm->premul.size() || !comm->premul[i].live)
            return fail(ncclInvalidArgument,
                        "%s: rank %d: op %d was not made by ncclRedOpCreatePreMulSum on this "
                        "communicator (or was destroyed)",
                        fn, comm->rank, static_cast<int>(op));
          pm = comm->premul[i];
        }
        if (pm.dtype != datatype)
          return fail(ncclInvalidArgument,
                      "%s: rank %d: op %d was made for ncclDataType_t %d but the call uses %d; "
                      "create the op with the collective's data type",
                      fn, comm->rank, static_cast<int>(op), static_cast<int>(pm.dtype),
                      static_cast<int>(datatype));
        if (accord_stream(c, stream) != nullptr)
          return fail(
              ncclInvalidUsage,
              "%s: rank %d: a pre-multiplied sum on device buffers is not supported by Accord's "
              "NCCL layer yet (host buffers only); use ncclAvg for averaging, or scale the tensor "
              "and use ncclSum",
              fn, comm->rank);
        if (in_count > 0 && sendbuff == nullptr)
          return fail(ncclInvalidArgument, "%s: rank %d: sendbuff is NULL with count %zu", fn,
                      comm->rank, count);
        auto scaled =
            std::make_shared<std::vector<unsigned char>>(in_count * dtype_bytes(datatype));
        if (in_count > 0)
          scale(datatype, scaled->data(), sendbuff, in_count,
                pm.residence == ncclScalarDevice ? pm.scalar : static_cast<const void*>(pm.value));
        if (t_replaying) t_group.keep.push_back(scaled);  // read when the group runs
        return run(c, scaled->data(), ACCORD_SUM);
      });
}

}  // namespace

namespace accord_nccl {
bool in_group() { return t_group.depth > 0; }
void defer_comm_job(std::function<ncclResult_t()> job) {
  t_group.comm_jobs.push_back(std::move(job));
}
}  // namespace accord_nccl

NCCL_EXPORT ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                                       ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                                       cudaStream_t stream) {
  return reduce_call(Reducing::kAllReduce, "ncclAllReduce", sendbuff, recvbuff, count, datatype, op,
                     0, comm, stream);
}

NCCL_EXPORT ncclResult_t ncclReduce(const void* sendbuff, void* recvbuff, size_t count,
                                    ncclDataType_t datatype, ncclRedOp_t op, int root,
                                    ncclComm_t comm, cudaStream_t stream) {
  return reduce_call(Reducing::kReduce, "ncclReduce", sendbuff, recvbuff, count, datatype, op, root,
                     comm, stream);
}

NCCL_EXPORT ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                                           ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                                           cudaStream_t stream) {
  return reduce_call(Reducing::kReduceScatter, "ncclReduceScatter", sendbuff, recvbuff, recvcount,
                     datatype, op, 0, comm, stream);
}

NCCL_EXPORT ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count,
                                       ncclDataType_t datatype, int root, ncclComm_t comm,
                                       cudaStream_t stream) {
  ncclResult_t r;
  if (!usable_dtype(datatype, "ncclBroadcast", &r)) return r;
  return run_or_defer(comm, "ncclBroadcast", count * dtype_bytes(datatype), [=](accord_comm_t c) {
    return result(
        accord_broadcast(sendbuff, recvbuff, count, static_cast<accord_datatype_t>(datatype), root,
                         c, accord_stream(c, stream)),
        c);
  });
}

// The legacy in-place broadcast.
NCCL_EXPORT ncclResult_t ncclBcast(void* buff, size_t count, ncclDataType_t datatype, int root,
                                   ncclComm_t comm, cudaStream_t stream) {
  return ncclBroadcast(buff, buff, count, datatype, root, comm, stream);
}

NCCL_EXPORT ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                                       ncclDataType_t datatype, ncclComm_t comm,
                                       cudaStream_t stream) {
  ncclResult_t r;
  if (!usable_dtype(datatype, "ncclAllGather", &r)) return r;
  return run_or_defer(comm, "ncclAllGather", sendcount * dtype_bytes(datatype),
                      [=](accord_comm_t c) {
                        return result(accord_all_gather(sendbuff, recvbuff, sendcount,
                                                        static_cast<accord_datatype_t>(datatype), c,
                                                        accord_stream(c, stream)),
                                      c);
                      });
}

NCCL_EXPORT ncclResult_t ncclSend(const void* sendbuff, size_t count, ncclDataType_t datatype,
                                  int peer, ncclComm_t comm, cudaStream_t stream) {
  ncclResult_t r;
  if (!usable_dtype(datatype, "ncclSend", &r)) return r;
  return run_or_defer(comm, "ncclSend", count * dtype_bytes(datatype), [=](accord_comm_t c) {
    return result(accord_send(sendbuff, count, static_cast<accord_datatype_t>(datatype), peer, c,
                              accord_stream(c, stream)),
                  c);
  });
}

NCCL_EXPORT ncclResult_t ncclRecv(void* recvbuff, size_t count, ncclDataType_t datatype, int peer,
                                  ncclComm_t comm, cudaStream_t stream) {
  ncclResult_t r;
  if (!usable_dtype(datatype, "ncclRecv", &r)) return r;
  return run_or_defer(comm, "ncclRecv", count * dtype_bytes(datatype), [=](accord_comm_t c) {
    return result(accord_recv(recvbuff, count, static_cast<accord_datatype_t>(datatype), peer, c,
                              accord_stream(c, stream)),
                  c);
  });
}

// A send to and a receive from every rank (itself included), progressing together.
NCCL_EXPORT ncclResult_t ncclAlltoAll(const void* sendbuff, void* recvbuff, size_t count,
                                      ncclDataType_t datatype, ncclComm_t comm,
                                      cudaStream_t stream) {
  const char* fn = "ncclAlltoAll";
  ncclResult_t r;
  if (!usable_dtype(datatype, fn, &r)) return r;
  return run_or_defer(
      comm, fn, count * dtype_bytes(datatype) * static_cast<size_t>(comm ? comm->nranks : 0),
      [=](accord_comm_t c) -> ncclResult_t {
        int n = 0;
        accord_comm_count(c, &n);
        const size_t block = count * dtype_bytes(datatype), total = block * static_cast<size_t>(n);
        const auto* s = static_cast<const unsigned char*>(sendbuff);
        auto* d = static_cast<unsigned char*>(recvbuff);
        if (total > 0 && s < d + total && d < s + total)
          return fail(ncclInvalidArgument,
                      "%s: rank %d: sendbuff and recvbuff overlap; an all-to-all in place is not "
                      "supported: use separate buffers",
                      fn, comm->rank);
        const auto dt = static_cast<accord_datatype_t>(datatype);
        const auto st = accord_stream(c, stream);
        accord_group_start();
        ncclResult_t first = ncclSuccess;
        for (int p = 0; p < n && first == ncclSuccess; ++p) {
          first = result(accord_send(s + block * static_cast<size_t>(p), count, dt, p, c, st), c);
          if (first == ncclSuccess)
            first = result(accord_recv(d + block * static_cast<size_t>(p), count, dt, p, c, st), c);
        }
        const std::string why = last_error();
        ncclResult_t e = result(accord_group_end(), nullptr);
        if (first != ncclSuccess) return fail(first, "%s: %s", fn, why.c_str());
        return e;
      });
}

NCCL_EXPORT ncclResult_t ncclGroupStart() {
  ++t_group.depth;
  return ncclSuccess;
}

NCCL_EXPORT ncclResult_t ncclGroupEnd() {
  if (t_group.depth == 0)
    return fail(ncclInvalidUsage, "ncclGroupEnd: no group is open; call ncclGroupStart first");
  if (--t_group.depth > 0) return ncclSuccess;
  return end_group(nullptr);
}

// Ends the group without running its collectives, point-to-point calls included, and
// reports an estimate of their time in microseconds (a fixed model, estimate_us above).
// Communicator creations in the group do run.
NCCL_EXPORT ncclResult_t ncclGroupSimulateEnd(ncclSimInfo_t* simInfo) {
  if (t_group.depth == 0)
    return fail(ncclInvalidUsage,
                "ncclGroupSimulateEnd: no group is open; call ncclGroupStart first");
  --t_group.depth;
  if (simInfo == nullptr || simInfo->magic != 0x74685283u) {
    if (t_group.depth == 0) {
      ncclSimInfo_t dropped = NCCL_SIM_INFO_INITIALIZER;
      (void)end_group(&dropped);
    }
    return fail(ncclInvalidArgument,
                "ncclGroupSimulateEnd: simInfo is NULL or was not initialised with "
                "NCCL_SIM_INFO_INITIALIZER; the group's calls were dropped");
  }
  if (t_group.depth > 0) return ncclSuccess;
  return end_group(simInfo);
}

NCCL_EXPORT ncclResult_t ncclRedOpCreatePreMulSum(ncclRedOp_t* op, void* scalar,
                                                  ncclDataType_t datatype,
                                                  ncclScalarResidence_t residence,
                                                  ncclComm_t comm) {
  const char* fn = "ncclRedOpCreatePreMulSum";
  accord_comm_t c = nullptr;
  ncclResult_t r = ready(comm, fn, &c);
  if (r != ncclSuccess) return r;
  if (op == nullptr || scalar == nullptr)
    return fail(ncclInvalidArgument, "%s: rank %d: op or scalar is NULL", fn, comm->rank);
  if (!usable_dtype(datatype, fn, &r)) return r;
  if (residence != ncclScalarDevice && residence != ncclScalarHostImmediate)
    return fail(ncclInvalidArgument,
                "%s: rank %d: residence %d; use ncclScalarDevice or ncclScalarHostImmediate", fn,
                comm->rank, static_cast<int>(residence));
  ncclComm::PreMulSum pm;
  pm.live = true;
  pm.dtype = datatype;
  pm.residence = residence;
  // ncclScalarHostImmediate: read now. ncclScalarDevice: read when a collective runs (the
  // pointer must be readable from the host: host ranks' memory; device buffers are refused).
  if (residence == ncclScalarHostImmediate)
    std::memcpy(pm.value, scalar, dtype_bytes(datatype));
  else
    pm.scalar = scalar;
  std::lock_guard<std::mutex> lock(comm->mutex);
  size_t i = 0;
  while (i < comm->premul.size() && comm->premul[i].live) ++i;
  if (static_cast<long long>(i) + ncclNumOps > static_cast<long long>(ncclMaxRedOp))
    return fail(ncclInvalidUsage,
                "%s: rank %d: too many ops; destroy unused ones with ncclRedOpDestroy", fn,
                comm->rank);
  if (i == comm->premul.size()) comm->premul.emplace_back();
  comm->premul[i] = pm;
  *op = static_cast<ncclRedOp_t>(static_cast<int>(ncclNumOps) + static_cast<int>(i));
  return ncclSuccess;
}

NCCL_EXPORT ncclResult_t ncclRedOpDestroy(ncclRedOp_t op, ncclComm_t comm) {
  const char* fn = "ncclRedOpDestroy";
  accord_comm_t c = nullptr;
  ncclResult_t r = ready(comm, fn, &c);
  if (r != ncclSuccess) return r;
  if (int(op) < int(ncclNumOps))
    return fail(ncclInvalidArgument,
                "%s: rank %d: op %d is built in (ncclSum .. ncclAvg) and cannot be destroyed", fn,
                comm->rank, static_cast<int>(op));
  std::lock_guard<std::mutex> lock(comm->mutex);
  const size_t i = static_cast<size_t>(op) - ncclNumOps;
  if (i >= comm->premul.size() || !comm->premul[i].live)
    return fail(ncclInvalidArgument,
                "%s: rank %d: op %d was not made by ncclRedOpCreatePreMulSum on this "
                "communicator (or was destroyed already)",
                fn, comm->rank, static_cast<int>(op));
  comm->premul[i].live = false;
  return ncclSuccess;
}
