// NCCL topology XML (NCCL_TOPO_FILE / NCCL_TOPO_DUMP_FILE, version 1) to and from a System.
// Read: <cpu> nodes become CPUs; <pci> nodes become GPUs (class 0x03xxxx from NVIDIA, vendor
// 0x10de or none given), NICs (0x02xxxx),
// NVSwitches (0x068000) or switches/bridges; <gpu dev=..> gives the CUDA ordinal and <nvlink>
// children the NVLinks. Static cloud files list GPUs only as PCI functions; those are numbered in
// PCI bus id order, as CUDA does by default (CUDA_DEVICE_ORDER=PCI_BUS_ID). Unknown elements and
// attributes are ignored, since NCCL adds new ones between releases.
#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <map>
#include <set>

#include "topology/cpuset.hpp"
#include "topology/formats.hpp"
#include "topology/xml.hpp"

namespace accord::topo {
namespace {

struct PendingNvlink {
  int gpu;
  std::string target;
  std::string tclass;
  int count;
  int line;
};

class XmlReader {
 public:
  XmlReader(const std::string& name, System* s) : name_(name), s_(s) {}

  Status system(const xml::Element& root) {
    if (root.name != "system") return fail(root, "expected the root element <system>");
    for (const auto& c : root.children) ACCORD_TRY(node(*c, -1));
    ACCORD_TRY(number_gpus());
    return nvlinks();
  }

 private:
  Status fail(const xml::Element& e, const std::string& what) {
    return error(ACCORD_ERR_INVALID_ARGUMENT, "%s:%d: <%s>: %s", name_.c_str(), e.line,
                 e.name.c_str(), what.c_str());
  }

  Status int_attr(const xml::Element& e, const char* key, int* out) {
    const std::string* v = e.attr(key);
    if (!v) return Status();
    char* end = nullptr;
    long x = std::strtol(v->c_str(), &end, 0);
    if (v->empty() || *end || x < -1000000000L || x > 1000000000L)
      return fail(e, format("attribute %s=\"%s\": expected an integer", key, v->c_str()));
    *out = static_cast<int>(x);
    return Status();
  }

  Status node(const xml::Element& e, int parent) {
    if (e.name == "cpu") return cpu(e);
    if (e.name == "pci") return pci(e, parent);
    if (e.name == "nic") return nic(e, parent, nullptr);
    return Status();  // <c2c>, <pcilink> and future tags carry nothing we model yet
  }

  Status cpu(const xml::Element& e) {
    Device d;
    d.kind = DeviceKind::kCpu;
    ACCORD_TRY(int_attr(e, "numaid", &d.numa_node));
    d.name = d.numa_node >= 0 ? "NUMA node " + std::to_string(d.numa_node) : "CPU";
    if (const std::string* aff = e.attr("affinity")) {
      bool ok;
      std::vector<int> cpus = parse_cpu_mask(*aff, &ok);
      if (!ok) return fail(e, "attribute affinity=\"" + *aff + "\": expected a hex CPU mask");
      d.cpu_affinity = format_cpulist(cpus);
    }
    d.cpu_arch = e.attr_or("arch", "");
    d.cpu_vendor = e.attr_or("vendor", "");
    ACCORD_TRY(int_attr(e, "familyid", &d.cpu_family));
    ACCORD_TRY(int_attr(e, "modelid", &d.cpu_model));
    int id = s_->add_device(d);
    for (const auto& c : e.children) ACCORD_TRY(node(*c, id));
    return Status();
  }

