// CudaRuntime: streams, events, IPC handles and reductions (memory, peer access and copies are
// cuda_runtime.cpp).
#include <cuda_runtime_api.h>

#include <chrono>
#include <cstring>
#include <thread>

#include "core/log.hpp"
#include "transport/device/cuda_runtime.hpp"
#include "transport/device/cuda_check.hpp"

// Note [CUDA reduction hook] (cuda_runtime.cpp).
#if __has_include("collectives/kernels/cuda_kernels.hpp")
#include "collectives/kernels/cuda_kernels.hpp"
#define ACCORD_DEVICE_CUDA_KERNELS 1
#else
#define ACCORD_DEVICE_CUDA_KERNELS 0
#endif

namespace accord {
namespace {

cudaStream_t native(void* s) { return static_cast<cudaStream_t>(s); }
cudaEvent_t native_event(void* e) { return static_cast<cudaEvent_t>(e); }

}  // namespace

Status CudaRuntime::create_stream(int device, Stream* out, bool blocking) {
  CudaDeviceGuard device_guard;
  ACCORD_TRY(use_device(device, "create_stream", &device_guard));
  if (!out) return error(ACCORD_ERR_INVALID_ARGUMENT, "device %d: create_stream: null output", device);
  cudaStream_t s;
  // Non-blocking unless asked: our streams never wait for the legacy default stream (Note
  // [Device runtime rules]). accord_stream_create's streams are non-blocking too (it passes no
  // `blocking`), unlike cudaStreamCreate's: keep them so. accord_device_memcpy is a synchronous
  // cudaMemcpy on the legacy stream, which waits for every blocking stream of its device: with
  // blocking streams, one rank's copy would wait for another rank's collective kernel on the
  // same GPU, which waits for this rank (the shared-GPU thread tests would hang on hardware).
  ACCORD_CUDA_CHECK(cudaStreamCreateWithFlags(&s, blocking ? cudaStreamDefault : cudaStreamNonBlocking), device,
                    "create_stream");
  std::lock_guard<std::mutex> lock(mu_);
  out->id = next_id_++;
  streams_[out->id] = Handle{s, device, true};
  return Status();
}

Status CudaRuntime::wrap_stream(int device, void* cuda_stream, Stream* out) {
  ACCORD_TRY(check_device(device, "wrap_stream"));
  if (!out) return error(ACCORD_ERR_INVALID_ARGUMENT, "device %d: wrap_stream: null output", device);
  std::lock_guard<std::mutex> lock(mu_);
  out->id = next_id_++;
  streams_[out->id] = Handle{cuda_stream, device, false};
  return Status();
}

Status CudaRuntime::destroy_stream(Stream stream) {
  Handle s;
  ACCORD_TRY(find(streams_, stream.id, "stream", "destroy_stream", &s));
  {
    std::lock_guard<std::mutex> lock(mu_);
    streams_.erase(stream.id);
  }
  if (!s.owned) return Status();  // the caller's stream: forget it, nothing more
  CudaDeviceGuard device_guard;
  ACCORD_TRY(use_device(s.device, "destroy_stream", &device_guard));
  Status st;
  cudaError_t e = cudaStreamSynchronize(native(s.native));
  if (e != cudaSuccess) st = cuda_error(e, s.device, "destroy_stream", "cudaStreamSynchronize");
  e = cudaStreamDestroy(native(s.native));
  if (e != cudaSuccess && st.ok()) st = cuda_error(e, s.device, "destroy_stream", "cudaStreamDestroy");
  return st;
}

Status CudaRuntime::synchronize_stream(Stream stream) {
  Handle s;
  ACCORD_TRY(find(streams_, stream.id, "stream", "synchronize_stream", &s));
  CudaDeviceGuard device_guard;
  ACCORD_TRY(use_device(s.device, "synchronize_stream", &device_guard));
  ACCORD_CUDA_CHECK(cudaStreamSynchronize(native(s.native)), s.device, "synchronize_stream");
  return Status();
}

Status CudaRuntime::synchronize_device(int device) {
  CudaDeviceGuard device_guard;
  ACCORD_TRY(use_device(device, "synchronize_device", &device_guard));
  ACCORD_CUDA_CHECK(cudaDeviceSynchronize(), device, "synchronize_device");
  return Status();
}

Status CudaRuntime::create_event(int device, Event* out) {
  CudaDeviceGuard device_guard;
  ACCORD_TRY(use_device(device, "create_event", &device_guard));
  if (!out) return error(ACCORD_ERR_INVALID_ARGUMENT, "device %d: create_event: null output", device);
  cudaEvent_t e;
  ACCORD_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), device, "create_event");
  std::lock_guard<std::mutex> lock(mu_);
  out->id = next_id_++;
  events_[out->id] = Handle{e, device, true};
  return Status();
}

