// CudaRuntime: each method checks its arguments against Accord's rules, makes the device
// current, and calls the CUDA runtime. Memory, peer access and copies live here; streams,
// events, IPC and reductions in cuda_runtime_streams.cpp.
//
// Note [CUDA reduction hook]: reductions launch accord::kernels::cuda_reduce
// (collectives/kernels/cuda_kernels.hpp, built from reduce_kernels.cu whenever CUDA is). The
// header is compiled in only when the tree has it (__has_include), so this adapter builds
// before and after the kernel library lands; when it is there the call is a strong reference
// that always pulls the kernels into the link (a weak reference would silently not, from a
// static archive). Without it reduce_async returns ACCORD_ERR_UNSUPPORTED.
#include "transport/device/cuda_runtime.hpp"
#include "transport/device/cuda_check.hpp"

#include <cuda_runtime_api.h>

#include <cctype>
#include <cstring>

#include "core/log.hpp"

namespace accord {
namespace {

cudaMemcpyKind native_kind(CopyKind kind) {
  switch (kind) {
    case CopyKind::kHostToDevice: return cudaMemcpyHostToDevice;
    case CopyKind::kDeviceToHost: return cudaMemcpyDeviceToHost;
    case CopyKind::kDeviceToDevice: return cudaMemcpyDeviceToDevice;
  }
  return cudaMemcpyDefault;
}

}  // namespace

Status CudaRuntime::create(std::unique_ptr<CudaRuntime>* out) {
  std::unique_ptr<CudaRuntime> rt(new CudaRuntime());
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    cudaGetLastError();
    rt->reason_ = format("CUDA: %s: %s", cudaGetErrorName(e), cudaGetErrorString(e));
    n = 0;
  } else if (n == 0) {
    rt->reason_ = "CUDA: no devices";
  }
  rt->count_ = n;
  rt->peer_.assign(static_cast<size_t>(n) * static_cast<size_t>(n), 0);
  LOG_DEBUG(kGpu, "CUDA runtime: %s", rt->description().c_str());
  *out = std::move(rt);
  return Status();
}

CudaRuntime::~CudaRuntime() {
  // Streams and events die with the process's contexts; destroy ours so that a runtime made
  // twice in one process does not leak them.
  for (auto& [id, h] : streams_) {
    if (!h.owned) continue;
    cudaSetDevice(h.device);
    cudaStreamSynchronize(static_cast<cudaStream_t>(h.native));
    cudaStreamDestroy(static_cast<cudaStream_t>(h.native));
  }
  for (auto& [id, h] : events_) cudaEventDestroy(static_cast<cudaEvent_t>(h.native));
  cudaGetLastError();
}

std::string CudaRuntime::description() const {
  if (count_ == 0) return format("cuda: no devices (%s)", reason_.c_str());
  return format("cuda: %d device(s)", count_);
}

Status CudaRuntime::check_device(int device, const char* op) const {
  if (device >= 0 && device < count_) return Status();
  if (count_ == 0)
    return error(ACCORD_ERR_UNSUPPORTED, "%s: device %d does not exist: no CUDA devices (%s)", op, device,
                 reason_.c_str());
  return error(ACCORD_ERR_INVALID_ARGUMENT, "%s: device %d does not exist: CUDA has devices 0-%d", op, device,
               count_ - 1);
}

Status CudaRuntime::use_device(int device, const char* op, CudaDeviceGuard* guard) const {
  ACCORD_TRY(check_device(device, op));
  ACCORD_CUDA_CHECK(guard->set(device), device, op);
  return Status();
}

bool cuda_thread_has_context() {
  using GetCurrent = int (*)(void** ctx);  // CUresult cuCtxGetCurrent(CUcontext*)
  static GetCurrent get_current = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found{};
    if (cudaGetDriverEntryPointByVersion("cuCtxGetCurrent", &fn, 12000, cudaEnableDefault, &found) !=
            cudaSuccess ||
        found != cudaDriverEntryPointSuccess)
      fn = nullptr;
    cudaGetLastError();
    return reinterpret_cast<GetCurrent>(fn);
  }();
  void* ctx = nullptr;
  return get_current != nullptr && get_current(&ctx) == 0 && ctx != nullptr;
}

Status CudaRuntime::current_device(int* out) {
  *out = -1;
  int d = -1;
  if (count_ > 0 && cuda_thread_has_context() && cudaGetDevice(&d) == cudaSuccess) *out = d;
  cudaGetLastError();
  return Status();
}

