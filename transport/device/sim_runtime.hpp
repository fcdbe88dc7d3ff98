// Simulated GPUs that obey a topology: the System (topology/system.hpp) loaded from any topology
// file says how many GPUs there are, their names and bus ids, and which pairs can peer. Device
// memory is host memory tagged with its device (sim_memory.hpp), streams are ordered work
// queues with a thread each (sim_stream.hpp), reductions run the host kernels on the stream.
// The rules both runtimes enforce are Note [Device runtime rules] (device_runtime.hpp); the
// simulation checks them more strictly than a driver can (every pointer of every call).
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "topology/system.hpp"
#include "transport/device/device_runtime.hpp"
#include "transport/device/sim_memory.hpp"
#include "transport/device/sim_stream.hpp"

namespace accord {

struct SimOptions {
  // Copies take as long as the System's bandwidth says (peer copies: the pair's estimate;
  // host <-> device: the GPU's PCIe link), and copies sharing a link queue behind each other,
  // so that benchmarks on simulated GPUs show the topology's shape. Off: copies run at memcpy
  // speed.
  bool throttle = false;
  // Why there are no devices, for the runtime made from an empty System ("CUDA: no driver").
  std::string no_devices_reason;
};

class SimulatedRuntime final : public DeviceRuntime {
 public:
  // Takes a finalized System. A System with no GPU gives a runtime of kind "none".
  SimulatedRuntime(topo::System system, SimOptions options = {});
  ~SimulatedRuntime() override;

  // Loads any topology file format (topology/formats.hpp).
  static Status from_file(const std::string& path, const SimOptions& options,
                          std::unique_ptr<SimulatedRuntime>* out);

  const topo::System& system() const { return system_; }

  const char* kind() const override { return system_.gpu_count() ? "simulated" : "none"; }
  std::string description() const override;
  int device_count() const override { return system_.gpu_count(); }
  Status device_info(int device, DeviceInfo* out) const override;

  Status alloc_device(int device, size_t bytes, void** out) override;
  Status free_device(void* ptr) override;
  Status alloc_host_pinned(size_t bytes, void** out) override;
  Status free_host_pinned(void* ptr) override;
  Status pointer_info(const void* ptr, PointerInfo* out) override;
  Status register_host(void* ptr, size_t bytes) override;
  Status unregister_host(void* ptr) override;

  Status can_access_peer(int device, int peer, bool* out) override;
  Status enable_peer(int device, int peer) override;

  Status copy(CopyKind kind, int device, void* dst, const void* src, size_t bytes) override;
  Status copy_async(CopyKind kind, void* dst, const void* src, size_t bytes, Stream stream) override;
  Status copy_peer(int dst_device, void* dst, int src_device, const void* src, size_t bytes) override;
  Status copy_peer_async(int dst_device, void* dst, int src_device, const void* src, size_t bytes,
                         Stream stream) override;

  Status create_stream(int device, Stream* out) override;
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
  Status wrap_user_stream(int device, void* user_stream, Stream* out) override;
  void* user_stream(Stream stream) const override;

  Status ipc_get_handle(const void* ptr, IpcHandle* out) override;
  Status ipc_open_handle(int device, const IpcHandle& handle, void** out) override;
  Status ipc_close_handle(void* ptr) override;

  Status reduce_async(const kernels::ReduceArgs& args, accord_datatype_t dtype, accord_red_op_t op,
                      Stream stream) override;

 private:
  // A planned copy: checked when enqueued, run (and throttled) on the stream or at once.
  struct CopyPlan {
    void* dst;
    const void* src;
    size_t bytes;
    int from, to;  // link endpoints for the throttle: a device index, or kHostNode
    bool pageable = false;  // the host side is pageable memory (not from alloc_host_pinned)
  };
  static constexpr int kHostNode = -1;

  Status check_device(int device, const char* op) const;
  bool peer_enabled(int device, int peer) const;
  // [ptr, ptr + bytes) must be device memory that `device` may touch (its own, or a peer's it
  // enabled access to); with allow_pinned, pinned host memory too. `what` names the argument.
  Status check_device_range(int device, const void* ptr, size_t bytes, bool allow_pinned, const char* op,
                            const char* what, int* owner) const;
  // A host pointer: anything but device memory. Sets *pageable unless it is pinned.
  Status check_host_range(const void* ptr, const char* op, const char* what, bool* pageable) const;
  Status plan_copy(CopyKind kind, int device, void* dst, const void* src, size_t bytes, CopyPlan* plan) const;
  Status plan_peer(int runner, int dst_device, void* dst, int src_device, const void* src, size_t bytes,
                   const char* op, CopyPlan* plan) const;
  void run_copy(const CopyPlan& plan);
  // Throttle: books `bytes` on the directed link from -> to; returns when the transfer ends.
  std::chrono::steady_clock::time_point reserve_link(int from, int to, size_t bytes);
  Status find_stream(Stream s, const char* op, std::shared_ptr<sim::SimStream>* out) const;
  Status find_event(Event e, const char* op, std::shared_ptr<sim::SimEvent>* out) const;
  // Waits for every stream (before memory goes away).
  void drain_all_streams();
  void drain_streams_of(int device);

  topo::System system_;
  SimOptions options_;
  sim::SimMemory memory_;

  mutable std::mutex mu_;  // guards everything below
  std::vector<char> peer_;  // [device * n + peer]: enable_peer(device, peer) succeeded
  std::map<uint64_t, std::shared_ptr<sim::SimStream>> streams_;
  std::map<uint64_t, std::shared_ptr<sim::SimEvent>> events_;
  uint64_t next_id_ = 1;

  std::mutex link_mu_;  // throttle: when each directed link (from, to) is next free
  std::map<std::pair<int, int>, std::chrono::steady_clock::time_point> link_free_at_;
};

}  // namespace accord
