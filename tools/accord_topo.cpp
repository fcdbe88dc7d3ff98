// accord-topo: tells a user which GPUs can talk to which, how fast, and what Accord will do about
// it. Without arguments it probes this machine (or loads ACCORD_TOPO_FILE); --file reads any
// supported topology file. Prints text (the default), JSON (schema in topology/README.md) or
// Graphviz, and can convert what it read to Accord JSON or NCCL XML. --runtime says which GPUs
// Accord's collectives would run on (CUDA's, simulated ones, or none and why).
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>

#include "core/settings.hpp"
#include "topology/detect.hpp"
#include "topology/formats.hpp"
#include "topology/report.hpp"
#include "topology/search.hpp"
#include "transport/device/device_runtime.hpp"

namespace {

const char kUsage[] =
    "usage: accord-topo [--file F] [--format text|json|dot] [--dump-json F] [--dump-nccl-xml F]\n"
    "       accord-topo --runtime\n"
    "\n"
    "Shows the GPUs of this machine (or of a described one), which pairs can use peer access\n"
    "and which go through host memory (and why), the NUMA affinity, the rings and trees Accord\n"
    "would build and the all-reduce bandwidth it predicts.\n"
    "\n"
    "  --file F           read a described machine instead of probing: nvidia-smi topo -m or\n"
    "                     topo -p2p output, NCCL topology XML, Accord JSON, a TensorFlow 'DMA:'\n"
    "                     peer matrix, simpleP2P or p2pBandwidthLatencyTest output (detected\n"
    "                     from the content)\n"
    "  --format FMT       text (default), json or dot (Graphviz; the first ring is bold)\n"
    "  --gpus LIST        plan rings and trees over these GPUs only, e.g. 0,1,4,5\n"
    "  --dump-json F      also write the topology as Accord JSON to F\n"
    "  --dump-nccl-xml F  also write it as NCCL topology XML (NCCL_TOPO_FILE format) to F\n"
    "  --runtime          say which GPUs Accord's collectives would use and stop: the device\n"
    "                     runtime (cuda, simulated with ACCORD_SIM_TOPO, or none and why), then\n"
    "                     one line per GPU\n"
    "  --help-env         list the ACCORD_* environment variables\n"
    "  --help             this text\n"
    "\n"
    "Environment: ACCORD_TOPO_FILE loads a file instead of probing; ACCORD_TOPO_DUMP_FILE writes\n"
    "what was detected.\n";

int fail(const accord::Status& st) {
  std::fprintf(stderr, "accord-topo: %s\n", st.message().c_str());
  return 1;
}

bool parse_gpus(const char* text, std::vector<int>* out) {
  std::string s = text;
  size_t pos = 0;
  while (pos <= s.size()) {
    size_t comma = s.find(',', pos);
    std::string item = s.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    char* end = nullptr;
    long v = std::strtol(item.c_str(), &end, 10);
    if (item.empty() || *end || v < 0) return false;
    out->push_back(static_cast<int>(v));
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return true;
}

// --runtime: the device runtime's own description ("cuda: 1 device(s)", "simulated: 4 GPUs of
// FILE", "none: no GPUs (why); ..."), then "GPU0: NAME, PCI BUS, sm_90" per GPU.
int print_runtime() {
  accord::Settings settings;
  accord::Status st = accord::load_settings(&settings);
  if (!st.ok()) return fail(st);
  std::unique_ptr<accord::DeviceRuntime> rt;
  if (!(st = accord::make_device_runtime(settings, &rt)).ok()) return fail(st);
  std::printf("%s\n", rt->description().c_str());
  for (int d = 0; d < rt->device_count(); ++d) {
    accord::DeviceInfo info;
    if (!(st = rt->device_info(d, &info)).ok()) return fail(st);
    std::printf("GPU%d: %s, PCI %s", d, info.name.c_str(), info.pci_bus_id.c_str());
    if (info.sm > 0) std::printf(", sm_%d", info.sm);
    std::printf("\n");
  }
  return std::ferror(stdout) ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace accord::topo;
  std::string file, fmt = "text", dump_json, dump_xml;
  std::vector<int> gpus;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&](std::string* out) {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "accord-topo: %s needs a value\n%s", a.c_str(), kUsage);
        return false;
      }
      *out = argv[++i];
      return true;
    };
    std::string gpu_list;
    if (a == "--help" || a == "-h") {
      std::fputs(kUsage, stdout);
      return 0;
    } else if (a == "--runtime") {
      return print_runtime();
    } else if (a == "--help-env") {
      std::fputs(accord::settings_help().c_str(), stdout);
      return 0;
    } else if (a == "--file") {
      if (!value(&file)) return 2;
    } else if (a == "--format") {
      if (!value(&fmt)) return 2;
      if (fmt != "text" && fmt != "json" && fmt != "dot") {
        std::fprintf(stderr, "accord-topo: --format %s: expected text, json or dot\n", fmt.c_str());
        return 2;
      }
    } else if (a == "--gpus") {
      if (!value(&gpu_list)) return 2;
      if (!parse_gpus(gpu_list.c_str(), &gpus)) {
        std::fprintf(stderr, "accord-topo: --gpus %s: expected GPU indices like 0,1,4,5\n",
                     gpu_list.c_str());
        return 2;
      }
    } else if (a == "--dump-json") {
      if (!value(&dump_json)) return 2;
    } else if (a == "--dump-nccl-xml") {
      if (!value(&dump_xml)) return 2;
    } else {
      std::fprintf(stderr, "accord-topo: unknown argument '%s'\n%s", a.c_str(), kUsage);
      return 2;
    }
  }

  System sys;
  accord::Status st = file.empty() ? detect_system(&sys) : load_system_file(file, &sys);
  if (!st.ok()) return fail(st);
  Plan plan;
  st = plan_collectives(sys, gpus, &plan);
  if (!st.ok()) return fail(st);
  if (!dump_json.empty() && !(st = write_file(dump_json, write_accord_json(sys, &plan))).ok())
    return fail(st);
  if (!dump_xml.empty() && !(st = write_file(dump_xml, write_nccl_xml(sys))).ok()) return fail(st);

  std::string out = fmt == "json"  ? write_accord_json(sys, &plan)
                    : fmt == "dot" ? render_dot(sys, plan)
                                   : render_text(sys, plan);
  std::fputs(out.c_str(), stdout);
  return std::ferror(stdout) ? 1 : 0;
}
