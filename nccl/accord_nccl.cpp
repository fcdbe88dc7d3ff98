// libaccord_nccl.so: NCCL's C API (names, enum values, unique id layout) mapped onto
// Accord's, so that a program or framework built against nccl.h can run on Accord
// (LD_PRELOAD, or the libnccl.so.2 symlink this folder installs). Compiled against the real
// nccl.h of the CUDA toolkit: the compiler checks every signature, and the static_asserts
// below check that the enum values Accord passes straight through agree. This file holds the
// communicator's life (init in every form, split, shrink, finalize, destroy, abort, errors)
// and the memory calls; nccl_calls.cpp the collectives, point-to-point and groups. Calls that
// Accord cannot honour return ncclInvalidUsage with a message for ncclGetLastError; nothing
// here aborts. See README.md for what works today.
#include <accord/accord.h>
#include <accord/accord_device.h>
#include <dlfcn.h>
#include <nccl.h>
#include <nccl_device/core.h>

#include <algorithm>
#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstdint>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "nccl_layer.hpp"

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

namespace accord_nccl {

std::string& last_error() {
  thread_local std::string text;
  return text;
}

ncclResult_t fail(ncclResult_t r, const char* fmt, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  last_error() = buf;
  return r;
}

accord_stream_t accord_stream(accord_comm_t c, cudaStream_t stream) {
  if (stream != nullptr) return reinterpret_cast<accord_stream_t>(stream);
  int device = -1;
  if (accord_comm_device(c, &device) != ACCORD_SUCCESS || device < 0) return nullptr;
  return reinterpret_cast<accord_stream_t>(uintptr_t{1});  // cudaStreamLegacy
}

// Accord's codes past NCCL's range: a timeout is a peer problem, the rest misuse.
ncclResult_t result(accord_status_t st, accord_comm_t comm) {
  if (st == ACCORD_SUCCESS || st == ACCORD_IN_PROGRESS) return static_cast<ncclResult_t>(st);
  last_error() = accord_last_error(comm);
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

ncclResult_t check_handle(ncclComm_t w, const char* fn) {
  if (w == nullptr)
    return fail(ncclInvalidArgument,
                "%s: comm is NULL; create one with ncclCommInitRank(Config) or ncclCommInitAll",
                fn);
  if (w->magic.load() != kLive)
    return fail(ncclInvalidUsage,
                "%s: this communicator was destroyed or aborted (or is not a ncclComm_t); create a "
                "new one",
                fn);
  return ncclSuccess;
}

ncclResult_t ready(ncclComm_t w, const char* fn, accord_comm_t* out) {
  ncclResult_t r = check_handle(w, fn);
  if (r != ncclSuccess) return r;
  // A non-blocking init still running: wait for it (polling, not joining, so that an
  // ncclCommAbort from another thread is never held up behind this wait).
  while (w->state.load() == ncclInProgress && w->init_running.load()) {
    if (w->magic.load() != kLive)
      return fail(ncclInvalidUsage,
                  "%s: rank %d: the communicator was aborted while it was being created", fn,
                  w->rank);
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  const int st = w->state.load();
  if (st == ncclInProgress)
    return fail(ncclInvalidUsage,
                "%s: rank %d: this communicator is created inside a group that has not ended; call "
                "ncclGroupEnd before using it",
                fn, w->rank);
  if (st != ncclSuccess)
    return fail(static_cast<ncclResult_t>(st),
                "%s: rank %d: this communicator failed to initialise: %s", fn, w->rank,
                w->init_error.c_str());
  *out = w->acc;
  return ncclSuccess;
}

bool usable_dtype(ncclDataType_t t, const char* fn, ncclResult_t* r) {
  if (int(t) >= 0 && int(t) < int(ACCORD_NUM_DTYPES)) return true;
  if (int(t) == int(ncclFloat8e4m3) || int(t) == int(ncclFloat8e5m2))
    *r = fail(
        ncclInvalidUsage,
        "%s: ncclDataType_t %d (float8) is not supported by Accord's NCCL layer; use int8..uint64, "
        "float16, bfloat16, float32 or float64",
        fn, static_cast<int>(t));
  else
    *r = fail(ncclInvalidArgument,
              "%s: ncclDataType_t %d is not a data type; use ncclInt8 .. ncclBfloat16", fn,
              static_cast<int>(t));
  return false;
}

size_t dtype_bytes(ncclDataType_t t) {
  return accord_dtype_size(static_cast<accord_datatype_t>(t));
}

// Note [Handles outlive destroy]: a communicator's memory is never freed (its Accord
// communicator is). ncclCommAbort is called from a watchdog thread while the rank's own
// thread may still be inside a call on the handle, and a stale handle must answer
// ncclInvalidUsage rather than touch freed memory, and an aborted non-blocking init may still
// run on its thread; a job makes a handful of communicators (a few hundred bytes each). They
// stay reachable from a table that is never destroyed, so leak checkers see no leak.
ncclComm_t new_handle() {
  static std::mutex mutex;
  static std::vector<ncclComm_t>& all = *new std::vector<ncclComm_t>();
  ncclComm_t w = new ncclComm();
  w->magic.store(kLive);
  std::lock_guard<std::mutex> lock(mutex);
  all.push_back(w);
  return w;
}

ncclResult_t blocking_of(const ncclConfig_t* config, bool inherit, const char* fn, bool* blocking) {
  if (config == nullptr) return ncclSuccess;  // *blocking keeps the default or the parent's
  if (config->magic != 0xcafebeef || config->size < offsetof(ncclConfig_t, cgaClusterSize))
    return fail(ncclInvalidArgument,
                "%s: config was not initialised with NCCL_CONFIG_INITIALIZER (magic 0x%x); "
                "assign ncclConfig_t config = NCCL_CONFIG_INITIALIZER before setting fields",
                fn, config->magic);
  if (config->blocking == NCCL_CONFIG_UNDEF_INT) {
    if (!inherit) *blocking = true;
  } else if (config->blocking == 0 || config->blocking == 1) {
    *blocking = config->blocking == 1;
  } else {
    return fail(ncclInvalidArgument,
                "%s: config->blocking is %d; use 0 (non-blocking) or 1 (blocking)", fn,
                config->blocking);
  }
  return ncclSuccess;
}

ncclResult_t start_init(ncclComm_t w, int nranks, const accord_unique_id_t& id, int rank,
                        int device, const ncclConfig_t* config, const char* fn) {
  bool blocking = true;
  ncclResult_t r = blocking_of(config, false, fn, &blocking);
  if (r != ncclSuccess) return r;
  w->blocking = blocking;
  w->rank = rank;
  w->nranks = nranks;
  auto job = [w, nranks, id, rank, device, fn]() -> ncclResult_t {
    accord_comm_t c = nullptr;
    accord_status_t st = accord_comm_init_rank_device(&c, nranks, id, rank, device);
    ncclResult_t res = result(st, nullptr);
    if (res == ncclSuccess && w->aborted.load()) {
      accord_comm_destroy(c);
      c = nullptr;
      res = fail(ncclInvalidUsage,
                 "%s: rank %d: ncclCommAbort was called while this communicator was being created",
                 fn, rank);
    }
    if (res != ncclSuccess) {
      w->init_error = std::string(fn) + ": " + last_error();
    }
    w->acc = c;
    w->state.store(res);
    return res;
  };
  if (in_group()) {
    defer_comm_job(job);
    return ncclSuccess;
  }
  if (blocking) return job();
  std::lock_guard<std::mutex> lock(w->init_mutex);
  w->init_running.store(true);
  w->init_thread = std::thread([w, job] {
    (void)job();
    w->init_running.store(false);
  });
  return ncclInProgress;
}

}  // namespace accord_nccl

using namespace accord_nccl;

namespace {

// ncclMemAlloc's allocations and their sizes (ncclMemFree checks against them), and the
// buffers registered with live communicators (ncclMemFree refuses to free one).
std::mutex g_mem_mutex;
std::map<void*, size_t>& g_mem = *new std::map<void*, size_t>();
std::multimap<const void*, size_t>& g_registered = *new std::multimap<const void*, size_t>();

void forget_registration(const void* buff, size_t size) {
  std::lock_guard<std::mutex> lock(g_mem_mutex);
  auto [from, to] = g_registered.equal_range(buff);
  for (auto it = from; it != to; ++it)
    if (it->second == size) {
      g_registered.erase(it);
      return;
    }
}

// The caller's current CUDA device when the process has the CUDA runtime loaded (PyTorch
// does: it calls cudaSetDevice before creating a communicator), else `otherwise`: this
// library links no CUDA.
int current_device(int otherwise) {
  using GetDevice = int (*)(int*);
  auto get = reinterpret_cast<GetDevice>(dlsym(RTLD_DEFAULT, "cudaGetDevice"));
  int d = 0;
  if (get == nullptr || get(&d) != 0) return otherwise;
  return d;
}

// The GPU of a rank made by ncclCommInitRank*: NCCL's rule, the current CUDA device, when
// Accord has GPUs and ACCORD_DEVICE does not choose; else -1, Accord's own choice
// (ACCORD_DEVICE, the local rank with ACCORD_SIM_TOPO, or host memory).
int init_device() {
  int gpus = 0;
  if (std::getenv("ACCORD_DEVICE") != nullptr || accord_device_count(&gpus) != ACCORD_SUCCESS ||
      gpus == 0)
    return -1;
  return current_device(-1);
}

}  // namespace

NCCL_EXPORT ncclResult_t ncclGetVersion(int* version) {
  if (version == nullptr) return fail(ncclInvalidArgument, "ncclGetVersion: version is NULL");
  // The NCCL API level this layer was compiled against (frameworks compare it with the
  // version they need); accord_get_version gives Accord's own.
  *version = NCCL_VERSION_CODE;
  return ncclSuccess;
}

NCCL_EXPORT ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  if (id == nullptr) return fail(ncclInvalidArgument, "ncclGetUniqueId: uniqueId is NULL");
  accord_unique_id_t a;
  ncclResult_t r = result(accord_get_unique_id(&a), nullptr);
  if (r == ncclSuccess) std::memcpy(id->internal, a.internal, sizeof a.internal);
  return r;
}

namespace {
ncclResult_t init_rank(ncclComm_t* comm, int nranks, const ncclUniqueId& id, int rank,
                       ncclConfig_t* config, const char* fn) {
  if (comm == nullptr) return fail(ncclInvalidArgument, "%s: comm is NULL", fn);
  *comm = nullptr;
  if (nranks < 1 || rank < 0 || rank >= nranks)
    return fail(ncclInvalidArgument,
                "%s: rank %d is out of range for nranks %d; ranks are 0..nranks-1", fn, rank,
                nranks);
  accord_unique_id_t a;
  std::memcpy(a.internal, id.internal, sizeof a.internal);
  ncclComm_t w = new_handle();
  ncclResult_t r = start_init(w, nranks, a, rank, init_device(), config, fn);
  if (r != ncclSuccess && r != ncclInProgress && w->state.load() == ncclInProgress) {
    w->magic.store(kDead);  // a bad config: nothing started
    return r;
  }
  *comm = w;
  return r;
}
}  // namespace

NCCL_EXPORT ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank) {
  return init_rank(comm, nranks, id, rank, nullptr, "ncclCommInitRank");
}

