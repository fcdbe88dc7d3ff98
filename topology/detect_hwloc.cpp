// hwloc probe: NUMA nodes with their CPU sets and sockets (packages). Built only with hwloc; the
// PCI placement uses sysfs in both builds (detect_sysfs.cpp), since hwloc reads the same files.
#include "accord_config.h"
#include "topology/detect_sources.hpp"

#if ACCORD_HAVE_HWLOC
#include <hwloc.h>
#endif

namespace accord::topo::probe {

#if ACCORD_HAVE_HWLOC
bool hwloc_cpus(System* s, std::vector<std::string>* notes) {
  hwloc_topology_t t;
  if (hwloc_topology_init(&t) != 0) return false;
  if (hwloc_topology_load(t) != 0) {
    hwloc_topology_destroy(t);
    notes->push_back("hwloc: could not load the topology; using sysfs");
    return false;
  }
  int n = hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_NUMANODE);
  int added = 0;
  for (int i = 0; i < n; ++i) {
    hwloc_obj_t node = hwloc_get_obj_by_type(t, HWLOC_OBJ_NUMANODE, i);
    if (!node || !node->cpuset || hwloc_bitmap_iszero(node->cpuset)) continue;
    Device cpu;
    cpu.kind = DeviceKind::kCpu;
    cpu.numa_node = static_cast<int>(node->os_index);
    cpu.name = "NUMA node " + std::to_string(cpu.numa_node);
    char buf[4096];
    hwloc_bitmap_list_snprintf(buf, sizeof buf, node->cpuset);
    cpu.cpu_affinity = buf;
    hwloc_obj_t pkg = hwloc_get_ancestor_obj_by_type(t, HWLOC_OBJ_PACKAGE, node);
    if (pkg) cpu.socket = static_cast<int>(pkg->os_index);
    s->add_device(cpu);
    ++added;
  }
  int packages = hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_PACKAGE);
  hwloc_topology_destroy(t);
  notes->push_back(format("CPUs: %d NUMA node(s) on %d socket(s) from hwloc", added, packages));
  return added > 0;
}
#else
bool hwloc_cpus(System*, std::vector<std::string>*) { return false; }
#endif

}  // namespace accord::topo::probe
