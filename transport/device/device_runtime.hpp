// The device runtime: the one interface through which Accord touches GPUs. Collectives and
// transports allocate, copy, order work on streams and events, map a peer process's memory
// (IPC) and launch reductions through it, and never call CUDA directly. Two implementations:
// CudaRuntime (cuda_runtime.hpp, the thin adapter over the CUDA runtime API) and
// SimulatedRuntime (sim_runtime.hpp: GPUs made of host memory that obey a topology file, so
// multi-GPU behaviour is tested on machines without any GPU). make_device_runtime() picks one.
//
// Note [Device runtime rules]: both implementations enforce the same rules, so that code which
// works on simulated GPUs does not fail on real ones for a reason the simulation hid.
//  - Every call returns a Status; bad input (device out of range, a pointer that is not what
//    the call needs, a destroyed stream) is an error naming the operation, the device and the
//    pointer, never an abort.
//  - Device memory of device X may be touched by work of device Y only if X == Y or
//    enable_peer(Y, X) succeeded before. copy_peer*() are *direct* copies and follow the same
//    rule (CUDA's cudaMemcpyPeer would silently stage through the host; we refuse, so that the
//    transport that stages does so on purpose and the cost model stays true). Copies staged
//    through pinned host memory (copy_d2h into a pinned buffer, copy_h2d out of it) always work.
//  - enable_peer(a, b) fails with ACCORD_ERR_UNSUPPORTED and the driver's text where the
//    machine cannot peer; enabling twice is not an error.
//  - Streams are non-blocking and belong to one device; synchronous copies do not wait for
//    streams (synchronize the stream first). Work on one stream runs in order; events order
//    work across streams (record on one, wait on another), as in CUDA.
//  - Freeing device memory waits for the streams of its device first (as cudaFree does);
//    freeing pinned host memory or closing an IPC mapping waits for every stream. Work queued
//    on another GPU that still reads the memory must be synchronized by the caller.
//  - Stream memory operations (Note [Stream memory operations] below): a write lands in stream
//    order after the work before it; work after a wait starts only once the word satisfies the
//    condition. Both runtimes check the word's alignment; the simulation also checks that the
//    stream's device may touch it. A simulated wait cannot hang: it fails when its stream or
//    runtime is destroyed, or after ACCORD_SIM_STALL_MS.
//  - Without MPS, a GPU shared by processes runs one process's kernels at a time; the
//    simulation models it on request (Note [Simulated time slices], sim_timeslice.hpp).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "collectives/kernels/reduce_kernels.hpp"
#include "core/settings.hpp"
#include "core/status.hpp"
#include "include/accord/accord.h"

namespace accord {

// What a pointer points at.
enum class MemoryKind {
  kHost,        // ordinary (pageable) host memory, or memory this runtime does not know
  kHostPinned,  // pinned host memory from alloc_host_pinned: copies and kernels may use it
  kDevice,      // device memory (including a peer process's memory opened from an IPC handle)
};
const char* memory_kind_name(MemoryKind kind);

struct PointerInfo {
  MemoryKind kind = MemoryKind::kHost;
  int device = -1;         // kDevice: the device that owns the memory
  void* base = nullptr;    // start of the allocation holding the pointer; nullptr if unknown
  size_t bytes = 0;        // size of that allocation; 0 if unknown
  bool imported = false;   // opened from another process's IPC handle
  // Note [Buffer ids]: a process-wide unique id of the allocation (CUDA:
  // CU_POINTER_ATTRIBUTE_BUFFER_ID; the simulation: a counter), never given to another
  // allocation, even one at the same address after a free. A cache of mappings keyed by base
  // alone would hand out a freed buffer's mapping for a new one; keyed by (base, buffer id) it
  // cannot. 0: unknown.
  uint64_t buffer_id = 0;
};

struct DeviceInfo {
  std::string name;        // "Tesla V100-SXM2-16GB", or "simulated GPU 3"
  std::string pci_bus_id;  // "0000:07:00.0"; simulated GPUs without one get "00ff:0N:00.0"
  std::string uuid;        // "GPU-8c1e...": the GPU's identity whatever CUDA_VISIBLE_DEVICES says
  int sm = 0;              // compute capability x 10, 0 unknown
  int multiprocessors = 0; // 0 unknown (simulated GPUs)
};

// Handles are small values. 0 is never a valid id; a destroyed handle's id is never reused,
// so using it is an error instead of touching another stream.
struct Stream {
  uint64_t id = 0;
};
struct Event {
  uint64_t id = 0;
};

// Plain bytes, so that a rank can publish it through the bootstrap store. The header is common;
// the payload belongs to the runtime that made it (the CUDA handle, or the simulated one).
struct IpcHandle {
  static constexpr uint32_t kMagic = 0x41434950;  // "ACIP"
  uint32_t magic = 0;
  uint32_t runtime = 0;  // IpcRuntime
  int32_t device = -1;   // owner of the memory
  uint32_t reserved = 0;
  uint64_t offset = 0;   // of the exported pointer inside its allocation
  uint64_t bytes = 0;    // size of the allocation
  uint8_t payload[96] = {};
};
static_assert(sizeof(IpcHandle) == 128, "IpcHandle travels as 128 plain bytes");
enum class IpcRuntime : uint32_t { kSimulated = 1, kCuda = 2 };

// The CUDA runtime's own words (cudaGetErrorName: cudaGetErrorString), which the simulation
// repeats so that its errors read like a real machine's.
inline constexpr char kPeerAccessUnsupportedText[] =
    "cudaErrorPeerAccessUnsupported: peer access is not supported between these two devices";
inline constexpr char kPeerAccessNotEnabledText[] =
    "cudaErrorPeerAccessNotEnabled: peer access has not been enabled";

enum class CopyKind { kHostToDevice, kDeviceToHost, kDeviceToDevice };

// One of Accord's own kernels (Note [One protocol, two executors], collectives/device/
// dev_call.hpp): the CUDA function and the same code for a host thread, which the simulation
// runs on the stream's thread. The runtime launches it; it does not know what it does.
struct KernelDesc {
  const char* name = "";
  const void* cuda_func = nullptr;                  // __global__ function; null without CUDA
  void (*host_func)(const void* params) = nullptr;  // the simulation's body
  unsigned threads = 256;                           // per block; one block
};
const char* copy_kind_name(CopyKind kind);  // "copy_h2d", ...

class DeviceRuntime {
 public:
  virtual ~DeviceRuntime() = default;

