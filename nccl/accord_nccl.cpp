// libaccord_nccl.so: NCCL's C API (names, enum values, unique id layout) mapped onto
// Accord's, so that a program or framework built against nccl.h can run on Accord
// (LD_PRELOAD, or the libnccl.so.2 symlink this folder installs). Compiled against the real
// nccl.h of the CUDA toolkit: the compiler checks every signature, and the static_asserts
// below check that the enum values Accord passes straight through agree. Calls outside
// Accord's surface return ncclInvalidUsage with a message for ncclGetLastError; nothing here
// aborts. See README.md for what works today.
#include <accord/accord.h>
#include <accord/accord_device.h>
#include <nccl.h>

#include <cstdio>
#include <cstring>
#include <string>

#define NCCL_EXPORT extern "C" __attribute__((visibility("default")))

static_assert(ACCORD_UNIQUE_ID_BYTES == NCCL_UNIQUE_ID_BYTES, "unique id sizes differ");
static_assert(sizeof(accord_unique_id_t) == sizeof(ncclUniqueId), "unique id layouts differ");
static_assert(int(ncclInt8) == int(ACCORD_INT8) && int(ncclUint8) == int(ACCORD_UINT8) &&
                  int(ncclInt32) == int(ACCORD_INT32) && int(ncclUint32) == int(ACCORD_UINT32) &&
                  int(ncclInt64) == int(ACCORD_INT64) && int(ncclUint64) == int(ACCORD_UINT64) &&
                  int(ncclFloat16) == int(ACCORD_FLOAT16) &&
                  int(ncclFloat32) == int(ACCORD_FLOAT32) &&
                  int(ncclFloat64) == int(ACCORD_FLOAT64) &&
                  int(ncclBfloat16) == int(ACCORD_BFLOAT16),
              "dtype values differ");
static_assert(int(ncclSum) == int(ACCORD_SUM) && int(ncclProd) == int(ACCORD_PROD) &&
                  int(ncclMax) == int(ACCORD_MAX) && int(ncclMin) == int(ACCORD_MIN) &&
                  int(ncclAvg) == int(ACCORD_AVG),
              "op values differ");
static_assert(int(ncclSuccess) == int(ACCORD_SUCCESS) &&
                  int(ncclUnhandledCudaError) == int(ACCORD_ERR_CUDA) &&
                  int(ncclSystemError) == int(ACCORD_ERR_SYSTEM) &&
                  int(ncclInternalError) == int(ACCORD_ERR_INTERNAL) &&
                  int(ncclInvalidArgument) == int(ACCORD_ERR_INVALID_ARGUMENT) &&
                  int(ncclInvalidUsage) == int(ACCORD_ERR_INVALID_USAGE) &&
                  int(ncclRemoteError) == int(ACCORD_ERR_REMOTE) &&
                  int(ncclInProgress) == int(ACCORD_IN_PROGRESS),
              "status values differ");

namespace {

thread_local std::string t_last_error;

accord_comm_t acc(ncclComm_t comm) { return reinterpret_cast<accord_comm_t>(comm); }

// Accord's codes past NCCL's range: a timeout is a peer problem, the rest misuse.
ncclResult_t result(accord_status_t st, accord_comm_t comm) {
  if (st == ACCORD_SUCCESS || st == ACCORD_IN_PROGRESS) return static_cast<ncclResult_t>(st);
  t_last_error = accord_last_error(comm);
  switch (st) {
    case ACCORD_ERR_TIMEOUT:
      return ncclRemoteError;
    case ACCORD_ERR_ABORTED:
    case ACCORD_ERR_MISMATCH:
    case ACCORD_ERR_UNSUPPORTED:
      return ncclInvalidUsage;
    default:
      return static_cast<ncclResult_t>(st);
  }
}

ncclResult_t unsupported(const char* what, const char* instead) {
  t_last_error = std::string(what) +
                 " is not supported by Accord's NCCL layer (libaccord_nccl.so); " + instead;
  return ncclInvalidUsage;
}

// float8 types (10, 11) have no Accord counterpart.
bool bad_dtype(ncclDataType_t t, ncclResult_t* r) {
  if (int(t) >= 0 && int(t) < int(ACCORD_NUM_DTYPES)) return false;
  char msg[64];
  std::snprintf(msg, sizeof msg, "ncclDataType_t %d", static_cast<int>(t));
  *r = unsupported(msg, "use int8..uint64, float16, bfloat16, float32 or float64");
  return true;
}
bool bad_op(ncclRedOp_t op, ncclResult_t* r) {
  if (int(op) >= 0 && int(op) < int(ACCORD_NUM_OPS)) return false;
  char msg[64];
  std::snprintf(msg, sizeof msg, "ncclRedOp_t %d (a custom op)", static_cast<int>(op));
  *r = unsupported(msg, "use ncclSum, ncclProd, ncclMax, ncclMin or ncclAvg");
  return true;
}

accord_datatype_t dt(ncclDataType_t t) { return static_cast<accord_datatype_t>(t); }
accord_red_op_t rop(ncclRedOp_t op) { return static_cast<accord_red_op_t>(op); }
accord_stream_t stream_of(cudaStream_t s) { return reinterpret_cast<accord_stream_t>(s); }

}  // namespace