  Status pci(const xml::Element& e, int parent) {
    const std::string* busid = e.attr("busid");
    if (!busid) return fail(e, "expected attribute busid=\"dddd:bb:dd.f\"");
    Device d;
    d.parent = parent;
    d.pci_bus_id = normalize_bus_id(*busid);
    if (d.pci_bus_id.empty()) d.pci_bus_id = *busid;  // "fffffff:ffff:ff" and other placeholders
    d.pci_class = e.attr_or("class", "");
    d.pci_speed_gts = std::atof(e.attr_or("link_speed", "0").c_str());
    ACCORD_TRY(int_attr(e, "link_width", &d.pci_width));
    d.numa_node = parent >= 0 ? s_->devices[parent].numa_node : -1;
    const xml::Element* gpu = nullptr;
    const xml::Element* nic_elem = nullptr;
    for (const auto& c : e.children) {
      if (c->name == "gpu") gpu = c.get();
      if (c->name == "nic") nic_elem = c.get();
    }
    const std::string& cls = d.pci_class;
    // A display function from another vendor (the BMC's ASPEED VGA, vendor 0x1a03) is no GPU.
    std::string vendor = e.attr_or("vendor", "0x10de");
    for (char& ch : vendor) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    bool nvidia = vendor == "0x10de" || vendor == "10de";
    if (gpu || (cls.rfind("0x03", 0) == 0 && nvidia)) {
      d.kind = DeviceKind::kGpu;
      d.name = "GPU";
      int id = s_->add_device(d);
      gpu_order_.push_back(id);
      if (gpu) {
        int dev = -1;
        ACCORD_TRY(int_attr(*gpu, "dev", &dev));
        ACCORD_TRY(int_attr(*gpu, "sm", &s_->devices[id].sm));
        if (dev >= 0) dev_of_[id] = dev;
        for (const auto& l : gpu->children) {
          if (l->name != "nvlink") continue;
          PendingNvlink p{id, l->attr_or("target", ""), l->attr_or("tclass", ""), 1, l->line};
          ACCORD_TRY(int_attr(*l, "count", &p.count));
          if (p.count < 1 || p.count > 64)
            return fail(*l, format("attribute count=\"%d\": expected 1..64 bonded NVLinks", p.count));
          if (p.target.empty()) return fail(*l, "expected attribute target=\"<bus id>\"");
          pending_.push_back(p);
        }
      }
      return Status();
    }
    if (nic_elem || cls.rfind("0x02", 0) == 0) return nic(nic_elem ? *nic_elem : e, parent, &d);
    if (cls == "0x068000") {
      d.kind = DeviceKind::kNvSwitch;
      d.name = "NVSwitch";
      s_->add_device(d);
      return Status();
    }
    if (e.children.empty() && cls != "0x060400") return Status();  // a leaf we do not model
    d.kind = DeviceKind::kPciSwitch;
    d.name = "PCI switch " + d.pci_bus_id;
    int id = s_->add_device(d);
    for (const auto& c : e.children) ACCORD_TRY(node(*c, id));
    return Status();
  }

  // A NIC: either a <pci> of class 0x02xxxx (d given) or a bare <nic> under a <cpu>.
  Status nic(const xml::Element& e, int parent, Device* pci_dev) {
    Device d = pci_dev ? *pci_dev : Device();
    d.kind = DeviceKind::kNic;
    d.parent = parent;
    if (parent >= 0) d.numa_node = s_->devices[parent].numa_node;
    d.name = "NIC " + std::to_string(nics_++);
    const xml::Element* nic_elem = e.name == "nic" ? &e : nullptr;
    if (nic_elem)
      for (const auto& c : nic_elem->children)
        if (c->name == "net") {
          d.name = c->attr_or("name", d.name);
          d.nic_speed_gbs = std::atof(c->attr_or("speed", "0").c_str()) / 8000.0;
          break;
        }
    s_->add_device(d);
    return Status();
  }

  Status number_gpus() {
    std::set<int> devs;
    for (auto [id, dev] : dev_of_) devs.insert(dev);
    bool use_dev = dev_of_.size() == gpu_order_.size() && devs.size() == gpu_order_.size() &&
                   (devs.empty() || *devs.rbegin() == static_cast<int>(devs.size()) - 1);
    if (!use_dev)
      std::stable_sort(gpu_order_.begin(), gpu_order_.end(), [&](int a, int b) {
        return bus_id_key(s_->devices[a].pci_bus_id) < bus_id_key(s_->devices[b].pci_bus_id);
      });
    for (size_t i = 0; i < gpu_order_.size(); ++i) {
      Device& g = s_->devices[gpu_order_[i]];
      g.gpu_index = use_dev ? dev_of_[gpu_order_[i]] : static_cast<int>(i);
      g.name = "GPU " + std::to_string(g.gpu_index);
    }
    return Status();
  }

