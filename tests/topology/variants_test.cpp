// Files written to imitate what the tools print on machines the fixtures do not cover
// (tests/topology/variants/, each with a header line saying what it imitates). For every variant:
// the GPU count, the path class and peer access of every pair, and for measured files the
// bandwidths, against hand-written values that restate the file. Then every variant cut short at
// every line, and with cells made garbage, must parse or fail with "file:line: what was expected"
// (never crash).
#include <gtest/gtest.h>

#include <algorithm>
#include <sstream>

#include "topology/formats.hpp"
#include "topology/report.hpp"
#include "topology/search.hpp"

using namespace accord::topo;

namespace {

std::string variant(const std::string& name) { return std::string(ACCORD_VARIANTS_DIR) + "/" + name; }

std::string slurp(const std::string& name) {
  std::string text;
  EXPECT_TRUE(read_file(variant(name), &text).ok()) << name;
  return text;
}

std::vector<std::string> words(const std::string& s) {
  std::istringstream in(s);
  std::vector<std::string> w;
  for (std::string x; in >> x;) w.push_back(x);
  return w;
}

System load(const std::string& name) {
  System s;
  accord::Status st = load_system_file(variant(name), &s);
  EXPECT_TRUE(st.ok()) << name << ": " << st.message();
  return s;
}

// paths: one row per GPU of nvidia-smi cells ("X NV12 SYS ..."); p2p: one row per GPU of
// X, Y (peer access) or N.
void expect_pairs(const System& s, const std::vector<std::string>& paths,
                  const std::vector<std::string>& p2p) {
  const int n = s.gpu_count();
  ASSERT_EQ(static_cast<int>(paths.size()), n);
  ASSERT_EQ(static_cast<int>(p2p.size()), n);
  for (int a = 0; a < n; ++a) {
    std::vector<std::string> row = words(paths[a]), prow = words(p2p[a]);
    ASSERT_EQ(static_cast<int>(row.size()), n) << paths[a];
    ASSERT_EQ(static_cast<int>(prow.size()), n) << p2p[a];
    for (int b = 0; b < n; ++b) {
      SCOPED_TRACE("GPU" + std::to_string(a) + " - GPU" + std::to_string(b));
      EXPECT_EQ(path_class_name(s.path(a, b), s.pair(a, b).nvlinks), row[b]);
      if (a != b) {
        EXPECT_EQ(s.p2p(a, b) ? "Y" : "N", prow[b]);
        EXPECT_EQ(s.p2p(a, b), s.p2p(b, a));
        if (!s.p2p(a, b)) {
          EXPECT_FALSE(s.p2p_reason(a, b).empty());
        }
      }
    }
  }
}

std::vector<std::string> all(int n, const std::string& cell) {
  std::vector<std::string> rows;
  for (int a = 0; a < n; ++a) {
    std::string r;
    for (int b = 0; b < n; ++b) r += (a == b ? std::string("X") : cell) + " ";
    rows.push_back(r);
  }
  return rows;
}

std::vector<int> gpu_numa(const System& s) {
  std::vector<int> v;
  for (int i = 0; i < s.gpu_count(); ++i) v.push_back(s.gpu_numa_node(i));
  return v;
}

const Device* nic(const System& s, const std::string& name) {
  for (const Device& d : s.devices)
    if (d.kind == DeviceKind::kNic && d.name == name) return &d;
  return nullptr;
}

int nic_count(const System& s) {
  int n = 0;
  for (const Device& d : s.devices) n += d.kind == DeviceKind::kNic;
  return n;
}

}  // namespace

TEST(Variants, DgxA100TopoMWithNicLegend) {
  System s = load("dgx-a100-nv12-10nic-topo-m.txt");
  ASSERT_EQ(s.gpu_count(), 8);
  expect_pairs(s, all(8, "NV12"), all(8, "Y"));
  EXPECT_EQ(gpu_numa(s), (std::vector<int>{3, 3, 1, 1, 7, 7, 5, 5}));
  EXPECT_EQ(s.gpu(0).cpu_affinity, "48-63,176-191");
  EXPECT_EQ(s.gpu(6).cpu_affinity, "80-95,208-223");
  ASSERT_EQ(nic_count(s), 10);
  // NIC Legend names them; each compute NIC hangs from its GPUs' NUMA node; the storage pair
  // (NIC4, NIC5) is SYS from every GPU, so the file does not say where it is.
  const int numa[] = {3, 3, 1, 1, -1, -1, 7, 7, 5, 5};
  for (int i = 0; i < 10; ++i) {
    const Device* d = nic(s, "mlx5_" + std::to_string(i));
    ASSERT_NE(d, nullptr) << i;
    EXPECT_EQ(d->numa_node, numa[i]) << i;
    ASSERT_EQ(d->gpu_paths.size(), 8u);
    EXPECT_EQ(d->gpu_paths[0], i < 2 ? PathClass::kPxb : PathClass::kSys) << i;
  }
}