NCCL_EXPORT ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId id,
                                                int rank, ncclConfig_t* config) {
  // Of the config, `blocking` is honoured; the rest (CTAs, cgaClusterSize, netName...) tunes
  // NCCL's kernels and network and has no meaning here.
  return init_rank(comm, nranks, id, rank, config, "ncclCommInitRankConfig");
}

// NCCL spreads the bootstrap over several roots; Accord's one bootstrap server (that of the
// first id) serves every rank. Every id came from ncclGetUniqueId on some rank of the job.
NCCL_EXPORT ncclResult_t ncclCommInitRankScalable(ncclComm_t* newcomm, int nranks, int myrank,
                                                  int nId, ncclUniqueId* commIds,
                                                  ncclConfig_t* config) {
  if (nId < 1 || commIds == nullptr)
    return fail(ncclInvalidArgument,
                "ncclCommInitRankScalable: rank %d: nId is %d and commIds %s; pass at least one "
                "unique id",
                myrank, nId, commIds == nullptr ? "NULL" : "set");
  return init_rank(newcomm, nranks, commIds[0], myrank, config, "ncclCommInitRankScalable");
}

NCCL_EXPORT ncclResult_t ncclCommInitAll(ncclComm_t* comms, int ndev, const int* devlist) {
  if (comms == nullptr || ndev < 1)
    return fail(ncclInvalidArgument, "ncclCommInitAll: comms is NULL or ndev %d < 1", ndev);
  std::vector<accord_comm_t> accs(static_cast<size_t>(ndev));
  ncclResult_t r = result(accord_comm_init_all(accs.data(), ndev, devlist), nullptr);
  for (int i = 0; i < ndev; ++i) {
    comms[i] = nullptr;
    if (r != ncclSuccess) continue;
    ncclComm_t w = new_handle();
    w->acc = accs[static_cast<size_t>(i)];
    w->rank = i;
    w->nranks = ndev;
    w->state.store(ncclSuccess);
    comms[i] = w;
  }
  return r;
}

