// Accord's own JSON topology file: the model (devices, links, observations), read back without
// loss, plus the derived view documented for `accord-topo --format json` (gpus, pairs, rings,
// trees, predicted), which readers ignore. The schema is in topology/README.md.
#include <cmath>
#include <type_traits>

#include "topology/formats.hpp"
#include "topology/json.hpp"
#include "topology/search.hpp"

namespace accord::topo {
namespace {

using json::number;
using json::quote;

std::string nullable(const std::string& s) { return s.empty() ? "null" : quote(s); }
std::string nullable(int v) { return v < 0 ? "null" : std::to_string(v); }

void write_device(const Device& d, std::string* o) {
  *o += "{\"kind\":" + quote(device_kind_name(d.kind));
  auto str = [&](const char* k, const std::string& v) {
    if (!v.empty()) *o += format(",\"%s\":", k) + quote(v);
  };
  auto num = [&](const char* k, double v, double dflt) {
    if (v != dflt) *o += format(",\"%s\":", k) + number(v);
  };
  num("gpu_index", d.gpu_index, -1);
  num("parent", d.parent, -1);
  str("name", d.name);
  str("pci_bus_id", d.pci_bus_id);
  str("pci_class", d.pci_class);
  num("numa_node", d.numa_node, -1);
  num("socket", d.socket, -1);
  str("cpu_affinity", d.cpu_affinity);
  num("sm", d.sm, 0);
  num("pci_speed_gts", d.pci_speed_gts, 0);
  num("pci_width", d.pci_width, 0);
  if (d.host_bridge) *o += ",\"host_bridge\":true";
  str("cpu_arch", d.cpu_arch);
  str("cpu_vendor", d.cpu_vendor);
  num("cpu_family", d.cpu_family, -1);
  num("cpu_model", d.cpu_model, -1);
  num("nic_speed_gbs", d.nic_speed_gbs, 0);
  if (!d.gpu_paths.empty()) {
    *o += ",\"gpu_paths\":[";
    for (size_t i = 0; i < d.gpu_paths.size(); ++i)
      *o += (i ? "," : "") + quote(path_class_name(d.gpu_paths[i]));
    *o += "]";
  }
  *o += "}";
}

}  // namespace

std::string write_accord_json(const System& s, const Plan* plan) {
  std::string o = "{\n  \"accord_topology\": 1,\n  \"source\": " + quote(s.source) + ",\n";
  o += "  \"notes\": [";
  for (size_t i = 0; i < s.notes.size(); ++i) o += (i ? ", " : "") + quote(s.notes[i]);
  o += "],\n  \"gpus\": [";
  for (int i = 0; i < s.gpu_count(); ++i) {
    const Device& g = s.gpu(i);
    o += (i ? ",\n    " : "\n    ") +
         format("{\"index\":%d,\"name\":%s,\"pci_bus_id\":%s,\"numa_node\":%s}", i,
                quote(g.name).c_str(), nullable(g.pci_bus_id).c_str(),
                nullable(s.gpu_numa_node(i)).c_str());
  }
  o += "],\n  \"pairs\": [";
  bool first = true;
  for (int a = 0; a < s.gpu_count(); ++a)
    for (int b = a + 1; b < s.gpu_count(); ++b) {
      const PairInfo& p = s.pair(a, b);
      o += (first ? "\n    " : ",\n    ") +
           format("{\"a\":%d,\"b\":%d,\"path\":%s,\"p2p\":%s,\"bandwidth_gbs\":%s", a, b,
                  quote(path_class_name(p.path, p.nvlinks)).c_str(), p.p2p ? "true" : "false",
                  number(p.bandwidth_gbs).c_str());
      o += ",\"p2p_source\":" + quote(p.p2p_source);
      if (!p.p2p) o += ",\"reason\":" + quote(p.reason);
      if (p.measured_gbs > 0) o += ",\"measured_gbs\":" + number(p.measured_gbs);
      o += "}";
      first = false;
    }
  o += "],\n";
  if (plan) {
    auto int_list = [](const std::vector<int>& v) {
      std::string r = "[";
      for (size_t i = 0; i < v.size(); ++i) r += (i ? "," : "") + std::to_string(v[i]);
      return r + "]";
    };
    o += "  \"rings\": [";
    for (size_t i = 0; i < plan->rings.size(); ++i) o += (i ? "," : "") + int_list(plan->rings[i]);
    o += "],\n  \"ring_bandwidth_gbs\": [";
    for (size_t i = 0; i < plan->ring_bandwidth_gbs.size(); ++i)
      o += (i ? "," : "") + number(plan->ring_bandwidth_gbs[i]);
    o += "],\n  \"trees\": [";
    for (size_t i = 0; i < plan->trees.size(); ++i) {
      const Tree& t = plan->trees[i];
      o += (i ? ",\n    " : "\n    ") + format("{\"channel\":%d,\"root\":%d,\"bandwidth_gbs\":%s,\"edges\":[",
                                               t.channel, t.root, number(t.bandwidth_gbs).c_str());
      for (size_t e = 0; e < t.edges.size(); ++e)
        o += format("%s[%d,%d]", e ? "," : "", t.edges[e].first, t.edges[e].second);
      o += "]}";
    }
    o += format("],\n  \"predicted\": {\"ring_bus_gbs\":%s,\"ring_alg_gbs\":%s,"
                "\"tree_bus_gbs\":%s,\"tree_alg_gbs\":%s},\n",
                number(plan->ring_bus_gbs).c_str(), number(plan->ring_alg_gbs).c_str(),
                number(plan->tree_bus_gbs).c_str(), number(plan->tree_alg_gbs).c_str());
  }
  o += "  \"devices\": [";
  for (size_t i = 0; i < s.devices.size(); ++i) {
    o += i ? ",\n    " : "\n    ";
    write_device(s.devices[i], &o);
  }
  o += "],\n  \"links\": [";
  for (size_t i = 0; i < s.links.size(); ++i) {
    const Link& l = s.links[i];
    o += (i ? ",\n    " : "\n    ") +
         format("{\"a\":%d,\"b\":%d,\"kind\":%s,\"count\":%d,\"bandwidth_gbs\":%s}", l.a, l.b,
                quote(link_kind_name(l.kind)).c_str(), l.count, number(l.bandwidth_gbs).c_str());
  }
  o += "],\n  \"observations\": [";
  first = true;
  for (const auto& [key, ob] : s.observed) {
    o += (first ? "\n    " : ",\n    ") + format("{\"a\":%d,\"b\":%d", key.first, key.second);
    if (ob.path != PathClass::kUnknown) o += ",\"path\":" + quote(path_class_name(ob.path, ob.nvlinks));
    if (ob.can_access >= 0) o += ob.can_access ? ",\"can_access\":true" : ",\"can_access\":false";
    if (ob.p2p_status != P2pStatus::kUnknown) o += ",\"p2p_status\":" + quote(p2p_status_name(ob.p2p_status));
    if (ob.perf_rank >= 0) o += format(",\"perf_rank\":%d", ob.perf_rank);
    if (ob.measured_gbs) o += ",\"measured_gbs\":" + number(ob.measured_gbs);
    if (ob.measured_bidir_gbs) o += ",\"measured_bidir_gbs\":" + number(ob.measured_bidir_gbs);
    if (ob.measured_staged_gbs) o += ",\"measured_staged_gbs\":" + number(ob.measured_staged_gbs);
    o += "}";
    first = false;
  }
  return o + "]\n}\n";
}

namespace {

class JsonReader {
 public:
  explicit JsonReader(const std::string& name) : name_(name) {}