  // "simulated", "cuda" or "none".
  virtual const char* kind() const = 0;
  // One line for logs: "simulated: 8 GPUs of dgx1-v100-topo-m.txt".
  virtual std::string description() const = 0;

  // ---- devices ----
  virtual int device_count() const = 0;
  virtual Status device_info(int device, DeviceInfo* out) const = 0;
  // The GPU the calling thread has made current (CUDA: it has a context, from cudaSetDevice
  // or any CUDA call; the communicator then runs on it, as NCCL does), -1 if none. The
  // simulation has no current device.
  virtual Status current_device(int* out) {
    *out = -1;
    return Status();
  }

  // The ordinal of the GPU with this PCI bus id among the devices this process sees
  // (cudaDeviceGetByPCIBusId), or -1 when it does not see it (CUDA_VISIBLE_DEVICES); case and
  // a 4- or 8-digit domain do not matter.
  virtual Status device_by_bus_id(const std::string& pci_bus_id, int* out) const;
  // The PCI bus ids of the other GPUs that `device` can peer with in both directions: the
  // fact each rank publishes at init so that every rank decides every route alike (Note [GPU
  // identity], collectives/device/engine.cpp). This default asks can_access_peer about the
  // devices this process sees; a runtime that knows the whole machine lists the others too.
  virtual Status peer_bus_ids(int device, std::vector<std::string>* out);

  // ---- memory ----
  // alloc of 0 bytes gives nullptr and succeeds; freeing nullptr succeeds (as in CUDA).
  virtual Status alloc_device(int device, size_t bytes, void** out) = 0;
  virtual Status free_device(void* ptr) = 0;
  virtual Status alloc_host_pinned(size_t bytes, void** out) = 0;
  virtual Status free_host_pinned(void* ptr) = 0;
  virtual Status pointer_info(const void* ptr, PointerInfo* out) = 0;
  // Pins existing host memory (cudaHostRegister, portable and mapped): afterwards copies and
  // reductions of every device accept [ptr, ptr + bytes) as pinned host memory. The shared-memory
  // FIFO slots are registered so that device kernels read and write them directly (host-staged
  // transport). unregister_host takes the pointer given to register_host.
  virtual Status register_host(void* ptr, size_t bytes) = 0;
  virtual Status unregister_host(void* ptr) = 0;

  // ---- peer access ----
  // Whether device may be given access to peer's memory (false for device == peer).
  virtual Status can_access_peer(int device, int peer, bool* out) = 0;
  // Lets work on `device` touch memory of `peer` (one direction, as cudaDeviceEnablePeerAccess).
  virtual Status enable_peer(int device, int peer) = 0;