Status CudaRuntime::destroy_event(Event event) {
  Handle e;
  ACCORD_TRY(find(events_, event.id, "event", "destroy_event", &e));
  {
    std::lock_guard<std::mutex> lock(mu_);
    events_.erase(event.id);
  }
  ACCORD_CUDA_CHECK(cudaEventDestroy(native_event(e.native)), e.device, "destroy_event");
  return Status();
}

Status CudaRuntime::record_event(Event event, Stream stream) {
  Handle e, s;
  ACCORD_TRY(find(events_, event.id, "event", "record_event", &e));
  ACCORD_TRY(find(streams_, stream.id, "stream", "record_event", &s));
  if (e.device != s.device)
    return error(ACCORD_ERR_INVALID_ARGUMENT, "record_event: event %llu belongs to device %d but stream %llu to "
                 "device %d; record an event of the stream's device", (unsigned long long)event.id, e.device,
                 (unsigned long long)stream.id, s.device);
  CudaDeviceGuard device_guard;
  ACCORD_TRY(use_device(s.device, "record_event", &device_guard));
  ACCORD_CUDA_CHECK(cudaEventRecord(native_event(e.native), native(s.native)), s.device, "record_event");
  return Status();
}

Status CudaRuntime::stream_wait_event(Stream stream, Event event) {
  Handle e, s;
  ACCORD_TRY(find(streams_, stream.id, "stream", "stream_wait_event", &s));
  ACCORD_TRY(find(events_, event.id, "event", "stream_wait_event", &e));
  CudaDeviceGuard device_guard;
  ACCORD_TRY(use_device(s.device, "stream_wait_event", &device_guard));
  ACCORD_CUDA_CHECK(cudaStreamWaitEvent(native(s.native), native_event(e.native), 0), s.device, "stream_wait_event");
  return Status();
}

Status CudaRuntime::synchronize_event(Event event) {
  Handle e;
  ACCORD_TRY(find(events_, event.id, "event", "synchronize_event", &e));
  ACCORD_CUDA_CHECK(cudaEventSynchronize(native_event(e.native)), e.device, "synchronize_event");
  return Status();
}

Status CudaRuntime::query_event(Event event, bool* done) {
  Handle e;
  ACCORD_TRY(find(events_, event.id, "event", "query_event", &e));
  if (!done) return error(ACCORD_ERR_INVALID_ARGUMENT, "query_event: null output");
  cudaError_t err = cudaEventQuery(native_event(e.native));
  if (err == cudaErrorNotReady) {
    cudaGetLastError();
    *done = false;
    return Status();
  }
  ACCORD_CUDA_CHECK(err, e.device, "query_event");
  *done = true;
  return Status();
}

Status CudaRuntime::launch_host_func(Stream stream, HostFn fn, void* arg) {
  Handle s;
  ACCORD_TRY(find(streams_, stream.id, "stream", "launch_host_func", &s));
  if (!fn) return error(ACCORD_ERR_INVALID_ARGUMENT, "device %d: launch_host_func: null function", s.device);
  CudaDeviceGuard device_guard;
  ACCORD_TRY(use_device(s.device, "launch_host_func", &device_guard));
  ACCORD_CUDA_CHECK(cudaLaunchHostFunc(native(s.native), fn, arg), s.device, "launch_host_func");
  return Status();
}

// ---- IPC ----

