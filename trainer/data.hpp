// Training data: readers for IDX files (MNIST, Fashion-MNIST; gzip-compressed or not, read
// with zlib) and the CIFAR-10 binary batches, and the sampler that gives every rank its own
// shard of every step.
//
// Sharding: each epoch has one permutation of the training set (from the seed and the epoch
// number only, so a resumed run recomputes it). Step s of an epoch covers the global batch
// perm[s*G .. s*G+G) with G = nranks * batch; rank r takes its slice [r*batch, (r+1)*batch).
// So every rank sees different samples every step (the seeds' pitfall: towers fed the same
// images), and N ranks x batch b cover exactly the samples of 1 rank x batch N*b.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "trainer/layers.hpp"
#include "trainer/status.hpp"

namespace accord::trainer {

struct Dataset {
  Shape shape;                  // one sample
  int classes = 10;
  std::vector<float> images;    // count x C x H x W, normalised
  std::vector<uint8_t> labels;  // count
  size_t count() const { return labels.size(); }
};

// Reads an IDX image file (magic 0x803) and its label file (magic 0x801). Either may be
// gzip-compressed. Pixels are scaled to (x / 255 - mean) / stddev.
Status load_idx(const std::string& images_path, const std::string& labels_path, float mean,
                float stddev, Dataset* out);

// Reads CIFAR-10 binary batches (records of 1 label byte + 3072 pixel bytes).
Status load_cifar10(const std::vector<std::string>& paths, Dataset* out);

// dataset: "fashion-mnist", "mnist" or "cifar10"; dir holds the standard file names
// (train-images-idx3-ubyte[.gz] ..., or data_batch_1.bin ... test_batch.bin, also inside a
// cifar-10-batches-bin subfolder).
Status load_dataset(const std::string& dataset, const std::string& dir, bool train, Dataset* out);

class ShardSampler {
 public:
  ShardSampler(size_t samples, int nranks, int batch, uint64_t seed);
  // Full global batches per epoch (the remainder of an epoch is skipped).
  size_t steps_per_epoch() const { return samples_ / (static_cast<size_t>(nranks_) * batch_); }
  // Indices of rank's part of step `step` (0-based within the epoch) of epoch `epoch`.
  void indices(int epoch, size_t step, int rank, std::vector<uint32_t>* out);

 private:
  size_t samples_;
  int nranks_, batch_;
  uint64_t seed_;
  int perm_epoch_ = -1;
  std::vector<uint32_t> perm_;
};

// Copies the samples at `indices` into images (batch x C x H x W) and labels.
void gather_batch(const Dataset& data, const std::vector<uint32_t>& indices, float* images,
                  uint8_t* labels);

}  // namespace accord::trainer
