// Every fixture in shared/fixtures/topologies: the path class and peer access derived for every
// GPU pair match what the file itself states (expected matrices written from reading the files).
#include <gtest/gtest.h>

#include <sstream>

#include "fixtures.hpp"
#include "topology/formats.hpp"

using namespace accord::topo;

namespace {

struct Expected {
  const char* file;
  int gpus;
  std::vector<std::string> paths;  // rows of path cells ("X NV1 ...") or empty when not stated
  std::vector<std::string> peer;   // rows of Y/N (self X)
};

std::vector<std::string> cells(const std::string& row) {
  std::istringstream in(row);
  std::vector<std::string> out;
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

const std::vector<std::string> kAllYes8(8, "");

void check(const Expected& e) {
  SCOPED_TRACE(e.file);
  System s;
  accord::Status st = load_system_file(fixture(e.file), &s);
  ASSERT_TRUE(st.ok()) << st.message();
  ASSERT_EQ(s.gpu_count(), e.gpus);
  for (int a = 0; a < e.gpus; ++a) {
    std::vector<std::string> prow = e.paths.empty() ? std::vector<std::string>() : cells(e.paths[a]);
    std::vector<std::string> qrow = cells(e.peer[a]);
    ASSERT_EQ(qrow.size(), static_cast<size_t>(e.gpus));
    for (int b = 0; b < e.gpus; ++b) {
      SCOPED_TRACE(testing::Message() << "GPU" << a << " - GPU" << b);
      const PairInfo& p = s.pair(a, b);
      if (!prow.empty()) {
        EXPECT_EQ(path_class_name(p.path, p.nvlinks), prow[b]);
      }
      if (a == b) continue;
      EXPECT_EQ(p.p2p ? "Y" : "N", qrow[b]);
      if (!p.p2p) {
        EXPECT_FALSE(p.reason.empty());
      }
      EXPECT_EQ(s.pair(b, a).path, p.path);
    }
  }
}

}  // namespace

TEST(Fixtures, Dgx1HybridCubeMesh) {
  check({"dgx1-v100-topo-m.txt", 8,
         {"X NV1 NV1 NV2 NV2 SYS SYS SYS", "NV1 X NV2 NV1 SYS NV2 SYS SYS",
          "NV1 NV2 X NV2 SYS SYS NV1 SYS", "NV2 NV1 NV2 X SYS SYS SYS NV1",
          "NV2 SYS SYS SYS X NV1 NV1 NV2", "SYS NV2 SYS SYS NV1 X NV2 NV1",
          "SYS SYS NV1 SYS NV1 NV2 X NV2", "SYS SYS SYS NV1 NV2 NV1 NV2 X"},
         {"X Y Y Y Y N N N", "Y X Y Y N Y N N", "Y Y X Y N N Y N", "Y Y Y X N N N Y",
          "Y N N N X Y Y Y", "N Y N N Y X Y Y", "N N Y N Y Y X Y", "N N N Y Y Y Y X"}});
}

TEST(Fixtures, Hgx100Nv18) {
  std::vector<std::string> paths, peer;
  for (int a = 0; a < 8; ++a) {
    std::string p, q;
    for (int b = 0; b < 8; ++b) p += a == b ? "X " : "NV18 ", q += a == b ? "X " : "Y ";
    paths.push_back(p);
    peer.push_back(q);
  }
  check({"hgx-h100-8gpu-nv18-topo-m.txt", 8, paths, peer});
  System s;
  ASSERT_TRUE(load_system_file(fixture("hgx-h100-8gpu-nv18-topo-m.txt"), &s).ok());
  EXPECT_EQ(s.gpu_numa_node(0), 0);
  EXPECT_EQ(s.gpu_numa_node(7), 1);
}

TEST(Fixtures, Power9Nv3Tabs) {
  check({"ibm-power9-4x-v100-nv3-topo-m.txt", 4,
         {"X NV3 SYS SYS", "NV3 X SYS SYS", "SYS SYS X NV3", "SYS SYS NV3 X"},
         {"X Y N N", "Y X N N", "N N X Y", "N N Y X"}});
}

TEST(Fixtures, Pcie8Gpu2Socket) {
  check({"pcie-8gpu-2socket-pix-phb-sys-topo-m.txt", 8,
         {"X PIX PHB PHB SYS SYS SYS SYS", "PIX X PHB PHB SYS SYS SYS SYS",
          "PHB PHB X PIX SYS SYS SYS SYS", "PHB PHB PIX X SYS SYS SYS SYS",
          "SYS SYS SYS SYS X PIX PHB PHB", "SYS SYS SYS SYS PIX X PHB PHB",
          "SYS SYS SYS SYS PHB PHB X PIX", "SYS SYS SYS SYS PHB PHB PIX X"},
         {"X Y N N N N N N", "Y X N N N N N N", "N N X Y N N N N", "N N Y X N N N N",
          "N N N N X Y N N", "N N N N Y X N N", "N N N N N N X Y", "N N N N N N Y X"}});
}

TEST(Fixtures, AwsG6eNode) {
  check({"aws-g6e-12xlarge-4gpu-node-topo-m.txt", 4,
         {"X NODE NODE NODE", "NODE X NODE NODE", "NODE NODE X NODE", "NODE NODE NODE X"},
         {"X N N N", "N X N N", "N N X N", "N N N X"}});
}

TEST(Fixtures, ConsumerPhb) {
  check({"consumer-2x-gtx1080ti-phb-topo-m.txt", 2, {"X PHB", "PHB X"}, {"X N", "N X"}});
}

TEST(Fixtures, AutodlPixButNotSupported) {
  // PIX path, yet topo -p2p says NS and the bandwidth test says CANNOT: reported beats inferred.
  check({"autodl-2x-rtx2080ti-pix-p2p-cannot.txt", 2, {"X PIX", "PIX X"}, {"X N", "N X"}});
  System s;
  ASSERT_TRUE(load_system_file(fixture("autodl-2x-rtx2080ti-pix-p2p-cannot.txt"), &s).ok());
  EXPECT_EQ(s.gpu(1).pci_bus_id, "0000:b5:00.0");
  EXPECT_EQ(s.gpu(0).name, "NVIDIA GeForce RTX 2080 Ti");
  EXPECT_EQ(s.gpu_numa_node(1), 1);
  EXPECT_NE(s.p2p_reason(0, 1).find("(NS)"), std::string::npos);
  EXPECT_DOUBLE_EQ(s.pair(0, 1).measured_gbs, 5.72);
}

TEST(Fixtures, HpeNvlinkBridge) {
  check({"hpe-dl380a-2x-h100pcie-nvlink-bridge-topo-p2p.txt", 2, {"X NV12", "NV12 X"}, {"X Y", "Y X"}});
  System s;
  ASSERT_TRUE(load_system_file(fixture("hpe-dl380a-2x-h100pcie-nvlink-bridge-topo-p2p.txt"), &s).ok());
  EXPECT_EQ(s.pair(0, 1).p2p_source, "reported");
  EXPECT_EQ(s.gpu(1).pci_bus_id, "0000:d5:00.0");
}

TEST(Fixtures, A100P2pBandwidth) {
  std::vector<std::string> peer;
  for (int a = 0; a < 8; ++a) {
    std::string q;
    for (int b = 0; b < 8; ++b) q += a == b ? "X " : "Y ";
    peer.push_back(q);
  }
  check({"a100-sxm4-8gpu-nvswitch-p2pbandwidth.txt", 8, {}, peer});
  System s;
  ASSERT_TRUE(load_system_file(fixture("a100-sxm4-8gpu-nvswitch-p2pbandwidth.txt"), &s).ok());
  EXPECT_EQ(s.gpu(7).pci_bus_id, "0000:e7:00.0");
  EXPECT_EQ(s.gpu(0).name, "NVIDIA A100-SXM4-80GB");
  EXPECT_NEAR(s.observed.at({0, 1}).measured_gbs, 270.83, 1e-9);
  EXPECT_NEAR(s.observed.at({4, 5}).measured_bidir_gbs, 518.15, 1e-9);
}

TEST(Fixtures, SimpleP2pMixed) {
  check({"simplep2p-titanx-pascal-plus-titan-z-mixed.txt", 3, {}, {"X N N", "N X Y", "N Y X"}});
  System s;
  ASSERT_TRUE(load_system_file(fixture("simplep2p-titanx-pascal-plus-titan-z-mixed.txt"), &s).ok());
  EXPECT_EQ(s.gpu(0).name, "TITAN X (Pascal)");
  EXPECT_EQ(s.gpu(2).name, "GeForce GTX TITAN Z");
}

TEST(Fixtures, TensorFlowDmaMatrix) {
  check({"tf-4gpu-cannot-enable-peer-access-dma-matrix.txt", 4, {},
         {"X Y N N", "Y X N N", "N N X Y", "N N Y X"}});
}

// NCCL XML files state PCI trees, not path classes; the expected classes follow the legend.
TEST(Fixtures, AwsP4dXml) {
  check({"aws-p4d-24xl-topo.xml", 8,
         {"X PIX PHB PHB SYS SYS SYS SYS", "PIX X PHB PHB SYS SYS SYS SYS",
          "PHB PHB X PIX SYS SYS SYS SYS", "PHB PHB PIX X SYS SYS SYS SYS",
          "SYS SYS SYS SYS X PIX PHB PHB", "SYS SYS SYS SYS PIX X PHB PHB",
          "SYS SYS SYS SYS PHB PHB X PIX", "SYS SYS SYS SYS PHB PHB PIX X"},
         {"X Y N N N N N N", "Y X N N N N N N", "N N X Y N N N N", "N N Y X N N N N",
          "N N N N X Y N N", "N N N N Y X N N", "N N N N N N X Y", "N N N N N N Y X"}});
  System s;
  ASSERT_TRUE(load_system_file(fixture("aws-p4d-24xl-topo.xml"), &s).ok());
  EXPECT_EQ(s.gpu(0).pci_bus_id, "0000:10:1c.0");  // numbered in bus id order
  EXPECT_EQ(s.gpu(7).pci_bus_id, "0000:a0:1d.0");
  EXPECT_EQ(s.gpu_numa_node(5), 1);
}

TEST(Fixtures, AzureNdv2Xml) {
  std::vector<std::string> paths, peer;
  for (int a = 0; a < 8; ++a) {
    std::string p, q;
    for (int b = 0; b < 8; ++b) {
      p += a == b ? "X " : (a < 4) == (b < 4) ? "PHB " : "SYS ";
      q += a == b ? "X " : "N ";
    }
    paths.push_back(p);
    peer.push_back(q);
  }
  check({"azure-ndv2-topo.xml", 8, paths, peer});
}

TEST(Fixtures, AzureNdv4Xml) {
  // Bus id order: 0001,0002 (NUMA 1), 0003,0004 (NUMA 0), 000b,000c (NUMA 3), 000d,000e (NUMA 2).
  std::vector<std::string> paths, peer;
  for (int a = 0; a < 8; ++a) {
    std::string p, q;
    for (int b = 0; b < 8; ++b) {
      p += a == b ? "X " : a / 2 == b / 2 ? "PIX " : "SYS ";
      q += a == b ? "X " : a / 2 == b / 2 ? "Y " : "N ";
    }
    paths.push_back(p);
    peer.push_back(q);
  }
  check({"azure-ndv4-topo.xml", 8, paths, peer});
  System s;
  ASSERT_TRUE(load_system_file(fixture("azure-ndv4-topo.xml"), &s).ok());
  EXPECT_EQ(s.gpu_numa_node(0), 1);
  EXPECT_EQ(s.gpu_numa_node(2), 0);
  EXPECT_EQ(s.gpu_numa_node(4), 3);
  EXPECT_EQ(s.gpu_numa_node(6), 2);
}

TEST(Fixtures, NcclDumpRtx3090Xml) {
  std::vector<std::string> paths, peer;
  for (int a = 0; a < 8; ++a) {
    std::string p, q;
    for (int b = 0; b < 8; ++b) {
      p += a == b ? "X " : a / 4 == b / 4 ? "PIX " : "SYS ";
      q += a == b ? "X " : a / 4 == b / 4 ? "Y " : "N ";
    }
    paths.push_back(p);
    peer.push_back(q);
  }
  check({"nccl-dump-8x-rtx3090-pcie-switch-2socket.xml", 8, paths, peer});
  System s;
  ASSERT_TRUE(load_system_file(fixture("nccl-dump-8x-rtx3090-pcie-switch-2socket.xml"), &s).ok());
  EXPECT_EQ(s.gpu(4).pci_bus_id, "0000:9b:00.0");
  EXPECT_EQ(s.gpu(0).sm, 86);
  EXPECT_DOUBLE_EQ(s.bandwidth_gbs(0, 1), 24.0);  // Gen4 x16
}