Status CudaRuntime::ipc_get_handle(const void* ptr, IpcHandle* out) {
  if (!ptr || !out) return error(ACCORD_ERR_INVALID_ARGUMENT, "ipc_get_handle(%p): null pointer or output", ptr);
  uintptr_t base;
  Block b;
  // cudaIpcGetMemHandle needs the start of a cudaMalloc allocation; only ours are known.
  if (!find_block(ptr, &base, &b) || b.imported)
    return error(ACCORD_ERR_INVALID_ARGUMENT, "ipc_get_handle(%p): not memory from alloc_device of this runtime "
                 "(freed, a host pointer, or itself opened from an IPC handle)", ptr);
  CudaDeviceGuard device_guard;
  ACCORD_TRY(use_device(b.device, "ipc_get_handle", &device_guard));
  cudaIpcMemHandle_t h;
  ACCORD_CUDA_CHECK(cudaIpcGetMemHandle(&h, reinterpret_cast<void*>(base)), b.device, "ipc_get_handle");
  static_assert(sizeof h <= sizeof(IpcHandle::payload), "cudaIpcMemHandle_t must fit the payload");
  IpcHandle r;
  r.magic = IpcHandle::kMagic;
  r.runtime = static_cast<uint32_t>(IpcRuntime::kCuda);
  r.device = b.device;
  r.offset = reinterpret_cast<uintptr_t>(ptr) - base;
  r.bytes = b.bytes;
  std::memcpy(r.payload, &h, sizeof h);
  // The owner's bus id after the CUDA handle: an opener numbers GPUs its own way
  // (CUDA_VISIBLE_DEVICES), so r.device means nothing there.
  char bus[sizeof r.payload - sizeof h] = "";
  static_assert(sizeof bus >= 17, "a PCI bus id with its 8-digit domain must fit");
  ACCORD_CUDA_CHECK(cudaDeviceGetPCIBusId(bus, sizeof bus, b.device), b.device, "ipc_get_handle");
  std::memcpy(r.payload + sizeof h, bus, sizeof bus);
  *out = r;
  return Status();
}

Status CudaRuntime::ipc_open_handle(int device, const IpcHandle& h, void** out) {
  CudaDeviceGuard device_guard;
  ACCORD_TRY(use_device(device, "ipc_open_handle", &device_guard));
  if (!out) return error(ACCORD_ERR_INVALID_ARGUMENT, "device %d: ipc_open_handle: null output", device);
  if (h.magic != IpcHandle::kMagic || h.runtime != static_cast<uint32_t>(IpcRuntime::kCuda))
    return error(ACCORD_ERR_INVALID_ARGUMENT, "device %d: ipc_open_handle: not a CUDA IPC handle (every rank must "
                 "use the same runtime; is ACCORD_SIM_TOPO set for some of them only?)", device);
  cudaIpcMemHandle_t native_handle;
  std::memcpy(&native_handle, h.payload, sizeof native_handle);
  void* base = nullptr;
  ACCORD_CUDA_CHECK(cudaIpcOpenMemHandle(&base, native_handle, cudaIpcMemLazyEnablePeerAccess), device, "ipc_open_handle");
  // The owner as this process numbers it (-1: a GPU it does not see; CUDA maps it all the same).
  char bus[sizeof h.payload - sizeof native_handle + 1] = "";
  std::memcpy(bus, h.payload + sizeof native_handle, sizeof bus - 1);
  int owner = -1;
  if (bus[0] != '\0' && cudaDeviceGetByPCIBusId(&owner, bus) != cudaSuccess) {
    owner = -1;
    (void)cudaGetLastError();
  }
  std::lock_guard<std::mutex> lock(mu_);
  blocks_[reinterpret_cast<uintptr_t>(base)] = Block{static_cast<size_t>(h.bytes), owner >= 0 ? owner : device, true};
  if (owner != device && owner >= 0 && owner < count_)
    peer_[static_cast<size_t>(device * count_ + owner)] = 1;  // lazily enabled by the open
  *out = static_cast<char*>(base) + h.offset;
  return Status();
}

Status CudaRuntime::ipc_close_handle(void* ptr) {
  uintptr_t base;
  Block b;
  if (!ptr || !find_block(ptr, &base, &b) || !b.imported)
    return error(ACCORD_ERR_INVALID_ARGUMENT, "ipc_close_handle(%p): not memory opened with ipc_open_handle "
                 "(closed already?)", ptr);
  {
    std::lock_guard<std::mutex> lock(mu_);
    blocks_.erase(base);
  }
  ACCORD_CUDA_CHECK(cudaIpcCloseMemHandle(reinterpret_cast<void*>(base)), b.device, "ipc_close_handle");
  return Status();
}