NCCL_EXPORT ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  ncclResult_t r = check_handle(comm, "ncclCommDestroy");
  if (r != ncclSuccess) return r;
  {
    std::thread init;
    {
      std::lock_guard<std::mutex> lock(comm->init_mutex);
      init = std::move(comm->init_thread);
    }
    if (init.joinable()) init.join();
  }
  uint64_t live = kLive;
  if (!comm->magic.compare_exchange_strong(live, kDead))
    return fail(ncclInvalidUsage, "ncclCommDestroy: rank %d: already destroyed or aborted",
                comm->rank);
  if (comm->acc != nullptr) r = result(accord_comm_destroy(comm->acc), nullptr);
  std::lock_guard<std::mutex> lock(comm->mutex);
  for (auto& [handle, reg] : comm->registered) {  // destroy let go of them (accord_comm_destroy)
    forget_registration(reg->buff, reg->size);
    delete reg;
  }
  comm->registered.clear();
  return r;
}

// Returns at once; a call stuck in this communicator on another thread returns an error
// within about 20 ms (accord_comm_abort). An init still running is left to finish on its
// thread and then destroyed.
NCCL_EXPORT ncclResult_t ncclCommAbort(ncclComm_t comm) {
  ncclResult_t r = check_handle(comm, "ncclCommAbort");
  if (r != ncclSuccess) return r;
  comm->aborted.store(true);
  uint64_t live = kLive;
  if (!comm->magic.compare_exchange_strong(live, kDead))
    return fail(ncclInvalidUsage, "ncclCommAbort: rank %d: already destroyed or aborted",
                comm->rank);
  {
    std::lock_guard<std::mutex> lock(comm->init_mutex);
    if (comm->init_thread.joinable()) comm->init_thread.detach();  // it destroys what it makes
  }
  if (comm->state.load() == ncclSuccess && comm->acc != nullptr)
    return result(accord_comm_abort(comm->acc), nullptr);
  return ncclSuccess;
}

