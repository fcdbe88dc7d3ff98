// SimulatedRuntime: checks every call against the System and the memory registry, then does
// the work with memcpy and the host reduction kernels, at once or on a stream's thread.
#include "transport/device/sim_runtime.hpp"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "core/log.hpp"
#include "topology/formats.hpp"

namespace accord {

namespace {
const char* const kPeerUnsupported = kPeerAccessUnsupportedText;
const char* const kPeerNotEnabled = kPeerAccessNotEnabledText;

bool overlap(const void* a, const void* b, size_t bytes) {
  auto x = reinterpret_cast<uintptr_t>(a), y = reinterpret_cast<uintptr_t>(b);
  return x < y + bytes && y < x + bytes;
}
}  // namespace

// Note [Simulated visible devices]: CUDA_VISIBLE_DEVICES works here as in CUDA, so that jobs
// launched as clusters launch them (Slurm's --gpus-per-task=1, a container per GPU) can be
// tested: the topology file is the machine, and this process sees the GPUs the variable lists,
// renumbered from 0 in its order. Entries are indices into the machine or GPU UUIDs (a unique
// prefix is enough; device_info gives each simulated GPU one); as in CUDA, the first entry that
// is neither, or repeats a GPU, ends the list, and a variable set to nothing hides every GPU.
// Every call takes and gives the process's ordinals; inside, everything is the file's index.
// Peer access, IPC and the path between two GPUs are the machine's, visible or not: CUDA (10.1
// and later) opens an IPC handle of a GPU this process does not see, and NCCL relies on that.
namespace {
std::string sim_uuid(const std::string& bus_id) {
  uint64_t h = 1469598103934665603ULL;  // FNV-1a of the bus id: the same in every process
  for (char c : bus_id) h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ULL;
  return format("GPU-5e000000-0000-4000-8000-%012llx",
                static_cast<unsigned long long>(h & 0xffffffffffffULL));
}
}  // namespace

SimulatedRuntime::SimulatedRuntime(topo::System system, SimOptions options)
    : system_(std::move(system)), options_(std::move(options)) {
  const int n = system_.gpu_count();
  peer_.assign(static_cast<size_t>(n * n), 0);
  if (options_.timeslice_us > 0 && n > 0 && (!options_.slices || options_.slices->gpus() < n)) {
    std::string why;
    options_.slices = sim::TimeSlices::create(n, &why);
    if (!options_.slices) LOG_WARN(kGpu, "simulated time slices are off: %s", why.c_str());
  }
  if (!options_.visible_set) {
    for (int d = 0; d < n; ++d) visible_.push_back(d);
    return;
  }
  const std::string& list = options_.visible_devices;
  for (size_t at = 0; at <= list.size();) {
    size_t comma = list.find(',', at);
    if (comma == std::string::npos) comma = list.size();
    std::string entry = list.substr(at, comma - at);
    at = comma + 1;
    while (!entry.empty() && std::isspace(static_cast<unsigned char>(entry.back()))) entry.pop_back();
    entry.erase(0, std::min(entry.size(), entry.find_first_not_of(" \t")));
    int found = -1;
    char* end = nullptr;
    const long index = std::strtol(entry.c_str(), &end, 10);
    if (!entry.empty() && *end == '\0') {
      if (index >= 0 && index < n) found = static_cast<int>(index);
    } else if (entry.rfind("GPU-", 0) == 0) {
      for (int d = 0; d < n; ++d)
        if (sim_uuid(bus_id_of(d)).rfind(entry, 0) == 0) found = found == -1 ? d : -2;  // -2: ambiguous
    }
    if (found < 0 || std::find(visible_.begin(), visible_.end(), found) != visible_.end()) {
      if (!entry.empty() || comma < list.size())
        visible_note_ = format("; CUDA_VISIBLE_DEVICES entry '%s' is %s, so the list ends before it",
                               entry.c_str(), found == -2 ? "ambiguous" : found >= 0 ? "a repeat" : "no GPU of the file");
      break;
    }
    visible_.push_back(found);
  }
  std::string shown;
  for (int d : visible_) shown += format("%s%d", shown.empty() ? "" : ",", d);
  visible_note_ = format(", CUDA_VISIBLE_DEVICES='%s': this process sees GPUs %s of the file as 0..%zu%s",
                         list.c_str(), shown.empty() ? "(none)" : shown.c_str(),
                         visible_.empty() ? size_t{0} : visible_.size() - 1, visible_note_.c_str());
}

Status SimulatedRuntime::to_physical(int* device, const char* op) const {
  const int n = static_cast<int>(visible_.size());
  if (*device >= 0 && *device < n) {
    *device = visible_[static_cast<size_t>(*device)];
    return Status();
  }
  if (n == 0 && system_.gpu_count() > 0)
    return error(ACCORD_ERR_UNSUPPORTED, "%s: device %d does not exist: %s", op, *device, description().c_str());
  if (n == 0) return check_device(-1, op);  // says why there are none
  if (n == system_.gpu_count()) return check_device(*device, op);
  return error(ACCORD_ERR_INVALID_ARGUMENT, "%s: device %d does not exist: this process sees %d of the %d GPUs of %s%s",
               op, *device, n, system_.gpu_count(), system_.source.c_str(), visible_note_.c_str());
}

int SimulatedRuntime::ordinal_of(int physical) const {
  auto it = std::find(visible_.begin(), visible_.end(), physical);
  return it == visible_.end() ? -1 : static_cast<int>(it - visible_.begin());
}

std::string SimulatedRuntime::bus_id_of(int physical) const {
  const topo::Device& d = system_.gpu(physical);
  // A made-up domain (0x00ff) that no real machine in the fixtures uses, so that ranks in
  // different processes agree on it and nobody mistakes it for a real slot.
  return canonical_bus_id(d.pci_bus_id.empty() ? format("00ff:%02x:00.0", physical) : d.pci_bus_id);
}

int SimulatedRuntime::physical_of_bus(const std::string& pci_bus_id) const {
  const std::string want = canonical_bus_id(pci_bus_id);
  for (int d = 0; d < system_.gpu_count(); ++d)
    if (bus_id_of(d) == want) return d;
  return -1;
}

Status SimulatedRuntime::device_by_bus_id(const std::string& pci_bus_id, int* out) const {
  const int physical = physical_of_bus(pci_bus_id);
  *out = physical < 0 ? -1 : ordinal_of(physical);
  return Status();
}

Status SimulatedRuntime::peer_bus_ids(int device, std::vector<std::string>* out) {
  ACCORD_TRY(to_physical(&device, "peer_bus_ids"));
  out->clear();
  for (int d = 0; d < system_.gpu_count(); ++d)
    if (d != device && system_.p2p(device, d) && system_.p2p(d, device)) out->push_back(bus_id_of(d));
  return Status();
}

SimulatedRuntime::~SimulatedRuntime() {
  // Streams first: their queued work may still touch memory.
  std::map<uint64_t, std::shared_ptr<sim::SimStream>> streams;
  {
    std::lock_guard<std::mutex> lock(mu_);
    streams.swap(streams_);
  }
  // A wait on a word that nobody will write any more would keep the thread from joining.
  for (auto& [id, s] : streams) s->cancel_waits();
  streams.clear();
}

Status SimulatedRuntime::from_file(const std::string& path, const SimOptions& options,
                                   std::unique_ptr<SimulatedRuntime>* out) {
  topo::System system;
  Status st = topo::load_system_file(path, &system);
  if (!st.ok()) return st.prefix("simulated GPUs (ACCORD_SIM_TOPO): ");
  out->reset(new SimulatedRuntime(std::move(system), options));
  return Status();
}

// For a runtime without GPUs: why, and what to do.
static std::string no_gpus_text(const SimOptions& o) {
  return format("no GPUs (%s); set ACCORD_SIM_TOPO=FILE to simulate the GPUs of a topology file",
                o.no_devices_reason.empty() ? "the topology has none" : o.no_devices_reason.c_str());
}

std::string SimulatedRuntime::description() const {
  if (system_.gpu_count() == 0) return "none: " + no_gpus_text(options_);
  if (visible_.empty())
    return format("none: no GPUs (CUDA_VISIBLE_DEVICES='%s' hides the %d GPUs of %s)",
                  options_.visible_devices.c_str(), system_.gpu_count(), system_.source.c_str());
  return format("simulated: %d GPUs of %s%s%s", system_.gpu_count(), system_.source.c_str(),
                options_.throttle ? ", copies throttled to the topology's bandwidth" : "", visible_note_.c_str());
}

Status SimulatedRuntime::check_device(int device, const char* op) const {
  if (device >= 0 && device < system_.gpu_count()) return Status();
  if (system_.gpu_count() == 0)
    return error(ACCORD_ERR_UNSUPPORTED, "%s: device %d does not exist: %s", op, device, no_gpus_text(options_).c_str());
  return error(ACCORD_ERR_INVALID_ARGUMENT, "%s: device %d does not exist: %s has devices 0-%d", op, device,
               system_.source.c_str(), system_.gpu_count() - 1);
}

Status SimulatedRuntime::device_info(int device, DeviceInfo* out) const {
  ACCORD_TRY(to_physical(&device, "device_info"));
  const topo::Device& d = system_.gpu(device);
  out->name = d.name.empty() || d.name.rfind("GPU ", 0) == 0 ? format("simulated GPU %d", device) : d.name;
  out->pci_bus_id = bus_id_of(device);
  out->uuid = sim_uuid(out->pci_bus_id);
  out->sm = d.sm;
  return Status();
}

// ---- memory ----

Status SimulatedRuntime::alloc_device(int device, size_t bytes, void** out) {
  ACCORD_TRY(to_physical(&device, "alloc_device"));
  if (!out) return error(ACCORD_ERR_INVALID_ARGUMENT, "device %d: alloc_device: null output pointer", device);
  *out = nullptr;
  if (bytes == 0) return Status();
  ACCORD_TRY(wait_idle(device, false, "alloc_device", "cudaMalloc may synchronize the device"));
  return memory_.alloc_device(device, bytes, out);
}

// As cudaFree synchronizes the memory's device, not every GPU of the process: draining every
// stream would make a rank that frees memory wait for other ranks' streams, which may be held
// (stream_wait_flag) until this very rank's next collective, a deadlock real CUDA does not have.
Status SimulatedRuntime::free_device(void* ptr) {
  if (!ptr) return Status();
  sim::Allocation a;
  if (memory_.find(ptr, 0, &a) && a.kind == MemoryKind::kDevice && !a.imported)
    ACCORD_TRY(wait_idle(a.device, false, "free_device", "cudaFree synchronizes the device"));
  else
    ACCORD_TRY(wait_idle(-1, false, "free_device", "cudaFree synchronizes"));
  return memory_.free(ptr, MemoryKind::kDevice, "free_device");
}

Status SimulatedRuntime::alloc_host_pinned(size_t bytes, void** out) {
  ACCORD_TRY(not_in_host_func("alloc_host_pinned"));
  if (!out) return error(ACCORD_ERR_INVALID_ARGUMENT, "alloc_host_pinned: null output pointer");
  *out = nullptr;
  if (bytes == 0) return Status();
  return memory_.alloc_pinned(bytes, out);
}

Status SimulatedRuntime::free_host_pinned(void* ptr) {
  if (!ptr) return Status();
  ACCORD_TRY(wait_idle(-1, false, "free_host_pinned", "cudaFreeHost synchronizes"));
  return memory_.free(ptr, MemoryKind::kHostPinned, "free_host_pinned");
}

Status SimulatedRuntime::pointer_info(const void* ptr, PointerInfo* out) {
  if (!out) return error(ACCORD_ERR_INVALID_ARGUMENT, "pointer_info(%p): null output", ptr);
  *out = PointerInfo();
  sim::Allocation a;
  if (ptr && memory_.find(ptr, 0, &a)) {
    out->kind = a.kind;
    out->device = a.kind == MemoryKind::kDevice ? ordinal_of(a.device) : a.device;
    out->base = a.base;
    out->bytes = a.bytes;
    out->imported = a.imported;
    out->buffer_id = a.buffer_id;
  }
  return Status();
}

// ---- peer access ----

Status SimulatedRuntime::can_access_peer(int device, int peer, bool* out) {
  ACCORD_TRY(to_physical(&device, "can_access_peer"));
  ACCORD_TRY(to_physical(&peer, "can_access_peer"));
  if (!out) return error(ACCORD_ERR_INVALID_ARGUMENT, "can_access_peer: null output");
  *out = device != peer && system_.p2p(device, peer);
  return Status();
}

Status SimulatedRuntime::enable_peer(int device, int peer) {
  ACCORD_TRY(to_physical(&device, "enable_peer"));
  ACCORD_TRY(to_physical(&peer, "enable_peer"));
  if (device == peer)
    return error(ACCORD_ERR_INVALID_ARGUMENT, "enable_peer(%d -> %d): a device cannot enable peer access to "
                 "itself (cudaErrorInvalidDevice)", device, peer);
  if (!system_.p2p(device, peer)) {
    LOG_INFO(kGpu, "simulated GPU %d cannot enable peer access to GPU %d: %s", device, peer,
             system_.p2p_reason(device, peer).c_str());
    return error(ACCORD_ERR_UNSUPPORTED, "enable_peer(%d -> %d): %s (simulated %s: %s); stage copies between "
                 "them through pinned host memory", device, peer, kPeerUnsupported, system_.source.c_str(),
                 system_.p2p_reason(device, peer).c_str());
  }
  std::lock_guard<std::mutex> lock(mu_);
  peer_[static_cast<size_t>(device * system_.gpu_count() + peer)] = 1;
  return Status();
}

bool SimulatedRuntime::peer_enabled(int device, int peer) const {
  if (device == peer) return true;
  std::lock_guard<std::mutex> lock(mu_);
  return peer_[static_cast<size_t>(device * system_.gpu_count() + peer)] != 0;
}

// ---- checks ----

Status SimulatedRuntime::check_device_range(int device, const void* ptr, size_t bytes, bool allow_pinned,
                                            const char* op, const char* what, int* owner) const {
  if (!ptr) return error(ACCORD_ERR_INVALID_ARGUMENT, "device %d: %s: %s is null", device, op, what);
  sim::Allocation a;
  if (!memory_.find(ptr, bytes, &a))
    return error(ACCORD_ERR_INVALID_ARGUMENT, "device %d: %s: %s %p (+%zu bytes) is not device memory of this "
                 "runtime: a host pointer, freed memory, or past the end of its allocation", device, op, what, ptr,
                 bytes);
  if (a.kind == MemoryKind::kHostPinned) {
    if (allow_pinned) {
      if (owner) *owner = kHostNode;
      return Status();
    }
    return error(ACCORD_ERR_INVALID_ARGUMENT, "device %d: %s: %s %p is pinned host memory, not device memory; "
                 "use the copy kind that names the host side", device, op, what, ptr);
  }
  if (!peer_enabled(device, a.device))
    return error(ACCORD_ERR_INVALID_USAGE, "device %d: %s: %s %p is memory of device %d, and device %d has not "
                 "enabled peer access to it (%s); call enable_peer(%d, %d) or stage through pinned host memory",
                 device, op, what, ptr, a.device, device, kPeerNotEnabled, device, a.device);
  if (owner) *owner = a.device;
  return Status();
}

Status SimulatedRuntime::check_host_range(const void* ptr, const char* op, const char* what, bool* pageable) const {
  if (!ptr) return error(ACCORD_ERR_INVALID_ARGUMENT, "%s: %s is null", op, what);
  sim::Allocation a;
  const bool known = memory_.find(ptr, 0, &a);
  if (known && a.kind == MemoryKind::kDevice)
    return error(ACCORD_ERR_INVALID_ARGUMENT, "%s: %s %p is device memory of device %d, not host memory; use "
                 "copy_d2d or copy_peer", op, what, ptr, a.device);
  *pageable = !known;
  return Status();
}

Status SimulatedRuntime::plan_copy(CopyKind kind, int device, void* dst, const void* src, size_t bytes,
                                   CopyPlan* plan) const {
  const char* op = copy_kind_name(kind);
  ACCORD_TRY(check_device(device, op));
  *plan = CopyPlan{dst, src, bytes, device, device};
  if (bytes == 0) return Status();
  switch (kind) {
    case CopyKind::kHostToDevice:
      ACCORD_TRY(check_device_range(device, dst, bytes, false, op, "dst", &plan->to));
      ACCORD_TRY(check_host_range(src, op, "src", &plan->pageable));
      plan->from = kHostNode;
      break;
    case CopyKind::kDeviceToHost:
      ACCORD_TRY(check_device_range(device, src, bytes, false, op, "src", &plan->from));
      ACCORD_TRY(check_host_range(dst, op, "dst", &plan->pageable));
      plan->to = kHostNode;
      break;
    case CopyKind::kDeviceToDevice:
      ACCORD_TRY(check_device_range(device, src, bytes, false, op, "src", &plan->from));
      ACCORD_TRY(check_device_range(device, dst, bytes, false, op, "dst", &plan->to));
      break;
    default:
      return error(ACCORD_ERR_INVALID_ARGUMENT, "copy: unknown copy kind %d", static_cast<int>(kind));
  }
  return Status();
}

Status SimulatedRuntime::plan_peer(int runner, int dst_device, void* dst, int src_device, const void* src,
                                   size_t bytes, const char* op, CopyPlan* plan) const {
  ACCORD_TRY(check_device(dst_device, op));
  ACCORD_TRY(check_device(src_device, op));
  *plan = CopyPlan{dst, src, bytes, src_device, dst_device};
  if (bytes == 0) return Status();
  const int other = runner == src_device ? dst_device : src_device;
  if (!peer_enabled(runner, other)) {
    std::string what_to_do = system_.p2p(runner, other)
                                 ? format("call enable_peer(%d, %d) first, or stage the copy through pinned host "
                                          "memory", runner, other)
                                 : format("they cannot peer (%s): stage the copy through pinned host memory",
                                          system_.p2p_reason(runner, other).c_str());
    return error(ACCORD_ERR_INVALID_USAGE, "%s(device %d -> device %d): a direct copy needs peer access from device "
                 "%d to device %d: %s; %s", op, src_device, dst_device, runner, other, kPeerNotEnabled,
                 what_to_do.c_str());
  }
  // Each pointer must be the memory of the device the call names.
  struct Side {
    const void* ptr;
    int device;
    const char* what;
  };
  for (const Side& s : {Side{dst, dst_device, "dst"}, Side{src, src_device, "src"}}) {
    if (!s.ptr) return error(ACCORD_ERR_INVALID_ARGUMENT, "%s: %s is null", op, s.what);
    sim::Allocation a;
    if (!memory_.find(s.ptr, bytes, &a) || a.kind != MemoryKind::kDevice)
      return error(ACCORD_ERR_INVALID_ARGUMENT, "%s: %s %p (+%zu bytes) is not device memory of this runtime: a "
                   "host pointer, freed memory, or past the end of its allocation", op, s.what, s.ptr, bytes);
    if (a.device != s.device)
      return error(ACCORD_ERR_INVALID_ARGUMENT, "%s: %s %p is memory of device %d, but the call names device %d",
                   op, s.what, s.ptr, a.device, s.device);
  }
  return Status();
}

void SimulatedRuntime::run_copy(const CopyPlan& plan) {
  if (plan.bytes == 0) return;
  if (!options_.throttle || plan.from == plan.to) {
    std::memmove(plan.dst, plan.src, plan.bytes);
    return;
  }
  // The copy itself overlaps the modelled transfer time: a copy ends when both are done.
  const auto done = reserve_link(plan.from, plan.to, plan.bytes);
  std::memmove(plan.dst, plan.src, plan.bytes);
  std::this_thread::sleep_until(done);
}

std::chrono::steady_clock::time_point SimulatedRuntime::reserve_link(int from, int to, size_t bytes) {
  double gbs = topo::kDefaultPciGbs;
  if (from != kHostNode && to != kHostNode) {
    gbs = system_.bandwidth_gbs(from, to);
  } else {
    const topo::Device& d = system_.gpu(from == kHostNode ? to : from);
    if (d.pci_speed_gts > 0 && d.pci_width > 0) gbs = topo::pci_bandwidth_gbs(d.pci_speed_gts, d.pci_width);
  }
  if (gbs <= 0) gbs = topo::kDefaultPciGbs;
  using Clock = std::chrono::steady_clock;
  const auto cost = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(bytes / (gbs * 1e9)));
  Clock::time_point done;
  {
    // Copies on one directed link queue behind each other; the two directions are independent.
    std::lock_guard<std::mutex> lock(link_mu_);
    auto& free_at = link_free_at_[{from, to}];
    done = std::max(free_at, Clock::now()) + cost;
    free_at = done;
  }
  return done;
}

