// Derivation of per-pair facts from a System: the path class (from what a source stated, else from
// the device tree and links), peer access (reported beats inferred), and the bandwidth estimate
// with NCCL's constants. See topology/README.md "How pair facts are derived".
#include "topology/system.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

namespace accord::topo {

namespace {

const char* const kDeviceKindNames[] = {"gpu", "cpu", "pci_switch", "nvswitch", "nic"};
const char* const kLinkKindNames[] = {"pci", "nvlink", "cpu_interconnect"};
const char* const kStatusNames[] = {"", "OK", "CNS", "GNS", "TNS", "DR", "NS", "U"};

// Inter-socket bandwidth per direction (nccl.md 1.4, ncclTopoGetInterCpuBw).
double inter_cpu_bandwidth_gbs(const Device& cpu) {
  if (cpu.cpu_arch == "ppc64" || cpu.cpu_arch == "ppc64le") return 32;
  if (cpu.cpu_arch == "arm64" || cpu.cpu_arch == "aarch64") return 6;
  if (cpu.cpu_vendor == "AuthenticAMD") return 16;
  if (cpu.cpu_vendor == "GenuineIntel") {
    if (cpu.cpu_model == 79 || cpu.cpu_model == 63) return 6;  // Broadwell, Haswell
    if (cpu.cpu_model == 143) return 22;                       // Sapphire Rapids
    if (cpu.cpu_model == 207) return 40;                       // Emerald Rapids
  }
  return 10;  // Skylake-class UPI, NCCL's default for Intel
}

std::string status_reason(P2pStatus s) {
  switch (s) {
    case P2pStatus::kChipsetNotSupported:
      return "the driver reports peer access unsupported by the chipset (CNS)";
    case P2pStatus::kGpuNotSupported:
      return "the driver reports peer access unsupported (GNS)";
    case P2pStatus::kTopologyNotSupported:
      return "the driver reports peer access unsupported on this PCIe topology (TNS)";
    case P2pStatus::kDisabledByRegkey:
      return "peer access is disabled by a driver registry key";
    case P2pStatus::kNotSupported:
      return "the driver reports peer access not supported (NS)";
    default:
      return "";
  }
}

std::string path_reason(PathClass p) {
  switch (p) {
    case PathClass::kPhb:
      return "path goes through a CPU PCIe host bridge (PHB); peer access is not used there";
    case PathClass::kNode:
      return "path crosses between PCIe host bridges of one NUMA node (NODE)";
    case PathClass::kSys:
      return "path crosses the CPU interconnect (SYS)";
    default:
      return "nothing says these GPUs can peer (no topology information)";
  }
}

}  // namespace

const char* device_kind_name(DeviceKind k) { return kDeviceKindNames[static_cast<int>(k)]; }
const char* link_kind_name(LinkKind k) { return kLinkKindNames[static_cast<int>(k)]; }
const char* p2p_status_name(P2pStatus s) { return kStatusNames[static_cast<int>(s)]; }

bool parse_device_kind(const std::string& s, DeviceKind* out) {
  for (int i = 0; i < 5; ++i)
    if (s == kDeviceKindNames[i]) return *out = static_cast<DeviceKind>(i), true;
  return false;
}

bool parse_link_kind(const std::string& s, LinkKind* out) {
  for (int i = 0; i < 3; ++i)
    if (s == kLinkKindNames[i]) return *out = static_cast<LinkKind>(i), true;
  return false;
}

bool parse_p2p_status(const std::string& s, P2pStatus* out) {
  for (int i = 1; i < 8; ++i)
    if (s == kStatusNames[i]) return *out = static_cast<P2pStatus>(i), true;
  return false;
}

std::string path_class_name(PathClass p, int nvlinks) {
  switch (p) {
    case PathClass::kSelf: return "X";
    case PathClass::kNvLink: return "NV" + std::to_string(nvlinks);
    case PathClass::kPix: return "PIX";
    case PathClass::kPxb: return "PXB";
    case PathClass::kPhb: return "PHB";
    case PathClass::kNode: return "NODE";
    case PathClass::kSys: return "SYS";
    default: return "?";
  }
}

bool parse_path_class(const std::string& s, PathClass* out, int* nvlinks) {
  static const std::pair<const char*, PathClass> kNames[] = {
      {"X", PathClass::kSelf}, {"PIX", PathClass::kPix},   {"PXB", PathClass::kPxb},
      {"PHB", PathClass::kPhb}, {"NODE", PathClass::kNode}, {"SYS", PathClass::kSys}};
  *nvlinks = 0;
  for (const auto& [name, cls] : kNames)
    if (s == name) return *out = cls, true;
  if (s == "SOC") return *out = PathClass::kSys, true;  // drivers before 384 said SOC for SYS
  if (s.size() > 2 && s[0] == 'N' && s[1] == 'V' &&
      std::all_of(s.begin() + 2, s.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    *out = PathClass::kNvLink;
    *nvlinks = std::atoi(s.c_str() + 2);
    return *nvlinks > 0;
  }
  return false;
}

double nvlink_bandwidth_gbs(int sm) {
  if (sm <= 0) return 20.0;  // unknown: V100/A100 value
  if (sm < 70) return 18.0;
  if (sm < 86) return 20.0;
  if (sm < 90) return 12.0;
  if (sm < 100) return 20.6;
  return 40.1;
}

double pci_bandwidth_gbs(double gts, int width) {
  if (gts <= 0 || width <= 0) return 0;
  // NCCL's kvDictPciGen codes (x100 Mb/s per lane after encoding): 2.5->15, 5->30, 8->60...
  double code = gts <= 2.5 ? 15 : gts <= 5 ? 30 : gts * 7.5;
  return width * code / 80.0;
}

std::string normalize_bus_id(const std::string& s) {
  unsigned dom = 0, bus = 0, dev = 0, fn = 0;
  char tail = 0;
  int n = std::sscanf(s.c_str(), "%x:%x:%x.%x%c", &dom, &bus, &dev, &fn, &tail);
  if (n != 4) {
    dom = fn = 0;
    n = std::sscanf(s.c_str(), "%x:%x.%x%c", &bus, &dev, &fn, &tail);
    if (n != 3) {
      fn = 0;
      if (std::sscanf(s.c_str(), "%x:%x:%x%c", &dom, &bus, &dev, &tail) != 3) return "";
    }
  }
  if (bus > 0xff || dev > 0x1f || fn > 7) return "";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%04x:%02x:%02x.%x", dom, bus, dev, fn);
  return buf;
}

unsigned long long bus_id_key(const std::string& id) {
  unsigned dom = 0, bus = 0, dev = 0, fn = 0;
  std::sscanf(id.c_str(), "%x:%x:%x.%x", &dom, &bus, &dev, &fn);
  return (static_cast<unsigned long long>(dom) << 16) | (bus << 8) | (dev << 3) | fn;
}

int System::add_device(Device d) {
  devices.push_back(std::move(d));
  return static_cast<int>(devices.size()) - 1;
}

void System::add_link(int a, int b, LinkKind kind, int count, double bandwidth_gbs) {
  links.push_back(Link{a, b, kind, count, bandwidth_gbs});
}

int System::cpu_count() const {
  return static_cast<int>(std::count_if(devices.begin(), devices.end(),
                                        [](const Device& d) { return d.kind == DeviceKind::kCpu; }));
}

int System::cpu_of(int d) const {
  for (int guard = 0; d >= 0 && guard < 64; ++guard) {
    if (devices[d].kind == DeviceKind::kCpu) return d;
    d = devices[d].parent;
  }
  return -1;
}

int System::gpu_numa_node(int i) const {
  const Device& g = gpu(i);
  if (g.numa_node >= 0) return g.numa_node;
  int c = cpu_of(gpus[i]);
  return c >= 0 ? devices[c].numa_node : -1;
}

namespace {

// Chain of device indices from d up to its root (d included).
std::vector<int> ancestors(const System& s, int d) {
  std::vector<int> chain;
  while (d >= 0 && chain.size() < 64) {
    chain.push_back(d);
    d = s.devices[d].parent;
  }
  return chain;
}

// PCIe bandwidth available to device d: its own link, else the first known one above it.
double pci_leg_gbs(const System& s, int d) {
  for (int x : ancestors(s, d)) {
    double bw = pci_bandwidth_gbs(s.devices[x].pci_speed_gts, s.devices[x].pci_width);
    if (bw > 0) return bw;
  }
  return kDefaultPciGbs;
}

int nvlinks_between(const System& s, int da, int db) {
  int direct = 0;
  std::map<int, int> switch_links_a, switch_links_b;
  for (const Link& l : s.links) {
    if (l.kind != LinkKind::kNvLink) continue;
    if ((l.a == da && l.b == db) || (l.a == db && l.b == da)) direct += l.count;
    for (auto [self, other] : {std::pair{l.a, l.b}, std::pair{l.b, l.a}}) {
      if (s.devices[other].kind != DeviceKind::kNvSwitch) continue;
      if (self == da) switch_links_a[other] += l.count;
      if (self == db) switch_links_b[other] += l.count;
    }
  }
  // Traffic spreads over every NVSwitch both GPUs reach (DGX A100: 6 switches x 2 links = NV12).
  int via_switch = 0;
  for (auto [sw, n] : switch_links_a)
    if (switch_links_b.count(sw)) via_switch += std::min(n, switch_links_b[sw]);
  return std::max(direct, via_switch);
}

// Path class from the device tree: the lowest common ancestor and the bridges on the way.
PathClass tree_path(const System& s, int da, int db) {
  std::vector<int> ca = ancestors(s, da), cb = ancestors(s, db);
  if (ca.size() < 2 || cb.size() < 2) return PathClass::kUnknown;
  int lca = -1;
  size_t ia = 0, ib = 0;
  for (ia = 1; ia < ca.size() && lca < 0; ++ia)
    for (ib = 1; ib < cb.size(); ++ib)
      if (ca[ia] == cb[ib]) {
        lca = ca[ia];
        break;
      }
  if (lca < 0) {
    bool both_cpu = s.devices[ca.back()].kind == DeviceKind::kCpu &&
                    s.devices[cb.back()].kind == DeviceKind::kCpu;
    return both_cpu ? PathClass::kSys : PathClass::kUnknown;
  }
  --ia;  // ca[ia] == cb[ib] == lca
  const Device& top = s.devices[lca];
  if (top.kind == DeviceKind::kCpu) {
    // Below the same CPU: NODE when they hang from different host bridges we know about.
    int ha = ca[ia - 1], hb = cb[ib - 1];
    if (ha != hb && s.devices[ha].host_bridge && s.devices[hb].host_bridge) return PathClass::kNode;
    return PathClass::kPhb;
  }
  if (top.host_bridge) return PathClass::kPhb;
  // Count switches on the path, the common one included once (endpoints excluded).
  int bridges = 0;
  for (size_t i = 1; i <= ia; ++i) bridges += s.devices[ca[i]].kind == DeviceKind::kPciSwitch;
  for (size_t i = 1; i < ib; ++i) bridges += s.devices[cb[i]].kind == DeviceKind::kPciSwitch;
  return bridges <= 1 ? PathClass::kPix : PathClass::kPxb;
}

void derive_pair(const System& s, int a, int b, PairInfo* out) {
  int da = s.gpus[a], db = s.gpus[b];
  const Device& ga = s.devices[da];
  const Device& gb = s.devices[db];
  auto find = [&](int x, int y) -> const PairObservation* {
    auto it = s.observed.find({x, y});
    return it == s.observed.end() ? nullptr : &it->second;
  };
  const PairObservation* ab = find(a, b);
  const PairObservation* ba = find(b, a);
  static const PairObservation kNone;
  if (!ab) ab = ba ? ba : &kNone;
  if (!ba) ba = ab;

  // Path class: a stated one wins (the machine told us), else the tree and the links.
  PathClass stated = std::min(ab->path, ba->path);
  if (stated != PathClass::kUnknown) {
    out->path = stated;
    out->nvlinks = std::max(ab->nvlinks, ba->nvlinks);
  } else if (int nv = nvlinks_between(s, da, db); nv > 0) {
    out->path = PathClass::kNvLink;
    out->nvlinks = nv;
  } else {
    out->path = tree_path(s, da, db);
  }

  // Peer access: a runtime's answer or a file's statement, else NCCL's default rule (PXB).
  P2pStatus st = ab->p2p_status != P2pStatus::kOk && ab->p2p_status != P2pStatus::kUnknown
                     ? ab->p2p_status
                     : ba->p2p_status;
  bool status_known = ab->p2p_status != P2pStatus::kUnknown &&
                      ab->p2p_status != P2pStatus::kStatusUnknown;
  if (ab->can_access >= 0 || ba->can_access >= 0) {
    int x = ab->can_access >= 0 ? ab->can_access : ba->can_access;
    int y = ba->can_access >= 0 ? ba->can_access : ab->can_access;
    out->p2p = x == 1 && y == 1;
    out->p2p_source = "reported";
    if (!out->p2p) {
      out->reason = status_reason(st);
      if (out->reason.empty())
        out->reason = format("the CUDA runtime reports GPU %d cannot access GPU %d", x ? b : a,
                             x ? a : b);
    }
  } else if (status_known) {
    out->p2p = st == P2pStatus::kOk;
    out->p2p_source = "reported";
    if (!out->p2p) out->reason = status_reason(st);
  } else {
    PathClass p = out->path;
    out->p2p = p == PathClass::kNvLink || p == PathClass::kPix || p == PathClass::kPxb;
    out->p2p_source = "inferred";
    if (!out->p2p) out->reason = path_reason(p);
  }

  // Bandwidth of the path actually used (research/nccl.md 1.4 and 1.6).
  double leg = std::min(pci_leg_gbs(s, da), pci_leg_gbs(s, db));
  if (out->p2p && out->path == PathClass::kNvLink) {
    int sm = ga.sm && gb.sm ? std::min(ga.sm, gb.sm) : std::max(ga.sm, gb.sm);
    out->bandwidth_gbs = out->nvlinks * nvlink_bandwidth_gbs(sm);
  } else {
    out->bandwidth_gbs = out->p2p ? leg : leg * kHostStagingFactor;
    if (out->path == PathClass::kSys) {
      int ca = s.cpu_of(da), cb = s.cpu_of(db);
      double sys = 10;
      if (ca >= 0 && cb >= 0)
        sys = std::min(inter_cpu_bandwidth_gbs(s.devices[ca]), inter_cpu_bandwidth_gbs(s.devices[cb]));
      out->bandwidth_gbs = std::min(out->bandwidth_gbs, sys);
    }
  }
  double m = std::min(ab->measured_gbs > 0 ? ab->measured_gbs : ba->measured_gbs,
                      ba->measured_gbs > 0 ? ba->measured_gbs : ab->measured_gbs);
  out->measured_gbs = m;
}

}  // namespace

Status System::finalize() {
  const int nd = static_cast<int>(devices.size());
  int ngpu = 0;
  for (const Device& d : devices) ngpu += d.kind == DeviceKind::kGpu;
  gpus.assign(ngpu, -1);
  for (int i = 0; i < nd; ++i) {
    const Device& d = devices[i];
    if (d.parent < -1 || d.parent >= nd || d.parent == i)
      return error(ACCORD_ERR_INVALID_ARGUMENT, "%s: device %d (%s) has parent %d, out of range",
                   source.c_str(), i, d.name.c_str(), d.parent);
    if (d.kind != DeviceKind::kGpu) continue;
    if (d.gpu_index < 0 || d.gpu_index >= ngpu || gpus[d.gpu_index] >= 0)
      return error(ACCORD_ERR_INVALID_ARGUMENT,
                   "%s: GPU index %d of device %d is duplicated or outside 0..%d", source.c_str(),
                   d.gpu_index, i, ngpu - 1);
    gpus[d.gpu_index] = i;
  }
  for (const Link& l : links)
    if (l.a < 0 || l.a >= nd || l.b < 0 || l.b >= nd || l.a == l.b)
      return error(ACCORD_ERR_INVALID_ARGUMENT, "%s: link %d-%d names no device", source.c_str(),
                   l.a, l.b);
  for (const auto& [key, obs] : observed)
    if (key.first < 0 || key.first >= ngpu || key.second < 0 || key.second >= ngpu)
      return error(ACCORD_ERR_INVALID_ARGUMENT, "%s: observation about GPU %d/%d, but there are %d",
                   source.c_str(), key.first, key.second, ngpu);
  // Cycles in parent pointers would make every walk above loop.
  for (int i = 0; i < nd; ++i)
    if (ancestors(*this, i).size() >= 64)
      return error(ACCORD_ERR_INVALID_ARGUMENT, "%s: device %d has a parent cycle", source.c_str(),
                   i);
  pairs.assign(static_cast<size_t>(ngpu) * ngpu, PairInfo{});
  for (int a = 0; a < ngpu; ++a) {
    PairInfo& self = pairs[a * ngpu + a];
    self.path = PathClass::kSelf;
    self.p2p = true;
    self.bandwidth_gbs = 5000;  // NCCL LOC_BW
    for (int b = a + 1; b < ngpu; ++b) {
      derive_pair(*this, a, b, &pairs[a * ngpu + b]);
      pairs[b * ngpu + a] = pairs[a * ngpu + b];
    }
  }
  return Status();
}

}  // namespace accord::topo