// ---- reductions ----

Status CudaRuntime::reduce_async(const kernels::ReduceArgs& args, accord_datatype_t dtype, accord_red_op_t op,
                                 Stream stream) {
  Handle s;
  ACCORD_TRY(find(streams_, stream.id, "stream", "reduce_async", &s));
  CudaDeviceGuard device_guard;
  ACCORD_TRY(use_device(s.device, "reduce_async", &device_guard));
  if (dtype_bytes(dtype) == 0 || op < 0 || op >= ACCORD_NUM_OPS)
    return error(ACCORD_ERR_INVALID_ARGUMENT, "device %d: reduce_async: unknown dtype %d or op %d", s.device,
                 static_cast<int>(dtype), static_cast<int>(op));
  if (args.count == 0) return Status();
  if (!args.dst0 || !args.a)
    return error(ACCORD_ERR_INVALID_ARGUMENT, "device %d: reduce_async: dst0 and a are required", s.device);
#if ACCORD_DEVICE_CUDA_KERNELS
  ACCORD_CUDA_CHECK(kernels::cuda_reduce(args, dtype, op, native(s.native)), s.device, "reduce_async");
  return Status();
#else
  return error(ACCORD_ERR_UNSUPPORTED, "device %d: reduce_async: this build has no CUDA reduction kernels "
               "(collectives/kernels/cuda_kernels.hpp is missing)", s.device);
#endif
}

}  // namespace accord

namespace accord {

// ---- registered host memory, flags, the caller's streams ----

Status CudaRuntime::register_host(void* ptr, size_t bytes) {
  if (!ptr || bytes == 0)
    return error(ACCORD_ERR_INVALID_ARGUMENT, "register_host(%p, %zu bytes): need a pointer and a size", ptr, bytes);
  if (count_ == 0) ACCORD_TRY(check_device(0, "register_host"));
  // Portable: every device's work may use it; mapped: kernels read and write it in place.
  ACCORD_CUDA_CHECK(cudaHostRegister(ptr, bytes, cudaHostRegisterPortable | cudaHostRegisterMapped), -1,
                    "register_host");
  return Status();
}

Status CudaRuntime::unregister_host(void* ptr) {
  if (!ptr) return error(ACCORD_ERR_INVALID_ARGUMENT, "unregister_host: null pointer");
  ACCORD_CUDA_CHECK(cudaHostUnregister(ptr), -1, "unregister_host");
  return Status();
}

namespace {
struct FlagWait {
  const std::atomic<uint64_t>* flag;
  uint64_t value;
};
void wait_flag_host_fn(void* arg) {
  FlagWait* w = static_cast<FlagWait*>(arg);
  while (w->flag->load(std::memory_order_acquire) < w->value) std::this_thread::sleep_for(std::chrono::microseconds(20));
  delete w;
}
}  // namespace

// Flags live in mapped pinned pages, so the GPU can read them (cuStreamWaitValue64); if
// pinning fails, in the default list (stream_wait_flag then polls from a host function).
std::atomic<uint64_t>* CudaRuntime::new_flag() {
  constexpr size_t kPageBytes = 4096, kPerPage = kPageBytes / sizeof(std::atomic<uint64_t>);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!flag_pages_failed_ && (flag_pages_.empty() || flags_used_ == kPerPage)) {
      void* page = nullptr;
      if (cudaHostAlloc(&page, kPageBytes, cudaHostAllocMapped | cudaHostAllocPortable) == cudaSuccess) {
        std::memset(page, 0, kPageBytes);
        flag_pages_.push_back(static_cast<std::atomic<uint64_t>*>(page));
        flags_used_ = 0;
      } else {
        cudaGetLastError();
        flag_pages_failed_ = true;
      }
    }
    if (!flag_pages_failed_) return new (flag_pages_.back() + flags_used_++) std::atomic<uint64_t>(0);
  }
  return DeviceRuntime::new_flag();
}