// Host collectives finish inside their call and device ones on the communicator's worker:
// nothing is left to flush, so the state is ncclSuccess at once (non-blocking mode too).
// Later calls other than ncclCommDestroy return ncclInvalidUsage.
NCCL_EXPORT ncclResult_t ncclCommFinalize(ncclComm_t comm) {
  accord_comm_t c = nullptr;
  ncclResult_t r = ready(comm, "ncclCommFinalize", &c);
  if (r != ncclSuccess) return r;
  comm->finalized.store(true);
  return ncclSuccess;
}

NCCL_EXPORT ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* async_error) {
  ncclResult_t r = check_handle(comm, "ncclCommGetAsyncError");
  if (r != ncclSuccess) return r;
  if (async_error == nullptr)
    return fail(ncclInvalidArgument, "ncclCommGetAsyncError: asyncError is NULL");
  const int st = comm->state.load();
  if (st != ncclSuccess) {
    // Still initialising (ncclInProgress), or the init's failure.
    *async_error = static_cast<ncclResult_t>(st);
    if (st != ncclInProgress) last_error() = comm->init_error;
    return ncclSuccess;
  }
  accord_status_t e = ACCORD_SUCCESS;
  r = result(accord_comm_get_async_error(comm->acc, &e), comm->acc);
  if (r == ncclSuccess) *async_error = e == ACCORD_SUCCESS ? ncclSuccess : result(e, comm->acc);
  return r;
}

NCCL_EXPORT ncclResult_t ncclCommCount(const ncclComm_t comm, int* count) {
  accord_comm_t c = nullptr;
  ncclResult_t r = ready(comm, "ncclCommCount", &c);
  return r != ncclSuccess ? r : result(accord_comm_count(c, count), c);
}

NCCL_EXPORT ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank) {
  accord_comm_t c = nullptr;
  ncclResult_t r = ready(comm, "ncclCommUserRank", &c);
  return r != ncclSuccess ? r : result(accord_comm_rank(c, rank), c);
}