TEST(Variants, TopoMPastedTwiceKeepsOneSetOfNics) {
  std::string text = slurp("pcie-4gpu-4nic-nic-legend-topo-m.txt");
  System s;
  accord::Status st = parse_system(text + "\n" + text, "twice.txt", &s);
  ASSERT_TRUE(st.ok()) << st.message();
  EXPECT_EQ(s.gpu_count(), 4);
  EXPECT_EQ(nic_count(s), 4);
}

TEST(Variants, NicColumnsNamedNicNAndMlx5) {
  const std::vector<std::string> paths = {"X NODE SYS SYS", "NODE X SYS SYS", "SYS SYS X NODE",
                                          "SYS SYS NODE X"};
  for (const char* f : {"pcie-4gpu-4nic-nic-legend-topo-m.txt", "pcie-4gpu-4nic-mlx5-names-topo-m.txt"}) {
    SCOPED_TRACE(f);
    System s = load(f);
    ASSERT_EQ(s.gpu_count(), 4);
    expect_pairs(s, paths, all(4, "N"));  // NODE and SYS: no peer access by NCCL's rule
    ASSERT_EQ(nic_count(s), 4);
    for (int i = 0; i < 4; ++i) {
      const Device* d = nic(s, "mlx5_" + std::to_string(i));
      ASSERT_NE(d, nullptr) << i;
      EXPECT_EQ(d->gpu_paths[i], PathClass::kPix);
      EXPECT_EQ(d->parent, s.cpu_of(s.gpus[i]));  // beside GPU i
    }
    EXPECT_EQ(s.gpu(2).cpu_affinity, "24-47,72-95");
  }
  EXPECT_EQ(gpu_numa(load("pcie-4gpu-4nic-nic-legend-topo-m.txt")), (std::vector<int>{0, 0, 1, 1}));
  // The old layout has no NUMA column: two CPUs told apart by affinity, NUMA ids unknown.
  System old = load("pcie-4gpu-4nic-mlx5-names-topo-m.txt");
  EXPECT_EQ(gpu_numa(old), (std::vector<int>{-1, -1, -1, -1}));
  EXPECT_EQ(old.cpu_count(), 2);
}

TEST(Variants, TabsTrailingTabsAndCrlf) {
  System s = load("rtxa6000-4gpu-nvbridge-crlf-tabs-topo-m.txt");
  ASSERT_EQ(s.gpu_count(), 4);
  expect_pairs(s, {"X NV4 SYS SYS", "NV4 X SYS SYS", "SYS SYS X NV4", "SYS SYS NV4 X"},
               {"X Y N N", "Y X N N", "N N X Y", "N N Y X"});
  EXPECT_EQ(gpu_numa(s), (std::vector<int>{0, 0, 1, 1}));
  EXPECT_EQ(s.gpu(3).cpu_affinity, "16-31");  // no '\r' or tab left in it
}

TEST(Variants, MixedNvLinkCountsAndPciClassesWithSpaces) {
  System s = load("mixed-nv1-nv18-pix-pxb-phb-node-sys-spaces-topo-m.txt");
  ASSERT_EQ(s.gpu_count(), 8);
  expect_pairs(s,
               {"X NV18 PXB PHB SYS SYS SYS SYS", "NV18 X PXB PHB SYS SYS SYS SYS",
                "PXB PXB X NV1 SYS SYS SYS SYS", "PHB PHB NV1 X NV3 SYS SYS SYS",
                "SYS SYS SYS NV3 X PIX NODE NODE", "SYS SYS SYS SYS PIX X NODE NODE",
                "SYS SYS SYS SYS NODE NODE X NV2", "SYS SYS SYS SYS NODE NODE NV2 X"},
               {"X Y Y N N N N N", "Y X Y N N N N N", "Y Y X Y N N N N", "N N Y X Y N N N",
                "N N N Y X Y N N", "N N N N Y X N N", "N N N N N N X Y", "N N N N N N Y X"});
  EXPECT_EQ(gpu_numa(s), (std::vector<int>{0, 0, 0, 0, 1, 1, 1, 1}));
  // 18 links per GPU at most: direct links, no NVSwitch invented.
  for (const Device& d : s.devices) EXPECT_NE(d.kind, DeviceKind::kNvSwitch);
  EXPECT_GT(s.bandwidth_gbs(0, 1), s.bandwidth_gbs(6, 7));
  EXPECT_GT(s.bandwidth_gbs(6, 7), s.bandwidth_gbs(2, 3));
}