  // ---- copies ----
  // Synchronous: done when the call returns. `device` is the device doing the copy; its memory
  // (or a peer's it has access to) must be on the device side of `kind`.
  virtual Status copy(CopyKind kind, int device, void* dst, const void* src, size_t bytes) = 0;
  // Asynchronous on `stream` (whose device does the copy): returns at once, except with
  // pageable host memory, as in CUDA: from it, the call returns once the source is staged (it
  // may be reused at once); into it, the call returns when the copy is done. Use pinned memory
  // for copies that overlap.
  virtual Status copy_async(CopyKind kind, void* dst, const void* src, size_t bytes,
                            Stream stream) = 0;
  // Direct copy between the memory of two devices. The synchronous form is pushed by
  // src_device and needs enable_peer(src_device, dst_device); the asynchronous form runs on a
  // stream of src_device or dst_device and needs peer access from that device to the other.
  virtual Status copy_peer(int dst_device, void* dst, int src_device, const void* src,
                           size_t bytes) = 0;
  virtual Status copy_peer_async(int dst_device, void* dst, int src_device, const void* src,
                                 size_t bytes, Stream stream) = 0;

  // ---- streams and events ----
  // `blocking`: synchronizes with the legacy default stream, as cudaStreamCreate's streams do
  // (users' streams); Accord's own streams are non-blocking.
  virtual Status create_stream(int device, Stream* out, bool blocking = false) = 0;
  // Waits for the stream's work, then destroys it.
  virtual Status destroy_stream(Stream stream) = 0;
  // Waits for all work enqueued so far; returns the first error any of it hit.
  virtual Status synchronize_stream(Stream stream) = 0;
  // Waits for every stream of the device.
  virtual Status synchronize_device(int device) = 0;
  virtual Status create_event(int device, Event* out) = 0;
  virtual Status destroy_event(Event event) = 0;
  // The event completes when the work enqueued on `stream` so far has completed.
  virtual Status record_event(Event event, Stream stream) = 0;
  // Work enqueued on `stream` after this waits for the event's latest record (a no-op if it
  // was never recorded).
  virtual Status stream_wait_event(Stream stream, Event event) = 0;
  virtual Status synchronize_event(Event event) = 0;
  virtual Status query_event(Event event, bool* done) = 0;
  // Runs fn(arg) on a host thread when the stream reaches this point; later work waits for it
  // (cudaLaunchHostFunc). fn must not call the runtime.
  using HostFn = void (*)(void* arg);
  virtual Status launch_host_func(Stream stream, HostFn fn, void* arg) = 0;
  // Work enqueued on `stream` after this waits until flag->load() >= value. The flag lives in
  // host memory and is set by a host thread (the communicator's device worker). Note [Stream
  // gate] (transport/device/README.md) says why this, and not a blocking host function, is how
  // a collective holds the caller's stream.
  virtual Status stream_wait_flag(Stream stream, const std::atomic<uint64_t>* flag, uint64_t value) = 0;
  // A flag (zero) for stream_wait_flag that stays where it is until the process ends: a caller's
  // stream may still wait on a communicator's flag after the communicator is gone. Flags are
  // never freed (8 bytes per GPU communicator ever created) and stay reachable. The CUDA adapter
  // puts them in mapped pinned memory, where the GPU itself can wait (cuStreamWaitValue64).
  virtual std::atomic<uint64_t>* new_flag();

  // ---- stream memory operations (cuStreamWriteValue32/64, cuStreamWaitValue32/64) ----
  // Note [Stream memory operations]: a hand-off between two processes that share a GPU without
  // MPS must not wait inside a kernel (the GPU runs one process's kernels at a time, in slices
  // of about 2 ms, so a spinning kernel waits for a slice); a stream waiting on a word lets the
  // GPU switch to the other process at once. `ptr` is device memory the stream's device may
  // touch (its own, a peer's with access, IPC-opened), or pinned / registered host memory
  // (give the CUDA adapter device_address()'s pointer; the simulation takes either), aligned
  // to the word's size.
  //  - write: stores `value` in stream order, after the work enqueued before it completed
  //    (with a memory barrier: that work's writes are visible before the word).
  //  - wait: work enqueued after it on `stream` starts only once the word satisfies the
  //    condition: kGeq as CUDA defines it, (int32_t)(*ptr - value) >= 0 (int64_t for 64 bits,
  //    so a counter that wraps still compares right), kEq *ptr == value.
  // Both return ACCORD_ERR_UNSUPPORTED where the driver lacks them (the CUDA adapter checks
  // the device attributes). The simulation's wait (the stream's thread polls the word) ends
  // with an error, breaking the stream, when the stream is destroyed, the runtime is destroyed,
  // or the word has not arrived after ACCORD_SIM_STALL_MS, so a wait on a dead peer's word
  // never hangs a test; a GPU waits for ever, so the caller's watchdog must write the word.
  enum class WaitCondition { kGeq, kEq };
  virtual Status stream_write_value32(Stream stream, void* ptr, uint32_t value) = 0;
  virtual Status stream_write_value64(Stream stream, void* ptr, uint64_t value) = 0;
  virtual Status stream_wait_value32(Stream stream, const void* ptr, uint32_t value, WaitCondition condition) = 0;
  virtual Status stream_wait_value64(Stream stream, const void* ptr, uint64_t value, WaitCondition condition) = 0;

