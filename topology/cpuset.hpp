// CPU sets in the two spellings topology files use: Linux cpulists ("0-11,24-35", nvidia-smi and
// sysfs) and NCCL's hex masks ("00000000,000fffff", 32-bit groups, most significant first).
#pragma once

#include <string>
#include <vector>

namespace accord::topo {

// Empty vector on garbage.
std::vector<int> parse_cpulist(const std::string& list, bool* ok);
std::string format_cpulist(const std::vector<int>& cpus);
std::vector<int> parse_cpu_mask(const std::string& mask, bool* ok);
std::string format_cpu_mask(const std::vector<int>& cpus);

}  // namespace accord::topo
