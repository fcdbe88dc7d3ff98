// What the files of libaccord_nccl.so share: the communicator behind ncclComm_t (nccl.h
// declares `struct ncclComm` and leaves it to the library), the thread's last error, the
// mapping of Accord's status codes, and the group queue (nccl_calls.cpp).
#pragma once

#include <accord/accord.h>
#include <nccl.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#define NCCL_EXPORT extern "C" __attribute__((visibility("default")))

// One rank's communicator. Never freed (Note [Handles outlive destroy] in accord_nccl.cpp).
struct ncclComm {
  std::atomic<uint64_t> magic{0};
  // ncclInProgress while a non-blocking (or grouped) init runs, then its result.
  std::atomic<int> state{ncclInProgress};
  std::mutex init_mutex;  // guards init_thread
  std::thread init_thread;
  std::atomic<bool> init_running{false};  // init_thread has not finished
  std::string init_error;  // the init's message, written before state leaves ncclInProgress
  std::atomic<bool> aborted{false};
  bool blocking = true;
  accord_comm_t acc = nullptr;
  int rank = -1;
  int nranks = 0;
  std::atomic<bool> finalized{false};

  std::mutex mutex;  // the tables below
  // ncclRedOpCreatePreMulSum's ops: op ncclNumOps + i is premul[i].
  struct PreMulSum {
    bool live = false;
    ncclDataType_t dtype = ncclFloat32;
    accord_red_op_t op = ACCORD_SUM;  // accord_red_op_create_pre_mul_sum's, on the same rank
  };
  std::vector<PreMulSum> premul;
  // ncclCommRegister's handles: accord_comm_register's (Note [User buffers mapped into peers]).
  struct Registration {
    void* buff;
    size_t size;
    void* acc;  // accord_comm_register's handle
  };
  std::map<void*, Registration*> registered;
};

namespace accord_nccl {

constexpr uint64_t kLive = 0x6e63636c4c495645ULL;  // "ncclLIVE"
constexpr uint64_t kDead = 0x6e63636c44454144ULL;  // "ncclDEAD"

// ncclGetLastError's text: per thread, as NCCL's.
std::string& last_error();
// Sets the thread's last error from printf-style text and returns r.
ncclResult_t fail(ncclResult_t r, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
// An Accord status as NCCL's; on failure the thread's last error takes accord_last_error(comm).
ncclResult_t result(accord_status_t st, accord_comm_t comm);

// Checks the handle (NULL, destroyed) without waiting for its init.
ncclResult_t check_handle(ncclComm_t comm, const char* fn);
// The Accord communicator of a usable comm: waits for a non-blocking init to finish.
ncclResult_t ready(ncclComm_t comm, const char* fn, accord_comm_t* out);

// Note [Stream 0]: NCCL's stream 0 is CUDA's default stream, and PyTorch passes it for every
// collective with async_op=False (it launches those on the current stream, which is the
// default stream unless the script set another). Accord's C API reads a NULL stream as "host
// buffers, synchronous", so for a communicator with a GPU a NULL stream becomes
// cudaStreamLegacy (0x1). The legacy stream also orders work with a caller's per-thread
// default stream, so a caller built with --default-stream per-thread is served too. Where
// several ranks of one process share the GPU, Accord refuses the legacy stream with a message
// (Note [One stream per rank]); a host-only communicator keeps NULL.
accord_stream_t accord_stream(accord_comm_t c, cudaStream_t stream);

// float8 has no Accord counterpart; other values outside NCCL's range are errors.
bool usable_dtype(ncclDataType_t t, const char* fn, ncclResult_t* r);
size_t dtype_bytes(ncclDataType_t t);

// Group queue (nccl_calls.cpp): inside ncclGroupStart/End, calls and communicator creations
// wait for the outermost ncclGroupEnd.
bool in_group();
void defer_comm_job(std::function<ncclResult_t()> job);

// Starts ranks' init on an allocated handle: at once (blocking), on a thread (non-blocking:
// returns ncclInProgress) or at ncclGroupEnd (inside a group).
ncclResult_t start_init(ncclComm_t w, int nranks, const accord_unique_id_t& id, int rank,
                        int device, const ncclConfig_t* config, const char* fn);
ncclComm_t new_handle();
// Reads config->blocking (NULL or undefined: blocking); checks the config's magic.
ncclResult_t blocking_of(const ncclConfig_t* config, bool inherit, const char* fn, bool* blocking);

}  // namespace accord_nccl