  // ---- the caller's streams (accord_stream_t) ----
  // CUDA: accord_stream_t is a cudaStream_t of `device`. Simulated: it is the Stream id cast to
  // a pointer (what accord_stream_create returns). wrap_user_stream makes one usable as a
  // Stream (the runtime never destroys it: destroy_stream only forgets a wrapped stream);
  // user_stream goes the other way.
  virtual Status wrap_user_stream(int device, void* user_stream, Stream* out) = 0;
  virtual void* user_stream(Stream stream) const = 0;
  // Whether work enqueued on `stream` now would be captured into a CUDA graph
  // (cudaStreamIsCapturing: an active or invalidated capture). The simulation has no graphs:
  // never.
  virtual Status stream_capturing(Stream stream, bool* out) = 0;

  // ---- IPC between processes of one host ----
  // Exports device memory (ptr may point inside an allocation). The handle stays valid while
  // the allocation lives.
  virtual Status ipc_get_handle(const void* ptr, IpcHandle* out) = 0;
  // Maps another process's exported memory for use by `device`; peer access to the owner is
  // enabled on the way (cudaIpcMemLazyEnablePeerAccess). Opening a handle exported by this
  // same process is an error, as in CUDA: use the pointer.
  virtual Status ipc_open_handle(int device, const IpcHandle& handle, void** out) = 0;
  virtual Status ipc_close_handle(void* ptr) = 0;

  // ---- Accord's kernels ----
  // Loads the kernel's code on the device now (CUDA: cudaFuncGetAttributes), so that its first
  // launch never waits for the device: with lazy loading (CUDA's default), the first launch of a
  // kernel waits until the device is idle, which a stream held by a collective never is.
  virtual Status load_kernel(int device, const KernelDesc& kernel) = 0;
  // `blocks` blocks of kernel.threads threads on `stream`, with `params` (copied at once) as its
  // only argument, and `shared_bytes` of dynamic shared memory per block (at most 48 KiB,
  // CUDA's limit without opting in). Returns at once.
  virtual Status launch_kernel(const KernelDesc& kernel, const void* params, size_t params_bytes,
                               Stream stream, unsigned blocks = 1, size_t shared_bytes = 0) = 0;
  // The most blocks of one launch that this runtime runs at once.
  virtual unsigned max_kernel_blocks() const { return 1024; }
  // bytes of device (or pinned) memory set to `value`, on `stream`.
  virtual Status memset_async(void* ptr, int value, size_t bytes, Stream stream) = 0;
  // The address by which device code reaches registered or pinned host memory (CUDA:
  // cudaHostGetDevicePointer; the simulation: the same pointer).
  virtual Status device_address(void* host, void** out) = 0;

  // ---- reductions ----
  // dst0 (and dst1) = a op b (or a when b is null), divided by divisor when > 1, on `stream`,
  // with the host kernels' contract (collectives/kernels/reduce_kernels.hpp). Every buffer must
  // be device memory the stream's device may touch, or pinned host memory.
  virtual Status reduce_async(const kernels::ReduceArgs& args, accord_datatype_t dtype,
                              accord_red_op_t op, Stream stream) = 0;
};

// Picks the runtime: ACCORD_SIM_TOPO set -> simulated GPUs of that machine (any topology file
// format); else CUDA when built with it and a device exists; else a runtime with no devices,
// whose description() says why and whose device calls fail saying so. Logs the choice at info.
Status make_device_runtime(const Settings& settings, std::unique_ptr<DeviceRuntime>* out);

// The runtime of this process, made by make_device_runtime on first use and kept until exit:
// every communicator and the public device API (accord_device.h) share it, so that device
// pointers of one are known to the others. Null (with *why set) when it has no device.
DeviceRuntime* process_device_runtime(const Settings& settings, std::string* why = nullptr);

// A PCI bus id in one form ("0000:07:00.0", lower case, 4-digit domain), to compare ids from
// different sources (CUDA gives 8-digit domains in upper case).
std::string canonical_bus_id(const std::string& pci_bus_id);

// Bytes per element; 0 for an unknown dtype.
size_t dtype_bytes(accord_datatype_t dtype);

}  // namespace accord