namespace {

// The driver's stream memory operations, through the runtime's driver entry point (Accord does
// not link libcuda). Null when this driver has none.
// The v2 operations (CUDA 12's default): 32-bit ones work on every device, 64-bit ones where
// CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS says so.
struct StreamMemOps {
  using Value32Fn = int (*)(cudaStream_t stream, unsigned long long addr, unsigned int value, unsigned int flags);
  using Value64Fn = int (*)(cudaStream_t stream, unsigned long long addr, unsigned long long value,
                            unsigned int flags);
  Value32Fn wait_value32 = nullptr;   // cuStreamWaitValue32
  Value32Fn write_value32 = nullptr;  // cuStreamWriteValue32
  Value64Fn wait_value64 = nullptr;   // cuStreamWaitValue64
  Value64Fn write_value64 = nullptr;  // cuStreamWriteValue64
  int (*device_attribute)(int* value, int attribute, int device) = nullptr;  // cuDeviceGetAttribute
};

void* driver_entry(const char* name) { return cuda_driver_entry(name); }

const StreamMemOps& stream_mem_ops() {
  static const StreamMemOps ops = [] {
    StreamMemOps o;
    o.wait_value32 = reinterpret_cast<StreamMemOps::Value32Fn>(driver_entry("cuStreamWaitValue32"));
    o.write_value32 = reinterpret_cast<StreamMemOps::Value32Fn>(driver_entry("cuStreamWriteValue32"));
    o.wait_value64 = reinterpret_cast<StreamMemOps::Value64Fn>(driver_entry("cuStreamWaitValue64"));
    o.write_value64 = reinterpret_cast<StreamMemOps::Value64Fn>(driver_entry("cuStreamWriteValue64"));
    o.device_attribute = reinterpret_cast<decltype(o.device_attribute)>(driver_entry("cuDeviceGetAttribute"));
    return o;
  }();
  return ops;
}

constexpr int kCanUse64BitStreamMemOps = 122;  // CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS
constexpr unsigned kWaitValueGeq = 0;           // CU_STREAM_WAIT_VALUE_GEQ
constexpr unsigned kWaitValueEq = 1;            // CU_STREAM_WAIT_VALUE_EQ
constexpr unsigned kWriteValueDefault = 0;      // CU_STREAM_WRITE_VALUE_DEFAULT (with a memory barrier)

}  // namespace

// A stream held until a host thread sets a flag (the first device path's "stream gate"; the
// kernel design of collectives/device/engine.cpp no longer uses it, tests still hold streams
// with it). Where the driver has 64-bit stream memory operations and the flag is one of
// new_flag's mapped pinned flags, the GPU waits for it itself (cuStreamWaitValue64, "flag -
// value >= 0" as signed 64-bit: the ticket only grows). Otherwise a host function polls it,
// which occupies CUDA's one callback thread of the process while it waits.
Status CudaRuntime::stream_wait_flag(Stream stream, const std::atomic<uint64_t>* flag, uint64_t value) {
  if (!flag) return error(ACCORD_ERR_INVALID_ARGUMENT, "stream_wait_flag: null flag");
  Handle h;
  ACCORD_TRY(find(streams_, stream.id, "stream", "stream_wait_flag", &h));
  bool mapped = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (std::atomic<uint64_t>* page : flag_pages_)
      mapped = mapped || (flag >= page && flag < page + 4096 / sizeof(*page));
  }
  const StreamMemOps& ops = stream_mem_ops();
  int supported = 0;
  if (mapped && ops.wait_value64 != nullptr && ops.device_attribute != nullptr &&
      ops.device_attribute(&supported, kCanUse64BitStreamMemOps, h.device) == 0 && supported != 0) {
    CudaDeviceGuard device_guard;
    ACCORD_TRY(use_device(h.device, "stream_wait_flag", &device_guard));
    void* dptr = nullptr;
    ACCORD_CUDA_CHECK(cudaHostGetDevicePointer(&dptr, const_cast<std::atomic<uint64_t>*>(flag), 0), h.device,
                      "stream_wait_flag");
    const int rc = ops.wait_value64(native(h.native), reinterpret_cast<uintptr_t>(dptr), value, kWaitValueGeq);
    if (rc == 0) return Status();
    LOG_DEBUG(kGpu, "device %d: cuStreamWaitValue64 failed (CUresult %d); waiting from a host function",
              h.device, rc);
  }
  FlagWait* w = new FlagWait{flag, value};
  Status s = launch_host_func(stream, wait_flag_host_fn, w);
  if (!s.ok()) delete w;
  return s;
}

