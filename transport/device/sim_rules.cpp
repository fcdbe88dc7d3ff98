// SimulatedRuntime: the CUDA rules of Note [Simulated CUDA rules] (sim_runtime.hpp), and
// Accord's own kernels, which the simulation runs on the stream's host thread.
#include <cstring>
#include <vector>

#include "core/log.hpp"
#include "transport/device/sim_runtime.hpp"

namespace accord {

namespace {
// Set while a host function (launch_host_func) runs on a stream's thread.
thread_local bool t_in_host_func = false;
}  // namespace

Status SimulatedRuntime::not_in_host_func(const char* op) {
  if (!t_in_host_func) return Status();
  return error(ACCORD_ERR_INVALID_USAGE,
               "%s called from a host function: cudaErrorNotPermitted: operation not permitted "
               "(CUDA forbids any CUDA call in a cudaLaunchHostFunc callback; it may deadlock)",
               op);
}

Status SimulatedRuntime::wait_idle(int device, bool blocking_only, const char* op, const char* rule) {
  ACCORD_TRY(not_in_host_func(op));
  std::vector<std::shared_ptr<sim::SimStream>> busy;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [id, s] : streams_)
      if ((device < 0 || s->device() == device) && (!blocking_only || s->blocking())) busy.push_back(s);
  }
  const auto start = std::chrono::steady_clock::now();
  for (auto& s : busy) {
    const int64_t spent = std::chrono::duration_cast<std::chrono::milliseconds>(
                              std::chrono::steady_clock::now() - start)
                              .count();
    Status ignored;  // a stream's own errors are for its own synchronize
    if (!s->synchronize_for(std::max<int64_t>(0, options_.stall_ms - spent), &ignored))
      return error(ACCORD_ERR_CUDA,
                   "simulated GPU %d: %s waits until %s is idle (%s), and stream %llu of GPU %d has "
                   "not gone idle in %lld ms: on a real GPU this call would block there, for ever "
                   "if that stream waits for something this thread does after the call "
                   "(ACCORD_SIM_STALL_MS sets the limit)",
                   device < 0 ? s->device() : device, op,
                   device < 0 ? "every device" : "the device", rule,
                   static_cast<unsigned long long>(s->id()), s->device(),
                   static_cast<long long>(options_.stall_ms));
  }
  return Status();
}

Status SimulatedRuntime::first_launch(int device, const std::string& name, const char* op) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (loaded_.count({device, name})) return Status();
  }
  std::string rule = "lazy loading: the first launch of kernel " + name +
                     " loads its module; load it ahead with load_kernel (cudaFuncGetAttributes)";
  ACCORD_TRY(wait_idle(device, false, op, rule.c_str()));
  std::lock_guard<std::mutex> lock(mu_);
  loaded_.insert({device, name});
  return Status();
}

Status SimulatedRuntime::load_kernel(int device, const KernelDesc& kernel) {
  ACCORD_TRY(not_in_host_func("load_kernel"));
  ACCORD_TRY(to_physical(&device, "load_kernel"));
  if (kernel.host_func == nullptr)
    return error(ACCORD_ERR_INVALID_ARGUMENT, "device %d: load_kernel(%s): the kernel has no host body",
                 device, kernel.name);
  // Loading waits for nothing when done before any work, which is when Accord does it.
  std::lock_guard<std::mutex> lock(mu_);
  loaded_.insert({device, kernel.name});
  return Status();
}

