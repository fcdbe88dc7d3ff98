// accord-topo end to end: every fixture in all three formats exits 0, the JSON parses and has the
// documented keys, a broken file exits non-zero naming the file and line, probing this machine
// (no GPU here) works, and --runtime names the GPUs the collectives would use.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>

#include "fixtures.hpp"
#include "topology/json.hpp"

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

// ENV: assignments put before the command ("ACCORD_SIM_TOPO=... "), or empty.
int run(const std::string& args, std::string* out, const std::string& env = "") {
  const char* bin = std::getenv("ACCORD_TOPO_BIN");
  std::string cmd = env + std::string(bin ? bin : "accord-topo") + " " + args + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return -1;
  char buf[4096];
  out->clear();
  for (size_t n; (n = fread(buf, 1, sizeof buf, p)) > 0;) out->append(buf, n);
  int rc = pclose(p);
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

}  // namespace

TEST(Tool, EveryFixtureInEveryFormat) {
  for (const char* f : kFiles) {
    SCOPED_TRACE(f);
    std::string out;
    std::string file = "--file '" + fixture(f) + "'";
    ASSERT_EQ(run(file, &out), 0) << out;
    EXPECT_NE(out.find("GPU paths"), std::string::npos);
    ASSERT_EQ(run(file + " --format dot", &out), 0) << out;
    EXPECT_EQ(out.rfind("graph accord_topology {", 0), 0u);
    EXPECT_NE(out.find("penwidth=3"), std::string::npos);
    ASSERT_EQ(run(file + " --format json", &out), 0) << out;
    json::Value v;
    accord::Status st = json::parse(out, f, &v);
    ASSERT_TRUE(st.ok()) << st.message();
    const json::Value* gpus = v.find("gpus");
    const json::Value* pairs = v.find("pairs");
    ASSERT_TRUE(gpus && pairs && v.find("rings") && v.find("trees"));
    size_t n = gpus->items.size();
    EXPECT_EQ(pairs->items.size(), n * (n - 1) / 2);
    for (const json::Value& p : pairs->items)
      for (const char* key : {"a", "b", "path", "p2p", "bandwidth_gbs"}) EXPECT_TRUE(p.find(key)) << key;
    EXPECT_EQ(v.find("rings")->items[0].items.size(), n);
  }
}

TEST(Tool, ConvertsAndReadsBack) {
  std::string out;
  std::string dir = testing::TempDir();
  std::string json = dir + "/accord-topo-dgx1.json", xml = dir + "/accord-topo-dgx1.xml";
  ASSERT_EQ(run("--file '" + fixture("dgx1-v100-topo-m.txt") + "' --dump-json " + json +
                    " --dump-nccl-xml " + xml + " --format json",
                &out),
            0)
      << out;
  std::string again;
  ASSERT_EQ(run("--file " + json + " --format json", &again), 0) << again;
  EXPECT_NE(again.find("\"rings\": [[0,3,2,1,5,6,7,4]"), std::string::npos) << again;
  ASSERT_EQ(run("--file " + xml, &again), 0) << again;
}

TEST(Tool, BrokenFileNamesFileAndLine) {
  std::string path = testing::TempDir() + "/accord-topo-broken.txt";
  std::ofstream(path) << "        GPU0    GPU1\nGPU0     X      NV2\nGPU1    NV2     BAD\n";
  std::string out;
  EXPECT_NE(run("--file " + path, &out), 0);
  EXPECT_NE(out.find(path + ":3:"), std::string::npos) << out;
  EXPECT_NE(run("--file /nonexistent.xml", &out), 0);
  EXPECT_NE(run("--format pdf", &out), 0);
}

TEST(Tool, ProbesThisMachine) {
  std::string out;
  ASSERT_EQ(run("", &out), 0) << out;
  EXPECT_NE(out.find("NUMA affinity"), std::string::npos) << out;
  ASSERT_EQ(run("--format json", &out), 0) << out;
  json::Value v;
  EXPECT_TRUE(json::parse(out, "probe", &v).ok());
  ASSERT_EQ(run("--help-env", &out), 0);
  EXPECT_NE(out.find("ACCORD_TOPO_FILE"), std::string::npos);
  ASSERT_EQ(run("--help", &out), 0);
}

TEST(Tool, HonoursTopoFileAndDumpSettings) {
  std::string dump = testing::TempDir() + "/accord-topo-dump.json";
  std::string out;
  ASSERT_EQ(run("", &out), 0);
  std::string env = "ACCORD_TOPO_FILE='" + fixture("ibm-power9-4x-v100-nv3-topo-m.txt") +
                    "' ACCORD_TOPO_DUMP_FILE=" + dump + " ";
  const char* bin = std::getenv("ACCORD_TOPO_BIN");
  std::string cmd = env + (bin ? bin : "accord-topo") + " --format json";
  FILE* p = popen(cmd.c_str(), "r");
  ASSERT_TRUE(p);
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  ASSERT_EQ(pclose(p), 0);
  EXPECT_NE(out.find("\"path\":\"NV3\""), std::string::npos);
  std::ifstream in(dump);
  std::string dumped((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(dumped.find("\"observations\""), std::string::npos);
}

TEST(Tool, RuntimeSaysWhichGpus) {
  std::string out;
  // Simulated GPUs of a file: its GPUs, names and bus ids.
  const std::string file = fixture("autodl-2x-rtx2080ti-pix-p2p-cannot.txt");
  ASSERT_EQ(run("--runtime", &out, "ACCORD_SIM_TOPO='" + file + "' "), 0) << out;
  EXPECT_EQ(out, "simulated: 2 GPUs of " + file +
                     "\nGPU0: NVIDIA GeForce RTX 2080 Ti, PCI 0000:b4:00.0\n"
                     "GPU1: NVIDIA GeForce RTX 2080 Ti, PCI 0000:b5:00.0\n");
  // This machine: CUDA's GPUs, or none and why.
  ASSERT_EQ(run("--runtime", &out, "env -u ACCORD_SIM_TOPO "), 0) << out;
  if (out.rfind("cuda: ", 0) == 0) {
    EXPECT_NE(out.find("\nGPU0: "), std::string::npos) << out;
  } else {
    EXPECT_EQ(out.rfind("none: no GPUs (", 0), 0u) << out;
    EXPECT_NE(out.find("set ACCORD_SIM_TOPO=FILE"), std::string::npos) << out;
  }
  // A file that is not there: an error naming it.
  EXPECT_NE(run("--runtime", &out, "ACCORD_SIM_TOPO=/nonexistent-topology.txt "), 0);
  EXPECT_NE(out.find("/nonexistent-topology.txt"), std::string::npos) << out;
}