  Status nvlinks() {
    std::map<std::string, int> by_bus;
    for (size_t i = 0; i < s_->devices.size(); ++i)
      if (!s_->devices[i].pci_bus_id.empty()) by_bus[s_->devices[i].pci_bus_id] = static_cast<int>(i);
    int nvswitch = -1;
    std::set<std::pair<int, int>> seen;
    std::map<std::pair<int, int>, size_t> to_switch;  // (gpu, nvswitch) -> index in links
    for (const PendingNvlink& p : pending_) {
      std::string norm = normalize_bus_id(p.target);
      auto it = by_bus.find(norm.empty() ? p.target : norm);
      int target = it == by_bus.end() ? -1 : it->second;
      if (target < 0 && p.tclass == "0x068000") {
        // NVML could not resolve the peer: an NVSwitch the OS does not show (nccl#1182).
        if (nvswitch < 0) {
          Device d;
          d.kind = DeviceKind::kNvSwitch;
          d.name = "NVSwitch";
          nvswitch = s_->add_device(d);
        }
        target = nvswitch;
      }
      // Only GPU peers and NVSwitches: an NVLink to a POWER9 CPU names the CPU's bridge (or a
      // bus id we do not have), which is not a GPU link.
      if (target < 0 || target == p.gpu || (s_->devices[target].kind != DeviceKind::kGpu &&
                                            s_->devices[target].kind != DeviceKind::kNvSwitch))
        continue;
      if (s_->devices[target].kind == DeviceKind::kNvSwitch) {
        // A GPU lists one <nvlink> per NVSwitch (DGX A100: 6 x count 2); when they all fold into
        // one unresolved switch, their counts add up.
        auto [it2, fresh] = to_switch.emplace(std::pair{p.gpu, target}, s_->links.size());
        if (fresh) s_->add_link(p.gpu, target, LinkKind::kNvLink, p.count);
        else s_->links[it2->second].count += p.count;
        continue;
      }
      auto key = std::minmax(p.gpu, target);
      if (!seen.insert(key).second) continue;  // both ends list the same bonded links
      s_->add_link(p.gpu, target, LinkKind::kNvLink, p.count);
    }
    return Status();
  }

  std::string name_;
  System* s_;
  std::vector<int> gpu_order_;
  std::map<int, int> dev_of_;
  std::vector<PendingNvlink> pending_;
  int nics_ = 0;
};

// ---- writer ----

class XmlWriter {
 public:
  explicit XmlWriter(const System& s) : s_(s) {
    // Devices without a bus id get placeholders in domain ffff, as cloud files do for bridges.
    int synth = 0;
    for (const Device& d : s.devices) {
      std::string id = d.pci_bus_id;
      if (id.empty() && d.kind != DeviceKind::kCpu)
        id = format("ffff:%02x:%02x.0", 0xf0 + synth / 32, synth % 32), ++synth;
      bus_.push_back(id);
    }
  }

  std::string run() {
    out_ = "<system version=\"1\">\n";
    std::vector<int> orphans;
    for (size_t i = 0; i < s_.devices.size(); ++i) {
      const Device& d = s_.devices[i];
      if (d.kind == DeviceKind::kCpu) cpu(static_cast<int>(i));
      else if (d.parent < 0 && d.kind != DeviceKind::kNvSwitch) orphans.push_back(static_cast<int>(i));
    }
    if (!orphans.empty()) {
      // NCCL hangs devices it cannot place from a CPU with numaid -1.
      out_ += "  <cpu numaid=\"-1\">\n";
      for (int o : orphans) device(o, 2);
      out_ += "  </cpu>\n";
    }
    return out_ + "</system>\n";
  }