// Note [Stream memory operations] (device_runtime.hpp) on the GPU: the driver's
// cuStreamWrite/WaitValue32/64 through the runtime's driver entry point.
Status CudaRuntime::stream_value_op(Stream stream, const void* ptr, uint64_t value, size_t bytes, bool wait,
                                    WaitCondition condition, const char* op) {
  Handle h;
  ACCORD_TRY(find(streams_, stream.id, "stream", op, &h));
  if (ptr == nullptr || reinterpret_cast<uintptr_t>(ptr) % bytes != 0)
    return error(ACCORD_ERR_INVALID_ARGUMENT, "device %d: %s(%p): the word must be non-null and aligned to %zu "
                 "bytes", h.device, op, ptr, bytes);
  const StreamMemOps& ops = stream_mem_ops();
  StreamMemOps::Value32Fn fn32 = wait ? ops.wait_value32 : ops.write_value32;
  StreamMemOps::Value64Fn fn64 = wait ? ops.wait_value64 : ops.write_value64;
  if (bytes == 4 ? fn32 == nullptr : fn64 == nullptr)
    return error(ACCORD_ERR_UNSUPPORTED, "device %d: %s: this driver has no cuStream%sValue%d (needs a CUDA 12 "
                 "driver or newer); hand-offs must wait in a kernel or a host function instead", h.device, op,
                 wait ? "Wait" : "Write", bytes == 4 ? 32 : 64);
  if (bytes == 8) {
    int supported = 0;
    if (ops.device_attribute == nullptr ||
        ops.device_attribute(&supported, kCanUse64BitStreamMemOps, h.device) != 0 || supported == 0)
      return error(ACCORD_ERR_UNSUPPORTED, "device %d: %s: the device does not support 64-bit stream memory "
                   "operations (CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS is 0); use the 32-bit form",
                   h.device, op);
  }
  CudaDeviceGuard device_guard;
  ACCORD_TRY(use_device(h.device, op, &device_guard));
  const unsigned flags = !wait ? kWriteValueDefault : condition == WaitCondition::kEq ? kWaitValueEq : kWaitValueGeq;
  const unsigned long long addr = reinterpret_cast<uintptr_t>(ptr);
  const int rc = bytes == 4 ? fn32(native(h.native), addr, static_cast<unsigned>(value), flags)
                            : fn64(native(h.native), addr, value, flags);
  constexpr int kNotSupported = 801;  // CUDA_ERROR_NOT_SUPPORTED
  if (rc != 0)
    return error(rc == kNotSupported ? ACCORD_ERR_UNSUPPORTED : ACCORD_ERR_CUDA,
                 "device %d: %s(%p): the driver returned CUresult %d%s", h.device, op, ptr, rc,
                 rc == kNotSupported
                     ? " (CUDA_ERROR_NOT_SUPPORTED: this device or platform has no stream memory operations)"
                     : " (is the pointer device memory, or the device address of pinned memory?)");
  return Status();
}

Status CudaRuntime::stream_write_value32(Stream stream, void* ptr, uint32_t value) {
  return stream_value_op(stream, ptr, value, 4, false, WaitCondition::kEq, "stream_write_value32");
}
Status CudaRuntime::stream_write_value64(Stream stream, void* ptr, uint64_t value) {
  return stream_value_op(stream, ptr, value, 8, false, WaitCondition::kEq, "stream_write_value64");
}
Status CudaRuntime::stream_wait_value32(Stream stream, const void* ptr, uint32_t value, WaitCondition condition) {
  return stream_value_op(stream, ptr, value, 4, true, condition, "stream_wait_value32");
}
Status CudaRuntime::stream_wait_value64(Stream stream, const void* ptr, uint64_t value, WaitCondition condition) {
  return stream_value_op(stream, ptr, value, 8, true, condition, "stream_wait_value64");
}