NCCL_EXPORT ncclResult_t ncclGetVersion(int* version) {
  if (version == nullptr)
    return t_last_error = "ncclGetVersion: version is NULL", ncclInvalidArgument;
  // The NCCL API level this layer was compiled against (frameworks compare it with the
  // version they need); accord_get_version gives Accord's own.
  *version = NCCL_VERSION_CODE;
  return ncclSuccess;
}

NCCL_EXPORT ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  if (id == nullptr) return t_last_error = "ncclGetUniqueId: uniqueId is NULL", ncclInvalidArgument;
  accord_unique_id_t a;
  ncclResult_t r = result(accord_get_unique_id(&a), nullptr);
  if (r == ncclSuccess) std::memcpy(id->internal, a.internal, sizeof a.internal);
  return r;
}

NCCL_EXPORT ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank) {
  if (comm == nullptr) return t_last_error = "ncclCommInitRank: comm is NULL", ncclInvalidArgument;
  accord_unique_id_t a;
  std::memcpy(a.internal, id.internal, sizeof a.internal);
  accord_comm_t c = nullptr;
  ncclResult_t r = result(accord_comm_init_rank(&c, nranks, a, rank), nullptr);
  *comm = reinterpret_cast<ncclComm_t>(c);
  return r;
}

NCCL_EXPORT ncclResult_t ncclCommInitAll(ncclComm_t* comms, int ndev, const int* devlist) {
  static_assert(sizeof(ncclComm_t) == sizeof(accord_comm_t), "handle sizes differ");
  return result(accord_comm_init_all(reinterpret_cast<accord_comm_t*>(comms), ndev, devlist),
                nullptr);
}

NCCL_EXPORT ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  return result(accord_comm_destroy(acc(comm)), nullptr);
}
NCCL_EXPORT ncclResult_t ncclCommAbort(ncclComm_t comm) {
  return result(accord_comm_abort(acc(comm)), nullptr);
}
// Accord's collectives on host buffers finish inside the call: nothing is left to flush.
NCCL_EXPORT ncclResult_t ncclCommFinalize(ncclComm_t comm) {
  int n = 0;
  return result(accord_comm_count(acc(comm), &n), acc(comm));
}

NCCL_EXPORT ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* async_error) {
  if (async_error == nullptr)
    return t_last_error = "ncclCommGetAsyncError: asyncError is NULL", ncclInvalidArgument;
  accord_status_t e = ACCORD_SUCCESS;
  ncclResult_t r = result(accord_comm_get_async_error(acc(comm), &e), acc(comm));
  if (r == ncclSuccess) *async_error = e == ACCORD_SUCCESS ? ncclSuccess : result(e, acc(comm));
  return r;
}

NCCL_EXPORT ncclResult_t ncclCommCount(const ncclComm_t comm, int* count) {
  return result(accord_comm_count(acc(comm), count), acc(comm));
}
NCCL_EXPORT ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank) {
  return result(accord_comm_rank(acc(comm), rank), acc(comm));
}
NCCL_EXPORT ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int* device) {
  int d = -1;
  ncclResult_t r = result(accord_comm_device(acc(comm), &d), acc(comm));
  if (r != ncclSuccess) return r;
  if (device != nullptr) *device = d;
  if (d < 0)
    return unsupported("ncclCommCuDevice",
                       "this communicator's rank runs on host memory (no GPU: create it with "
                       "ncclCommInitAll and a device list, or set ACCORD_DEVICE)");
  return ncclSuccess;
}

NCCL_EXPORT ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                                       ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                                       cudaStream_t stream) {
  ncclResult_t r;
  if (bad_dtype(datatype, &r) || bad_op(op, &r)) return r;
  return result(accord_all_reduce(sendbuff, recvbuff, count, dt(datatype), rop(op), acc(comm),
                                  stream_of(stream)),
                acc(comm));
}

NCCL_EXPORT ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count,
                                       ncclDataType_t datatype, int root, ncclComm_t comm,
                                       cudaStream_t stream) {
  ncclResult_t r;
  if (bad_dtype(datatype, &r)) return r;
  return result(
      accord_broadcast(sendbuff, recvbuff, count, dt(datatype), root, acc(comm), stream_of(stream)),
      acc(comm));
}