NCCL_EXPORT ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int* device) {
  accord_comm_t c = nullptr;
  ncclResult_t r = ready(comm, "ncclCommCuDevice", &c);
  if (r != ncclSuccess) return r;
  int d = -1;
  r = result(accord_comm_device(c, &d), c);
  if (r != ncclSuccess) return r;
  if (device != nullptr) *device = d;
  if (d < 0)
    return fail(ncclInvalidUsage,
                "ncclCommCuDevice: rank %d runs on host memory (no GPU: create it with "
                "ncclCommInitAll and a device list, or set ACCORD_DEVICE)",
                comm->rank);
  return ncclSuccess;
}

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
    case ncclNumResults:
      break;
  }
  return "unknown result code";
}

// NCCL's last error is per thread, not per communicator; ours too (comm is accepted and
// ignored, as NCCL does).
NCCL_EXPORT const char* ncclGetLastError(ncclComm_t) { return last_error().c_str(); }

// Registration maps the buffer's allocation into every peer (accord_comm_register; Note [User
// buffers mapped into peers]). Unlike NCCL's, it is collective in a job of several processes
// on the direct protocol: every rank registers at the same point of its calls, and
// deregisters in the same order (nccl-tests -R does; a caching allocator's hook that
// registers on one rank only does not, and fails with an error that says so).
NCCL_EXPORT ncclResult_t ncclCommRegister(const ncclComm_t comm, void* buff, size_t size,
                                          void** handle) {
  accord_comm_t c = nullptr;
  ncclResult_t r = ready(comm, "ncclCommRegister", &c);
  if (r != ncclSuccess) return r;
  if (handle == nullptr)
    return fail(ncclInvalidArgument, "ncclCommRegister: rank %d: handle is NULL", comm->rank);
  *handle = nullptr;
  if (buff == nullptr && size > 0)
    return fail(ncclInvalidArgument, "ncclCommRegister: rank %d: buff is NULL with size %zu",
                comm->rank, size);
  void* acc = nullptr;
  r = result(accord_comm_register(c, buff, size, &acc), c);
  if (r != ncclSuccess) return r;
  auto* reg = new ncclComm::Registration{buff, size, acc};
  {
    std::lock_guard<std::mutex> lock(g_mem_mutex);
    g_registered.emplace(buff, size);
  }
  std::lock_guard<std::mutex> lock(comm->mutex);
  comm->registered[reg] = reg;
  *handle = reg;
  return ncclSuccess;
}

NCCL_EXPORT ncclResult_t ncclCommDeregister(const ncclComm_t comm, void* handle) {
  accord_comm_t c = nullptr;
  ncclResult_t r = ready(comm, "ncclCommDeregister", &c);
  if (r != ncclSuccess) return r;
  ncclComm::Registration* reg = nullptr;
  {
    std::lock_guard<std::mutex> lock(comm->mutex);
    auto it = comm->registered.find(handle);
    if (it == comm->registered.end())
      return fail(ncclInvalidArgument,
                  "ncclCommDeregister: rank %d: handle %p is not one that ncclCommRegister gave "
                  "this communicator (or it was deregistered already)",
                  comm->rank, handle);
    reg = it->second;
    comm->registered.erase(it);
  }
  r = result(accord_comm_deregister(c, reg->acc), c);
  forget_registration(reg->buff, reg->size);
  delete reg;
  return r;
}

// Symmetric memory and device-initiated communication need every rank's GPU memory mapped
// into one window that kernels address directly (NVLink/NVLS, GIN). Accord's GPU path moves
// data through its own channels and maps no peer memory, so it refuses; PyTorch asks for
// these only for torch.distributed._symmetric_memory on the NCCL backend, never for DDP.
NCCL_EXPORT ncclResult_t ncclCommWindowRegister(ncclComm_t comm, void* buff, size_t size,
                                                ncclWindow_t* win, int winFlags) {
  if (win != nullptr) *win = nullptr;
  accord_comm_t c = nullptr;
  ncclResult_t r = ready(comm, "ncclCommWindowRegister", &c);
  if (r != ncclSuccess) return r;
  return fail(ncclInvalidUsage,
              "ncclCommWindowRegister: rank %d: a symmetric memory window (%p, %zu bytes, flags "
              "0x%x) is not supported by Accord's NCCL layer: Accord maps no peer GPU memory. "
              "Collectives on this "
              "buffer work without a window; do not use symmetric memory "
              "(torch.distributed._symmetric_memory, "
              "NCCL backend) on Accord",
              comm->rank, buff, size, static_cast<unsigned>(winFlags));
}

