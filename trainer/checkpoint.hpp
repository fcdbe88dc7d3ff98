// Checkpoints: everything a run needs to continue exactly where it stopped, so that a resumed
// run produces the same weights as an uninterrupted one: the step counters (the data order
// is recomputed from seed and epoch, see data.hpp), the parameters, Adam's moments and the
// moving average. One binary file, little-endian, ending with a CRC-32C; written to a
// temporary name and renamed, so a crash mid-write leaves the previous checkpoint intact.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "trainer/status.hpp"

namespace accord::trainer {

struct TrainState {
  std::string model;          // "cnn" or "mlp"
  std::string dataset;        // "fashion-mnist", ...
  uint64_t seed = 0;
  int64_t step = 0;           // optimizer steps done
  int64_t epoch = 0;          // epoch in progress (0-based)
  int64_t step_in_epoch = 0;  // steps of that epoch done
  int64_t global_batch = 0;   // nranks x batch: fixes the data order
  std::vector<float> params, m, v, ema;
};

Status save_checkpoint(const std::string& path, const TrainState& state);
Status load_checkpoint(const std::string& path, TrainState* state);

// The file inside a --checkpoint directory.
std::string checkpoint_path(const std::string& dir);

}  // namespace accord::trainer
