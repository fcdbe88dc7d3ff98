// Topology files: JSON round trips losslessly for every fixture, NCCL XML written back reads to the
// same picture, and malformed inputs are errors that name the file and the line.
#include <gtest/gtest.h>

#include "fixtures.hpp"
#include "topology/cpuset.hpp"
#include "topology/formats.hpp"
#include "topology/json.hpp"
#include "topology/search.hpp"

using namespace accord::topo;

namespace {

const char* const kFiles[] = {
    "a100-sxm4-8gpu-nvswitch-p2pbandwidth.txt", "autodl-2x-rtx2080ti-pix-p2p-cannot.txt",
    "aws-g6e-12xlarge-4gpu-node-topo-m.txt", "aws-p4d-24xl-topo.xml", "azure-ndv2-topo.xml",
    "azure-ndv4-topo.xml", "consumer-2x-gtx1080ti-phb-topo-m.txt", "dgx1-v100-topo-m.txt",
    "hgx-h100-8gpu-nv18-topo-m.txt", "hpe-dl380a-2x-h100pcie-nvlink-bridge-topo-p2p.txt",
    "ibm-power9-4x-v100-nv3-topo-m.txt", "nccl-dump-8x-rtx3090-pcie-switch-2socket.xml",
    "pcie-8gpu-2socket-pix-phb-sys-topo-m.txt", "simplep2p-titanx-pascal-plus-titan-z-mixed.txt",
    "tf-4gpu-cannot-enable-peer-access-dma-matrix.txt"};

void expect_same_pairs(const System& a, const System& b) {
  ASSERT_EQ(a.gpu_count(), b.gpu_count());
  for (int x = 0; x < a.gpu_count(); ++x)
    for (int y = 0; y < a.gpu_count(); ++y) {
      const PairInfo& p = a.pair(x, y);
      const PairInfo& q = b.pair(x, y);
      EXPECT_EQ(p.path, q.path);
      EXPECT_EQ(p.nvlinks, q.nvlinks);
      EXPECT_EQ(p.p2p, q.p2p);
      EXPECT_EQ(p.reason, q.reason);
      EXPECT_EQ(p.bandwidth_gbs, q.bandwidth_gbs);
    }
}

// Loads `text` and expects an error mentioning "name:line".
void expect_error(const std::string& text, int line, const char* what = nullptr) {
  System s;
  accord::Status st = parse_system(text, "bad.txt", &s);
  ASSERT_FALSE(st.ok()) << text;
  EXPECT_NE(st.message().find("bad.txt:" + std::to_string(line) + ":"), std::string::npos)
      << st.message();
  if (what) {
    EXPECT_NE(st.message().find(what), std::string::npos) << st.message();
  }
}

}  // namespace

TEST(Formats, JsonRoundTripIsLossless) {
  for (const char* f : kFiles) {
    SCOPED_TRACE(f);
    System s;
    ASSERT_TRUE(load_system_file(fixture(f), &s).ok());
    Plan plan;
    ASSERT_TRUE(plan_collectives(s, {}, &plan).ok());
    std::string text = write_accord_json(s, &plan);
    System back;
    accord::Status st = parse_system(text, "round-trip.json", &back);
    ASSERT_TRUE(st.ok()) << st.message();
    EXPECT_EQ(back.source, s.source);
    ASSERT_EQ(back.devices.size(), s.devices.size());
    EXPECT_EQ(back.links.size(), s.links.size());
    EXPECT_EQ(back.observed, s.observed);
    expect_same_pairs(s, back);
    EXPECT_EQ(write_accord_json(back, &plan), text);  // byte-identical the second time
  }
}

TEST(Formats, NcclXmlWrittenBackReadsTheSame) {
  for (const char* f : kFiles) {
    SCOPED_TRACE(f);
    System s;
    ASSERT_TRUE(load_system_file(fixture(f), &s).ok());
    std::string xml = write_nccl_xml(s);
    System back;
    accord::Status st = parse_system(xml, "back.xml", &back);
    ASSERT_TRUE(st.ok()) << st.message() << "\n" << xml;
    ASSERT_EQ(back.gpu_count(), s.gpu_count());
    // Files that came from XML keep every path class; text files keep NVLink and socket structure.
    std::string name = f;
    for (int a = 0; a < s.gpu_count(); ++a)
      for (int b = 0; b < s.gpu_count(); ++b) {
        PathClass p = s.path(a, b);
        if (name.ends_with(".xml") || p == PathClass::kNvLink || p == PathClass::kSys ||
            p == PathClass::kPix) {
          EXPECT_EQ(path_class_name(back.path(a, b), back.pair(a, b).nvlinks),
                    path_class_name(p, s.pair(a, b).nvlinks))
              << a << "," << b;
        }
      }
  }
}

TEST(Formats, DetectsFormatFromContent) {
  EXPECT_EQ(detect_format("  {\"devices\": []}"), FileFormat::kJson);
  EXPECT_EQ(detect_format("<!-- x -->\n<system version=\"1\"></system>"), FileFormat::kNcclXml);
  EXPECT_EQ(detect_format("        GPU0    GPU1\nGPU0 X PIX\n"), FileFormat::kText);
}

