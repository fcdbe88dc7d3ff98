// NVML probe, loaded at run time with dlopen("libnvidia-ml.so.1") so that neither nvml.h nor the
// driver is needed to build or run. Declares only the few types and entry points it uses, with the
// layouts of the public NVML API. Gives NVLink state and far ends, P2P status per ordered pair,
// and the GPU list when CUDA found none (NVML numbers GPUs in PCI bus order).
#include <dlfcn.h>

#include <cstring>

#include "topology/detect_sources.hpp"

namespace accord::topo::probe {
namespace {

using nvmlReturn_t = int;  // NVML_SUCCESS = 0
using nvmlDevice_t = struct nvmlDevice_st*;
constexpr nvmlReturn_t kNvmlSuccess = 0;
constexpr int kNvmlFeatureEnabled = 1;
constexpr int kNvmlP2pCapsRead = 0, kNvmlP2pCapsWrite = 1;
constexpr int kNvmlMaxLinks = 18;

struct NvmlPciInfo {  // nvmlPciInfo_t (v3 API)
  char bus_id_legacy[16];
  unsigned int domain;
  unsigned int bus;
  unsigned int device;
  unsigned int pci_device_id;
  unsigned int pci_subsystem_id;
  char bus_id[32];
};

struct Nvml {
  void* lib = nullptr;
  nvmlReturn_t (*init)() = nullptr;
  nvmlReturn_t (*shutdown)() = nullptr;
  nvmlReturn_t (*count)(unsigned int*) = nullptr;
  nvmlReturn_t (*by_index)(unsigned int, nvmlDevice_t*) = nullptr;
  nvmlReturn_t (*by_bus)(const char*, nvmlDevice_t*) = nullptr;
  nvmlReturn_t (*pci_info)(nvmlDevice_t, NvmlPciInfo*) = nullptr;
  nvmlReturn_t (*name)(nvmlDevice_t, char*, unsigned int) = nullptr;
  nvmlReturn_t (*cc)(nvmlDevice_t, int*, int*) = nullptr;
  nvmlReturn_t (*link_state)(nvmlDevice_t, unsigned int, int*) = nullptr;
  nvmlReturn_t (*link_remote)(nvmlDevice_t, unsigned int, NvmlPciInfo*) = nullptr;
  nvmlReturn_t (*p2p)(nvmlDevice_t, nvmlDevice_t, int, int*) = nullptr;

  template <typename F>
  bool sym(F* f, const char* n) {
    *f = reinterpret_cast<F>(dlsym(lib, n));
    return *f != nullptr;
  }
  bool load() {
    lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) return false;
    bool ok = sym(&init, "nvmlInit_v2") && sym(&shutdown, "nvmlShutdown") &&
              sym(&count, "nvmlDeviceGetCount_v2") && sym(&by_index, "nvmlDeviceGetHandleByIndex_v2") &&
              sym(&by_bus, "nvmlDeviceGetHandleByPciBusId_v2") && sym(&pci_info, "nvmlDeviceGetPciInfo_v3");
    // Optional entry points: older drivers lack some, and the probe does without them.
    sym(&name, "nvmlDeviceGetName");
    sym(&cc, "nvmlDeviceGetCudaComputeCapability");
    sym(&link_state, "nvmlDeviceGetNvLinkState");
    sym(&link_remote, "nvmlDeviceGetNvLinkRemotePciInfo_v2");
    sym(&p2p, "nvmlDeviceGetP2PStatus");
    return ok;
  }
  ~Nvml() {
    if (lib) dlclose(lib);
  }
};

P2pStatus from_nvml(int status) {
  switch (status) {
    case 0: return P2pStatus::kOk;
    case 1: return P2pStatus::kChipsetNotSupported;
    case 2: return P2pStatus::kGpuNotSupported;
    case 3: return P2pStatus::kTopologyNotSupported;
    case 4: return P2pStatus::kDisabledByRegkey;
    case 5: return P2pStatus::kNotSupported;
    default: return P2pStatus::kStatusUnknown;
  }
}

std::string bus_of(const NvmlPciInfo& p) {
  return normalize_bus_id(format("%x:%x:%x.0", p.domain, p.bus, p.device));
}

}  // namespace

void nvml(std::vector<GpuFound>* gpus, std::vector<NvlinkFound>* links,
          std::map<std::pair<int, int>, PairObservation>* obs, std::vector<std::string>* notes) {
  Nvml n;
  if (!n.load()) {
    notes->push_back("NVML: libnvidia-ml.so.1 not available (no NVIDIA driver)");
    return;
  }
  if (nvmlReturn_t r = n.init(); r != kNvmlSuccess) {
    notes->push_back(format("NVML: nvmlInit failed (error %d)", r));
    return;
  }
  std::vector<nvmlDevice_t> dev;
  if (gpus->empty()) {  // CUDA found nothing: take NVML's list
    unsigned int count = 0;
    n.count(&count);
    for (unsigned int i = 0; i < count; ++i) {
      nvmlDevice_t d;
      NvmlPciInfo pci;
      if (n.by_index(i, &d) != kNvmlSuccess || n.pci_info(d, &pci) != kNvmlSuccess) continue;
      GpuFound g;
      g.bus_id = bus_of(pci);
      char name[96] = "";
      if (n.name && n.name(d, name, sizeof name) == kNvmlSuccess) g.name = name;
      int major = 0, minor = 0;
      if (n.cc && n.cc(d, &major, &minor) == kNvmlSuccess) g.sm = major * 10 + minor;
      gpus->push_back(g);
    }
  }
  for (const GpuFound& g : *gpus) {
    nvmlDevice_t d = nullptr;
    if (n.by_bus(g.bus_id.c_str(), &d) != kNvmlSuccess) d = nullptr;
    dev.push_back(d);
  }
  int active = 0;
  for (size_t i = 0; i < dev.size(); ++i) {
    if (!dev[i] || !n.link_state || !n.link_remote) continue;
    std::map<std::string, int> per_remote;
    for (unsigned int l = 0; l < kNvmlMaxLinks; ++l) {
      int state = 0;
      NvmlPciInfo remote;
      if (n.link_state(dev[i], l, &state) != kNvmlSuccess) break;  // past the last link
      if (state != kNvmlFeatureEnabled || n.link_remote(dev[i], l, &remote) != kNvmlSuccess) continue;
      per_remote[bus_of(remote)]++;
      ++active;
    }
    for (const auto& [bus, count] : per_remote) {
      bool is_gpu = false;
      for (const GpuFound& g : *gpus) is_gpu |= g.bus_id == bus;
      links->push_back(NvlinkFound{static_cast<int>(i), bus, is_gpu, count});
    }
  }
  for (size_t a = 0; a < dev.size(); ++a)
    for (size_t b = 0; b < dev.size(); ++b) {
      if (a == b || !dev[a] || !dev[b] || !n.p2p) continue;
      int rd = -1, wr = -1;
      if (n.p2p(dev[a], dev[b], kNvmlP2pCapsRead, &rd) != kNvmlSuccess) continue;
      if (n.p2p(dev[a], dev[b], kNvmlP2pCapsWrite, &wr) != kNvmlSuccess) wr = rd;
      (*obs)[{static_cast<int>(a), static_cast<int>(b)}].p2p_status = from_nvml(rd != 0 ? rd : wr);
    }
  notes->push_back(format("NVML: %zu GPU(s), %d active NVLink(s)", gpus->size(), active));
  n.shutdown();
}

}  // namespace accord::topo::probe
