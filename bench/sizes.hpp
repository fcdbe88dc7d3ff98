// Message sizes on the benchmarks' command lines: "8", "64K", "16M", "1G", "512KB" (binary
// multiples, as nccl-tests). Header-only: the collective benchmarks link the public library and
// p2p_bandwidth the internal one, so they share no object files.
#pragma once

#include <cstddef>
#include <cstdlib>

namespace accord::bench {

inline bool parse_size(const char* s, size_t* out) {
  char* end = nullptr;
  double v = std::strtod(s, &end);
  if (end == s || v < 0) return false;
  double mult = 1;
  if (*end == 'K' || *end == 'k') mult = 1 << 10, ++end;
  else if (*end == 'M' || *end == 'm') mult = 1 << 20, ++end;
  else if (*end == 'G' || *end == 'g') mult = 1 << 30, ++end;
  if (*end == 'B' || *end == 'b') ++end;
  if (*end != '\0') return false;
  *out = static_cast<size_t>(v * mult);
  return true;
}

}  // namespace accord::bench