Status CudaRuntime::find(const std::map<uint64_t, Handle>& table, uint64_t id, const char* what, const char* op,
                         Handle* out) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = table.find(id);
  if (it == table.end())
    return error(ACCORD_ERR_INVALID_ARGUMENT, "%s: %s %llu does not exist (destroyed, never created, or made by "
                 "another runtime)", op, what, (unsigned long long)id);
  *out = it->second;
  return Status();
}

bool CudaRuntime::find_block(const void* ptr, uintptr_t* base, Block* out) const {
  const uintptr_t p = reinterpret_cast<uintptr_t>(ptr);
  std::lock_guard<std::mutex> lock(mu_);
  auto it = blocks_.upper_bound(p);
  if (it == blocks_.begin()) return false;
  --it;
  if (p >= it->first + it->second.bytes) return false;
  *base = it->first;
  *out = it->second;
  return true;
}

void* CudaRuntime::native_stream(Stream stream) const {
  Handle h;
  return find(streams_, stream.id, "stream", "native_stream", &h).ok() ? h.native : nullptr;
}

Status CudaRuntime::device_info(int device, DeviceInfo* out) const {
  ACCORD_TRY(check_device(device, "device_info"));
  cudaDeviceProp prop;
  ACCORD_CUDA_CHECK(cudaGetDeviceProperties(&prop, device), device, "device_info");
  char bus[32] = "";
  ACCORD_CUDA_CHECK(cudaDeviceGetPCIBusId(bus, sizeof bus, device), device, "device_info");
  out->name = prop.name;
  out->sm = prop.major * 10 + prop.minor;
  out->multiprocessors = prop.multiProcessorCount;
  out->pci_bus_id = canonical_bus_id(bus);
  const auto* u = reinterpret_cast<const unsigned char*>(&prop.uuid);
  out->uuid = format("GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", u[0], u[1], u[2],
                     u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13], u[14], u[15]);
  return Status();
}

Status CudaRuntime::device_by_bus_id(const std::string& pci_bus_id, int* out) const {
  *out = -1;
  if (count_ == 0) return Status();
  int device = -1;
  if (cudaDeviceGetByPCIBusId(&device, pci_bus_id.c_str()) != cudaSuccess) {
    (void)cudaGetLastError();  // cudaErrorInvalidDevice: not visible here
    return Status();
  }
  *out = device;
  return Status();
}

// ---- memory ----

Status CudaRuntime::alloc_device(int device, size_t bytes, void** out) {
  CudaDeviceGuard device_guard;
  ACCORD_TRY(use_device(device, "alloc_device", &device_guard));
  if (!out) return error(ACCORD_ERR_INVALID_ARGUMENT, "device %d: alloc_device: null output pointer", device);
  *out = nullptr;
  if (bytes == 0) return Status();
  ACCORD_CUDA_CHECK(cudaMalloc(out, bytes), device, "alloc_device");
  std::lock_guard<std::mutex> lock(mu_);
  blocks_[reinterpret_cast<uintptr_t>(*out)] = Block{bytes, device, false};
  return Status();
}

Status CudaRuntime::free_device(void* ptr) {
  if (!ptr) return Status();
  Block b;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = blocks_.find(reinterpret_cast<uintptr_t>(ptr));
    if (it == blocks_.end() || it->second.imported)
      return error(ACCORD_ERR_INVALID_ARGUMENT, "free_device(%p): not an allocation of this runtime (freed "
                   "already, inside an allocation, or opened from an IPC handle)", ptr);
    b = it->second;
    blocks_.erase(it);
  }
  CudaDeviceGuard device_guard;
  ACCORD_TRY(use_device(b.device, "free_device", &device_guard));
  ACCORD_CUDA_CHECK(cudaFree(ptr), b.device, "free_device");
  return Status();
}

Status CudaRuntime::alloc_host_pinned(size_t bytes, void** out) {
  if (!out) return error(ACCORD_ERR_INVALID_ARGUMENT, "alloc_host_pinned: null output pointer");
  *out = nullptr;
  if (bytes == 0) return Status();
  if (count_ == 0) ACCORD_TRY(check_device(0, "alloc_host_pinned"));
  // Portable: usable by every device's work; mapped: kernels may read it (reductions).
  ACCORD_CUDA_CHECK(cudaHostAlloc(out, bytes, cudaHostAllocPortable | cudaHostAllocMapped), -1, "alloc_host_pinned");
  return Status();
}

