// Choosing the device runtime (ACCORD_SIM_TOPO, then CUDA, then none) and the small helpers
// shared by the implementations.
#include "transport/device/device_runtime.hpp"

#include "accord_config.h"
#include <cctype>
#include <cstdlib>
#include <deque>
#include <mutex>

#include "core/log.hpp"
#include "transport/device/sim_runtime.hpp"
#if ACCORD_HAVE_CUDA
#include "transport/device/cuda_runtime.hpp"
#endif

namespace accord {

const char* memory_kind_name(MemoryKind kind) {
  switch (kind) {
    case MemoryKind::kHost: return "host memory";
    case MemoryKind::kHostPinned: return "pinned host memory";
    case MemoryKind::kDevice: return "device memory";
  }
  return "unknown memory";
}

const char* copy_kind_name(CopyKind kind) {
  switch (kind) {
    case CopyKind::kHostToDevice: return "copy_h2d";
    case CopyKind::kDeviceToHost: return "copy_d2h";
    case CopyKind::kDeviceToDevice: return "copy_d2d";
  }
  return "copy";
}

std::string canonical_bus_id(const std::string& pci_bus_id) {
  std::string id;
  for (char c : pci_bus_id) id += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  // "00000000:07:00.0" (CUDA's 8-digit domain) -> "0000:07:00.0"
  const size_t colon = id.find(':');
  if (colon != std::string::npos && colon > 4 && id.find_first_not_of('0') >= colon - 4)
    id.erase(0, colon - 4);
  return id;
}

Status DeviceRuntime::device_by_bus_id(const std::string& pci_bus_id, int* out) const {
  *out = -1;
  const std::string want = canonical_bus_id(pci_bus_id);
  for (int d = 0; d < device_count(); ++d) {
    DeviceInfo info;
    ACCORD_TRY(device_info(d, &info));
    if (canonical_bus_id(info.pci_bus_id) == want) {
      *out = d;
      break;
    }
  }
  return Status();
}

Status DeviceRuntime::peer_bus_ids(int device, std::vector<std::string>* out) {
  out->clear();
  for (int d = 0; d < device_count(); ++d) {
    bool there = false, back = false;
    if (d == device) continue;
    ACCORD_TRY(can_access_peer(device, d, &there));
    ACCORD_TRY(can_access_peer(d, device, &back));
    if (!there || !back) continue;
    DeviceInfo info;
    ACCORD_TRY(device_info(d, &info));
    out->push_back(canonical_bus_id(info.pci_bus_id));
  }
  return Status();
}

size_t dtype_bytes(accord_datatype_t dtype) {
  switch (dtype) {
    case ACCORD_INT8:
    case ACCORD_UINT8: return 1;
    case ACCORD_FLOAT16:
    case ACCORD_BFLOAT16: return 2;
    case ACCORD_INT32:
    case ACCORD_UINT32:
    case ACCORD_FLOAT32: return 4;
    case ACCORD_INT64:
    case ACCORD_UINT64:
    case ACCORD_FLOAT64: return 8;
    default: return 0;
  }
}

// Default flags: one process-wide list (std::deque keeps its elements in place).
std::atomic<uint64_t>* DeviceRuntime::new_flag() {
  static std::mutex mutex;
  static auto* flags = new std::deque<std::atomic<uint64_t>>();
  std::lock_guard<std::mutex> lock(mutex);
  return &flags->emplace_back(0);
}

Status make_device_runtime(const Settings& settings, std::unique_ptr<DeviceRuntime>* out) {
  if (!out) return error(ACCORD_ERR_INVALID_ARGUMENT, "make_device_runtime: null output");
  if (!settings.sim_topo.empty()) {
    std::unique_ptr<SimulatedRuntime> sim;
    SimOptions options;
    options.throttle = settings.sim_throttle;
    options.stall_ms = settings.sim_stall_ms;
    // Note [Simulated visible devices]: CUDA's variable, read as CUDA reads it.
    if (const char* visible = std::getenv("CUDA_VISIBLE_DEVICES")) {
      options.visible_set = true;
      options.visible_devices = visible;
    }
    options.timeslice_us = settings.sim_timeslice_us;
    if (options.timeslice_us > 0) options.slices = sim::TimeSlices::process_table();  // null: the runtime says why
    ACCORD_TRY(SimulatedRuntime::from_file(settings.sim_topo, options, &sim));
    LOG_INFO(kGpu, "device runtime: %s (ACCORD_SIM_TOPO)", sim->description().c_str());
    *out = std::move(sim);
    return Status();
  }
  std::string reason = "this build has no CUDA (-Dcuda=disabled or no toolkit)";
#if ACCORD_HAVE_CUDA
  std::unique_ptr<CudaRuntime> cuda;
  ACCORD_TRY(CudaRuntime::create(&cuda));
  if (cuda->device_count() > 0) {
    LOG_INFO(kGpu, "device runtime: %s", cuda->description().c_str());
    *out = std::move(cuda);
    return Status();
  }
  reason = cuda->unavailable_reason();
#endif
  SimOptions none;
  none.no_devices_reason = reason;
  auto empty = std::make_unique<SimulatedRuntime>(topo::System{}, none);
  LOG_INFO(kGpu, "device runtime: %s", empty->description().c_str());
  *out = std::move(empty);
  return Status();
}

DeviceRuntime* process_device_runtime(const Settings& settings, std::string* why) {
  static std::mutex mu;
  static DeviceRuntime* runtime = nullptr;  // never destroyed: streams may outlive every communicator
  static std::string reason;
  std::lock_guard<std::mutex> lock(mu);
  if (runtime == nullptr && reason.empty()) {
    std::unique_ptr<DeviceRuntime> rt;
    Status s = make_device_runtime(settings, &rt);
    if (!s.ok()) {
      reason = s.message();
    } else if (rt->device_count() == 0) {
      reason = rt->description();
    } else {
      runtime = rt.release();
    }
  }
  if (why != nullptr) *why = reason;
  return runtime;
}

}  // namespace accord