NCCL_EXPORT ncclResult_t ncclReduce(const void* sendbuff, void* recvbuff, size_t count,
                                    ncclDataType_t datatype, ncclRedOp_t op, int root,
                                    ncclComm_t comm, cudaStream_t stream) {
  ncclResult_t r;
  if (bad_dtype(datatype, &r) || bad_op(op, &r)) return r;
  return result(accord_reduce(sendbuff, recvbuff, count, dt(datatype), rop(op), root, acc(comm),
                              stream_of(stream)),
                acc(comm));
}

NCCL_EXPORT ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                                       ncclDataType_t datatype, ncclComm_t comm,
                                       cudaStream_t stream) {
  ncclResult_t r;
  if (bad_dtype(datatype, &r)) return r;
  return result(
      accord_all_gather(sendbuff, recvbuff, sendcount, dt(datatype), acc(comm), stream_of(stream)),
      acc(comm));
}

NCCL_EXPORT ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                                           ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                                           cudaStream_t stream) {
  ncclResult_t r;
  if (bad_dtype(datatype, &r) || bad_op(op, &r)) return r;
  return result(accord_reduce_scatter(sendbuff, recvbuff, recvcount, dt(datatype), rop(op),
                                      acc(comm), stream_of(stream)),
                acc(comm));
}

NCCL_EXPORT ncclResult_t ncclGroupStart() { return result(accord_group_start(), nullptr); }
NCCL_EXPORT ncclResult_t ncclGroupEnd() { return result(accord_group_end(), nullptr); }

NCCL_EXPORT const char* ncclGetErrorString(ncclResult_t r) {
  switch (r) {
    case ncclSuccess:
      return "no error";
    case ncclUnhandledCudaError:
      return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError:
      return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError:
      return "internal error - please report this issue to the NCCL developers";
    case ncclInvalidArgument:
      return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage:
      return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError:
      return "remote process exited or there was a network error";
    case ncclInProgress:
      return "NCCL operation in progress";
    default:
      return "unknown result code";
  }
}

// NCCL's last error is per thread, not per communicator; ours too (comm is accepted and
// ignored, as NCCL does).
NCCL_EXPORT const char* ncclGetLastError(ncclComm_t) { return t_last_error.c_str(); }

// Names frameworks link that Accord does not provide: defined, so that loading succeeds, and
// failing cleanly when called.
NCCL_EXPORT ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId id,
                                                int rank, ncclConfig_t*) {
  // The config (blocking, cgaClusterSize...) only tunes NCCL; Accord's defaults are used.
  return ncclCommInitRank(comm, nranks, id, rank);
}
NCCL_EXPORT ncclResult_t ncclCommSplit(ncclComm_t, int, int, ncclComm_t* newcomm, ncclConfig_t*) {
  if (newcomm != nullptr) *newcomm = nullptr;
  return unsupported("ncclCommSplit",
                     "create the sub-communicator with ncclCommInitRank and a new unique id");
}
NCCL_EXPORT ncclResult_t ncclSend(const void*, size_t, ncclDataType_t, int, ncclComm_t,
                                  cudaStream_t) {
  return unsupported("ncclSend (point-to-point)", "Accord has collectives only");
}
NCCL_EXPORT ncclResult_t ncclRecv(void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t) {
  return unsupported("ncclRecv (point-to-point)", "Accord has collectives only");
}
NCCL_EXPORT ncclResult_t ncclRedOpCreatePreMulSum(ncclRedOp_t*, void*, ncclDataType_t,
                                                  ncclScalarResidence_t, ncclComm_t) {
  return unsupported("ncclRedOpCreatePreMulSum", "scale the buffer, then use ncclSum (or ncclAvg)");
}
NCCL_EXPORT ncclResult_t ncclRedOpDestroy(ncclRedOp_t, ncclComm_t) {
  return unsupported("ncclRedOpDestroy", "no custom ops exist in Accord");
}
NCCL_EXPORT ncclResult_t ncclCommRegister(const ncclComm_t, void*, size_t, void** handle) {
  if (handle != nullptr) *handle = nullptr;
  return unsupported("ncclCommRegister", "buffers need no registration in Accord");
}
NCCL_EXPORT ncclResult_t ncclCommDeregister(const ncclComm_t, void*) {
  return unsupported("ncclCommDeregister", "buffers need no registration in Accord");
}
NCCL_EXPORT ncclResult_t ncclMemAlloc(void** ptr, size_t) {
  if (ptr != nullptr) *ptr = nullptr;
  return unsupported("ncclMemAlloc",
                     "allocate with cudaMalloc (or accord_device_alloc on the GPU path)");
}
NCCL_EXPORT ncclResult_t ncclMemFree(void*) {
  return unsupported("ncclMemFree", "free what you allocated");
}
