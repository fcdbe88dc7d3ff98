// Live detection of this machine's topology. Every source is optional: the CUDA runtime (GPUs,
// bus ids, cudaDeviceCanAccessPeer for every ordered pair, P2P attributes) when built with CUDA;
// NVML, loaded at run time (NVLink state and peers, P2P status); hwloc for NUMA nodes and sockets
// when built with it; sysfs for the PCI tree and as the fallback for everything else. A machine
// with no GPU or no driver yields zero GPUs plus its CPUs and NUMA nodes, and no error.
#pragma once

#include "core/settings.hpp"
#include "core/status.hpp"
#include "topology/system.hpp"

namespace accord::topo {

// What other layers call: loads ACCORD_TOPO_FILE instead of probing when it is set, and writes
// what it found to ACCORD_TOPO_DUMP_FILE when that is set (JSON, or NCCL XML for a .xml name).
Status detect_system(System* out);
Status detect_system(const Settings& settings, System* out);

// Probes this machine, ignoring the settings.
Status probe_system(System* out);

}  // namespace accord::topo
