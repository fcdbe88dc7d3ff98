// Linux sysfs probes: NUMA nodes and their CPUs, and where a PCI device sits (host bridge and
// PCIe switches above it). sysfs shows each switch as an upstream port with one downstream port
// per slot; like NCCL we keep one node per switch (the upstream port) and fold the root port into
// its host bridge, so that "one switch between two GPUs" reads as PIX.
#include <dirent.h>
#include <limits.h>
#include <stdlib.h>

#include <algorithm>
#include <fstream>
#include <sstream>

#include "topology/detect_sources.hpp"

namespace accord::topo::probe {
namespace {

std::string read_line(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

int find_or_add(System* s, const Device& d, bool by_name) {
  for (size_t i = 0; i < s->devices.size(); ++i) {
    const Device& x = s->devices[i];
    if (x.kind != d.kind) continue;
    if (by_name ? x.name == d.name : x.pci_bus_id == d.pci_bus_id) return static_cast<int>(i);
  }
  return s->add_device(d);
}

}  // namespace

bool sysfs_cpus(System* s, std::vector<std::string>* notes) {
  DIR* dir = opendir("/sys/devices/system/node");
  if (!dir) return false;
  std::vector<int> nodes;
  while (dirent* e = readdir(dir)) {
    int id;
    char tail;
    if (std::sscanf(e->d_name, "node%d%c", &id, &tail) == 1) nodes.push_back(id);
  }
  closedir(dir);
  std::sort(nodes.begin(), nodes.end());
  for (int id : nodes) {
    Device cpu;
    cpu.kind = DeviceKind::kCpu;
    cpu.numa_node = id;
    cpu.name = "NUMA node " + std::to_string(id);
    cpu.cpu_affinity = read_line(format("/sys/devices/system/node/node%d/cpulist", id));
    if (cpu.cpu_affinity.empty()) continue;  // memory-only node (CXL, HBM)
    int first = std::atoi(cpu.cpu_affinity.c_str());
    std::string pkg = read_line(format("/sys/devices/system/cpu/cpu%d/topology/physical_package_id", first));
    if (!pkg.empty()) cpu.socket = std::atoi(pkg.c_str());
    s->add_device(cpu);
  }
  notes->push_back(format("CPUs: %zu NUMA node(s) from sysfs", nodes.size()));
  return !nodes.empty();
}

int sysfs_pci_parent(System* s, const std::string& bus_id, int* numa_node, double* gts, int* width) {
  std::string dev = "/sys/bus/pci/devices/" + bus_id;
  char real[PATH_MAX];
  if (bus_id.empty() || !realpath(dev.c_str(), real)) return -1;
  std::string numa = read_line(dev + "/numa_node");
  *numa_node = numa.empty() ? -1 : std::atoi(numa.c_str());
  *gts = std::atof(read_line(dev + "/max_link_speed").c_str());
  *width = std::atoi(read_line(dev + "/max_link_width").c_str());
  std::vector<std::string> parts;
  std::stringstream in(real);
  for (std::string p; std::getline(in, p, '/');) parts.push_back(p);
  size_t host = 0;
  while (host < parts.size() && parts[host].rfind("pci", 0) != 0) ++host;
  if (host >= parts.size()) return -1;
  // The CPU of the device's NUMA node (or the first CPU) owns the host bridge.
  int cpu = -1;
  for (size_t i = 0; i < s->devices.size(); ++i)
    if (s->devices[i].kind == DeviceKind::kCpu && (cpu < 0 || s->devices[i].numa_node == *numa_node))
      cpu = static_cast<int>(i);
  Device hb;
  hb.kind = DeviceKind::kPciSwitch;
  hb.host_bridge = true;
  hb.name = "host bridge " + parts[host];
  hb.parent = cpu;
  hb.numa_node = *numa_node;
  int parent = find_or_add(s, hb, true);
  // parts[host+1] is the root port; then (upstream, downstream) per switch; last is the device.
  for (size_t i = host + 2; i + 1 < parts.size(); i += 2) {
    Device sw;
    sw.kind = DeviceKind::kPciSwitch;
    sw.pci_bus_id = normalize_bus_id(parts[i]);
    if (sw.pci_bus_id.empty()) break;
    sw.name = "PCIe switch " + sw.pci_bus_id;
    sw.parent = parent;
    sw.numa_node = *numa_node;
    sw.pci_class = read_line("/sys/bus/pci/devices/" + sw.pci_bus_id + "/class").substr(0, 8);
    sw.pci_speed_gts = std::atof(read_line("/sys/bus/pci/devices/" + sw.pci_bus_id + "/max_link_speed").c_str());
    sw.pci_width = std::atoi(read_line("/sys/bus/pci/devices/" + sw.pci_bus_id + "/max_link_width").c_str());
    parent = find_or_add(s, sw, false);
  }
  return parent;
}

}  // namespace accord::topo::probe