Status CudaRuntime::free_host_pinned(void* ptr) {
  if (!ptr) return Status();
  ACCORD_CUDA_CHECK(cudaFreeHost(ptr), -1, "free_host_pinned");
  return Status();
}

Status CudaRuntime::pointer_info(const void* ptr, PointerInfo* out) {
  if (!out) return error(ACCORD_ERR_INVALID_ARGUMENT, "pointer_info(%p): null output", ptr);
  *out = PointerInfo();
  if (!ptr || count_ == 0) return Status();
  cudaPointerAttributes attr;
  if (cudaPointerGetAttributes(&attr, ptr) != cudaSuccess) {
    cudaGetLastError();  // older drivers: "invalid value" for memory CUDA never saw
    return Status();
  }
  switch (attr.type) {
    case cudaMemoryTypeDevice:
    case cudaMemoryTypeManaged:
      out->kind = MemoryKind::kDevice;
      out->device = attr.device;
      break;
    case cudaMemoryTypeHost: out->kind = MemoryKind::kHostPinned; break;
    default: out->kind = MemoryKind::kHost; break;
  }
  uintptr_t base;
  Block b;
  if (out->kind == MemoryKind::kDevice && find_block(ptr, &base, &b)) {
    out->base = reinterpret_cast<void*>(base);
    out->bytes = b.bytes;
    out->imported = b.imported;
  }
  if (out->kind == MemoryKind::kDevice) allocation_identity(ptr, out);
  return Status();
}

// Note [Buffer ids] (device_runtime.hpp): any allocation's range (cuMemGetAddressRange) and
// its process-wide unique id (CU_POINTER_ATTRIBUTE_BUFFER_ID), through the runtime's driver
// entry points (Accord links no libcuda). Left unknown (0) when this driver has neither.
void CudaRuntime::allocation_identity(const void* ptr, PointerInfo* out) {
  using RangeFn = int (*)(unsigned long long* base, size_t* bytes, unsigned long long ptr);
  using AttrFn = int (*)(void* data, int attribute, unsigned long long ptr);
  struct Fns {
    RangeFn range = nullptr;
    AttrFn attr = nullptr;
  };
  static const Fns fns = [] {
    Fns f;
    f.range = reinterpret_cast<RangeFn>(cuda_driver_entry("cuMemGetAddressRange"));
    f.attr = reinterpret_cast<AttrFn>(cuda_driver_entry("cuPointerGetAttribute"));
    return f;
  }();
  constexpr int kBufferId = 7;  // CU_POINTER_ATTRIBUTE_BUFFER_ID
  const auto at = static_cast<unsigned long long>(reinterpret_cast<uintptr_t>(ptr));
  unsigned long long base = 0;
  size_t bytes = 0;
  if (fns.range != nullptr && fns.range(&base, &bytes, at) == 0 && out->base == nullptr) {
    out->base = reinterpret_cast<void*>(static_cast<uintptr_t>(base));
    out->bytes = bytes;
  }
  unsigned long long id = 0;
  if (fns.attr != nullptr && fns.attr(&id, kBufferId, at) == 0) out->buffer_id = id;
}

// ---- peer access ----

Status CudaRuntime::can_access_peer(int device, int peer, bool* out) {
  ACCORD_TRY(check_device(device, "can_access_peer"));
  ACCORD_TRY(check_device(peer, "can_access_peer"));
  if (!out) return error(ACCORD_ERR_INVALID_ARGUMENT, "can_access_peer: null output");
  int ok = 0;
  if (device != peer) ACCORD_CUDA_CHECK(cudaDeviceCanAccessPeer(&ok, device, peer), device, "can_access_peer");
  *out = ok != 0;
  return Status();
}

Status CudaRuntime::enable_peer(int device, int peer) {
  ACCORD_TRY(check_device(peer, "enable_peer"));
  CudaDeviceGuard device_guard;
  ACCORD_TRY(use_device(device, "enable_peer", &device_guard));
  if (device == peer)
    return error(ACCORD_ERR_INVALID_ARGUMENT, "enable_peer(%d -> %d): a device cannot enable peer access to "
                 "itself (cudaErrorInvalidDevice)", device, peer);
  cudaError_t e = cudaDeviceEnablePeerAccess(peer, 0);
  if (e == cudaErrorPeerAccessAlreadyEnabled) {
    cudaGetLastError();
  } else if (e == cudaErrorPeerAccessUnsupported) {
    cudaGetLastError();
    return error(ACCORD_ERR_UNSUPPORTED, "enable_peer(%d -> %d): %s; stage copies between them through pinned "
                 "host memory", device, peer, kPeerAccessUnsupportedText);
  } else if (e != cudaSuccess) {
    return cuda_error(e, device, "enable_peer", "cudaDeviceEnablePeerAccess");
  }
  std::lock_guard<std::mutex> lock(mu_);
  peer_[static_cast<size_t>(device * count_ + peer)] = 1;
  return Status();
}