Status CudaRuntime::wrap_user_stream(int device, void* user_stream, Stream* out) {
  return wrap_stream(device, user_stream, out);
}

void* CudaRuntime::user_stream(Stream stream) const { return native_stream(stream); }

Status CudaRuntime::stream_capturing(Stream stream, bool* out) {
  Handle s;
  ACCORD_TRY(find(streams_, stream.id, "stream", "stream_capturing", &s));
  if (!out)
    return error(ACCORD_ERR_INVALID_ARGUMENT, "device %d: stream_capturing: null output", s.device);
  CudaDeviceGuard device_guard;
  ACCORD_TRY(use_device(s.device, "stream_capturing", &device_guard));
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  ACCORD_CUDA_CHECK(cudaStreamIsCapturing(native(s.native), &status), s.device,
                    "stream_capturing (cudaStreamIsCapturing)");
  *out = status != cudaStreamCaptureStatusNone;
  return Status();
}

// ---- Accord's kernels (Note [One protocol, two executors], collectives/device/dev_call.hpp) ----

Status CudaRuntime::load_kernel(int device, const KernelDesc& kernel) {
  CudaDeviceGuard device_guard;
  ACCORD_TRY(use_device(device, "load_kernel", &device_guard));
  if (kernel.cuda_func == nullptr)
    return error(ACCORD_ERR_UNSUPPORTED, "device %d: load_kernel(%s): this build has no CUDA code for it",
                 device, kernel.name);
  // Loads the function's module now: with lazy loading, a first launch behind a stream that
  // waits for a peer would wait for the device to go idle, which it never does.
  cudaFuncAttributes attr;
  ACCORD_CUDA_CHECK(cudaFuncGetAttributes(&attr, kernel.cuda_func), device, "load_kernel (cudaFuncGetAttributes)");
  if (static_cast<unsigned>(attr.maxThreadsPerBlock) < kernel.threads)
    return error(ACCORD_ERR_CUDA, "device %d: kernel %s runs at most %d threads per block here, %u wanted", device,
                 kernel.name, attr.maxThreadsPerBlock, kernel.threads);
  return Status();
}

Status CudaRuntime::launch_kernel(const KernelDesc& kernel, const void* params, size_t params_bytes,
                                  Stream stream, unsigned blocks, size_t shared_bytes) {
  Handle s;
  ACCORD_TRY(find(streams_, stream.id, "stream", "launch_kernel", &s));
  CudaDeviceGuard device_guard;
  ACCORD_TRY(use_device(s.device, "launch_kernel", &device_guard));
  if (kernel.cuda_func == nullptr || params == nullptr || params_bytes == 0)
    return error(ACCORD_ERR_INVALID_ARGUMENT, "device %d: launch_kernel(%s): no CUDA code or no parameters",
                 s.device, kernel.name);
  // The kernel takes one argument, a struct of params_bytes: args[0] points at its bytes.
  void* args[] = {const_cast<void*>(params)};
  ACCORD_CUDA_CHECK(cudaLaunchKernel(kernel.cuda_func, dim3(blocks), dim3(kernel.threads), args, shared_bytes,
                                     static_cast<cudaStream_t>(s.native)),
                    s.device, "launch_kernel");
  return Status();
}

Status CudaRuntime::memset_async(void* ptr, int value, size_t bytes, Stream stream) {
  Handle s;
  ACCORD_TRY(find(streams_, stream.id, "stream", "memset_async", &s));
  CudaDeviceGuard device_guard;
  ACCORD_TRY(use_device(s.device, "memset_async", &device_guard));
  if (bytes == 0) return Status();
  ACCORD_CUDA_CHECK(cudaMemsetAsync(ptr, value, bytes, static_cast<cudaStream_t>(s.native)), s.device,
                    "memset_async");
  return Status();
}

Status CudaRuntime::device_address(void* host, void** out) {
  if (host == nullptr || out == nullptr)
    return error(ACCORD_ERR_INVALID_ARGUMENT, "device_address(%p): null pointer or output", host);
  ACCORD_CUDA_CHECK(cudaHostGetDevicePointer(out, host, 0), -1, "device_address (cudaHostGetDevicePointer)");
  return Status();
}

}  // namespace accord