// ---- copies ----

Status SimulatedRuntime::copy(CopyKind kind, int device, void* dst, const void* src, size_t bytes) {
  CopyPlan plan;
  ACCORD_TRY(to_physical(&device, copy_kind_name(kind)));
  ACCORD_TRY(plan_copy(kind, device, dst, src, bytes, &plan));
  ACCORD_TRY(wait_idle(device, true, copy_kind_name(kind),
                       "a synchronous copy runs on the legacy default stream, which waits for every "
                       "blocking stream"));
  run_copy(plan);
  return Status();
}

Status SimulatedRuntime::copy_async(CopyKind kind, void* dst, const void* src, size_t bytes, Stream stream) {
  std::shared_ptr<sim::SimStream> s;
  ACCORD_TRY(not_in_host_func(copy_kind_name(kind)));
  ACCORD_TRY(find_stream(stream, copy_kind_name(kind), &s));
  CopyPlan plan;
  ACCORD_TRY(plan_copy(kind, s->device(), dst, src, bytes, &plan));
  // Pageable host memory behaves as with CUDA, so that code correct there is correct here: a
  // copy from it returns once the source was staged (the caller may reuse it at once), and a
  // copy into it returns only when done.
  if (plan.pageable && kind == CopyKind::kHostToDevice) {
    auto staged = std::make_shared<std::vector<char>>(static_cast<const char*>(src),
                                                      static_cast<const char*>(src) + bytes);
    plan.src = staged->data();
    s->enqueue([this, plan, staged] {
      run_copy(plan);
      return Status();
    });
    return Status();
  }
  s->enqueue([this, plan] {
    run_copy(plan);
    return Status();
  });
  if (plan.pageable && kind == CopyKind::kDeviceToHost) {
    // Errors stay with the stream, for its synchronize to report.
    (void)s->synchronize();
  }
  return Status();
}

