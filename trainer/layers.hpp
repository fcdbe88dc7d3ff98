// The CPU layers of the trainer's networks: convolution (im2col + one sgemm over the whole
// batch), max pooling, ReLU, fully connected (sgemm), and an axis swap between the two
// activation layouts.
//
// Note [Activation layouts]: convolution and pooling work on channel-major activations
// (C x N x H x W). With that layout one im2col matrix covers the whole batch and a single
// sgemm W[Cout x C*k*k] * col[C*k*k x N*H*W] writes the output already in C x N x H x W, so
// no transpose is needed between conv layers. Fully connected layers work on N x F rows.
// SwapAxes converts between the two (for a single-channel input both layouts are the same
// bytes, so the networks need it only before the first fully connected layer, and after the
// input when it has several channels).
//
// A layer is called once per batch (virtual calls per layer, never per element). Parameters
// live in the model's flat buffers; a layer only holds views into them (bind()).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace accord::trainer {

// Shape of one sample (the batch dimension is separate).
struct Shape {
  int c = 0, h = 0, w = 0;
  size_t size() const { return static_cast<size_t>(c) * h * w; }
};

// Deterministic random numbers (the same on every machine and standard library), for weight
// initialisation and shuffling: splitmix64.
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t next() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  double uniform() { return static_cast<double>(next() >> 11) * (1.0 / 9007199254740992.0); }
  double normal();

 private:
  uint64_t state_;
};

class Layer {
 public:
  virtual ~Layer() = default;
  virtual std::string name() const = 0;
  // Called once with the input shape; returns the output shape.
  virtual Shape configure(Shape in) = 0;
  virtual size_t param_count() const { return 0; }
  // Number of leading parameters that are weights (L2 regularised); the rest are biases.
  virtual size_t weight_count() const { return 0; }
  virtual void bind(float* /*params*/, float* /*grads*/) {}
  virtual void init_params(Rng& /*rng*/) {}
  virtual void forward(const float* x, float* y, int batch) = 0;
  // dx == nullptr: the caller needs no input gradient (first layer). Parameter gradients are
  // overwritten, not accumulated.
  virtual void backward(const float* x, const float* y, const float* dy, float* dx, int batch) = 0;
};

// 2-D convolution, stride 1, "same" zero padding (odd kernel), C x N x H x W in and out.
class Conv2d : public Layer {
 public:
  Conv2d(int out_channels, int kernel) : out_(out_channels), k_(kernel) {}
  std::string name() const override;
  Shape configure(Shape in) override;
  size_t param_count() const override { return weight_count() + out_; }
  size_t weight_count() const override { return static_cast<size_t>(out_) * in_.c * k_ * k_; }
  void bind(float* params, float* grads) override;
  void init_params(Rng& rng) override;
  void forward(const float* x, float* y, int batch) override;
  void backward(const float* x, const float* y, const float* dy, float* dx, int batch) override;
  int out_channels() const { return out_; }
  int kernel() const { return k_; }
  Shape input() const { return in_; }

 private:
  void im2col(const float* x, int batch);
  void col2im(const float* dcol, float* dx, int batch) const;

  int out_, k_;
  Shape in_;
  float* w_ = nullptr;
  float* b_ = nullptr;
  float* dw_ = nullptr;
  float* db_ = nullptr;
  std::vector<float> col_;   // im2col of the last forward input, kept for backward
  std::vector<float> dcol_;  // reused gradient of col_
};

// Max pooling, window == stride, C x N x H x W (any layout whose planes are H x W).
class MaxPool2d : public Layer {
 public:
  explicit MaxPool2d(int size) : s_(size) {}
  std::string name() const override;
  int size() const { return s_; }
  Shape input() const { return in_; }
  Shape configure(Shape in) override;
  void forward(const float* x, float* y, int batch) override;
  void backward(const float* x, const float* y, const float* dy, float* dx, int batch) override;

 private:
  int s_;
  Shape in_, out_;
  std::vector<uint32_t> argmax_;  // index in the input plane of each output's maximum
};

class Relu : public Layer {
 public:
  std::string name() const override { return "relu"; }
  Shape input() const { return in_; }
  Shape configure(Shape in) override {
    in_ = in;
    return in;
  }
  void forward(const float* x, float* y, int batch) override;
  void backward(const float* x, const float* y, const float* dy, float* dx, int batch) override;

 private:
  Shape in_;
};

// Fully connected: y[N x out] = x[N x in] * W^T + b, with W stored out x in.
class Linear : public Layer {
 public:
  explicit Linear(int out) : out_(out) {}
  std::string name() const override;
  int in_features() const { return in_; }
  int out_features() const { return out_; }
  Shape configure(Shape in) override;
  size_t param_count() const override { return weight_count() + out_; }
  size_t weight_count() const override { return static_cast<size_t>(out_) * in_; }
  void bind(float* params, float* grads) override;
  void init_params(Rng& rng) override;
  void forward(const float* x, float* y, int batch) override;
  void backward(const float* x, const float* y, const float* dy, float* dx, int batch) override;

 private:
  int out_;
  int in_ = 0;
  float* w_ = nullptr;
  float* b_ = nullptr;
  float* dw_ = nullptr;
  float* db_ = nullptr;
  std::vector<float> ones_;  // batch of ones: bias gradient as one sgemv
};

// Swaps the batch and channel axes: to_rows converts C x N x (H*W) into N x C x (H*W) (the
// N x F rows that Linear reads, F in C,H,W order); otherwise the reverse.
class SwapAxes : public Layer {
 public:
  explicit SwapAxes(bool to_rows) : to_rows_(to_rows) {}
  bool to_rows() const { return to_rows_; }
  std::string name() const override { return to_rows_ ? "to_rows" : "to_channels"; }
  Shape configure(Shape in) override {
    in_ = in;
    return in;
  }
  void forward(const float* x, float* y, int batch) override;
  void backward(const float* x, const float* y, const float* dy, float* dx, int batch) override;

 private:
  bool to_rows_;
  Shape in_;
};

}  // namespace accord::trainer