TEST(Formats, TopoMVariants) {
  // NIC Legend names, a GPU NUMA ID column, single spaces and CRLF line ends.
  const char* text =
      "\tGPU0\tGPU1\tNIC0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\r\n"
      "GPU0\t X \tPXB\tPIX\t0-7\t0\t\tN/A\r\n"
      "GPU1\tPXB\t X \tPXB\t0-7\t0\t\tN/A\r\n"
      "NIC0\tPIX\tPXB\t X \r\n"
      "\r\nNIC Legend:\r\n\r\n  NIC0: mlx5_0\r\n";
  System s;
  accord::Status st = parse_system(text, "variant.txt", &s);
  ASSERT_TRUE(st.ok()) << st.message();
  ASSERT_EQ(s.gpu_count(), 2);
  EXPECT_EQ(s.path(0, 1), PathClass::kPxb);
  EXPECT_TRUE(s.p2p(0, 1));
  bool found = false;
  for (const Device& d : s.devices) found |= d.kind == DeviceKind::kNic && d.name == "mlx5_0";
  EXPECT_TRUE(found);
}

TEST(Formats, TopoP2pReadModes) {
  const char* text =
      "$ nvidia-smi topo -p2p r\n"
      " \tGPU0\tGPU1\tGPU2\t\n"
      " GPU0\tX\tOK\tCNS\t\n"
      " GPU1\tOK\tX\tGNS\t\n"
      " GPU2\tCNS\tGNS\tX\t\n";
  System s;
  ASSERT_TRUE(parse_system(text, "p2p.txt", &s).ok());
  EXPECT_TRUE(s.p2p(0, 1));
  EXPECT_FALSE(s.p2p(1, 2));
  EXPECT_EQ(s.p2p_reason(1, 2), "the driver reports peer access unsupported (GNS)");
  EXPECT_NE(s.p2p_reason(0, 2).find("(CNS)"), std::string::npos);
}

TEST(Formats, MalformedInputsNameFileAndLine) {
  expect_error("        GPU0    GPU1\nGPU0     X      PIX\nGPU1    PIX\n", 3, "expected 2");
  expect_error("        GPU0    GPU1\nGPU0     X      FOO\n", 2, "NV#");
  expect_error("I x.cc:1] DMA: 0 1\nI x.cc:2] 0:   Y Q\n", 2, "Y or N");
  expect_error("P2P Connectivity Matrix\n   D\\D 0 1\n   0 1 1\n   1 1\n", 4, "expected 2");
  expect_error("Device=0 CAN Access Peer\n", 1, "CAN|CANNOT");
  expect_error("nothing to see here\n", 1, "no topology found");
  expect_error("<system version=\"1\">\n  <cpu numaid=\"0\">\n  </pci>\n</system>\n", 3,
               "expected </cpu>");
  expect_error("<system>\n <cpu numaid=\"zero\"/>\n</system>\n", 2, "integer");
  expect_error("<system>\n\n <cpu><pci class=\"0x030200\"/></cpu>\n</system>\n", 3, "busid");
  expect_error("<system>\n  <cpu numaid=\"0\">\n", 3, "never closed");
  expect_error("{\n  \"devices\": [\n    {\"kind\": \"toaster\"}\n  ]\n}\n", 3, "kind");
  expect_error("{\n  \"devices\": [1,\n  2,,]\n}\n", 3, "expected a value");
  expect_error("{\n  \"devices\": \"no\"\n}\n", 2, "expected an array");
}

TEST(Formats, MissingFileIsAnError) {
  System s;
  accord::Status st = load_system_file("/nonexistent/topo.xml", &s);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("/nonexistent/topo.xml"), std::string::npos);
}

TEST(Formats, CpuSets) {
  bool ok;
  std::vector<int> cpus = parse_cpu_mask("00000000,000fffff", &ok);
  ASSERT_TRUE(ok);
  EXPECT_EQ(format_cpulist(cpus), "0-19");
  EXPECT_EQ(format_cpu_mask(parse_cpulist("0-11,24-35", &ok)), "0000000f,ff000fff");
  EXPECT_EQ(format_cpulist(parse_cpu_mask("ffffff00,000000ff", &ok)), "0-7,40-63");
  parse_cpulist("1-x", &ok);
  EXPECT_FALSE(ok);
}

TEST(Formats, JsonNumbersRoundTrip) {
  for (double v : {0.0, 40.0, 370.8, 0.1, 1e-7, 123456789.125}) {
    json::Value parsed;
    ASSERT_TRUE(json::parse(json::number(v), "n", &parsed).ok());
    EXPECT_EQ(parsed.number, v);
  }
  json::Value s;
  ASSERT_TRUE(json::parse(json::quote("a\"b\\c\n\x01"), "s", &s).ok());
  EXPECT_EQ(s.string, "a\"b\\c\n\x01");
}
