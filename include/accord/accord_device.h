/* Accord's device API: the few GPU calls programs need (tests, benchmarks, examples, an
 * NCCL-compatible shim) to use whatever device runtime Accord runs on, CUDA or the simulated
 * GPUs of ACCORD_SIM_TOPO, without calling CUDA themselves. Compiles as C99.
 *
 * The runtime is chosen once per process, at the first call here or the first communicator
 * on a GPU: ACCORD_SIM_TOPO=FILE gives the simulated GPUs of that machine (device memory is
 * host memory, streams are work queues with a thread each), else CUDA when built with it and
 * a GPU exists. Without either, accord_device_count reports 0 and the other calls fail with
 * ACCORD_ERR_UNSUPPORTED. Errors leave their message in accord_last_error(NULL). */
#ifndef ACCORD_DEVICE_H
#define ACCORD_DEVICE_H

#include <stddef.h>

#include "accord/accord.h"

#ifdef __cplusplus
extern "C" {
#endif

/** Number of GPUs (0 when there is no device runtime; that is not an error). */
ACCORD_API accord_status_t accord_device_count(int* count);

/** Allocates `bytes` of memory on GPU `device` (0 bytes gives NULL). */
ACCORD_API accord_status_t accord_device_alloc(void** ptr, size_t bytes, int device);

/** Frees memory from accord_device_alloc (NULL is fine). Waits for queued work first. */
ACCORD_API accord_status_t accord_device_free(void* ptr);

/** Copies `bytes` synchronously in any direction: host to device, device to host, device to
 *  device (of one GPU, or of two: then staged through the host), host to host. Does not wait
 *  for streams: synchronize the stream that writes `src` first. */
ACCORD_API accord_status_t accord_device_memcpy(void* dst, const void* src, size_t bytes);

/** Creates a stream of GPU `device`, usable as the accord_stream_t of collectives. */
ACCORD_API accord_status_t accord_stream_create(accord_stream_t* stream, int device);

/** Waits until all work enqueued on the stream has finished. */
ACCORD_API accord_status_t accord_stream_synchronize(accord_stream_t stream);

/** Waits for the stream's work, then destroys it. */
ACCORD_API accord_status_t accord_stream_destroy(accord_stream_t stream);

/** The GPU this communicator's rank runs on (from accord_comm_init_all's devlist,
 *  ACCORD_DEVICE, or the local rank with simulated GPUs), or -1 for a host-memory rank. */
ACCORD_API accord_status_t accord_comm_device(accord_comm_t comm, int* device);

/** accord_comm_init_rank on a given GPU (device >= 0; -1: as accord_comm_init_rank picks).
 *  For layers that know the rank's GPU, such as a sub-communicator made from one of a GPU. */
ACCORD_API accord_status_t accord_comm_init_rank_device(accord_comm_t* comm, int nranks,
                                                        accord_unique_id_t id, int rank,
                                                        int device);

#ifdef __cplusplus
}
#endif

#endif /* ACCORD_DEVICE_H */