Status SimulatedRuntime::copy_peer(int dst_device, void* dst, int src_device, const void* src, size_t bytes) {
  CopyPlan plan;
  ACCORD_TRY(not_in_host_func("copy_peer"));
  ACCORD_TRY(to_physical(&src_device, "copy_peer"));
  ACCORD_TRY(to_physical(&dst_device, "copy_peer"));
  ACCORD_TRY(plan_peer(src_device, dst_device, dst, src_device, src, bytes, "copy_peer", &plan));
  run_copy(plan);
  return Status();
}

Status SimulatedRuntime::copy_peer_async(int dst_device, void* dst, int src_device, const void* src, size_t bytes,
                                         Stream stream) {
  std::shared_ptr<sim::SimStream> s;
  ACCORD_TRY(not_in_host_func("copy_peer_async"));
  ACCORD_TRY(find_stream(stream, "copy_peer_async", &s));
  ACCORD_TRY(to_physical(&src_device, "copy_peer_async"));
  ACCORD_TRY(to_physical(&dst_device, "copy_peer_async"));
  if (s->device() != src_device && s->device() != dst_device)
    return error(ACCORD_ERR_INVALID_ARGUMENT, "copy_peer_async(device %d -> device %d): stream %llu is on device %d; "
                 "use a stream of either device", src_device, dst_device, (unsigned long long)stream.id,
                 s->device());
  CopyPlan plan;
  ACCORD_TRY(plan_peer(s->device(), dst_device, dst, src_device, src, bytes, "copy_peer_async", &plan));
  s->enqueue([this, plan] {
    run_copy(plan);
    return Status();
  });
  return Status();
}

