// Orchestrates live detection (detect.hpp): CPUs and NUMA nodes (hwloc, else sysfs), GPUs (CUDA,
// else NVML), their place in the PCI tree (sysfs), NVLinks and P2P status (NVML), NICs (sysfs),
// then the settings-driven file load and dump.
#include "topology/detect.hpp"

#include <dirent.h>
#include <limits.h>
#include <stdlib.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <map>

#include "core/log.hpp"
#include "topology/detect_sources.hpp"
#include "topology/formats.hpp"

namespace accord::topo {
namespace {

std::string read_line(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

// Vendor, family and model of the first CPU, and the architecture, for the inter-socket constant.
void cpu_identity(System* s) {
  std::string vendor;
  int family = -1, model = -1;
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line) && (vendor.empty() || family < 0 || model < 0);) {
    size_t colon = line.find(':');
    if (colon == std::string::npos || colon + 2 > line.size()) continue;
    std::string key = line.substr(0, line.find_last_not_of(" \t", colon - 1) + 1);
    std::string value = line.substr(colon + 2);
    if (key == "vendor_id") vendor = value;
    if (key == "cpu family") family = std::atoi(value.c_str());
    if (key == "model") model = std::atoi(value.c_str());
  }
  struct utsname u;
  std::string arch = uname(&u) == 0 ? u.machine : "";
  if (arch == "aarch64") arch = "arm64";
  for (Device& d : s->devices)
    if (d.kind == DeviceKind::kCpu) {
      d.cpu_arch = arch;
      d.cpu_vendor = vendor;
      d.cpu_family = family;
      d.cpu_model = model;
    }
}

int cpu_for_numa(const System& s, int numa) {
  int first = -1;
  for (size_t i = 0; i < s.devices.size(); ++i) {
    if (s.devices[i].kind != DeviceKind::kCpu) continue;
    if (first < 0) first = static_cast<int>(i);
    if (s.devices[i].numa_node == numa) return static_cast<int>(i);
  }
  return first;
}

// Places a PCI device: under its switches and host bridge when sysfs knows them, else under the
// CPU of its NUMA node.
void place(System* s, Device* d) {
  int numa = -1;
  int parent = probe::sysfs_pci_parent(s, d->pci_bus_id, &numa, &d->pci_speed_gts, &d->pci_width);
  if (numa >= 0) d->numa_node = numa;
  d->parent = parent >= 0 ? parent : cpu_for_numa(*s, d->numa_node);
}

// Network devices that sit on PCI: InfiniBand HCAs, then Ethernet ports without an HCA.
void add_nics(System* s) {
  std::map<std::string, std::string> by_bus;  // bus id -> name
  for (const char* dir : {"/sys/class/infiniband", "/sys/class/net"}) {
    DIR* d = opendir(dir);
    if (!d) continue;
    while (dirent* e = readdir(d)) {
      if (e->d_name[0] == '.') continue;
      char real[PATH_MAX];
      std::string link = std::string(dir) + "/" + e->d_name + "/device";
      if (!realpath(link.c_str(), real)) continue;
      std::string path = real;
      std::string bus = normalize_bus_id(path.substr(path.rfind('/') + 1));
      if (!bus.empty() && !by_bus.count(bus)) by_bus[bus] = e->d_name;
    }
    closedir(d);
  }
  for (const auto& [bus, name] : by_bus) {
    Device nic;
    nic.kind = DeviceKind::kNic;
    nic.name = name;
    nic.pci_bus_id = bus;
    nic.pci_class = read_line("/sys/bus/pci/devices/" + bus + "/class").substr(0, 8);
    place(s, &nic);
    s->add_device(nic);
  }
}

}  // namespace

Status probe_system(System* out) {
  *out = System();
  char host[256] = "this machine";
  gethostname(host, sizeof host - 1);
  out->source = std::string("this machine (host ") + host + ")";
  System& s = *out;
  if (!probe::hwloc_cpus(&s, &s.notes) && !probe::sysfs_cpus(&s, &s.notes)) {
    Device cpu;
    cpu.kind = DeviceKind::kCpu;
    cpu.name = "CPU";
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    cpu.cpu_affinity = n > 1 ? format("0-%ld", n - 1) : "0";
    s.add_device(cpu);
    s.notes.push_back("CPUs: neither hwloc nor sysfs NUMA information; one CPU assumed");
  }
  cpu_identity(&s);

  std::vector<probe::GpuFound> gpus;
  std::vector<probe::NvlinkFound> nvlinks;
  probe::cuda(&gpus, &s.observed, &s.notes);
  probe::nvml(&gpus, &nvlinks, &s.observed, &s.notes);
  std::map<std::string, int> by_bus;
  for (size_t i = 0; i < gpus.size(); ++i) {
    Device g;
    g.gpu_index = static_cast<int>(i);
    g.name = gpus[i].name;
    g.pci_bus_id = gpus[i].bus_id;
    g.sm = gpus[i].sm;
    g.pci_class = read_line("/sys/bus/pci/devices/" + g.pci_bus_id + "/class").substr(0, 8);
    place(&s, &g);
    by_bus[g.pci_bus_id] = s.add_device(g);
  }
  int nvswitch = -1;
  for (const probe::NvlinkFound& l : nvlinks) {
    int a = -1;
    for (size_t d = 0; d < s.devices.size(); ++d)
      if (s.devices[d].kind == DeviceKind::kGpu && s.devices[d].gpu_index == l.gpu) a = static_cast<int>(d);
    int b = -1;
    if (l.remote_is_gpu && by_bus.count(l.remote)) {
      b = by_bus[l.remote];
    } else {
      if (nvswitch < 0) {
        Device sw;
        sw.kind = DeviceKind::kNvSwitch;
        sw.name = "NVSwitch";
        nvswitch = s.add_device(sw);
      }
      b = nvswitch;
    }
    if (a >= 0 && b >= 0 && (b == nvswitch || a < b)) s.add_link(a, b, LinkKind::kNvLink, l.count);
  }
  add_nics(&s);
  for (const std::string& note : s.notes) LOG_INFO(kTopo, "%s", note.c_str());
  return s.finalize();
}

Status detect_system(const Settings& settings, System* out) {
  if (!settings.topo_file.empty()) {
    LOG_INFO(kTopo, "loading the topology from ACCORD_TOPO_FILE=%s", settings.topo_file.c_str());
    Status st = load_system_file(settings.topo_file, out);
    if (!st.ok()) return st.prefix("ACCORD_TOPO_FILE: ");
  } else {
    ACCORD_TRY(probe_system(out));
  }
  LOG_INFO(kTopo, "%d GPUs, %d CPU/NUMA nodes (%s)", out->gpu_count(), out->cpu_count(),
           out->source.c_str());
  if (!settings.topo_dump_file.empty()) {
    const std::string& f = settings.topo_dump_file;
    bool xml = f.size() > 4 && f.compare(f.size() - 4, 4, ".xml") == 0;
    Status st = write_file(f, xml ? write_nccl_xml(*out) : write_accord_json(*out, nullptr));
    if (!st.ok()) return st.prefix("ACCORD_TOPO_DUMP_FILE: ");
  }
  return Status();
}

Status detect_system(System* out) {
  Settings settings;
  ACCORD_TRY(load_settings(&settings));
  return detect_system(settings, out);
}

}  // namespace accord::topo