  Status fail(const json::Value& v, const std::string& what) {
    return error(ACCORD_ERR_INVALID_ARGUMENT, "%s:%d: %s", name_.c_str(), v.line, what.c_str());
  }
  Status get(const json::Value& obj, const char* key, std::string* out) {
    const json::Value* v = obj.find(key);
    if (!v || v->kind == json::Value::kNull) return Status();
    if (v->kind != json::Value::kString) return fail(*v, format("\"%s\": expected a string", key));
    *out = v->string;
    return Status();
  }
  template <typename T>
  Status get(const json::Value& obj, const char* key, T* out) {
    const json::Value* v = obj.find(key);
    if (!v || v->kind == json::Value::kNull) return Status();
    if (v->kind != json::Value::kNumber) return fail(*v, format("\"%s\": expected a number", key));
    if (std::is_integral_v<T> && (v->number != std::floor(v->number) ||
                                  std::fabs(v->number) > 1e9))  // beyond int: undefined cast
      return fail(*v, format("\"%s\": expected an integer", key));
    *out = static_cast<T>(v->number);
    return Status();
  }
  Status get(const json::Value& obj, const char* key, bool* out) {
    const json::Value* v = obj.find(key);
    if (!v || v->kind == json::Value::kNull) return Status();
    if (v->kind != json::Value::kBool) return fail(*v, format("\"%s\": expected true or false", key));
    *out = v->boolean;
    return Status();
  }
  Status array(const json::Value& root, const char* key, const json::Value** out) {
    *out = root.find(key);
    if (*out && (*out)->kind != json::Value::kArray)
      return fail(**out, format("\"%s\": expected an array", key));
    return Status();
  }