TEST(Variants, SingleGpu) {
  System s = load("single-gpu-topo-m.txt");
  ASSERT_EQ(s.gpu_count(), 1);
  expect_pairs(s, {"X"}, {"X"});
  EXPECT_EQ(gpu_numa(s), (std::vector<int>{0}));
  EXPECT_EQ(s.gpu(0).cpu_affinity, "0-31");
  Plan plan;
  ASSERT_TRUE(plan_collectives(s, {}, &plan).ok());
  EXPECT_NE(render_text(s, plan).find("One GPU: no rings or trees to build"), std::string::npos);
}

TEST(Variants, AnsiEscapesFromATerminalCapture) {
  System s = load("l4-2gpu-ansi-underlined-headers.txt");
  ASSERT_EQ(s.gpu_count(), 2);
  expect_pairs(s, {"X NODE", "NODE X"}, {"X N", "N X"});
  EXPECT_NE(s.p2p_reason(0, 1).find("CNS"), std::string::npos) << s.p2p_reason(0, 1);
  EXPECT_EQ(s.pair(0, 1).p2p_source, "reported");
  EXPECT_EQ(gpu_numa(s), (std::vector<int>{0, 0}));
}

TEST(Variants, TopoP2pTitledP2pConnectivityMatrix) {
  // As some posts paste it: the nvidia-smi matrix under the bandwidth test's title.
  System s;
  accord::Status st = parse_system(
      "P2P Connectivity Matrix\n        GPU0  GPU1  GPU2\nGPU0      X    OK   CNS\n"
      "GPU1     OK     X   CNS\nGPU2    CNS   CNS     X\n", "titled.txt", &s);
  ASSERT_TRUE(st.ok()) << st.message();
  ASSERT_EQ(s.gpu_count(), 3);
  expect_pairs(s, all(3, "?"), {"X Y N", "Y X N", "N N X"});
}

TEST(Variants, OldDriverSocIsSys) {
  System s = load("k80-4gpu-old-driver-soc-topo-m.txt");
  ASSERT_EQ(s.gpu_count(), 4);
  expect_pairs(s, {"X PIX SYS SYS", "PIX X SYS SYS", "SYS SYS X PIX", "SYS SYS PIX X"},
               {"X Y N N", "Y X N N", "N N X Y", "N N Y X"});
  EXPECT_EQ(s.gpu(2).cpu_affinity, "12-23,36-47");
}

TEST(Variants, TopoP2pReadAndWrite) {
  System s = load("p2p-r-w-4gpu-cns-gns.txt");
  ASSERT_EQ(s.gpu_count(), 4);
  expect_pairs(s, all(4, "?"), {"X Y N N", "Y X N N", "N N X Y", "N N Y X"});
  EXPECT_NE(s.p2p_reason(0, 2).find("CNS"), std::string::npos) << s.p2p_reason(0, 2);
  EXPECT_NE(s.p2p_reason(0, 3).find("GNS"), std::string::npos) << s.p2p_reason(0, 3);
  EXPECT_NE(s.p2p_reason(1, 3).find("CNS"), std::string::npos) << s.p2p_reason(1, 3);
  EXPECT_EQ(s.pair(0, 1).p2p_source, "reported");
}

TEST(Variants, TopoP2pNvlinkModeDoesNotDenyPcieAccess) {
  System s = load("p2p-n-rw-4gpu-nvlink-pair-tns.txt");
  ASSERT_EQ(s.gpu_count(), 4);
  // -p2p n says NS for 0-2 (no NVLink); -p2p rw says OK: peer access over PCIe.
  expect_pairs(s, all(4, "?"), {"X Y Y N", "Y X Y N", "Y Y X N", "N N N X"});
  EXPECT_NE(s.p2p_reason(2, 3).find("TNS"), std::string::npos) << s.p2p_reason(2, 3);
}

