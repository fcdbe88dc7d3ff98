// NCCL's collectives, point-to-point calls and groups on Accord (accord_nccl.cpp holds the
// communicator's life).
//
// Note [NCCL groups]: between ncclGroupStart and the outermost ncclGroupEnd this layer keeps
// the calls itself, on the calling thread, and replays them at the end: first every
// communicator creation of the group (init, split, shrink), each on its own thread since
// they wait for each other when one thread drives several ranks; then the collectives and
// point-to-point calls inside one accord_group_start/end, where each communicator's sends
// and receives progress together. Keeping them here is what lets ncclGroupSimulateEnd end a
// group without running it.
#include <accord/accord.h>
#include <nccl.h>

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
  double estimate_us = 0;
};
thread_local Group t_group;

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
  for (auto& call : g.calls) {
    ncclResult_t r = call();
    if (r != ncclSuccess && first == ncclSuccess) first = r;
  }
  const std::string queued_error = first != ncclSuccess ? last_error() : std::string();
  ncclResult_t r = result(accord_group_end(), nullptr);
  if (first != ncclSuccess) {
    last_error() = queued_error;
    return first;
  }
  return r;
}

enum class Reducing { kAllReduce, kReduce, kReduceScatter };

// A reducing collective. ncclSum..ncclAvg go straight to Accord, and so does an op of
// ncclRedOpCreatePreMulSum, as the Accord op it was made with (sum over ranks of scalar * x,
// NCCL's definition; host and device buffers, Note [Pre-multiplied sum] in Accord).
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
        return run(c, sendbuff, pm.op);
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
  // ncclScalarHostImmediate: read now. ncclScalarDevice: read when a collective runs (by the
  // kernel for device buffers; host-readable memory for host buffers).
  r = result(accord_red_op_create_pre_mul_sum(&pm.op, scalar, static_cast<accord_datatype_t>(datatype),
                                              residence == ncclScalarDevice ? ACCORD_SCALAR_DEVICE
                                                                            : ACCORD_SCALAR_HOST_IMMEDIATE,
                                              c),
             c);
  if (r != ncclSuccess) return r;
  std::lock_guard<std::mutex> lock(comm->mutex);
  size_t i = 0;
  while (i < comm->premul.size() && comm->premul[i].live) ++i;
  if (static_cast<long long>(i) + ncclNumOps > static_cast<long long>(ncclMaxRedOp)) {
    (void)accord_red_op_destroy(pm.op, c);
    return fail(ncclInvalidUsage,
                "%s: rank %d: too many ops; destroy unused ones with ncclRedOpDestroy", fn,
                comm->rank);
  }
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
  return result(accord_red_op_destroy(comm->premul[i].op, c), c);
}