  Status device(const json::Value& v, Device* d) {
    if (v.kind != json::Value::kObject) return fail(v, "device: expected an object");
    std::string kind;
    ACCORD_TRY(get(v, "kind", &kind));
    if (!parse_device_kind(kind, &d->kind))
      return fail(v, "device \"kind\": expected gpu, cpu, pci_switch, nvswitch or nic");
    ACCORD_TRY(get(v, "gpu_index", &d->gpu_index));
    ACCORD_TRY(get(v, "parent", &d->parent));
    ACCORD_TRY(get(v, "name", &d->name));
    ACCORD_TRY(get(v, "pci_bus_id", &d->pci_bus_id));
    ACCORD_TRY(get(v, "pci_class", &d->pci_class));
    ACCORD_TRY(get(v, "numa_node", &d->numa_node));
    ACCORD_TRY(get(v, "socket", &d->socket));
    ACCORD_TRY(get(v, "cpu_affinity", &d->cpu_affinity));
    ACCORD_TRY(get(v, "sm", &d->sm));
    ACCORD_TRY(get(v, "pci_speed_gts", &d->pci_speed_gts));
    ACCORD_TRY(get(v, "pci_width", &d->pci_width));
    ACCORD_TRY(get(v, "host_bridge", &d->host_bridge));
    ACCORD_TRY(get(v, "cpu_arch", &d->cpu_arch));
    ACCORD_TRY(get(v, "cpu_vendor", &d->cpu_vendor));
    ACCORD_TRY(get(v, "cpu_family", &d->cpu_family));
    ACCORD_TRY(get(v, "cpu_model", &d->cpu_model));
    ACCORD_TRY(get(v, "nic_speed_gbs", &d->nic_speed_gbs));
    const json::Value* paths = nullptr;
    ACCORD_TRY(array(v, "gpu_paths", &paths));
    if (paths)
      for (const json::Value& p : paths->items) {
        PathClass cls = PathClass::kUnknown;
        int nv;
        if (p.kind != json::Value::kString ||
            (p.string != "?" && !parse_path_class(p.string, &cls, &nv)))
          return fail(p, "gpu_paths: expected X, NV#, PIX, PXB, PHB, NODE, SYS or ?");
        d->gpu_paths.push_back(cls);
      }
    return Status();
  }

