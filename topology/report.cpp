// Text and Graphviz renderings of a System (report.hpp).
#include "topology/report.hpp"

#include <algorithm>
#include <map>
#include <set>

#include "topology/json.hpp"

namespace accord::topo {
namespace {

std::string pad(const std::string& s, size_t w) { return s.size() >= w ? s + " " : s + std::string(w - s.size(), ' '); }

std::string gbs(double v) { return format(v >= 100 ? "%.0f" : v >= 10 ? "%.1f" : "%.2f", v); }

std::string list(const std::vector<int>& v, const char* sep = " ") {
  std::string r;
  for (size_t i = 0; i < v.size(); ++i) r += (i ? sep : "") + std::to_string(v[i]);
  return r;
}

void matrix(const System& s, std::string* o, const char* title,
            std::string (*cell)(const System&, int, int)) {
  const int n = s.gpu_count();
  *o += title;
  *o += "\n" + pad("", 8);
  for (int b = 0; b < n; ++b) *o += pad("GPU" + std::to_string(b), 7);
  *o += "\n";
  for (int a = 0; a < n; ++a) {
    *o += pad("GPU" + std::to_string(a), 8);
    for (int b = 0; b < n; ++b) *o += pad(cell(s, a, b), 7);
    while (!o->empty() && o->back() == ' ') o->pop_back();
    *o += "\n";
  }
  *o += "\n";
}

}  // namespace

std::string render_text(const System& s, const Plan& plan) {
  std::string o = "Accord topology of " + s.source + "\n";
  for (const std::string& note : s.notes) o += "  " + note + "\n";
  const int n = s.gpu_count();
  o += format("%d GPU%s, %d CPU / NUMA node%s\n\n", n, n == 1 ? "" : "s", s.cpu_count(),
              s.cpu_count() == 1 ? "" : "s");
  if (n == 0) o += "No GPUs found: nothing to connect. Collectives here run on host memory.\n\n";
  for (int i = 0; i < n; ++i) {
    const Device& g = s.gpu(i);
    int numa = s.gpu_numa_node(i);
    o += format("GPU%d: %s%s%s, NUMA node %s\n", i, g.name.c_str(),
                g.pci_bus_id.empty() ? "" : ", PCI ", g.pci_bus_id.c_str(),
                numa >= 0 ? std::to_string(numa).c_str() : "unknown");
  }
  if (n > 0) {
    o += "\n";
    matrix(s, &o, "GPU paths (nvidia-smi legend: X self, NV# bonded NVLinks, PIX one PCIe switch, "
                  "PXB several, PHB host bridge, NODE between host bridges, SYS across sockets, ? unknown)",
           [](const System& s, int a, int b) { return path_class_name(s.path(a, b), s.pair(a, b).nvlinks); });
    matrix(s, &o, "Peer access (Y peer-to-peer, N through host memory; * inferred from the path, "
                  "not reported by a driver)",
           [](const System& s, int a, int b) -> std::string {
             if (a == b) return "X";
             return std::string(s.p2p(a, b) ? "Y" : "N") + (s.pair(a, b).p2p_source == "inferred" ? "*" : "");
           });
    matrix(s, &o, "Estimated bandwidth per direction (GB/s)",
           [](const System& s, int a, int b) { return a == b ? std::string("X") : gbs(s.bandwidth_gbs(a, b)); });
  }
  // NUMA affinity: which CPUs, GPUs and NICs each node holds.
  o += "NUMA affinity\n";
  for (size_t d = 0; d < s.devices.size(); ++d) {
    const Device& c = s.devices[d];
    if (c.kind != DeviceKind::kCpu) continue;
    std::vector<int> gpus;
    std::vector<std::string> nics;
    for (int i = 0; i < n; ++i)
      if (s.cpu_of(s.gpus[i]) == static_cast<int>(d)) gpus.push_back(i);
    for (size_t k = 0; k < s.devices.size(); ++k)
      if (s.devices[k].kind == DeviceKind::kNic && s.cpu_of(static_cast<int>(k)) == static_cast<int>(d))
        nics.push_back(s.devices[k].name);
    o += "  " + c.name + ":";
    if (c.socket >= 0) o += format(" socket %d,", c.socket);
    o += " CPUs " + (c.cpu_affinity.empty() ? std::string("unknown") : c.cpu_affinity);
    if (!gpus.empty()) o += "; GPUs " + list(gpus, ",");
    if (!nics.empty()) {
      o += "; NICs";
      for (const std::string& nic : nics) o += " " + nic;
    }
    o += "\n";
  }
  if (s.cpu_count() == 0) o += "  (the source says nothing about CPUs or NUMA nodes)\n";
  if (n < 2) return o;

  o += format("\nRings (%zu channel%s; first ring's slowest hop %s GB/s, %d hop%s at that speed)\n",
              plan.rings.size(), plan.rings.size() == 1 ? "" : "s", gbs(plan.bottleneck_gbs).c_str(),
              plan.bottleneck_hops, plan.bottleneck_hops == 1 ? "" : "s");
  for (size_t c = 0; c < plan.rings.size(); ++c)
    o += format("  ring %zu: %s  (%s GB/s)\n", c, list(plan.rings[c]).c_str(),
                gbs(plan.ring_bandwidth_gbs[c]).c_str());
  o += "Trees (double binary trees, GPUs placed to maximise the slowest edge; parent->child)\n";
  for (size_t t = 0; t < plan.trees.size(); ++t) {
    const Tree& tr = plan.trees[t];
    o += format("  channel %d tree %zu: root %d;", tr.channel, t % 2, tr.root);
    for (auto [p, c] : tr.edges) o += format(" %d->%d", p, c);
    o += format("  (slowest edge %s GB/s)\n", gbs(tr.bandwidth_gbs).c_str());
  }
  o += format("Predicted all-reduce bandwidth: ring bus %s GB/s (algorithm %s GB/s), tree bus %s "
              "GB/s (algorithm %s GB/s)\n",
              gbs(plan.ring_bus_gbs).c_str(), gbs(plan.ring_alg_gbs).c_str(),
              gbs(plan.tree_bus_gbs).c_str(), gbs(plan.tree_alg_gbs).c_str());

  std::string staged;
  for (int a = 0; a < n; ++a)
    for (int b = a + 1; b < n; ++b)
      if (!s.p2p(a, b))
        staged += format("  GPU%d <-> GPU%d: %s\n", a, b, s.p2p_reason(a, b).c_str());
  o += staged.empty() ? "\nEvery GPU pair can use peer access.\n"
                      : "\nGPU pairs that go through host memory:\n" + staged;
  return o;
}

std::string render_dot(const System& s, const Plan& plan) {
  std::string o = "graph accord_topology {\n  label=" + json::quote(s.source) +
                  ";\n  node [shape=box, fontname=\"Helvetica\"];\n  edge [fontname=\"Helvetica\"];\n";
  std::map<int, std::vector<int>> by_cpu;
  for (int i = 0; i < s.gpu_count(); ++i) by_cpu[s.cpu_of(s.gpus[i])].push_back(i);
  for (const auto& [cpu, gpus] : by_cpu) {
    std::string indent = "  ";
    if (cpu >= 0) {
      o += format("  subgraph cluster_cpu%d {\n    label=%s;\n", cpu, json::quote(s.devices[cpu].name).c_str());
      indent = "    ";
    }
    for (int g : gpus)
      o += indent + format("gpu%d [label=%s];\n", g,
                           json::quote("GPU" + std::to_string(g) + "\n" + s.gpu(g).name).c_str());
    if (cpu >= 0) o += "  }\n";
  }
  std::set<std::pair<int, int>> bold;
  if (!plan.rings.empty() && plan.rings[0].size() > 1) {
    const std::vector<int>& r = plan.rings[0];
    for (size_t i = 0; i < r.size(); ++i) bold.insert(std::minmax(r[i], r[(i + 1) % r.size()]));
  }
  for (int a = 0; a < s.gpu_count(); ++a)
    for (int b = a + 1; b < s.gpu_count(); ++b) {
      const PairInfo& p = s.pair(a, b);
      std::string style = bold.count({a, b}) ? "bold" : p.p2p ? "solid" : "dashed";
      o += format("  gpu%d -- gpu%d [label=\"%s %s\", style=%s%s];\n", a, b,
                  path_class_name(p.path, p.nvlinks).c_str(), gbs(p.bandwidth_gbs).c_str(),
                  style.c_str(), bold.count({a, b}) ? ", penwidth=3" : "");
    }
  return o + "}\n";
}

}  // namespace accord::topo
