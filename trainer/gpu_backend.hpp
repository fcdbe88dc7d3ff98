// The GPU backend (backend.hpp): the model's layers on one CUDA device. Convolution (forward,
// backward data, backward filter, bias), max pooling and ReLU on cuDNN's legacy API,
// fully connected layers on cuBLAS sgemm/sgemv, softmax cross-entropy and Adam with the
// moving average in small kernels (gpu_kernels.cu). Parameters, gradients, optimizer state
// and activations live in device memory; activations are N x C x H x W (cuDNN's default),
// so the CPU's axis swaps (Note [Activation layouts]) are plain copies here. Weights are
// laid out as on the CPU (Cout x Cin x k x k, out x in), so checkpoints are the same files.
//
// Backward runs on a compute stream; gradient buckets are handed to the communication
// thread as device pointers with a second stream (DeviceGradients, grad_sync.hpp).
//
// Built only when CUDA, cuBLAS and cuDNN are found (trainer/meson.build).
#pragma once

#include <memory>
#include <string>

#include "trainer/backend.hpp"

namespace accord::trainer {

struct GpuDevice {
  int index = -1;  // CUDA device ordinal
  int count = 0;   // devices visible to this process
  std::string name;
};

// Picks device local_rank % device count and makes it current. Fails, naming the CUDA
// error, when there is no device or no driver.
Status open_gpu(int local_rank, GpuDevice* out);

Status make_gpu_backend(const GpuDevice& device, std::unique_ptr<Model> model,
                        const OptimizerConfig& config, std::unique_ptr<Backend>* out);
BackendFactory gpu_backend_factory(const GpuDevice& device);

}  // namespace accord::trainer