NCCL_EXPORT ncclResult_t ncclCommWindowDeregister(ncclComm_t comm, ncclWindow_t win) {
  accord_comm_t c = nullptr;
  ncclResult_t r = ready(comm, "ncclCommWindowDeregister", &c);
  if (r != ncclSuccess) return r;
  return fail(ncclInvalidArgument,
              "ncclCommWindowDeregister: rank %d: window %p did not come from this library "
              "(ncclCommWindowRegister is not supported on Accord, so no window exists)",
              comm->rank, static_cast<void*>(win));
}

NCCL_EXPORT ncclResult_t ncclDevCommCreate(ncclComm_t comm, ncclDevCommRequirements_t const*,
                                           ncclDevComm_t*) {
  accord_comm_t c = nullptr;
  ncclResult_t r = ready(comm, "ncclDevCommCreate", &c);
  if (r != ncclSuccess) return r;
  return fail(ncclInvalidUsage,
              "ncclDevCommCreate: rank %d: device communicators (kernels that communicate through "
              "NCCL's device API: LSA, multimem, GIN) are not supported by Accord's NCCL layer; "
              "use host-initiated "
              "collectives, and do not use symmetric memory (torch.distributed._symmetric_memory, "
              "NCCL backend) on "
              "Accord",
              comm->rank);
}

NCCL_EXPORT ncclResult_t ncclDevCommDestroy(ncclComm_t comm, ncclDevComm_t const* devComm) {
  accord_comm_t c = nullptr;
  ncclResult_t r = ready(comm, "ncclDevCommDestroy", &c);
  if (r != ncclSuccess) return r;
  return fail(ncclInvalidArgument,
              "ncclDevCommDestroy: rank %d: device communicator %p did not come from this "
              "library (ncclDevCommCreate is not supported on Accord, so none exists)",
              comm->rank, static_cast<const void*>(devComm));
}

// Device memory for NCCL's buffers: Accord's device runtime, on the caller's current CUDA
// device. With no GPU it fails and says so.
NCCL_EXPORT ncclResult_t ncclMemAlloc(void** ptr, size_t size) {
  if (ptr == nullptr) return fail(ncclInvalidArgument, "ncclMemAlloc: ptr is NULL");
  *ptr = nullptr;
  int count = 0;
  if (accord_device_count(&count) != ACCORD_SUCCESS || count == 0)
    return fail(ncclInvalidUsage,
                "ncclMemAlloc: no GPU is visible to Accord (this build or machine has none, and "
                "ACCORD_SIM_TOPO is unset), so there is no device memory to allocate %zu bytes "
                "from; use host "
                "memory with host communicators",
                size);
  if (size == 0) return ncclSuccess;
  const int device = current_device(0);
  ncclResult_t r = result(accord_device_alloc(ptr, size, device), nullptr);
  if (r != ncclSuccess)
    return fail(r, "ncclMemAlloc: allocating %zu bytes on GPU %d failed: %s", size, device,
                last_error().c_str());
  std::lock_guard<std::mutex> lock(g_mem_mutex);
  g_mem[*ptr] = size;
  return ncclSuccess;
}

NCCL_EXPORT ncclResult_t ncclMemFree(void* ptr) {
  if (ptr == nullptr) return ncclSuccess;
  {
    std::lock_guard<std::mutex> lock(g_mem_mutex);
    auto it = g_mem.find(ptr);
    if (it == g_mem.end())
      return fail(ncclInvalidArgument,
                  "ncclMemFree: %p did not come from ncclMemAlloc (or was freed already)", ptr);
    const auto* lo = static_cast<const uint8_t*>(ptr);
    for (const auto& [buff, size] : g_registered) {
      const auto* b = static_cast<const uint8_t*>(buff);
      if (b + size > lo && b < lo + it->second)
        return fail(ncclInvalidUsage,
                    "ncclMemFree: %p (%zu bytes) is still registered with a communicator (%p, %zu "
                    "bytes), whose peers map it: call ncclCommDeregister (or ncclCommDestroy) "
                    "first",
                    ptr, it->second, buff, size);
    }
    g_mem.erase(it);
  }
  return result(accord_device_free(ptr), nullptr);
}
