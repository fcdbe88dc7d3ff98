// The plain picture of one machine that every other layer consumes: devices (GPUs, CPU / NUMA
// nodes, PCI switches and host bridges, NVSwitches, NICs), the links between them, what the
// sources said about each GPU pair (nvidia-smi, CUDA, NVML, log files), and the facts derived from
// all of that per GPU pair: path class in nvidia-smi's legend, whether peer access works (and why
// not), and a bandwidth estimate. Detection and the file readers fill a System; finalize() derives
// the pair facts; search.hpp turns them into rings and trees.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/status.hpp"

namespace accord::topo {

enum class DeviceKind { kGpu, kCpu, kPciSwitch, kNvSwitch, kNic };

// A link's kind decides its bandwidth constant (research/nccl.md 1.4).
enum class LinkKind { kPci, kNvLink, kCpuInterconnect };

// nvidia-smi topo -m legend, ordered from best to worst so that `<` means "better".
enum class PathClass { kSelf, kNvLink, kPix, kPxb, kPhb, kNode, kSys, kUnknown };

// nvidia-smi topo -p2p / nvmlDeviceGetP2PStatus answers.
enum class P2pStatus {
  kUnknown,               // nobody said
  kOk,                    // OK
  kChipsetNotSupported,   // CNS
  kGpuNotSupported,       // GNS
  kTopologyNotSupported,  // TNS
  kDisabledByRegkey,      // DR (NVML only)
  kNotSupported,          // NS
  kStatusUnknown,         // U: the driver itself does not know
};

struct Device {
  DeviceKind kind = DeviceKind::kGpu;
  int gpu_index = -1;        // GPUs: CUDA ordinal, 0..gpu_count()-1
  int parent = -1;           // index in System::devices of the PCI parent (switch, host bridge, CPU)
  std::string name;          // "NVIDIA A100-SXM4-80GB", "mlx5_0", "NUMA node 0"
  std::string pci_bus_id;    // "0000:07:00.0" (lower case) or empty
  std::string pci_class;     // "0x030200" or empty
  int numa_node = -1;        // CPUs: their NUMA id; others: the node they hang from (-1 unknown)
  int socket = -1;           // CPUs: physical package id when known
  std::string cpu_affinity;  // cpulist, "0-11,24-35"
  int sm = 0;                // GPUs: compute capability x 10 (80 = sm_80), 0 unknown
  double pci_speed_gts = 0;  // PCIe link rate per lane in GT/s, 0 unknown
  int pci_width = 0;         // PCIe lanes, 0 unknown
  bool host_bridge = false;  // PCI switches: this is a CPU root complex, not a switch
  std::string cpu_arch;      // CPUs: x86_64, arm64, ppc64
  std::string cpu_vendor;    // CPUs: GenuineIntel, AuthenticAMD
  int cpu_family = -1, cpu_model = -1;
  double nic_speed_gbs = 0;  // NICs: port speed in GB/s, 0 unknown
  // NICs described by nvidia-smi topo -m: the stated path class to each GPU (by GPU index).
  std::vector<PathClass> gpu_paths;
};

struct Link {
  int a = -1, b = -1;  // indices in System::devices; links are symmetric
  LinkKind kind = LinkKind::kPci;
  int count = 1;       // NVLinks bonded together (PCI links: 1)
  double bandwidth_gbs = 0;  // one direction; 0 = derive from the kind and the endpoints
};

// What some source said about the ordered GPU pair (a -> b). Nothing here is derived.
struct PairObservation {
  PathClass path = PathClass::kUnknown;  // nvidia-smi topo -m cell
  int nvlinks = 0;                       // the # of NV#
  int can_access = -1;                   // cudaDeviceCanAccessPeer and friends: -1 unknown, 0, 1
  P2pStatus p2p_status = P2pStatus::kUnknown;  // nvidia-smi topo -p2p r/w/rw/p or NVML
  int perf_rank = -1;                    // cudaDevP2PAttrPerformanceRank, -1 unknown
  double measured_gbs = 0;               // unidirectional copy with peer access enabled
  double measured_bidir_gbs = 0;         // bidirectional, peer access enabled
  double measured_staged_gbs = 0;        // unidirectional, peer access disabled
  bool operator==(const PairObservation&) const = default;
};

// Derived per unordered GPU pair (stored for both orders).
struct PairInfo {
  PathClass path = PathClass::kUnknown;
  int nvlinks = 0;
  bool p2p = false;
  std::string reason;         // why not, when !p2p ("path crosses the CPU interconnect (SYS)")
  std::string p2p_source;     // "reported" (a runtime or the file said) or "inferred" (from the path)
  double bandwidth_gbs = 0;   // estimated one-direction bandwidth of the path used
  double measured_gbs = 0;    // from the file or a probe, 0 when unknown
};

struct System {
  std::string source;  // file name or "detected on HOST"
  std::vector<std::string> notes;  // what each detection source said ("CUDA: no driver, 0 GPUs")
  std::vector<Device> devices;
  std::vector<Link> links;
  std::map<std::pair<int, int>, PairObservation> observed;  // by (gpu a, gpu b)