// ---- reductions ----

Status SimulatedRuntime::reduce_async(const kernels::ReduceArgs& args, accord_datatype_t dtype, accord_red_op_t op,
                                      Stream stream) {
  std::shared_ptr<sim::SimStream> s;
  ACCORD_TRY(not_in_host_func("reduce_async"));
  ACCORD_TRY(find_stream(stream, "reduce_async", &s));
  const int device = s->device();
  kernels::ReduceFn fn = kernels::get_reduce_fn(dtype, op);
  if (!fn)
    return error(ACCORD_ERR_INVALID_ARGUMENT, "device %d: reduce_async: unknown dtype %d or op %d", device,
                 static_cast<int>(dtype), static_cast<int>(op));
  if (args.count == 0) return Status();
  const size_t esize = dtype_bytes(dtype);
  if (args.count > SIZE_MAX / esize)
    return error(ACCORD_ERR_INVALID_ARGUMENT, "device %d: reduce_async: count %zu overflows", device, args.count);
  const size_t bytes = args.count * esize;
  ACCORD_TRY(check_device_range(device, args.dst0, bytes, true, "reduce_async", "dst0", nullptr));
  ACCORD_TRY(check_device_range(device, args.a, bytes, true, "reduce_async", "a", nullptr));
  if (args.b) ACCORD_TRY(check_device_range(device, args.b, bytes, true, "reduce_async", "b", nullptr));
  if (args.dst1) ACCORD_TRY(check_device_range(device, args.dst1, bytes, true, "reduce_async", "dst1", nullptr));
  // The kernels' contract: an output may be an input exactly, never overlap it partly.
  for (const void* dst : {static_cast<const void*>(args.dst0), static_cast<const void*>(args.dst1)})
    for (const void* in : {args.a, args.b})
      if (dst && in && dst != in && overlap(dst, in, bytes))
        return error(ACCORD_ERR_INVALID_ARGUMENT, "device %d: reduce_async: output %p partly overlaps input %p "
                     "(%zu bytes); outputs may only alias an input exactly", device, dst, in, bytes);
  // One kernel per dtype x op, each loaded on its first launch (Note [Simulated CUDA rules]).
  ACCORD_TRY(first_launch(device, format("reduce<%d,%d>", static_cast<int>(dtype), static_cast<int>(op)),
                          "reduce_async"));
  s->enqueue([fn, args] {
    fn(args);
    return Status();
  });
  return Status();
}

}  // namespace accord
