// The GPU backend's own CUDA kernels (gpu_kernels.cu, compiled by nvcc): the parts cuDNN and
// cuBLAS do not cover. Each returns the launch's error (cudaGetLastError).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace accord::trainer::gpu {

// Softmax cross-entropy per sample, as Model::loss: dlogits = (softmax(z) - onehot(y)) / batch,
// loss[n] = log(sum exp(z - max)) - (z[y] - max) (double), correct[n] = argmax == y (first max).
cudaError_t softmax_xent(const float* logits, const uint8_t* labels, int batch, int classes,
                         float* dlogits, double* loss, int* correct, cudaStream_t stream);

// Adam + moving average over n elements, as Optimizer::apply (l2: 0 for biases).
struct AdamStep {
  float l2, beta1, beta2, lr_t, eps, ema_decay;
};
cudaError_t adam_ema(float* params, const float* grads, float* m, float* v, float* ema, size_t n,
                     const AdamStep& step, cudaStream_t stream);

}  // namespace accord::trainer::gpu