  Status system(const json::Value& root, System* s) {
    if (root.kind != json::Value::kObject || !root.find("devices"))
      return fail(root, "expected an Accord topology object with a \"devices\" array");
    ACCORD_TRY(get(root, "source", &s->source));
    const json::Value* notes = nullptr;
    ACCORD_TRY(array(root, "notes", &notes));
    for (const json::Value& v : notes ? notes->items : std::vector<json::Value>{}) {
      if (v.kind != json::Value::kString) return fail(v, "\"notes\": expected strings");
      s->notes.push_back(v.string);
    }
    const json::Value *devices, *links, *obs;
    ACCORD_TRY(array(root, "devices", &devices));
    ACCORD_TRY(array(root, "links", &links));
    ACCORD_TRY(array(root, "observations", &obs));
    const int nd = static_cast<int>(devices->items.size());
    int ngpu = 0;
    for (const json::Value& v : devices->items) {
      Device d;
      ACCORD_TRY(device(v, &d));
      if (d.parent < -1 || d.parent >= nd || d.parent == static_cast<int>(s->devices.size()))
        return fail(v, format("device \"parent\": expected -1 or another device's index 0..%d, "
                              "found %d", nd - 1, d.parent));
      ngpu += d.kind == DeviceKind::kGpu;
      s->devices.push_back(d);
    }
    std::vector<bool> index_used(ngpu);
    for (int i = 0; i < nd; ++i) {
      const Device& d = s->devices[i];
      const json::Value& v = devices->items[i];
      if (d.kind == DeviceKind::kGpu) {
        if (d.gpu_index < 0 || d.gpu_index >= ngpu || index_used[d.gpu_index])
          return fail(v, format("device \"gpu_index\": expected each of 0..%d once (one per GPU), "
                                "found %d", ngpu - 1, d.gpu_index));
        index_used[d.gpu_index] = true;
      }
      int x = i, steps = 0;
      while (x >= 0 && steps++ <= nd) x = s->devices[x].parent;
      if (x >= 0) return fail(v, "device \"parent\": the parents of this device form a cycle");
    }
    for (const json::Value& v : links ? links->items : std::vector<json::Value>{}) {
      Link l;
      std::string kind;
      ACCORD_TRY(get(v, "a", &l.a));
      ACCORD_TRY(get(v, "b", &l.b));
      ACCORD_TRY(get(v, "kind", &kind));
      ACCORD_TRY(get(v, "count", &l.count));
      ACCORD_TRY(get(v, "bandwidth_gbs", &l.bandwidth_gbs));
      if (!parse_link_kind(kind, &l.kind))
        return fail(v, "link \"kind\": expected pci, nvlink or cpu_interconnect");
      if (l.a < 0 || l.a >= nd || l.b < 0 || l.b >= nd || l.a == l.b)
        return fail(v, format("link: expected \"a\" and \"b\" to be two device indices 0..%d",
                              nd - 1));
      s->links.push_back(l);
    }
    for (const json::Value& v : obs ? obs->items : std::vector<json::Value>{}) {
      int a = -1, b = -1;
      std::string path, status;
      PairObservation o;
      bool access = false;
      ACCORD_TRY(get(v, "a", &a));
      ACCORD_TRY(get(v, "b", &b));
      ACCORD_TRY(get(v, "path", &path));
      if (!path.empty() && !parse_path_class(path, &o.path, &o.nvlinks))
        return fail(v, "\"path\": expected X, NV#, PIX, PXB, PHB, NODE or SYS");
      if (v.find("can_access")) {
        ACCORD_TRY(get(v, "can_access", &access));
        o.can_access = access;
      }
      ACCORD_TRY(get(v, "p2p_status", &status));
      if (!status.empty() && !parse_p2p_status(status, &o.p2p_status))
        return fail(v, "\"p2p_status\": expected OK, CNS, GNS, TNS, DR, NS or U");
      ACCORD_TRY(get(v, "perf_rank", &o.perf_rank));
      ACCORD_TRY(get(v, "measured_gbs", &o.measured_gbs));
      ACCORD_TRY(get(v, "measured_bidir_gbs", &o.measured_bidir_gbs));
      ACCORD_TRY(get(v, "measured_staged_gbs", &o.measured_staged_gbs));
      if (a < 0 || a >= ngpu || b < 0 || b >= ngpu)
        return fail(v, format("observation: expected \"a\" and \"b\" to be GPU indices 0..%d",
                              ngpu - 1));
      s->observed[{a, b}] = o;
    }
    return Status();
  }

 private:
  std::string name_;
};

}  // namespace

Status parse_accord_json(const std::string& text, const std::string& name, System* out) {
  json::Value root;
  ACCORD_TRY(json::parse(text, name, &root));
  *out = System();
  out->source = name;
  ACCORD_TRY(JsonReader(name).system(root, out));
  // finalize()'s messages name the file being read, not the "source" stored in it.
  std::string stored = out->source;
  out->source = name;
  Status st = out->finalize();
  out->source = stored;
  return st;
}

}  // namespace accord::topo