TEST(Variants, TopoP2pPropWithoutCommandAndUnknown) {
  System s = load("p2p-p-3gpu-ns-unknown-no-command.txt");
  ASSERT_EQ(s.gpu_count(), 3);
  expect_pairs(s, all(3, "?"), {"X N N", "N X N", "N N X"});
  EXPECT_NE(s.p2p_reason(0, 1).find("NS"), std::string::npos) << s.p2p_reason(0, 1);
  EXPECT_EQ(s.pair(0, 1).p2p_source, "reported");
  EXPECT_EQ(s.pair(0, 2).p2p_source, "inferred");  // U: the driver does not know either
}

TEST(Variants, TensorFlow1TwoGpus) {
  System s = load("tf1-2gpu-1080ti-dma-all-y.txt");
  ASSERT_EQ(s.gpu_count(), 2);
  expect_pairs(s, all(2, "?"), all(2, "Y"));
  EXPECT_EQ(s.gpu(0).name, "GeForce GTX 1080 Ti");
  EXPECT_EQ(s.gpu(1).pci_bus_id, "0000:03:00.0");
}

TEST(Variants, TensorFlow1EightGpusPeerNotSupported) {
  System s = load("tf1-8gpu-k80-peer-not-supported-dma.txt");
  ASSERT_EQ(s.gpu_count(), 8);
  std::vector<std::string> p2p;
  for (int a = 0; a < 8; ++a) {
    std::string r;
    for (int b = 0; b < 8; ++b) r += a == b ? "X " : (a < 4) == (b < 4) ? "Y " : "N ";
    p2p.push_back(r);
  }
  expect_pairs(s, all(8, "?"), p2p);
  EXPECT_EQ(s.gpu(4).pci_bus_id, "0000:84:00.0");
  // The "Peer access not supported" lines alone (no DMA matrix) say the same.
  std::string text = slurp("tf1-8gpu-k80-peer-not-supported-dma.txt");
  text = text.substr(0, text.find("DMA:"));
  text = text.substr(0, text.rfind('\n') + 1);
  System only;
  accord::Status st = parse_system(text, "peer-lines.txt", &only);
  ASSERT_TRUE(st.ok()) << st.message();
  ASSERT_EQ(only.gpu_count(), 8);
  for (int a = 0; a < 8; ++a)
    for (int b = 0; b < 8; ++b)
      if ((a < 4) != (b < 4)) {
        EXPECT_FALSE(only.p2p(a, b)) << a << " " << b;
      }
}

TEST(Variants, TensorFlowPeerLinesSingularOrPlural) {
  for (const char* word : {"ordinals", "ordinal"}) {
    System s;
    std::string text = std::string("I tensorflow/core/common_runtime/gpu/gpu_device.cc:777] Peer "
                                   "access not supported between device ") + word + " 0 and 2\n";
    accord::Status st = parse_system(text, "tf.log", &s);
    ASSERT_TRUE(st.ok()) << st.message();
    ASSERT_EQ(s.gpu_count(), 3);
    EXPECT_FALSE(s.p2p(0, 2));
    EXPECT_EQ(s.pair(0, 2).p2p_source, "reported");
  }
}

TEST(Variants, TensorFlow2EdgeMatrix) {
  System s = load("tf2-4gpu-edge-matrix.txt");
  ASSERT_EQ(s.gpu_count(), 4);
  expect_pairs(s, all(4, "?"), {"X Y N N", "Y X N N", "N N X Y", "N N Y X"});
  EXPECT_EQ(s.gpu(3).name, "Tesla V100-SXM2-16GB");
  EXPECT_EQ(s.gpu(3).pci_bus_id, "0000:1d:00.0");
  EXPECT_EQ(s.gpu(3).sm, 70);
}

TEST(Variants, SimpleP2pMixed) {
  System s = load("simplep2p-4gpu-mixed-yes-no.txt");
  ASSERT_EQ(s.gpu_count(), 4);
  expect_pairs(s, all(4, "?"), {"X Y N N", "Y X N N", "N N X Y", "N N Y X"});
  EXPECT_EQ(s.gpu(2).name, "Tesla V100-PCIE-32GB");
  EXPECT_EQ(s.pair(0, 1).measured_gbs, 10.24);
}

