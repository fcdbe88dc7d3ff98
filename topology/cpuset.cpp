// Conversions between cpulists and NCCL affinity masks (cpuset.hpp).
#include "topology/cpuset.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <sstream>

namespace accord::topo {

std::vector<int> parse_cpulist(const std::string& list, bool* ok) {
  std::vector<int> cpus;
  *ok = true;
  std::stringstream in(list);
  for (std::string part; std::getline(in, part, ',');) {
    int lo, hi;
    char tail;
    if (std::sscanf(part.c_str(), "%d-%d%c", &lo, &hi, &tail) == 2 && lo >= 0 && hi >= lo &&
        hi < 65536) {
      for (int c = lo; c <= hi; ++c) cpus.push_back(c);
    } else if (std::sscanf(part.c_str(), "%d%c", &lo, &tail) == 1 && lo >= 0 && lo < 65536) {
      cpus.push_back(lo);
    } else {
      *ok = false;
      return {};
    }
  }
  std::sort(cpus.begin(), cpus.end());
  cpus.erase(std::unique(cpus.begin(), cpus.end()), cpus.end());
  return cpus;
}

std::string format_cpulist(const std::vector<int>& cpus) {
  std::string out;
  for (size_t i = 0; i < cpus.size();) {
    size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    if (!out.empty()) out += ',';
    out += std::to_string(cpus[i]);
    if (j > i) out += '-' + std::to_string(cpus[j]);
    i = j + 1;
  }
  return out;
}

std::vector<int> parse_cpu_mask(const std::string& mask, bool* ok) {
  std::vector<unsigned long> words;
  std::stringstream in(mask);
  *ok = true;
  for (std::string w; std::getline(in, w, ',');) {
    char* end = nullptr;
    words.push_back(std::strtoul(w.c_str(), &end, 16));
    if (w.empty() || w.size() > 8 || *end) {
      *ok = false;
      return {};
    }
  }
  std::vector<int> cpus;
  for (size_t i = 0; i < words.size(); ++i) {
    unsigned long word = words[words.size() - 1 - i];  // least significant group last
    for (int bit = 0; bit < 32; ++bit)
      if (word >> bit & 1) cpus.push_back(static_cast<int>(i * 32 + bit));
  }
  return cpus;
}

std::string format_cpu_mask(const std::vector<int>& cpus) {
  int top = cpus.empty() ? 0 : cpus.back();
  std::vector<unsigned long> words(top / 32 + 1, 0);
  for (int c : cpus) words[c / 32] |= 1ul << (c % 32);
  std::string out;
  for (size_t i = words.size(); i-- > 0;) {
    char buf[16];
    std::snprintf(buf, sizeof buf, "%08lx", words[i]);
    if (!out.empty()) out += ',';
    out += buf;
  }
  return out;
}

}  // namespace accord::topo
