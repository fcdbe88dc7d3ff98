/*
 * Accord: collective communication for data-parallel training.
 *
 * The C API. Compiles as C99 and C++. Close to NCCL's shape: a communicator per rank, created
 * from a unique id that rank 0 makes and the caller broadcasts (or from the launcher's
 * environment), and collectives that take (sendbuf, recvbuf, count, dtype, op, comm, stream).
 *
 * Every function returns an accord_status_t. On failure, accord_last_error(comm) returns a
 * message that says what failed, where (rank, peer, operation) and what to do.
 *
 * Memory: with stream == NULL the buffers are host memory and the call is synchronous (it
 * returns when recvbuf holds the result on this rank).
 *
 * Thread safety: different communicators may be used from different threads at once. One
 * communicator must be used by one thread at a time.
 */
#ifndef ACCORD_ACCORD_H_
#define ACCORD_ACCORD_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define ACCORD_API __attribute__((visibility("default")))
#else
#define ACCORD_API
#endif

/** Library version as MAJOR*10000 + MINOR*100 + PATCH. */
#define ACCORD_VERSION_CODE(major, minor, patch) ((major)*10000 + (minor)*100 + (patch))

/** Result of every call. Values below 9 match NCCL's ncclResult_t. */
typedef enum {
  ACCORD_SUCCESS = 0,                /**< The call did what it was asked. */
  ACCORD_ERR_CUDA = 1,               /**< A CUDA call failed; the message has CUDA's text and the device. */
  ACCORD_ERR_SYSTEM = 2,             /**< An operating system call failed (socket, shm, mmap...). */
  ACCORD_ERR_INTERNAL = 3,           /**< A bug in Accord; please report the message. */
  ACCORD_ERR_INVALID_ARGUMENT = 4,   /**< An argument is wrong (NULL buffer, unknown dtype...). */
  ACCORD_ERR_INVALID_USAGE = 5,      /**< The call is not allowed now (destroyed communicator...). */
  ACCORD_ERR_REMOTE = 6,             /**< Another rank failed or died; the message names it. */
  ACCORD_IN_PROGRESS = 7,            /**< Asynchronous work is still running (not an error). */
  ACCORD_ERR_TIMEOUT = 8,            /**< A wait passed its deadline; the message names whom it waited for. */
  ACCORD_ERR_ABORTED = 9,            /**< The communicator was aborted. */
  ACCORD_ERR_MISMATCH = 10,          /**< Ranks called a collective with different arguments. */
  ACCORD_ERR_UNSUPPORTED = 11,       /**< Valid, but not supported by this build or machine. */
  ACCORD_NUM_STATUS = 12
} accord_status_t;

/** Element types. Values match NCCL's ncclDataType_t. */
typedef enum {
  ACCORD_INT8 = 0,
  ACCORD_UINT8 = 1,
  ACCORD_INT32 = 2,
  ACCORD_UINT32 = 3,
  ACCORD_INT64 = 4,
  ACCORD_UINT64 = 5,
  ACCORD_FLOAT16 = 6,  /**< IEEE 754 binary16; reduced in float32, rounded to nearest even. */
  ACCORD_FLOAT32 = 7,
  ACCORD_FLOAT64 = 8,
  ACCORD_BFLOAT16 = 9, /**< bfloat16; reduced in float32, rounded to nearest even. */
  ACCORD_NUM_DTYPES = 10
} accord_datatype_t;

/** Reduction operations. Values match NCCL's ncclRedOp_t. */
typedef enum {
  ACCORD_SUM = 0,
  ACCORD_PROD = 1,
  ACCORD_MAX = 2,
  ACCORD_MIN = 3,
  /** Sum divided by the number of ranks. Integer averages truncate toward zero (C division);
   *  integer sums wrap around on overflow (two's complement), as unsigned arithmetic does. */
  ACCORD_AVG = 4,
  /** The built-in ops; values from ACCORD_NUM_OPS on are pre-multiplied sums that
   *  accord_red_op_create_pre_mul_sum made for one communicator. */
  ACCORD_NUM_OPS = 5
} accord_red_op_t;

/** Where the scalar of a pre-multiplied sum lives. Values match NCCL's ncclScalarResidence_t. */
typedef enum {
  /** Read each time a collective runs: by the kernel from device memory of the communicator's
   *  GPU for device buffers; from host-readable memory for host buffers. */
  ACCORD_SCALAR_DEVICE = 0,
  /** Read once, when the op is created. */
  ACCORD_SCALAR_HOST_IMMEDIATE = 1
} accord_scalar_residence_t;