Status SimulatedRuntime::launch_kernel(const KernelDesc& kernel, const void* params, size_t params_bytes,
                                       Stream stream, unsigned blocks, size_t shared_bytes) {
  ACCORD_TRY(not_in_host_func("launch_kernel"));
  std::shared_ptr<sim::SimStream> s;
  ACCORD_TRY(find_stream(stream, "launch_kernel", &s));
  if (kernel.host_func == nullptr || (params_bytes > 0 && params == nullptr))
    return error(ACCORD_ERR_INVALID_ARGUMENT, "device %d: launch_kernel(%s): no host body or no parameters",
                 s->device(), kernel.name);
  if (params_bytes > 4096)
    return error(ACCORD_ERR_INVALID_ARGUMENT, "device %d: launch_kernel(%s): %zu bytes of parameters; CUDA "
                 "takes at most 4096", s->device(), kernel.name, params_bytes);
  if (blocks == 0 || blocks > max_kernel_blocks())
    return error(ACCORD_ERR_INVALID_ARGUMENT, "device %d: launch_kernel(%s): %u blocks; the simulation runs 1 to %u",
                 s->device(), kernel.name, blocks, max_kernel_blocks());
  if (shared_bytes > (48u << 10))
    return error(ACCORD_ERR_INVALID_ARGUMENT, "device %d: launch_kernel(%s): %zu bytes of dynamic shared memory; "
                 "CUDA launches at most 48 KiB without cudaFuncSetAttribute", s->device(), kernel.name, shared_bytes);
  ACCORD_TRY(first_launch(s->device(), kernel.name, "launch_kernel"));
  auto copy = std::make_shared<std::vector<uint8_t>>(static_cast<const uint8_t*>(params),
                                                     static_cast<const uint8_t*>(params) + params_bytes);
  void (*body)(const void*) = kernel.host_func;
  std::shared_ptr<sim::TimeSlices> slices = options_.timeslice_us > 0 ? this->slices() : nullptr;
  if (!slices) {
    s->enqueue([body, copy] {
      body(copy->data());
      return Status();
    });
    return Status();
  }
  // Note [Simulated time slices]: the kernel holds its GPU's slice while it runs.
  const int device = s->device();
  const int64_t slice_us = options_.timeslice_us, stall_ms = options_.stall_ms;
  std::string name = kernel.name;
  s->enqueue([body, copy, slices, device, slice_us, stall_ms, name] {
    sim::KernelSlice slice(slices, device, slice_us, stall_ms, name);
    ACCORD_TRY(slice.enter());
    {
      sim::AdoptKernelSlice adopt(&slice);
      body(copy->data());
    }
    slice.leave();
    return slice.status();
  });
  return Status();
}

Status SimulatedRuntime::memset_async(void* ptr, int value, size_t bytes, Stream stream) {
  ACCORD_TRY(not_in_host_func("memset_async"));
  std::shared_ptr<sim::SimStream> s;
  ACCORD_TRY(find_stream(stream, "memset_async", &s));
  if (bytes == 0) return Status();
  ACCORD_TRY(check_device_range(s->device(), ptr, bytes, true, "memset_async", "ptr", nullptr));
  s->enqueue([ptr, value, bytes] {
    std::memset(ptr, value, bytes);
    return Status();
  });
  return Status();
}

Status SimulatedRuntime::device_address(void* host, void** out) {
  ACCORD_TRY(not_in_host_func("device_address"));
  if (host == nullptr || out == nullptr)
    return error(ACCORD_ERR_INVALID_ARGUMENT, "device_address(%p): null pointer or output", host);
  PointerInfo info;
  ACCORD_TRY(pointer_info(host, &info));
  if (info.kind != MemoryKind::kHostPinned)
    return error(ACCORD_ERR_INVALID_ARGUMENT, "device_address(%p): not pinned or registered host memory "
                 "(cudaErrorInvalidValue); register it first (register_host)", host);
  *out = host;
  return Status();
}

sim::SliceCounts SimulatedRuntime::slice_counts(int device) const {
  const std::shared_ptr<sim::TimeSlices> table = slices();
  if (!table || !to_physical(&device, "slice_counts").ok()) return sim::SliceCounts{};
  return table->counts(device);  // the table is the machine's: physical indices
}

std::shared_ptr<sim::TimeSlices> SimulatedRuntime::slices() const {
  std::lock_guard<std::mutex> lock(slices_mu_);
  return options_.slices;
}

std::string SimulatedRuntime::slices_handle() const {
  const std::shared_ptr<sim::TimeSlices> table = options_.timeslice_us > 0 ? slices() : nullptr;
  return table ? table->handle() : std::string();
}

Status SimulatedRuntime::adopt_slices(const std::string& handle) {
  const std::shared_ptr<sim::TimeSlices> table = slices();
  if (options_.timeslice_us <= 0 || handle.empty() || (table && table->same(handle))) return Status();
  std::string why;
  std::shared_ptr<sim::TimeSlices> other = sim::TimeSlices::open(handle, &why);
  if (!other || other->gpus() < system_.gpu_count())
    return error(ACCORD_ERR_SYSTEM, "simulated time slices: the job's table (%s) cannot be used: %s", handle.c_str(),
                 other ? "it has fewer GPUs than this machine" : why.c_str());
  std::lock_guard<std::mutex> lock(slices_mu_);
  options_.slices = std::move(other);
  return Status();
}

// Runs a host function with the rule's flag set (launch_host_func's body).
void run_host_func_flagged(DeviceRuntime::HostFn fn, void* arg) {
  t_in_host_func = true;
  fn(arg);
  t_in_host_func = false;
}

}  // namespace accord
