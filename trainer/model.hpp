// A network as a sequence of layers, with all parameters (and their gradients) in one flat
// buffer each. The flat buffers are what the rest of the trainer works on: the optimizer
// updates them in one loop, checkpoints write them in one piece, rank 0 broadcasts them, and
// gradient buckets are contiguous ranges of them (see grad_sync.hpp).
//
// Backward runs the layers last to first and reports each parameterised layer as soon as its
// gradients are final, so that communication of those gradients can start while earlier
// layers are still computing.
#pragma once

#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "trainer/layers.hpp"
#include "trainer/status.hpp"

namespace accord::trainer {

// Parameters of one layer inside the flat buffer.
struct ParamRange {
  size_t layer = 0;    // index in Model::layers()
  size_t offset = 0;   // first element in the flat buffer
  size_t count = 0;    // elements
  size_t weights = 0;  // leading elements that are weights (L2 regularised)
};

class Model {
 public:
  // "cnn": LeNet-5 as in the seeds (conv 5x5x32, pool 2, conv 5x5x64, pool 2, fc 512, fc 10,
  // ReLU between). "mlp": fc 512, fc 256, fc classes.
  static Status create(const std::string& kind, Shape input, int classes,
                       std::unique_ptr<Model>* out);

  Model(std::string kind, Shape input);
  void add(std::unique_ptr<Layer> layer);
  // Call after the last add(): sizes the flat buffers and binds layers to them.
  void finalize();

  const std::string& kind() const { return kind_; }
  Shape input_shape() const { return input_; }
  int classes() const { return static_cast<int>(shapes_.back().size()); }
  const std::vector<std::unique_ptr<Layer>>& layers() const { return layers_; }
  const std::vector<ParamRange>& param_ranges() const { return ranges_; }
  // shapes()[i] = input of layer i; back() = output.
  const std::vector<Shape>& shapes() const { return shapes_; }
  size_t param_count() const { return params_.size(); }
  // Spans, not the vectors: layers hold pointers into these buffers, so they must never be
  // reallocated, swapped or resized.
  std::span<float> params() { return params_; }
  std::span<float> grads() { return grads_; }
  std::string describe() const;

  void init_params(uint64_t seed);

  // Runs the batch (batch x C x H x W, row-major) and returns the logits (batch x classes).
  const float* forward(const float* input, int batch);
  // Mean softmax cross-entropy of the last forward's logits; writes dlogits for backward and
  // counts correct predictions.
  float loss(const uint8_t* labels, int batch, int* correct);
  // Backward from the dlogits of loss(). on_layer_done(i) runs right after layer i's
  // parameter gradients are final (only for layers with parameters).
  void backward(int batch, const std::function<void(size_t)>& on_layer_done);

 private:
  void reserve(int batch);

  std::string kind_;
  Shape input_;
  std::vector<std::unique_ptr<Layer>> layers_;
  std::vector<Shape> shapes_;  // shapes_[i] = input of layer i; back() = output
  std::vector<ParamRange> ranges_;
  std::vector<float> params_, grads_;
  // acts_[i] = input of layer i (acts_[0] is a copy of the input), acts_.back() = logits.
  std::vector<std::vector<float>> acts_, grad_acts_;
  int reserved_batch_ = 0;
};

}  // namespace accord::trainer