/** Opaque communicator handle: one per rank. */
typedef struct accord_comm* accord_comm_t;

/** The caller's stream for collectives on device buffers: with CUDA a cudaStream_t of the
 *  communicator's GPU; with simulated GPUs (ACCORD_SIM_TOPO) the value accord_stream_create
 *  (accord_device.h) returns. With device buffers a collective is asynchronous, as in NCCL: it
 *  returns once enqueued; later work on the stream sees its result; a failure while it runs
 *  sets the communicator's asynchronous error (accord_comm_get_async_error) and still lets
 *  the stream go on. Host buffers run synchronously; a communicator without a GPU refuses a
 *  non-NULL stream (ACCORD_ERR_UNSUPPORTED). */
typedef void* accord_stream_t;

/** Bytes in a unique id (same as NCCL's). */
#define ACCORD_UNIQUE_ID_BYTES 128

/** Identifies one job: the bootstrap address and the job's secret. Treat it as a secret: anyone
 *  holding it may join the job. Create on one rank, send to all others out of band. */
typedef struct {
  char internal[ACCORD_UNIQUE_ID_BYTES];
} accord_unique_id_t;

/** Fixed text for a status code ("invalid argument"); never NULL. */
ACCORD_API const char* accord_status_string(accord_status_t status);

/** The last error message of this communicator, or, with comm == NULL, the last error of any
 *  call made by this thread (init failures have no communicator). Empty string if none.
 *  The pointer is valid until the next call on the same communicator or thread. */
ACCORD_API const char* accord_last_error(accord_comm_t comm);

/** Version as ACCORD_VERSION_CODE(major, minor, patch). */
ACCORD_API accord_status_t accord_get_version(int* version);

/** Creates a unique id and starts the bootstrap listener in this process (bound to
 *  ACCORD_BOOTSTRAP_ADDR, loopback by default). Call once per job, on one process. */
ACCORD_API accord_status_t accord_get_unique_id(accord_unique_id_t* id);

/** Joins a job as `rank` of `nranks`. Collective: every rank must call it with the same id and
 *  nranks. Fails with ACCORD_ERR_TIMEOUT naming the missing ranks if not all arrive within
 *  ACCORD_INIT_TIMEOUT_MS (default 60 s). */
ACCORD_API accord_status_t accord_comm_init_rank(accord_comm_t* comm, int nranks,
                                                 accord_unique_id_t id, int rank);

/** Joins a job described by the launcher's environment, first match wins:
 *  RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT (torchrun style; rank 0 listens on MASTER_PORT),
 *  OMPI_COMM_WORLD_RANK/SIZE (mpirun), PMI_RANK/PMI_SIZE, SLURM_PROCID/SLURM_NTASKS.
 *  Without MASTER_ADDR the ranks meet through a rendezvous file in ACCORD_BOOTSTRAP_DIR
 *  (default /tmp) named after the launcher's job id (single host only). */
ACCORD_API accord_status_t accord_comm_init_from_env(accord_comm_t* comm);

/** Creates ndev communicators in this process, ranks 0..ndev-1 of one job (as NCCL's
 *  ncclCommInitAll), each initialised on its own thread. devlist: the GPU of each rank (CUDA
 *  devices, or simulated GPUs with ACCORD_SIM_TOPO); NULL for host-memory ranks. One thread
 *  may then drive every rank: collectives on device buffers return once enqueued, with or
 *  without accord_group_start/end. Without devlist, accord_comm_init_rank picks
 *  ACCORD_DEVICE, else (with ACCORD_SIM_TOPO) the local rank modulo the GPUs. */
ACCORD_API accord_status_t accord_comm_init_all(accord_comm_t* comms, int ndev, const int* devlist);

/** Frees the communicator: call it after the last collective on every rank. Where ranks of
 *  other processes map this rank's GPU memory (device collectives between processes of one
 *  host), it first waits until each of them has destroyed its communicator or exited (at most
 *  ACCORD_TIMEOUT_MS; then it leaves that memory allocated, with a warning), so that no peer's
 *  kernel reads freed memory. Using the handle afterwards returns ACCORD_ERR_INVALID_USAGE. */
ACCORD_API accord_status_t accord_comm_destroy(accord_comm_t comm);