Status CudaRuntime::check_peer_copy(int runner, int dst_device, int src_device, const char* op) const {
  ACCORD_TRY(check_device(dst_device, op));
  ACCORD_TRY(check_device(src_device, op));
  if (dst_device == src_device) return Status();
  const int other = runner == src_device ? dst_device : src_device;
  std::lock_guard<std::mutex> lock(mu_);
  if (peer_[static_cast<size_t>(runner * count_ + other)]) return Status();
  return error(ACCORD_ERR_INVALID_USAGE, "%s(device %d -> device %d): a direct copy needs peer access from device "
               "%d to device %d: %s; call enable_peer(%d, %d) first, or stage the copy through pinned host memory",
               op, src_device, dst_device, runner, other, kPeerAccessNotEnabledText, runner, other);
}

// ---- copies ----

Status CudaRuntime::copy(CopyKind kind, int device, void* dst, const void* src, size_t bytes) {
  const char* op = copy_kind_name(kind);
  CudaDeviceGuard device_guard;
  ACCORD_TRY(use_device(device, op, &device_guard));
  if (bytes == 0) return Status();
  if (!dst || !src) return error(ACCORD_ERR_INVALID_ARGUMENT, "device %d: %s: null pointer", device, op);
  ACCORD_CUDA_CHECK(cudaMemcpy(dst, src, bytes, native_kind(kind)), device, op);
  return Status();
}

Status CudaRuntime::copy_async(CopyKind kind, void* dst, const void* src, size_t bytes, Stream stream) {
  const char* op = copy_kind_name(kind);
  Handle s;
  ACCORD_TRY(find(streams_, stream.id, "stream", op, &s));
  CudaDeviceGuard device_guard;
  ACCORD_TRY(use_device(s.device, op, &device_guard));
  if (bytes == 0) return Status();
  if (!dst || !src) return error(ACCORD_ERR_INVALID_ARGUMENT, "device %d: %s: null pointer", s.device, op);
  ACCORD_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, native_kind(kind), static_cast<cudaStream_t>(s.native)), s.device, op);
  return Status();
}

Status CudaRuntime::copy_peer(int dst_device, void* dst, int src_device, const void* src, size_t bytes) {
  ACCORD_TRY(check_peer_copy(src_device, dst_device, src_device, "copy_peer"));
  CudaDeviceGuard device_guard;
  ACCORD_TRY(use_device(src_device, "copy_peer", &device_guard));
  if (bytes == 0) return Status();
  if (!dst || !src) return error(ACCORD_ERR_INVALID_ARGUMENT, "copy_peer: null pointer");
  ACCORD_CUDA_CHECK(cudaMemcpyPeer(dst, dst_device, src, src_device, bytes), src_device, "copy_peer");
  return Status();
}

Status CudaRuntime::copy_peer_async(int dst_device, void* dst, int src_device, const void* src, size_t bytes,
                                    Stream stream) {
  Handle s;
  ACCORD_TRY(find(streams_, stream.id, "stream", "copy_peer_async", &s));
  if (s.device != src_device && s.device != dst_device)
    return error(ACCORD_ERR_INVALID_ARGUMENT, "copy_peer_async(device %d -> device %d): stream %llu is on device %d; "
                 "use a stream of either device", src_device, dst_device, (unsigned long long)stream.id, s.device);
  ACCORD_TRY(check_peer_copy(s.device, dst_device, src_device, "copy_peer_async"));
  CudaDeviceGuard device_guard;
  ACCORD_TRY(use_device(s.device, "copy_peer_async", &device_guard));
  if (bytes == 0) return Status();
  if (!dst || !src) return error(ACCORD_ERR_INVALID_ARGUMENT, "copy_peer_async: null pointer");
  ACCORD_CUDA_CHECK(cudaMemcpyPeerAsync(dst, dst_device, src, src_device, bytes, static_cast<cudaStream_t>(s.native)),
             s.device, "copy_peer_async");
  return Status();
}

}  // namespace accord