  // ---- derived by finalize() ----
  std::vector<int> gpus;        // device index of GPU i
  std::vector<PairInfo> pairs;  // gpu_count()^2, row-major

  int add_device(Device d);
  void add_link(int a, int b, LinkKind kind, int count = 1, double bandwidth_gbs = 0);
  PairObservation& observe(int a, int b) { return observed[{a, b}]; }

  // Checks the model (GPU indices 0..n-1, parents in range) and derives gpus and pairs.
  Status finalize();

  int gpu_count() const { return static_cast<int>(gpus.size()); }
  const Device& gpu(int i) const { return devices[gpus[i]]; }
  const PairInfo& pair(int a, int b) const { return pairs[a * gpu_count() + b]; }
  bool p2p(int a, int b) const { return pair(a, b).p2p; }
  const std::string& p2p_reason(int a, int b) const { return pair(a, b).reason; }
  PathClass path(int a, int b) const { return pair(a, b).path; }
  double bandwidth_gbs(int a, int b) const { return pair(a, b).bandwidth_gbs; }
  int cpu_count() const;
  // NUMA node of GPU i: its own field, else that of the CPU it hangs from; -1 unknown.
  int gpu_numa_node(int i) const;
  // Device index of the CPU above device d, or -1.
  int cpu_of(int d) const;
};

// ---- names and constants ----
const char* device_kind_name(DeviceKind k);
bool parse_device_kind(const std::string& s, DeviceKind* out);
const char* link_kind_name(LinkKind k);
bool parse_link_kind(const std::string& s, LinkKind* out);
// "NV2", "PIX", "X", "?" (unknown).
std::string path_class_name(PathClass p, int nvlinks = 0);
// Parses a topo -m cell: X, NV#, PIX, PXB, PHB, NODE, SYS (case as printed).
bool parse_path_class(const std::string& s, PathClass* out, int* nvlinks);
const char* p2p_status_name(P2pStatus s);  // "OK", "CNS", ...; "" for kUnknown
bool parse_p2p_status(const std::string& s, P2pStatus* out);

// GB/s of one NVLink for a GPU of compute capability sm (NCCL's per-generation constants).
double nvlink_bandwidth_gbs(int sm);
// GB/s of a PCIe link of `width` lanes at `gts` GT/s per lane (NCCL: width * code / 80).
double pci_bandwidth_gbs(double gts, int width);
// Host staging (no peer access) copies through pinned host memory: each byte crosses PCIe twice
// and host memory once. The fixtures' P2P-disabled copies reach 0.48-0.85 of one PCIe link
// (RTX 2080 Ti Gen3 5.7/12, H100 PCIe Gen5 26/48, A100 Gen4 12-20/24); we charge 0.5.
inline constexpr double kHostStagingFactor = 0.5;
inline constexpr double kDefaultPciGbs = 12.0;  // NCCL PCI_BW, "Gen3 x16", when nothing says
inline constexpr int kMaxNvLinksPerGpu = 18;    // H100; more per GPU means an NVSwitch

// "0000:07:00.0" from "7:0.0", "00000000:07:00.0", "0000:07:00" ...; empty on garbage.
std::string normalize_bus_id(const std::string& s);
// Numeric key for sorting bus ids (domain, bus, device, function).
unsigned long long bus_id_key(const std::string& normalized);

}  // namespace accord::topo