/** Registers the caller's device buffer [buf, buf + bytes) with the communicator: where the job
 *  uses the direct protocol (every pair of ranks addresses the other's GPU memory) and its
 *  ranks are in several processes, every peer maps the allocation holding the buffer through
 *  CUDA IPC, once per process (a cache keyed by the allocation's base and buffer id).
 *  COLLECTIVE in such a job: every rank registers at the same point of its calls on the
 *  communicator (its own buffer; sizes may differ), and deregisters in the same order; a rank
 *  that does something else is named in an error (ACCORD_ERR_INVALID_USAGE), one that makes no
 *  call at all after ACCORD_TIMEOUT_MS. Elsewhere (threads of one process, the FIFO path) a
 *  local record. An out-of-place all-reduce (one-shot) whose input lies in a registered buffer
 *  is then read by the peers where it lies, without a copy; collectives are exact whether or
 *  not buffers are registered (the plan's "user buffers" line counts registrations and calls).
 *  Do not free a registered buffer before accord_comm_deregister returns (or
 *  accord_comm_destroy). *handle is never NULL on success. */
ACCORD_API accord_status_t accord_comm_register(accord_comm_t comm, void* buf, size_t bytes, void** handle);

/** Takes back a registration (collective where registering was): it first waits until this
 *  rank's queued collectives have ended; when it returns, no peer maps the buffer any more,
 *  and the caller may free it. */
ACCORD_API accord_status_t accord_comm_deregister(accord_comm_t comm, void* handle);

/** Aborts the communicator: every call waiting inside it on any thread returns
 *  ACCORD_ERR_ABORTED within about 20 ms, then its resources are freed and the handle is dead
 *  (later calls return ACCORD_ERR_INVALID_USAGE). Safe to call from another thread while a
 *  collective is blocked; returns within 5 s. The other ranks see this rank disappear
 *  (ACCORD_ERR_REMOTE) and should abort or destroy their communicators too. */
ACCORD_API accord_status_t accord_comm_abort(accord_comm_t comm);

/** The error that broke this communicator, or ACCORD_SUCCESS. Host collectives are
 *  synchronous, so this is the error their call already returned; it stays set. When it is
 *  set, accord_last_error(comm) on the calling thread then gives its message (a collective on
 *  device buffers fails on the communicator's worker, not on the caller's thread). */
ACCORD_API accord_status_t accord_comm_get_async_error(accord_comm_t comm, accord_status_t* async_error);

/** This communicator's rank. */
ACCORD_API accord_status_t accord_comm_rank(accord_comm_t comm, int* rank);

/** Number of ranks in this communicator. */
ACCORD_API accord_status_t accord_comm_count(accord_comm_t comm, int* nranks);

/** How ranks reach each other: one line per pair of ranks, "pair A-B: TRANSPORT (reason)",
 *  TRANSPORT one of shm, tcp, p2p, ipc, host-staged. Every rank gets the same text. Copies
 *  at most *len bytes (NUL-terminated) into buf and sets *len to the full size needed
 *  (including the NUL); buf may be NULL to ask for the size. */
ACCORD_API accord_status_t accord_comm_plan(accord_comm_t comm, char* buf, size_t* len);

/** recvbuf[i] = op over ranks of sendbuf[i], for i < count, on every rank. In place when
 *  sendbuf == recvbuf. Every rank gets bitwise identical results. */
ACCORD_API accord_status_t accord_all_reduce(const void* sendbuf, void* recvbuf, size_t count,
                                             accord_datatype_t dtype, accord_red_op_t op,
                                             accord_comm_t comm, accord_stream_t stream);

/** recvbuf (recvcount elements) = op over ranks of sendbuf[rank*recvcount .. +recvcount].
 *  sendbuf holds nranks*recvcount elements. In place when recvbuf == sendbuf + rank*recvcount. */
ACCORD_API accord_status_t accord_reduce_scatter(const void* sendbuf, void* recvbuf,
                                                 size_t recvcount, accord_datatype_t dtype,
                                                 accord_red_op_t op, accord_comm_t comm,
                                                 accord_stream_t stream);

/** recvbuf[r*sendcount .. +sendcount] = rank r's sendbuf, for every r. In place when
 *  sendbuf == recvbuf + rank*sendcount. */
