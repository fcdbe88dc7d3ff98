// CUDA runtime probe: GPUs in CUDA order with their bus ids, and for every ordered pair whether
// cudaDeviceCanAccessPeer allows peer access and the P2P performance rank. Built only with CUDA.
// A machine without a driver reports an error from cudaGetDeviceCount; that means zero GPUs.
#include "accord_config.h"
#include "topology/detect_sources.hpp"

#if ACCORD_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace accord::topo::probe {

#if ACCORD_HAVE_CUDA
void cuda(std::vector<GpuFound>* gpus, std::map<std::pair<int, int>, PairObservation>* obs,
          std::vector<std::string>* notes) {
  int n = 0;
  cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess) {
    notes->push_back(format("CUDA: %s (0 GPUs)", cudaGetErrorString(err)));
    cudaGetLastError();  // clear the sticky-free error so later callers start clean
    return;
  }
  for (int i = 0; i < n; ++i) {
    GpuFound g;
    cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, i) == cudaSuccess) {
      g.name = prop.name;
      g.sm = prop.major * 10 + prop.minor;
    }
    char bus[32] = "";
    if (cudaDeviceGetPCIBusId(bus, sizeof bus, i) == cudaSuccess) g.bus_id = normalize_bus_id(bus);
    gpus->push_back(g);
  }
  for (int a = 0; a < n; ++a)
    for (int b = 0; b < n; ++b) {
      if (a == b) continue;
      int ok = 0, rank = 0;
      PairObservation& o = (*obs)[{a, b}];
      if (cudaDeviceCanAccessPeer(&ok, a, b) == cudaSuccess) o.can_access = ok;
      if (cudaDeviceGetP2PAttribute(&rank, cudaDevP2PAttrPerformanceRank, a, b) == cudaSuccess)
        o.perf_rank = rank;
    }
  notes->push_back(format("CUDA: %d GPU(s)", n));
}
#else
void cuda(std::vector<GpuFound>*, std::map<std::pair<int, int>, PairObservation>*,
          std::vector<std::string>* notes) {
  notes->push_back("CUDA: not built in (-Dcuda=disabled or no toolkit)");
}
#endif

}  // namespace accord::topo::probe
