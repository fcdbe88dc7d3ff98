// Internal seams between detect.cpp and the per-source probes. Each probe adds what it knows and
// a note saying what it did; none of them fails the detection.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "topology/system.hpp"

namespace accord::topo::probe {

struct GpuFound {
  std::string name;
  std::string bus_id;  // normalized
  int sm = 0;
};

struct NvlinkFound {
  int gpu = -1;          // index into the GPU list
  std::string remote;    // normalized bus id of the far end
  bool remote_is_gpu = false;
  int count = 0;
};

// CUDA runtime: GPUs in CUDA order and can_access / perf_rank per ordered pair.
void cuda(std::vector<GpuFound>* gpus, std::map<std::pair<int, int>, PairObservation>* obs,
          std::vector<std::string>* notes);
// NVML: fills GPUs if CUDA found none, NVLinks, and P2P status per ordered pair.
void nvml(std::vector<GpuFound>* gpus, std::vector<NvlinkFound>* links,
          std::map<std::pair<int, int>, PairObservation>* obs, std::vector<std::string>* notes);
// hwloc: one CPU device per NUMA node with its cpulist and socket. False when unavailable.
bool hwloc_cpus(System* s, std::vector<std::string>* notes);
// sysfs: the same from /sys/devices/system/node.
bool sysfs_cpus(System* s, std::vector<std::string>* notes);
// sysfs: places a PCI device in the tree (host bridge, switches) and returns its parent index.
int sysfs_pci_parent(System* s, const std::string& bus_id, int* numa_node, double* gts, int* width);

}  // namespace accord::topo::probe
