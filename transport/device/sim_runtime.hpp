// Simulated GPUs that obey a topology: the System (topology/system.hpp) loaded from any topology
// file says how many GPUs there are, their names and bus ids, and which pairs can peer. Device
// memory is host memory tagged with its device (sim_memory.hpp), streams are ordered work
// queues with a thread each (sim_stream.hpp), reductions run the host kernels on the stream.
// The rules both runtimes enforce are Note [Device runtime rules] (device_runtime.hpp); the
// simulation checks them more strictly than a driver can (every pointer of every call).
//
// Note [Simulated CUDA rules]: a simulator kinder than CUDA passes what hangs on a GPU (the
// first device path did: every collective hung on an H100). So the simulation also enforces the
// rules of CUDA that such designs break, each tested in tests/device/sim_rules_test.cpp:
//  - Lazy loading (CUDA's default): the first launch of a kernel on a device waits until every
//    stream of that device is idle. load_kernel() loads it ahead (as cudaFuncGetAttributes).
//  - Implicit synchronization: alloc_device and free_device (cudaMalloc, cudaFree) and
//    destroy_event wait for every stream of their device; register_host, unregister_host,
//    free_host_pinned and ipc_close_handle wait for every stream of every device.
//  - The legacy default stream: a synchronous copy (cudaMemcpy) runs on it, so it waits for
//    every blocking stream of its device (streams made with blocking = true, as
//    cudaStreamCreate makes them; users' streams).
//  - No runtime call from a host function (cudaLaunchHostFunc): the call fails with
//    cudaErrorNotPermitted's text.
// Where CUDA would wait for ever, the simulation waits SimOptions::stall_ms
// (ACCORD_SIM_STALL_MS) and then fails the call, naming the rule and the busy stream, so that a
// test fails instead of hanging.
#pragma once

#include <chrono>
#include <map>
#include <set>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "topology/system.hpp"
#include "transport/device/device_runtime.hpp"
#include "transport/device/sim_memory.hpp"
#include "transport/device/sim_stream.hpp"
#include "transport/device/sim_timeslice.hpp"

namespace accord {

struct SimOptions {
  // Copies take as long as the System's bandwidth says (peer copies: the pair's estimate;
  // host <-> device: the GPU's PCIe link), and copies sharing a link queue behind each other,
  // so that benchmarks on simulated GPUs show the topology's shape. Off: copies run at memcpy
  // speed.
  bool throttle = false;
  // Why there are no devices, for the runtime made from an empty System ("CUDA: no driver").
  std::string no_devices_reason;
  // Note [Simulated CUDA rules]: how long a call that waits for the device to go idle waits
  // before it fails instead of hanging.
  int64_t stall_ms = 60000;
  // Note [Simulated visible devices]: CUDA_VISIBLE_DEVICES as CUDA reads it (visible_set:
  // the variable is set, even to nothing).
  bool visible_set = false;
  std::string visible_devices;
  // Note [Simulated time slices] (sim_timeslice.hpp): > 0 models a GPU shared by processes
  // without MPS, with slices of this many microseconds, in `slices` (made before the processes
  // fork, for at least this machine's GPUs; the runtime makes a table of its own when null,
  // which only this process sees). 0: kernels of every process run at once, as under MPS.
  int64_t timeslice_us = 0;
  std::shared_ptr<sim::TimeSlices> slices;
};

// Runs a host function as launch_host_func does, flagged so that runtime calls from it fail.
void run_host_func_flagged(DeviceRuntime::HostFn fn, void* arg);

class SimulatedRuntime final : public DeviceRuntime {
 public:
  // Takes a finalized System. A System with no GPU gives a runtime of kind "none".
  SimulatedRuntime(topo::System system, SimOptions options = {});
  ~SimulatedRuntime() override;

  // Loads any topology file format (topology/formats.hpp).
  static Status from_file(const std::string& path, const SimOptions& options,
                          std::unique_ptr<SimulatedRuntime>* out);

  const topo::System& system() const { return system_; }