 private:
  void cpu(int i) {
    const Device& d = s_.devices[i];
    out_ += format("  <cpu numaid=\"%d\"", d.numa_node);
    bool ok;
    std::vector<int> cpus = parse_cpulist(d.cpu_affinity, &ok);
    if (ok && !cpus.empty()) out_ += " affinity=\"" + format_cpu_mask(cpus) + "\"";
    if (!d.cpu_arch.empty()) out_ += " arch=\"" + xml::escape(d.cpu_arch) + "\"";
    if (!d.cpu_vendor.empty()) out_ += " vendor=\"" + xml::escape(d.cpu_vendor) + "\"";
    if (d.cpu_family >= 0) out_ += format(" familyid=\"%d\"", d.cpu_family);
    if (d.cpu_model >= 0) out_ += format(" modelid=\"%d\"", d.cpu_model);
    out_ += ">\n";
    children(i, 2);
    out_ += "  </cpu>\n";
  }

  void children(int parent, int depth) {
    for (size_t j = 0; j < s_.devices.size(); ++j)
      if (s_.devices[j].parent == parent) device(static_cast<int>(j), depth);
  }

  void device(int i, int depth) {
    const Device& d = s_.devices[i];
    std::string pad(depth * 2, ' ');
    if (d.kind == DeviceKind::kCpu || d.kind == DeviceKind::kNvSwitch) return;
    std::string cls = d.pci_class;
    if (cls.empty())
      cls = d.kind == DeviceKind::kGpu ? "0x030200" : d.kind == DeviceKind::kNic ? "0x020000" : "0x060400";
    out_ += pad + "<pci busid=\"" + xml::escape(bus_[i]) + "\" class=\"" + cls + "\"";
    if (d.pci_speed_gts > 0) out_ += format(" link_speed=\"%g GT/s\"", d.pci_speed_gts);
    if (d.pci_width > 0) out_ += format(" link_width=\"%d\"", d.pci_width);
    out_ += ">\n";
    if (d.kind == DeviceKind::kGpu) {
      out_ += pad + format("  <gpu dev=\"%d\" sm=\"%d\" rank=\"%d\" gdr=\"0\">\n", d.gpu_index,
                           d.sm, d.gpu_index);
      for (const Link& l : s_.links) {
        if (l.kind != LinkKind::kNvLink || (l.a != i && l.b != i)) continue;
        int other = l.a == i ? l.b : l.a;
        bool sw = s_.devices[other].kind == DeviceKind::kNvSwitch;
        out_ += pad + format("    <nvlink target=\"%s\" count=\"%d\" tclass=\"%s\"/>\n",
                             sw ? "fffffff:ffff:ff" : bus_[other].c_str(), l.count,
                             sw ? "0x068000" : "0x030200");
      }
      out_ += pad + "  </gpu>\n";
    } else if (d.kind == DeviceKind::kNic) {
      out_ += pad + "  <nic>\n" + pad + "    <net name=\"" + xml::escape(d.name) + "\"";
      if (d.nic_speed_gbs > 0) out_ += format(" speed=\"%.0f\"", d.nic_speed_gbs * 8000);
      out_ += "/>\n" + pad + "  </nic>\n";
    }
    children(i, depth + 1);
    out_ += pad + "</pci>\n";
  }

  const System& s_;
  std::vector<std::string> bus_;
  std::string out_;
};

}  // namespace

Status parse_nccl_xml(const std::string& text, const std::string& name, System* out) {
  std::unique_ptr<xml::Element> root;
  ACCORD_TRY(xml::parse(text, name, &root));
  *out = System();
  out->source = name;
  ACCORD_TRY(XmlReader(name, out).system(*root));
  return out->finalize();
}

std::string write_nccl_xml(const System& s) { return XmlWriter(s).run(); }

}  // namespace accord::topo
