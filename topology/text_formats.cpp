// Readers for the text that tools print about GPU pairs: nvidia-smi topo -m (with or without NIC
// rows, NUMA columns; tabs or spaces), nvidia-smi topo -p2p r|w|rw|p, TensorFlow's peer-access log
// (the "DMA:" matrix and "cannot enable peer access" lines), and the CUDA samples simpleP2P and
// p2pBandwidthLatencyTest. One file may hold several blocks (a post that pastes topo -m, then
// topo -p2p, then the bandwidth test); each block adds what it knows to one collection, which is
// then turned into a System. Prefixes (indentation, log headers, shell prompts) are tolerated
// because real files are pasted from Markdown and logs.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <set>
#include <sstream>

#include "topology/formats.hpp"

namespace accord::topo {
namespace {

using Tokens = std::vector<std::string>;

// nvidia-smi on a terminal underlines the topo -m / -p2p header ("\x1b[4mGPU0 ... ID\x1b[0m"), and
// captures made with script(1) or a CI log keep those escapes: drop CSI sequences (ESC [ ... final).
std::string strip_ansi(const std::string& l) {
  if (l.find('\x1b') == std::string::npos) return l;
  std::string out;
  for (size_t i = 0; i < l.size(); ++i) {
    if (l[i] != '\x1b') {
      out += l[i];
      continue;
    }
    if (i + 1 < l.size() && l[i + 1] == '[') {
      i += 2;
      while (i < l.size() && !(l[i] >= 0x40 && l[i] <= 0x7e)) ++i;  // parameters, then the final byte
    }
  }
  return out;
}

Tokens split(const std::string& line) {
  Tokens t;
  std::istringstream in(line);
  for (std::string w; in >> w;) t.push_back(w);
  return t;
}

bool is_int(const std::string& s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// A decimal that strtol saturates instead of overflowing (atoi would be undefined).
long to_long(const std::string& s) { return std::strtol(s.c_str(), nullptr, 10); }

bool is_number(const std::string& s, double* v) {
  char* end = nullptr;
  *v = std::strtod(s.c_str(), &end);
  return !s.empty() && end && *end == '\0';
}

// Index in "GPU12" (or "GPU12)"), else -1.
int gpu_label(const std::string& s) {
  if (s.rfind("GPU", 0) != 0) return -1;
  size_t n = 3;
  while (n < s.size() && isdigit(static_cast<unsigned char>(s[n]))) ++n;
  return n > 3 && n < 3 + 9 ? std::atoi(s.c_str() + 3) : -1;  // 9 digits cannot overflow
}

// More GPUs than any machine has: a garbled number, not a GPU (the System would be n^2 pairs).
constexpr long kMaxGpuOrdinal = 4095;

struct Nic {
  std::string label;
  std::map<int, PathClass> paths;
};

// Everything the text said, before it becomes a System.
struct Collected {
  int ngpu = 0;
  std::map<int, std::string> names, bus_ids, affinity;
  std::map<std::string, std::string> nic_labels;  // "NIC0" -> "mlx5_0" from the NIC Legend
  std::map<int, int> numa, sm;
  std::vector<Nic> nics;
  std::map<std::pair<int, int>, PairObservation> obs;
  bool any = false;
  long bad_ordinal = -1;  // an ordinal beyond kMaxGpuOrdinal (garbage), reported by the parser
  void saw_gpu(long i) {
    if (i < 0 || i > kMaxGpuOrdinal) bad_ordinal = i;
    else ngpu = std::max(ngpu, static_cast<int>(i) + 1);
  }
};

class TextParser {
 public:
  TextParser(const std::string& text, const std::string& name) : name_(name) {
    std::istringstream in(text);
    for (std::string l; std::getline(in, l);) {
      if (!l.empty() && l.back() == '\r') l.pop_back();
      lines_.push_back(strip_ansi(l));
    }
  }

  Status run(Collected* c) {
    c_ = c;
    for (size_t i = 0; i < lines_.size(); ++i) {
      ACCORD_TRY(line(i));
      if (c_->bad_ordinal >= 0)
        return fail(i, format("GPU %ld is out of range: expected a GPU ordinal 0..%ld",
                              c_->bad_ordinal, kMaxGpuOrdinal));
    }
    return Status();
  }

 private:
  Status fail(size_t i, const std::string& what) {
    if (i >= lines_.size())  // the block ran into the end of the file (cut short)
      return error(ACCORD_ERR_INVALID_ARGUMENT, "%s:%zu: the file ends here: %s", name_.c_str(),
                   lines_.size(), what.c_str());
    return error(ACCORD_ERR_INVALID_ARGUMENT, "%s:%zu: %s", name_.c_str(), i + 1, what.c_str());
  }

  Status line(size_t& i) {
    const std::string& l = lines_[i];
    Tokens t = split(l);
    if (t.empty()) return Status();
    if (l.find("topo -m") != std::string::npos || l.find("topo --matrix") != std::string::npos)
      p2p_mode_.clear();  // a new command: an earlier -p2p mode no longer applies
    if (size_t p = l.find("topo -p2p"); p != std::string::npos) {
      Tokens rest = split(l.substr(p + 9));
      p2p_mode_ = rest.empty() ? "" : rest[0];
    }
    if (gpu_label(t[0]) == 0 && t[0] == "GPU0" &&
        (t.size() == 1 || !is_cell(t[1])))
      return matrix(i, t);
    if (t.size() >= 2 && t[0].size() > 4 && t[0].rfind("NIC", 0) == 0 && t[0].back() == ':' &&
        t.size() == 2) {
      c_->nic_labels[t[0].substr(0, t[0].size() - 1)] = t[1];
      return Status();
    }
    // Markers must open the line (after indentation), so prose that mentions them is skipped.
    std::string lead = l.substr(l.find_first_not_of(" \t"));
    auto opens = [&](const char* marker) { return lead.rfind(marker, 0) == 0; };
    // A log message: what follows a log prefix ("I tensorflow/...gpu_init.cc:59] "), else the line.
    size_t close = l.find("] ");
    std::string msg = close == std::string::npos ? lead : l.substr(close + 2);
    msg.erase(0, msg.find_first_not_of(" \t"));
    auto says = [&](const char* marker) { return msg.rfind(marker, 0) == 0; };
    // simpleP2P; CUDA 5-7 wrote "Peer-to-Peer (P2P) access from".
    if (opens("> Peer access from") || opens("Peer access from") ||
        opens("> Peer-to-Peer (P2P) access from") || opens("Peer-to-Peer (P2P) access from"))
      return simple_p2p(i, l);
    // TensorFlow 1.x, for each ordered pair without peer access.
    static constexpr char kNoPeer[] = "Peer access not supported between device ordinal";
    if (says(kNoPeer)) {
      int a = -1, b = -1;
      // TensorFlow 1.x prints "ordinals"; accept the singular too.
      size_t at = msg.find_first_of("0123456789-", sizeof(kNoPeer) - 1);
      if (at == std::string::npos ||
          std::sscanf(msg.c_str() + at, "%d and %d", &a, &b) != 2 || a < 0 || b < 0)
        return fail(i, "expected 'Peer access not supported between device ordinals A and B'");
      set_access(a, b, 0);
      return Status();
    }
    if (size_t p = l.find("CUDA-capable device count:"); p != std::string::npos) {
      long n = std::strtol(l.c_str() + p + 26, nullptr, 10);
      if (n > 0) c_->saw_gpu(n - 1), c_->any = true;
      return Status();
    }
    if (t[0] == "Device:" && t.size() >= 3) return bandwidth_device(i, l);
    if (t[0].rfind("Device=", 0) == 0) return bandwidth_access(i, t);
    if (opens("P2P Connectivity Matrix")) return numeric_matrix(i, 'c');
    if ((opens("Unidirectional P2P=") || opens("Bidirectional P2P=")) &&
        l.find("Bandwidth") != std::string::npos) {
      bool bi = l.find("Bidirectional") != std::string::npos;
      bool enabled = l.find("P2P=Enabled") != std::string::npos;
      return numeric_matrix(i, bi ? (enabled ? 'b' : '-') : (enabled ? 'u' : 'd'));
    }
    if (size_t p = l.find("cudaMemcpyPeer / cudaMemcpy between GPU"); p != std::string::npos)
      return memcpy_peer(l.substr(p));
    if (says("cannot enable peer access from device ordinal")) {
      int a = -1, b = -1;
      if (std::sscanf(msg.c_str(), "cannot enable peer access from device ordinal %d to device "
                      "ordinal %d", &a, &b) != 2 || a < 0 || b < 0)
        return fail(i, "expected 'cannot enable peer access from device ordinal A to device "
                       "ordinal B'");
      set_access(a, b, 0);
      return Status();
    }
    if (size_t p = l.find("DMA:"); p != std::string::npos) {
      Tokens h = split(l.substr(p + 4));
      if (!h.empty() && is_int(h[0])) return dma_matrix(i, l.substr(p + 4));
    }
    if (l.find("edge matrix:") != std::string::npos && i + 1 < lines_.size()) {
      std::string next = lines_[i + 1];
      size_t b = next.find("] ");
      return dma_matrix(++i, b == std::string::npos ? next : next.substr(b + 2));
    }
    if (size_t p = l.find("physical GPU (device: "); p != std::string::npos)
      tf_device(l.substr(p + 13));
    else if (size_t q = l.find("-> (device: "); q != std::string::npos)  // TensorFlow 1.x
      tf_device(l.substr(q + 3));
    return Status();
  }

  static bool is_cell(const std::string& s) {
    PathClass p;
    int nv;
    P2pStatus st;
    return parse_path_class(s, &p, &nv) || parse_p2p_status(s, &st);
  }

  void set_access(long a, long b, int v) {
    c_->saw_gpu(a);
    c_->saw_gpu(b);
    if (c_->bad_ordinal >= 0 || a < 0 || b < 0) return;
    c_->obs[{a, b}].can_access = v;
    c_->any = true;
  }

  // nvidia-smi topo -m or topo -p2p: a header of column labels, then one row per device.
  Status matrix(size_t& i, const Tokens& header) {
    Tokens cols, trailing;
    size_t k = 0;
    for (; k < header.size(); ++k) {
      const std::string& w = header[k];
      bool next_aff = k + 1 < header.size() && header[k + 1] == "Affinity";
      if (((w == "CPU" || w == "NUMA") && next_aff) ||
          (w == "GPU" && k + 1 < header.size() && header[k + 1] == "NUMA"))
        break;
      cols.push_back(w);
    }
    for (; k < header.size(); ++k) {
      if (header[k] == "CPU" || header[k] == "NUMA") trailing.push_back(header[k]), ++k;
      else if (header[k] == "GPU") trailing.push_back("GPU NUMA ID"), k += 2;
    }
    int next_gpu = 0;
    for (const std::string& col : cols)
      if (int g = gpu_label(col); g >= 0 && g != next_gpu++)
        return fail(i, format("expected GPU%d in the header, found %s (nvidia-smi numbers GPU "
                              "columns from GPU0 without gaps)", next_gpu - 1, col.c_str()));
    int kind = 0;  // 1 = topo -m paths, 2 = p2p statuses
    std::set<std::string> rows;
    for (++i; i < lines_.size(); ++i) {
      Tokens t = split(lines_[i]);
      if (t.empty() || std::find(cols.begin(), cols.end(), t[0]) == cols.end()) break;
      rows.insert(t[0]);
      if (t.size() < cols.size() + 1)
        return fail(i, format("row %s has %zu cells, expected %zu (one per column of the header "
                              "above)", t[0].c_str(), t.size() - 1, cols.size()));
      int row_gpu = gpu_label(t[0]);
      Nic* nic = nullptr;
      if (row_gpu < 0) {
        // The same NIC row again (a post pasting topo -m twice) is the same NIC.
        auto same = std::find_if(c_->nics.begin(), c_->nics.end(),
                                 [&](const Nic& n) { return n.label == t[0]; });
        if (same == c_->nics.end()) same = c_->nics.insert(c_->nics.end(), Nic{t[0], {}});
        nic = &*same;
      } else {
        c_->saw_gpu(row_gpu);
      }
      for (size_t j = 0; j < cols.size(); ++j) {
        const std::string& cell = t[j + 1];
        int col_gpu = gpu_label(cols[j]);
        if (cell == "X") continue;
        PathClass p;
        int nv = 0;
        P2pStatus st;
        if (kind != 2 && parse_path_class(cell, &p, &nv)) {
          kind = 1;
          if (nic && col_gpu >= 0) nic->paths[col_gpu] = p;
          if (row_gpu >= 0 && col_gpu >= 0) {
            c_->obs[{row_gpu, col_gpu}].path = p;
            c_->obs[{row_gpu, col_gpu}].nvlinks = nv;
          }
        } else if (kind != 1 && parse_p2p_status(cell, &st)) {
          kind = 2;
          if (row_gpu >= 0 && col_gpu >= 0 && p2p_mode_ != "n" && p2p_mode_ != "a") {
            P2pStatus& cur = c_->obs[{row_gpu, col_gpu}].p2p_status;
            if (cur == P2pStatus::kUnknown || cur == P2pStatus::kOk) cur = st;
          }
        } else {
          return fail(i, format("column %s: expected %s, found '%s'", cols[j].c_str(),
                                kind == 2 ? "X, OK, CNS, GNS, TNS, NS or U"
                                          : "X, NV#, PIX, PXB, PHB, NODE or SYS",
                                cell.c_str()));
        }
      }
      if (row_gpu < 0) continue;
      for (size_t j = 0; j < trailing.size() && cols.size() + 1 + j < t.size(); ++j) {
        const std::string& v = t[cols.size() + 1 + j];
        if (trailing[j] == "CPU" && v != "N/A") c_->affinity[row_gpu] = v;
        if (trailing[j] == "NUMA" && is_int(v)) c_->numa[row_gpu] = std::atoi(v.c_str());
      }
    }
    // Every GPU column has its row (a file cut short does not).
    for (const std::string& col : cols)
      if (gpu_label(col) >= 0 && !rows.count(col))
        return fail(i, format("expected the row of %s (the header above lists %s..%s)",
                              col.c_str(), cols.front().c_str(), cols.back().c_str()));
    --i;
    c_->any = true;
    return Status();
  }

  // "> Peer access from TITAN X (Pascal) (GPU0) -> GeForce GTX TITAN Z (GPU1) : No"
  Status simple_p2p(size_t i, const std::string& l) {
    size_t from = l.find("access from") + 11, arrow = l.find(" -> ", from);
    size_t colon = l.rfind(" : ");
    if (arrow == std::string::npos || colon == std::string::npos || colon < arrow)
      return fail(i, "expected '> Peer access from NAME (GPUa) -> NAME (GPUb) : Yes|No'");
    auto side = [&](std::string s, int* gpu) {
      size_t open = s.rfind("(GPU");
      *gpu = open == std::string::npos ? -1 : gpu_label(s.substr(open + 1));
      std::string name = open == std::string::npos ? s : s.substr(0, open);
      name.erase(0, name.find_first_not_of(' '));
      name.erase(name.find_last_not_of(' ') + 1);
      return name;
    };
    int a, b;
    std::string na = side(l.substr(from, arrow - from), &a);
    std::string nb = side(l.substr(arrow + 4, colon - arrow - 4), &b);
    Tokens ans = split(l.substr(colon + 3));
    if (a < 0 || b < 0 || ans.empty() || (ans[0] != "Yes" && ans[0] != "No"))
      return fail(i, "expected '> Peer access from NAME (GPUa) -> NAME (GPUb) : Yes|No'");
    c_->names[a] = na;
    c_->names[b] = nb;
    set_access(a, b, ans[0] == "Yes");
    return Status();
  }

  // "Device: 0, NVIDIA A100-SXM4-80GB, pciBusID: 26, pciDeviceID: 0, pciDomainID:0"
  Status bandwidth_device(size_t i, const std::string& l) {
    int dev = -1;
    unsigned bus = 0, slot = 0, dom = 0;
    size_t p = l.find("Device:");
    if (std::sscanf(l.c_str() + p, "Device: %d,", &dev) != 1 || dev < 0)
      return fail(i, "expected 'Device: N, NAME, pciBusID: B, pciDeviceID: D, pciDomainID:M'");
    size_t c1 = l.find(',', p), c2 = l.find(", pciBusID:", p);
    if (c1 != std::string::npos && c2 != std::string::npos && c2 > c1) {
      c_->names[dev] = l.substr(c1 + 2, c2 - c1 - 2);
      if (std::sscanf(l.c_str() + c2, ", pciBusID: %x, pciDeviceID: %x, pciDomainID:%x", &bus,
                      &slot, &dom) == 3)
        c_->bus_ids[dev] = normalize_bus_id(format("%x:%x:%x.0", dom, bus, slot));
    }
    c_->saw_gpu(dev);
    c_->any = true;
    return Status();
  }

  // "Device=0 CAN Access Peer Device=1" / "CANNOT"
  Status bandwidth_access(size_t i, const Tokens& t) {
    if (t.size() != 5 || t[2] != "Access" || t[4].rfind("Device=", 0) != 0 ||
        (t[1] != "CAN" && t[1] != "CANNOT") || !is_int(t[0].substr(7)) || !is_int(t[4].substr(7)))
      return fail(i, "expected 'Device=A CAN|CANNOT Access Peer Device=B'");
    set_access(to_long(t[0].substr(7)), to_long(t[4].substr(7)), t[1] == "CAN");
    return Status();
  }

  // p2pBandwidthLatencyTest matrices: "D\D 0 1 .." then "r v v ..". kind: c connectivity,
  // u/d unidirectional enabled/disabled, b/- bidirectional enabled/disabled.
  Status numeric_matrix(size_t& i, char kind) {
    if (i + 1 >= lines_.size()) return fail(i, "expected a 'D\\D 0 1 ...' header line");
    // Some posts title an nvidia-smi topo -p2p matrix "P2P Connectivity Matrix": let it be read as one.
    if (Tokens next = split(lines_[i + 1]); !next.empty() && next[0] == "GPU0") return Status();
    Tokens h = split(lines_[++i]);
    if (h.empty() || h[0] != "D\\D") return fail(i, "expected a 'D\\D 0 1 ...' header line");
    size_t n = h.size() - 1, rows = 0;
    for (size_t j = 1; j < h.size(); ++j)
      if (!is_int(h[j])) return fail(i, "expected GPU ordinals after 'D\\D', found '" + h[j] + "'");
    for (++i; i < lines_.size(); ++i, ++rows) {
      Tokens t = split(lines_[i]);
      if (t.empty() || !is_int(t[0])) break;
      if (t.size() != n + 1)
        return fail(i, format("matrix row %s has %zu values, expected %zu", t[0].c_str(),
                              t.size() - 1, n));
      long a = to_long(t[0]);
      for (size_t j = 0; j < n; ++j) {
        double v;
        if (!is_number(t[j + 1], &v)) return fail(i, "expected a number, found '" + t[j + 1] + "'");
        long b = to_long(h[j + 1]);
        c_->saw_gpu(std::max(a, b));
        if (c_->bad_ordinal >= 0) return fail(i, format("GPU %ld is out of range", c_->bad_ordinal));
        if (a == b) continue;
        PairObservation& o = c_->obs[{a, b}];
        if (kind == 'c') o.can_access = v != 0;
        if (kind == 'u') o.measured_gbs = v;
        if (kind == 'b') o.measured_bidir_gbs = v;
        if (kind == 'd') o.measured_staged_gbs = v;
      }
    }
    if (rows != n)
      return fail(i, format("expected %zu matrix rows (one per column of the 'D\\D' header), "
                            "found %zu", n, rows));
    --i;
    c_->any = true;
    return Status();
  }

  // simpleP2P: "cudaMemcpyPeer / cudaMemcpy between GPU0 and GPU1: 236.01GB/s"
  Status memcpy_peer(const std::string& s) {
    int a, b;
    double gbs;
    if (std::sscanf(s.c_str(), "cudaMemcpyPeer / cudaMemcpy between GPU%d and GPU%d: %lf", &a, &b,
                    &gbs) == 3 && a >= 0 && b >= 0) {
      c_->saw_gpu(std::max(a, b));
      if (c_->obs[{a, b}].measured_gbs == 0) c_->obs[{a, b}].measured_gbs = gbs;
    }
    return Status();
  }

  // TensorFlow: "DMA: 0 1 2 3" then rows "0:   Y Y N N" (each after a log prefix "...] ").
  Status dma_matrix(size_t& i, const std::string& header) {
    Tokens h = split(header);
    for (const std::string& w : h)
      if (!is_int(w)) return fail(i, "expected GPU ordinals after 'DMA:', found '" + w + "'");
    size_t rows = 0;
    for (++i; i < lines_.size(); ++i, ++rows) {
      std::string l = lines_[i];
      size_t b = l.find("] ");
      Tokens t = split(b == std::string::npos ? l : l.substr(b + 2));
      if (t.empty() || t[0].back() != ':' || !is_int(t[0].substr(0, t[0].size() - 1))) break;
      if (t.size() != h.size() + 1)
        return fail(i, format("row %s has %zu entries, expected %zu (Y or N)", t[0].substr(0, t[0].size() - 1).c_str(),
                              t.size() - 1, h.size()));
      long a = to_long(t[0]);
      for (size_t j = 0; j < h.size(); ++j) {
        if (t[j + 1] != "Y" && t[j + 1] != "N")
          return fail(i, "expected Y or N, found '" + t[j + 1] + "'");
        long col = to_long(h[j]);
        c_->saw_gpu(std::max(a, col));
        if (c_->bad_ordinal >= 0) return fail(i, format("GPU %ld is out of range", c_->bad_ordinal));
        if (a != col) set_access(a, col, t[j + 1] == "Y");
      }
    }
    if (rows != h.size())
      return fail(i, format("expected %zu rows 'N: Y|N ...' (one per ordinal in the header), "
                            "found %zu", h.size(), rows));
    --i;
    c_->any = true;
    return Status();
  }

  // "(device: 0, name: Tesla K80, pci bus id: 0000:04:00.0, compute capability: 3.7)", after
  // "physical GPU " (TensorFlow 2) or "-> " (TensorFlow 1, without the compute capability).
  void tf_device(const std::string& s) {
    int dev = -1;
    if (std::sscanf(s.c_str(), "(device: %d,", &dev) != 1 || dev < 0) return;
    size_t n = s.find("name: "), b = s.find(", pci bus id: ");
    if (n != std::string::npos && b != std::string::npos && b > n) {
      c_->names[dev] = s.substr(n + 6, b - n - 6);
      std::string id = s.substr(b + 14);
      id = id.substr(0, id.find_first_of(",) \t"));
      if (std::string norm = normalize_bus_id(id); !norm.empty()) c_->bus_ids[dev] = norm;
    }
    size_t cc = s.find("compute capability: ");
    if (cc != std::string::npos) {
      double v = std::atof(s.c_str() + cc + 20);
      if (v > 0 && v < 100) c_->sm[dev] = static_cast<int>(v * 10 + 0.5);
    }
    c_->saw_gpu(dev);
  }

  std::string name_;
  std::vector<std::string> lines_;
  Collected* c_ = nullptr;
  std::string p2p_mode_;
};

void build(const Collected& c, System* s) {
  // CPUs: one per NUMA node (or, without a NUMA column, per CPU affinity) that GPUs hang from.
  std::map<std::string, int> cpus;
  std::vector<int> parent(c.ngpu, -1);
  for (int g = 0; g < c.ngpu; ++g) {
    auto numa = c.numa.find(g);
    auto aff = c.affinity.find(g);
    if (numa == c.numa.end() && aff == c.affinity.end()) continue;
    std::string key = numa != c.numa.end() ? "n" + std::to_string(numa->second) : "a" + aff->second;
    if (!cpus.count(key)) {
      Device cpu;
      cpu.kind = DeviceKind::kCpu;
      cpu.numa_node = numa != c.numa.end() ? numa->second : -1;
      cpu.name = cpu.numa_node >= 0 ? "NUMA node " + std::to_string(cpu.numa_node)
                                    : "CPU " + std::to_string(cpus.size());
      if (aff != c.affinity.end()) cpu.cpu_affinity = aff->second;
      cpus[key] = s->add_device(cpu);
    }
    parent[g] = cpus[key];
  }
  // GPUs that a PIX cell joins share a switch; this keeps the PCI tree meaningful in NCCL XML.
  std::vector<int> group(c.ngpu);
  for (int g = 0; g < c.ngpu; ++g) group[g] = g;
  for (const auto& [k, o] : c.obs)
    if (o.path == PathClass::kPix && parent[k.first] >= 0 && parent[k.first] == parent[k.second])
      group[std::max(group[k.first], group[k.second])] = std::min(group[k.first], group[k.second]);
  for (int g = 0; g < c.ngpu; ++g) group[g] = group[group[g]];
  std::map<int, int> switches;
  for (int g = 0; g < c.ngpu; ++g)
    if (group[g] != g && !switches.count(group[g])) {
      Device sw;
      sw.kind = DeviceKind::kPciSwitch;
      sw.name = "PCIe switch";
      sw.parent = parent[g];
      switches[group[g]] = s->add_device(sw);
    }
  std::vector<int> dev(c.ngpu);
  for (int g = 0; g < c.ngpu; ++g) {
    Device d;
    d.gpu_index = g;
    d.name = c.names.count(g) ? c.names.at(g) : "GPU " + std::to_string(g);
    if (c.bus_ids.count(g)) d.pci_bus_id = c.bus_ids.at(g);
    if (c.numa.count(g)) d.numa_node = c.numa.at(g);
    if (c.affinity.count(g)) d.cpu_affinity = c.affinity.at(g);
    if (c.sm.count(g)) d.sm = c.sm.at(g);
    d.parent = switches.count(group[g]) ? switches[group[g]] : parent[g];
    dev[g] = s->add_device(d);
  }
  // NV# cells become links; more bonded links per GPU than a GPU has means an NVSwitch.
  std::vector<int> nv_sum(c.ngpu), nv_max(c.ngpu);
  for (const auto& [k, o] : c.obs)
    if (o.path == PathClass::kNvLink) {
      nv_sum[k.first] += o.nvlinks;
      nv_max[k.first] = std::max(nv_max[k.first], o.nvlinks);
    }
  bool nvswitch = std::any_of(nv_sum.begin(), nv_sum.end(), [](int n) { return n > kMaxNvLinksPerGpu; });
  if (nvswitch) {
    Device nvs;
    nvs.kind = DeviceKind::kNvSwitch;
    nvs.name = "NVSwitch";
    int id = s->add_device(nvs);
    for (int g = 0; g < c.ngpu; ++g)
      if (nv_max[g]) s->add_link(dev[g], id, LinkKind::kNvLink, nv_max[g]);
  } else {
    for (const auto& [k, o] : c.obs)
      if (o.path == PathClass::kNvLink && k.first < k.second)
        s->add_link(dev[k.first], dev[k.second], LinkKind::kNvLink, o.nvlinks);
  }
  for (const Nic& n : c.nics) {
    Device d;
    d.kind = DeviceKind::kNic;
    d.name = c.nic_labels.count(n.label) ? c.nic_labels.at(n.label) : n.label;
    d.gpu_paths.assign(c.ngpu, PathClass::kUnknown);
    PathClass best = PathClass::kUnknown;
    for (const auto& [g, p] : n.paths) {
      if (g >= c.ngpu) continue;
      d.gpu_paths[g] = p;
      if (p < best && parent[g] >= 0) best = p, d.parent = parent[g];
    }
    if (best > PathClass::kNode) d.parent = -1;
    if (d.parent >= 0) d.numa_node = s->devices[d.parent].numa_node;
    s->add_device(d);
  }
  s->observed = c.obs;
}

}  // namespace

Status parse_text_logs(const std::string& text, const std::string& name, System* out) {
  Collected c;
  TextParser parser(text, name);
  ACCORD_TRY(parser.run(&c));
  for (const auto& [k, o] : c.obs) c.saw_gpu(std::max(k.first, k.second));  // build() indexes by them
  if (!c.any || c.ngpu == 0)
    return error(ACCORD_ERR_INVALID_ARGUMENT,
                 "%s:1: no topology found in the file: expected nvidia-smi topo -m or topo -p2p output, a "
                 "TensorFlow 'DMA:' peer matrix, simpleP2P or p2pBandwidthLatencyTest output, NCCL "
                 "topology XML (<system>) or Accord JSON ({...})",
                 name.c_str());
  *out = System();
  out->source = name;
  build(c, out);
  return out->finalize();
}

}  // namespace accord::topo
