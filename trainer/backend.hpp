// Where the model computes: the seam between the training loop and the hardware.
//
// A Backend owns the model and the optimizer state. The host copies (model().params(),
// optimizer().m()/v()/ema()/step()) are what setup, the start-of-run broadcast and
// checkpoints work on: push_state() after changing them, pull_state() before reading them.
// The CPU backend computes in those host buffers directly (both calls do nothing); the GPU
// backend (gpu_backend.hpp, built with CUDA, cuBLAS and cuDNN) keeps its own copies in device
// memory. grads() is the flat gradient buffer that gradient buckets point into: host memory
// on the CPU, device memory on a GPU, where device() says how to reach it.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "trainer/grad_sync.hpp"
#include "trainer/model.hpp"
#include "trainer/optimizer.hpp"
#include "trainer/status.hpp"

namespace accord::trainer {

class Backend {
 public:
  virtual ~Backend() = default;
  // "cpu (OpenBLAS)" or "gpu 0: <name> (cuDNN x.y, cuBLAS z)".
  virtual std::string describe() const = 0;
  virtual Model& model() = 0;
  virtual Optimizer& optimizer() = 0;
  virtual Status push_state() = 0;
  virtual Status pull_state() = 0;

  // One training step: forward on batch x C x H x W host images, mean softmax cross-entropy
  // (and dlogits), backward reporting each parameterised layer as its gradients are final.
  virtual Status forward(const float* images, int batch) = 0;
  virtual Status loss(const uint8_t* labels, int batch, float* loss, int* correct) = 0;
  virtual Status backward(int batch, const std::function<void(size_t)>& on_layer_done) = 0;
  virtual float* grads() = 0;
  // nullptr when grads() is host memory.
  virtual DeviceGradients* device() { return nullptr; }
  // Optimizer step with the averaged gradients; then *l2_loss = the regulariser's loss.
  virtual Status apply(double* l2_loss) = 0;

  // Evaluation with the moving-average weights: use_ema(true), logits() per batch (host
  // pointer, batch x classes, valid until the next call), use_ema(false).
  virtual Status use_ema(bool on) = 0;
  virtual Status logits(const float* images, int batch, const float** out) = 0;
};

// The CPU backend: Model's layers on OpenBLAS and Optimizer, in the host buffers.
std::unique_ptr<Backend> make_cpu_backend(std::unique_ptr<Model> model,
                                          const OptimizerConfig& config);

// How train() makes its backend once the model exists.
using BackendFactory = std::function<Status(
    std::unique_ptr<Model> model, const OptimizerConfig& config, std::unique_ptr<Backend>* out)>;
BackendFactory cpu_backend_factory();

}  // namespace accord::trainer