  const char* kind() const override { return visible_.empty() ? "none" : "simulated"; }
  std::string description() const override;
  int device_count() const override { return static_cast<int>(visible_.size()); }
  Status device_info(int device, DeviceInfo* out) const override;
  Status device_by_bus_id(const std::string& pci_bus_id, int* out) const override;
  // Every GPU of the machine, visible or not: the topology file is the machine (as NVML sees
  // every GPU whatever CUDA_VISIBLE_DEVICES says).
  Status peer_bus_ids(int device, std::vector<std::string>* out) override;
  // The topology file's index (physical_index) of a visible device, and of a GPU named by bus
  // id (visible or not); -1 if none.
  int physical_index(int device) const {
    return device >= 0 && static_cast<size_t>(device) < visible_.size() ? visible_[static_cast<size_t>(device)] : -1;
  }
  int physical_of_bus(const std::string& pci_bus_id) const;

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
  // Each block of Accord's collective kernel is a host thread (dev_host.cpp).
  unsigned max_kernel_blocks() const override { return 3; }
  Status memset_async(void* ptr, int value, size_t bytes, Stream stream) override;
  Status device_address(void* host, void** out) override;

  // Note [Simulated time slices]: GPU `device`'s counts (this process's ordinal; zero when
  // the model is off or the GPU is not visible).
  sim::SliceCounts slice_counts(int device) const;
  // Note [Simulated time slices of a job] (collectives/device/engine.cpp): the handle of this
  // runtime's table (empty when the model is off), and a switch to another process's table
  // (TimeSlices::open), for the kernels launched from now on.
  std::string slices_handle() const;
  Status adopt_slices(const std::string& handle);

 private:
  // stream_write_value* / stream_wait_value*: `bytes` is 4 or 8.
  Status write_value(Stream stream, void* ptr, uint64_t value, size_t bytes, const char* op);
  Status wait_value(Stream stream, const void* ptr, uint64_t value, WaitCondition condition, size_t bytes,
                    const char* op);
  // Note [Simulated CUDA rules]: waits until every stream of `device` (every device: -1; only
  // the blocking ones: blocking_only) is idle, or fails after stall_ms naming `op` and `rule`.
  Status wait_idle(int device, bool blocking_only, const char* op, const char* rule);
  // Fails when called from a host function (launch_host_func).
  static Status not_in_host_func(const char* op);
  // Lazy loading: the first launch of `name` on `device` waits for the device to go idle.
  Status first_launch(int device, const std::string& name, const char* op);

  // A planned copy: checked when enqueued, run (and throttled) on the stream or at once.
  struct CopyPlan {
    void* dst;
    const void* src;
    size_t bytes;
    int from, to;  // link endpoints for the throttle: a device index, or kHostNode
    bool pageable = false;  // the host side is pageable memory (not from alloc_host_pinned)
  };
  static constexpr int kHostNode = -1;

  Status check_device(int device, const char* op) const;  // a physical index
  // Note [Simulated visible devices]: the caller's ordinal (0..device_count()-1) to the
  // topology file's index, checked; and back (-1: not visible to this process).
  Status to_physical(int* device, const char* op) const;
  int ordinal_of(int physical) const;
  std::string bus_id_of(int physical) const;
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

  topo::System system_;
  SimOptions options_;
  mutable std::mutex slices_mu_;  // guards options_.slices (adopt_slices replaces it)
  std::shared_ptr<sim::TimeSlices> slices() const;
  sim::SimMemory memory_;
  std::vector<int> visible_;  // ordinal -> physical index (Note [Simulated visible devices])
  std::string visible_note_;  // why the visible set is what it is, for description()

  mutable std::mutex mu_;  // guards everything below
  std::vector<char> peer_;  // [device * n + peer]: enable_peer(device, peer) succeeded
  std::map<uint64_t, std::shared_ptr<sim::SimStream>> streams_;
  std::map<uint64_t, std::shared_ptr<sim::SimEvent>> events_;
  // Streams and events from 3: 0x1 and 0x2 are CUDA's cudaStreamLegacy and cudaStreamPerThread
  // handles (a simulated user stream is its id as a pointer), which no simulated stream is.
  uint64_t next_id_ = 3;
  std::set<std::pair<int, std::string>> loaded_;  // kernels loaded per device (lazy loading)

  std::mutex link_mu_;  // throttle: when each directed link (from, to) is next free
  std::map<std::pair<int, int>, std::chrono::steady_clock::time_point> link_free_at_;
};

}  // namespace accord