TEST(Variants, SimpleP2pOldWording) {
  System s = load("simplep2p-cuda6-2gpu-k20-p2p-wording.txt");
  ASSERT_EQ(s.gpu_count(), 2);
  expect_pairs(s, all(2, "?"), all(2, "Y"));
  EXPECT_EQ(s.gpu(1).name, "Tesla K20c");
  EXPECT_EQ(s.pair(0, 1).measured_gbs, 5.83);
}

TEST(Variants, WindowsUtf16AndByteOrderMarks) {
  System s = load("simplep2p-windows-utf16le-bom-crlf.txt");
  ASSERT_EQ(s.gpu_count(), 2);
  expect_pairs(s, all(2, "?"), all(2, "Y"));
  EXPECT_EQ(s.gpu(0).name, "NVIDIA RTX A5000");
  EXPECT_EQ(s.pair(0, 1).measured_gbs, 22.75);
  // A UTF-8 BOM before XML, JSON or text is skipped.
  for (const char* f : {"nccl-dump-hgx-a100-4gpu-direct-nvlink.xml", "single-gpu-topo-m.txt"}) {
    System bom;
    accord::Status st = parse_system("\xef\xbb\xbf" + slurp(f), f, &bom);
    ASSERT_TRUE(st.ok()) << f << ": " << st.message();
    EXPECT_EQ(bom.gpu_count(), load(f).gpu_count());
  }
  System json;
  accord::Status st = parse_system("\xef\xbb\xbf" + write_accord_json(s, nullptr), "bom.json", &json);
  ASSERT_TRUE(st.ok()) << st.message();
  EXPECT_EQ(json.gpu_count(), 2);
}

TEST(Variants, P2pBandwidthLatencyTest) {
  System s = load("p2pbandwidth-4gpu-v100-pcie-two-sockets.txt");
  ASSERT_EQ(s.gpu_count(), 4);
  expect_pairs(s, all(4, "?"), {"X Y N N", "Y X N N", "N N X Y", "N N Y X"});
  const char* bus[] = {"0000:1a:00.0", "0000:1b:00.0", "0000:88:00.0", "0000:89:00.0"};
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(s.gpu(i).pci_bus_id, bus[i]);
    EXPECT_EQ(s.gpu(i).name, "Tesla V100-PCIE-32GB");
  }
  // Rows of the file, diagonal skipped: (a, b) -> uni enabled, bi enabled, uni disabled.
  struct M { int a, b; double uni, bi, staged; };
  const M want[] = {{0, 1, 12.50, 24.75, 10.25}, {1, 0, 12.25, 24.50, 10.25},
                    {0, 2, 9.75, 16.25, 9.75},   {2, 0, 9.75, 16.25, 9.75},
                    {0, 3, 9.50, 16.00, 9.50},   {3, 0, 9.50, 16.00, 9.50},
                    {1, 2, 9.50, 16.00, 9.50},   {1, 3, 9.75, 16.25, 9.75},
                    {2, 3, 12.75, 25.25, 10.50}, {3, 2, 12.50, 25.00, 10.50},
                    {3, 1, 9.75, 16.25, 9.75},   {2, 1, 9.50, 16.00, 9.50}};
  for (const M& m : want) {
    SCOPED_TRACE(std::to_string(m.a) + "->" + std::to_string(m.b));
    const PairObservation& o = s.observed.at({m.a, m.b});
    EXPECT_EQ(o.measured_gbs, m.uni);
    EXPECT_EQ(o.measured_bidir_gbs, m.bi);
    EXPECT_EQ(o.measured_staged_gbs, m.staged);
  }
  EXPECT_EQ(s.pair(0, 1).measured_gbs, 12.25);  // the slower direction
  EXPECT_EQ(s.pair(2, 3).measured_gbs, 12.50);
}

TEST(Variants, NcclDumpNvSwitchNestedPci) {
  System s = load("nccl-dump-dgx-a100-nvswitch-nested-pci.xml");
  ASSERT_EQ(s.gpu_count(), 8);
  expect_pairs(s, all(8, "NV12"), all(8, "Y"));  // 6 NVSwitches x 2 links each
  EXPECT_EQ(gpu_numa(s), (std::vector<int>{3, 3, 1, 1, 7, 7, 5, 5}));
  EXPECT_EQ(s.gpu(1).pci_bus_id, "0000:0f:00.0");
  EXPECT_EQ(s.gpu(0).sm, 80);
  // Multi-word hex masks, most significant word first.
  EXPECT_EQ(s.devices[s.cpu_of(s.gpus[0])].cpu_affinity, "32-47,112-127");
  EXPECT_EQ(s.devices[s.cpu_of(s.gpus[4])].cpu_affinity, "160-175,240-255");
  EXPECT_EQ(s.bandwidth_gbs(0, 7), 12 * nvlink_bandwidth_gbs(80));
  ASSERT_EQ(nic_count(s), 8);
  const Device* m7 = nic(s, "mlx5_7");
  ASSERT_NE(m7, nullptr);
  EXPECT_EQ(m7->numa_node, 7);
  EXPECT_EQ(m7->nic_speed_gbs, 25.0);
  // GPU0 and GPU1 share the inner switch: PIX under it, PXB through two levels is not the case.
  EXPECT_EQ(s.devices[s.gpus[0]].parent, s.devices[s.gpus[1]].parent);
}

