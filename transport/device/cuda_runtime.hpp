// The real device runtime: a thin adapter over the CUDA runtime API (cuda_runtime_api.h, no
// nvcc needed). Every CUDA call is checked and a failure becomes ACCORD_ERR_CUDA with CUDA's
// error name and text, the device and the operation. It adds only what Note [Device runtime
// rules] (device_runtime.hpp) asks beyond CUDA: peer copies need enable_peer first, handles are
// checked ids, and a machine without peer support reports ACCORD_ERR_UNSUPPORTED. Built only
// with CUDA (ACCORD_HAVE_CUDA); this header does not include CUDA's.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "transport/device/device_runtime.hpp"

namespace accord {

class CudaDeviceGuard;  // cuda_check.hpp

class CudaRuntime final : public DeviceRuntime {
 public:
  // Succeeds with zero devices when there is no driver or no GPU; unavailable_reason() then
  // says what CUDA said ("CUDA driver version is insufficient for CUDA runtime version").
  static Status create(std::unique_ptr<CudaRuntime>* out);
  ~CudaRuntime() override;

  const std::string& unavailable_reason() const { return reason_; }

  const char* kind() const override { return "cuda"; }
  std::string description() const override;
  int device_count() const override { return count_; }
  Status device_info(int device, DeviceInfo* out) const override;
  Status device_by_bus_id(const std::string& pci_bus_id, int* out) const override;
  Status current_device(int* out) override;

  Status alloc_device(int device, size_t bytes, void** out) override;
  Status free_device(void* ptr) override;
  Status alloc_host_pinned(size_t bytes, void** out) override;
  Status free_host_pinned(void* ptr) override;
  Status pointer_info(const void* ptr, PointerInfo* out) override;
  static void allocation_identity(const void* ptr, PointerInfo* out);  // Note [Buffer ids]
  Status register_host(void* ptr, size_t bytes) override;
  Status unregister_host(void* ptr) override;

  Status can_access_peer(int device, int peer, bool* out) override;
  Status enable_peer(int device, int peer) override;

  Status copy(CopyKind kind, int device, void* dst, const void* src, size_t bytes) override;
  Status copy_async(CopyKind kind, void* dst, const void* src, size_t bytes, Stream stream) override;
  Status copy_peer(int dst_device, void* dst, int src_device, const void* src, size_t bytes) override;
  Status copy_peer_async(int dst_device, void* dst, int src_device, const void* src, size_t bytes,
                         Stream stream) override;

  Status create_stream(int device, Stream* out, bool blocking = false) override;
  Status destroy_stream(Stream stream) override;
  Status synchronize_stream(Stream stream) override;
  Status synchronize_device(int device) override;
  Status create_event(int device, Event* out) override;
  Status destroy_event(Event event) override;
  Status record_event(Event event, Stream stream) override;
  Status stream_wait_event(Stream stream, Event event) override;
  Status synchronize_event(Event event) override;
  Status query_event(Event event, bool* done) override;
  Status launch_host_func(Stream stream, HostFn fn, void* arg) override;
  Status stream_wait_flag(Stream stream, const std::atomic<uint64_t>* flag, uint64_t value) override;
  Status stream_write_value32(Stream stream, void* ptr, uint32_t value) override;
  Status stream_write_value64(Stream stream, void* ptr, uint64_t value) override;
  Status stream_wait_value32(Stream stream, const void* ptr, uint32_t value, WaitCondition condition) override;
  Status stream_wait_value64(Stream stream, const void* ptr, uint64_t value, WaitCondition condition) override;
  std::atomic<uint64_t>* new_flag() override;
  Status wrap_user_stream(int device, void* user_stream, Stream* out) override;
  void* user_stream(Stream stream) const override;
  Status stream_capturing(Stream stream, bool* out) override;

  Status ipc_get_handle(const void* ptr, IpcHandle* out) override;
  Status ipc_open_handle(int device, const IpcHandle& handle, void** out) override;
  Status ipc_close_handle(void* ptr) override;

  Status reduce_async(const kernels::ReduceArgs& args, accord_datatype_t dtype, accord_red_op_t op,
                      Stream stream) override;

  Status load_kernel(int device, const KernelDesc& kernel) override;
  Status launch_kernel(const KernelDesc& kernel, const void* params, size_t params_bytes,
                       Stream stream, unsigned blocks = 1, size_t shared_bytes = 0) override;
  Status memset_async(void* ptr, int value, size_t bytes, Stream stream) override;
  Status device_address(void* host, void** out) override;

  // The cudaStream_t behind a stream, for code that launches its own kernels; nullptr if unknown.
  void* native_stream(Stream stream) const;
  // Makes a caller's cudaStream_t of `device` usable as a Stream (NCCL-style: collectives run
  // on the user's stream). The runtime never destroys it: destroy_stream only forgets it.
  Status wrap_stream(int device, void* cuda_stream, Stream* out);

 private:
  CudaRuntime() = default;
  struct Handle {
    void* native = nullptr;  // cudaStream_t or cudaEvent_t
    int device = -1;
    bool owned = true;       // false: a caller's stream (wrap_stream)
  };
  struct Block {
    size_t bytes = 0;
    int device = -1;
    bool imported = false;
  };

  Status check_device(int device, const char* op) const;
  // check + make current for one call (Note [Caller's device], cuda_check.hpp)
  Status use_device(int device, const char* op, CudaDeviceGuard* guard) const;
  Status find(const std::map<uint64_t, Handle>& table, uint64_t id, const char* what, const char* op,
              Handle* out) const;
  bool find_block(const void* ptr, uintptr_t* base, Block* out) const;
  Status check_peer_copy(int runner, int dst_device, int src_device, const char* op) const;
  // stream_write_value* (wait false) and stream_wait_value* (wait true); bytes 4 or 8.
  Status stream_value_op(Stream stream, const void* ptr, uint64_t value, size_t bytes, bool wait,
                         WaitCondition condition, const char* op);

  int count_ = 0;
  std::string reason_;
  mutable std::mutex mu_;
  std::vector<char> peer_;                   // [device * count + peer] enabled through us
  std::map<uint64_t, Handle> streams_, events_;
  std::map<uintptr_t, Block> blocks_;        // allocations and imports made through us
  // new_flag: mapped pinned pages of flags (never freed), and how many of the last are used.
  std::vector<std::atomic<uint64_t>*> flag_pages_;
  size_t flags_used_ = 0;
  bool flag_pages_failed_ = false;
  uint64_t next_id_ = 1;
};

}  // namespace accord