ACCORD_API accord_status_t accord_all_gather(const void* sendbuf, void* recvbuf, size_t sendcount,
                                             accord_datatype_t dtype, accord_comm_t comm,
                                             accord_stream_t stream);

/** recvbuf = root's sendbuf on every rank (sendbuf is read on root only). */
ACCORD_API accord_status_t accord_broadcast(const void* sendbuf, void* recvbuf, size_t count,
                                            accord_datatype_t dtype, int root, accord_comm_t comm,
                                            accord_stream_t stream);

/** Root's recvbuf = op over ranks of sendbuf (recvbuf is written on root only). */
ACCORD_API accord_status_t accord_reduce(const void* sendbuf, void* recvbuf, size_t count,
                                         accord_datatype_t dtype, accord_red_op_t op, int root,
                                         accord_comm_t comm, accord_stream_t stream);

/** Sends count elements of sendbuf to rank peer, which must call accord_recv with this rank,
 *  the same count and dtype. Only the two ranks take part. Alone, it returns once the data
 *  has left sendbuf (it may wait for the peer). Between accord_group_start and
 *  accord_group_end, the sends and receives of a communicator progress together (an
 *  all-to-all is a group of one send to and one receive from every rank, this one included);
 *  calls for one peer match in call order. Host buffers run at once (or at the group's end).
 *  Device buffers are asynchronous on the stream, as collectives are: alone, one kernel;
 *  in a group, the group's sends and receives of each communicator are one kernel, launched
 *  at accord_group_end on the stream they name (one stream per communicator and group);
 *  the peers may be on the same GPU, on peers (p2p, ipc) or staged through host memory, not
 *  on other hosts (ACCORD_ERR_UNSUPPORTED). A count or dtype that differs from the peer's
 *  receive is ACCORD_ERR_MISMATCH (for device buffers, the communicator's asynchronous
 *  error); a send whose receive never comes fails at ACCORD_TIMEOUT_MS. */
ACCORD_API accord_status_t accord_send(const void* sendbuf, size_t count, accord_datatype_t dtype,
                                       int peer, accord_comm_t comm, accord_stream_t stream);

/** Receives count elements from rank peer into recvbuf (see accord_send). */
ACCORD_API accord_status_t accord_recv(void* recvbuf, size_t count, accord_datatype_t dtype,
                                       int peer, accord_comm_t comm, accord_stream_t stream);

/** A reduction op for accord_all_reduce, accord_reduce and accord_reduce_scatter on comm:
 *  the sum over ranks of scalar_r * sendbuf_r, where scalar_r is each rank's own one element
 *  of dtype (NCCL's ncclRedOpCreatePreMulSum). Host and device buffers. The op is valid for
 *  calls of this dtype on this communicator until accord_red_op_destroy. */
ACCORD_API accord_status_t accord_red_op_create_pre_mul_sum(accord_red_op_t* op, void* scalar,
                                                            accord_datatype_t dtype,
                                                            accord_scalar_residence_t residence,
                                                            accord_comm_t comm);

/** Frees an op of accord_red_op_create_pre_mul_sum (its number may be given out again). */
ACCORD_API accord_status_t accord_red_op_destroy(accord_red_op_t op, accord_comm_t comm);

/** Returns once every rank has called it. */
ACCORD_API accord_status_t accord_barrier(accord_comm_t comm, accord_stream_t stream);

/** Starts a group: collectives called until the matching accord_group_end are checked and
 *  queued (they return ACCORD_SUCCESS at once) and run together at accord_group_end. Needed
 *  when one thread drives several ranks, whose calls would otherwise wait for each other.
 *  Groups nest; only the outermost end runs the work. Calls on one communicator run in the
 *  order they were made. */
ACCORD_API accord_status_t accord_group_start(void);

/** Runs the group's queued collectives, each communicator's in its own thread, and returns
 *  when all are done: ACCORD_SUCCESS, or the first failure (each communicator's own error is
 *  in accord_last_error(comm)). Buffers must stay valid until it returns. On device buffers,
 *  collectives were enqueued at their call; the group's sends and receives are enqueued here,
 *  one kernel per communicator, and it returns once they are. */
ACCORD_API accord_status_t accord_group_end(void);

/** Size in bytes of one element of dtype, or 0 if dtype is unknown. */
ACCORD_API size_t accord_dtype_size(accord_datatype_t dtype);

#ifdef __cplusplus
}
#endif

#endif /* ACCORD_ACCORD_H_ */