TEST(Variants, NcclDumpH100FourSwitchesUnevenCountsAndAGpuWithoutNvlink) {
  System s = load("nccl-dump-hgx-h100-nvswitch-5-5-4-4-one-gpu-no-nvlink.xml");
  ASSERT_EQ(s.gpu_count(), 8);
  // 5+5+4+4 links through four switches = NV18; GPU5 has none: PIX to its switch mate GPU4, PHB
  // to the other switch under its CPU, SYS across.
  expect_pairs(s,
               {"X NV18 NV18 NV18 NV18 SYS NV18 NV18", "NV18 X NV18 NV18 NV18 SYS NV18 NV18",
                "NV18 NV18 X NV18 NV18 SYS NV18 NV18", "NV18 NV18 NV18 X NV18 SYS NV18 NV18",
                "NV18 NV18 NV18 NV18 X PIX NV18 NV18", "SYS SYS SYS SYS PIX X PHB PHB",
                "NV18 NV18 NV18 NV18 NV18 PHB X NV18", "NV18 NV18 NV18 NV18 NV18 PHB NV18 X"},
               {"X Y Y Y Y N Y Y", "Y X Y Y Y N Y Y", "Y Y X Y Y N Y Y", "Y Y Y X Y N Y Y",
                "Y Y Y Y X Y Y Y", "N N N N Y X N N", "Y Y Y Y Y N X Y", "Y Y Y Y Y N Y X"});
  EXPECT_EQ(s.bandwidth_gbs(0, 1), 18 * nvlink_bandwidth_gbs(90));
  EXPECT_EQ(gpu_numa(s), (std::vector<int>{0, 0, 0, 0, 1, 1, 1, 1}));
  ASSERT_EQ(nic_count(s), 6);  // 4 x 400G, and eth0 once per CPU
  EXPECT_EQ(nic(s, "mlx5_3")->nic_speed_gbs, 50.0);
  EXPECT_EQ(nic(s, "eth0")->nic_speed_gbs, 1.25);
}

TEST(Variants, NcclDumpDirectNvlinksListedFromBothEnds) {
  System s = load("nccl-dump-hgx-a100-4gpu-direct-nvlink.xml");
  ASSERT_EQ(s.gpu_count(), 4);
  expect_pairs(s, all(4, "NV4"), all(4, "Y"));  // count 4 once per pair, not 8
  int nvlinks = 0;
  for (const Link& l : s.links) nvlinks += l.kind == LinkKind::kNvLink;
  EXPECT_EQ(nvlinks, 6);  // the NVLink to the CPU is not a GPU link
  ASSERT_NE(nic(s, "mlx5_0"), nullptr);
  EXPECT_EQ(nic(s, "mlx5_0")->nic_speed_gbs, 12.5);
}

TEST(Variants, StaticXmlNumbersGpusByBusIdAndSkipsBmcVga) {
  System s = load("static-4gpu-unsorted-vga-and-3d-classes.xml");
  ASSERT_EQ(s.gpu_count(), 4);
  const char* bus[] = {"0000:1a:00.0", "0000:3d:00.0", "0000:89:00.0", "0000:b1:00.0"};
  for (int i = 0; i < 4; ++i) EXPECT_EQ(s.gpu(i).pci_bus_id, bus[i]);
  EXPECT_EQ(gpu_numa(s), (std::vector<int>{0, 0, 1, 1}));
  expect_pairs(s, {"X PHB SYS SYS", "PHB X SYS SYS", "SYS SYS X PIX", "SYS SYS PIX X"},
               {"X N N N", "N X N N", "N N X Y", "N N Y X"});
}

