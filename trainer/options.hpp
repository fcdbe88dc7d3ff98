// accord-train's command line: the flags, their defaults and the --help text, parsed into
// Options. Both "--flag value" and "--flag=value" work; anything unknown or malformed is an
// error that names the flag.
#pragma once

#include <cstdint>
#include <string>

#include "trainer/optimizer.hpp"
#include "trainer/status.hpp"

namespace accord::trainer {

struct Options {
  std::string data = "/usr/share/datasets/fashion-mnist";
  std::string dataset = "fashion-mnist";
  std::string model = "cnn";
  int epochs = 3;
  int batch = 64;  // per rank
  OptimizerConfig opt;
  std::string sync = "accord";
  bool overlap = true;
  int bucket_kb = 256;
  std::string metrics;
  std::string tensorboard;
  std::string checkpoint;
  bool resume = false;
  int64_t max_steps = 0;  // 0: no limit
  uint64_t seed = 1;
  int log_every = 50;
  int threads = 0;  // OpenBLAS threads per rank; 0: cores / ranks on this host
  std::string device = "cpu";  // cpu or gpu (gpu_backend.hpp)
  bool help = false;
};

Status parse_options(int argc, const char* const* argv, Options* out);
std::string usage();

}  // namespace accord::trainer