// Issue 20's machine for the ring tie-break (search_test): NVLink pairs, PHB and NODE pairs at
// one host-staged estimate.
TEST(Variants, NvlinkPairsWithPhbAndNodeBetweenThem) {
  System s = load("nvlink-pairs-phb-node-4gpu-topo-m.txt");
  ASSERT_EQ(s.gpu_count(), 4);
  expect_pairs(s, {"X PHB NV4 NODE", "PHB X NODE NV4", "NV4 NODE X PHB", "NODE NV4 PHB X"},
               {"X N Y N", "N X N Y", "Y N X N", "N Y N X"});
  EXPECT_EQ(s.bandwidth_gbs(0, 1), s.bandwidth_gbs(0, 3));
  EXPECT_GT(s.bandwidth_gbs(0, 2), s.bandwidth_gbs(0, 1));
}

namespace {

const char* const kVariants[] = {
    "dgx-a100-nv12-10nic-topo-m.txt", "pcie-4gpu-4nic-nic-legend-topo-m.txt",
    "pcie-4gpu-4nic-mlx5-names-topo-m.txt", "rtxa6000-4gpu-nvbridge-crlf-tabs-topo-m.txt",
    "mixed-nv1-nv18-pix-pxb-phb-node-sys-spaces-topo-m.txt", "single-gpu-topo-m.txt",
    "k80-4gpu-old-driver-soc-topo-m.txt", "p2p-r-w-4gpu-cns-gns.txt",
    "p2p-n-rw-4gpu-nvlink-pair-tns.txt", "p2p-p-3gpu-ns-unknown-no-command.txt",
    "tf1-2gpu-1080ti-dma-all-y.txt", "tf1-8gpu-k80-peer-not-supported-dma.txt",
    "tf2-4gpu-edge-matrix.txt", "simplep2p-4gpu-mixed-yes-no.txt",
    "simplep2p-cuda6-2gpu-k20-p2p-wording.txt", "p2pbandwidth-4gpu-v100-pcie-two-sockets.txt",
    "nccl-dump-dgx-a100-nvswitch-nested-pci.xml", "nccl-dump-hgx-a100-4gpu-direct-nvlink.xml",
    "static-4gpu-unsorted-vga-and-3d-classes.xml", "l4-2gpu-ansi-underlined-headers.txt",
    "nccl-dump-hgx-h100-nvswitch-5-5-4-4-one-gpu-no-nvlink.xml",
    "simplep2p-windows-utf16le-bom-crlf.txt", "nvlink-pairs-phb-node-4gpu-topo-m.txt"};

// A failure must say "cut.txt:LINE: ..." with a line inside the text.
void expect_clean(const std::string& text, const std::string& what) {
  System s;
  accord::Status st;
  try {
    st = parse_system(text, "cut.txt", &s);
  } catch (const std::exception& e) {
    FAIL() << what << ": threw " << e.what() << "\n" << text;
  }
  if (st.ok()) return;
  const std::string& m = st.message();
  size_t p = m.find("cut.txt:");
  ASSERT_NE(p, std::string::npos) << what << ": " << m;
  int line = std::atoi(m.c_str() + p + 8);
  int lines = 1 + static_cast<int>(std::count(text.begin(), text.end(), '\n'));
  EXPECT_GE(line, 1) << what << ": " << m;
  EXPECT_LE(line, lines) << what << ": " << m;
}

// Loads `text` (from variant `name`) and expects an error at `line` mentioning `expected`.
void expect_error_at(const std::string& text, int line, const std::string& expected) {
  System s;
  accord::Status st = parse_system(text, "bad.txt", &s);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("bad.txt:" + std::to_string(line) + ":"), std::string::npos)
      << st.message();
  EXPECT_NE(st.message().find(expected), std::string::npos) << st.message();
}

// Replaces the first `from` on 1-based line `line` by `to`.
std::string edit(std::string text, int line, const std::string& from, const std::string& to) {
  size_t p = 0;
  for (int l = 1; l < line; ++l) p = text.find('\n', p) + 1;
  size_t q = text.find(from, p);
  EXPECT_NE(q, std::string::npos) << from;
  EXPECT_LT(q, text.find('\n', p)) << from << " not on line " << line;
  return text.replace(q, from.size(), to);
}

}  // namespace

TEST(Variants, EveryVariantCutShortAtEveryLineFailsCleanly) {
  std::vector<std::pair<std::string, std::string>> inputs;
  for (const char* f : kVariants) inputs.push_back({f, slurp(f)});
  // Accord JSON and NCCL XML as Accord writes them, for a few of the variants.
  for (const char* f : {"dgx-a100-nv12-10nic-topo-m.txt", "p2pbandwidth-4gpu-v100-pcie-two-sockets.txt",
                        "nccl-dump-hgx-a100-4gpu-direct-nvlink.xml"}) {
    System s = load(f);
    inputs.push_back({std::string(f) + " as JSON", write_accord_json(s, nullptr)});
    inputs.push_back({std::string(f) + " as NCCL XML", write_nccl_xml(s)});
  }
  for (const auto& [f, text] : inputs) {
    SCOPED_TRACE(f);
    for (size_t p = 0; p < text.size(); ++p) {
      if (text[p] != '\n') continue;
      expect_clean(text.substr(0, p + 1), "whole lines");
      expect_clean(text.substr(0, p / 2 + (p + 1) / 2), "mid-line");  // halfway through a line too
    }
    // Every 7th byte, every byte value class: a letter, a digit, a tag character, a space.
    for (size_t p = 0; p < text.size(); p += 7)
      for (char c : {'Q', '7', '<', ' ', '"'}) {
        std::string bad = text;
        bad[p] = c;
        expect_clean(bad, "byte " + std::to_string(p));
      }
    // Numbers too large for an int, and negative ones, anywhere.
    for (size_t p = 0; p < text.size(); p += 13)
      for (const char* n : {"4294967296", "-7", "99999999999999999999"}) {
        std::string bad = text;
        bad.insert(p, n);
        expect_clean(bad, "insert at " + std::to_string(p));
      }
  }
}

TEST(Variants, GarbageCellsNameTheLineAndWhatWasExpected) {
  std::string dgx = slurp("dgx-a100-nv12-10nic-topo-m.txt");
  expect_error_at(edit(dgx, 5, "NV12", "NV1x"), 5, "expected X, NV#, PIX, PXB, PHB, NODE or SYS");
  // Cells missing from a row shift the CPU affinity into the NIC columns.
  expect_error_at(edit(dgx, 7, "NV12\tNV12\tNV12\tNV12", "NV12"), 7,
                  "column NIC7: expected X, NV#, PIX, PXB, PHB, NODE or SYS, found '112-127,240-255'");
  expect_error_at(edit(dgx, 14, "SYS", "??"), 14, "column GPU0: expected X, NV#");
  std::string crlf = slurp("rtxa6000-4gpu-nvbridge-crlf-tabs-topo-m.txt");
  expect_error_at(edit(crlf, 4, "NV4", "NVLINK"), 4, "found 'NVLINK'");
  std::string p2p = slurp("p2p-r-w-4gpu-cns-gns.txt");
  expect_error_at(edit(p2p, 6, "CNS", "CN5"), 6, "expected X, OK, CNS, GNS, TNS, NS or U");
  std::string tf = slurp("tf1-8gpu-k80-peer-not-supported-dma.txt");
  expect_error_at(edit(tf, 36, "Y N N", "Y ? N"), 36, "expected Y or N, found '?'");
  expect_error_at(edit(tf, 38, "N N N N ", ""), 38, "row 3 has 4 entries, expected 8");
  expect_error_at(edit(tf, 2, "ordinals 0 and 4", "ordinals 0 and"), 2,
                  "expected 'Peer access not supported between device ordinals A and B'");
  std::string sp = slurp("simplep2p-4gpu-mixed-yes-no.txt");
  expect_error_at(edit(sp, 8, ": No", ": Maybe"), 8, "Yes|No");
  std::string bw = slurp("p2pbandwidth-4gpu-v100-pcie-two-sockets.txt");
  expect_error_at(edit(bw, 32, "10.25", "10.2S"), 32, "expected a number, found '10.2S'");
  expect_error_at(edit(bw, 43, "  16.00", ""), 43, "matrix row 0 has 3 values, expected 4");
  expect_error_at(edit(bw, 7, "Device=0 CAN", "Device=0 CAM"), 7,
                  "expected 'Device=A CAN|CANNOT Access Peer Device=B'");
  std::string xml = slurp("nccl-dump-hgx-a100-4gpu-direct-nvlink.xml");
  expect_error_at(edit(xml, 8, "count=\"4\"", "count=\"four\""), 8, "expected an integer");
  std::string cut = xml.substr(0, xml.find("<nvlink target=\"0000:81:00.0\""));
  expect_error_at(cut, 8, "");
}
