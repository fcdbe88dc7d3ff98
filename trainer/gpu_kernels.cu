// CUDA kernels of the GPU backend (gpu_kernels.hpp). Compiled with -fmad=false so that the
// float arithmetic is the CPU's, operation for operation.
#include "trainer/gpu_kernels.hpp"

namespace accord::trainer::gpu {

namespace {

__global__ void softmax_xent_kernel(const float* logits, const uint8_t* labels, int batch,
                                    int classes, float* dlogits, double* loss, int* correct) {
  const int n = blockIdx.x * blockDim.x + threadIdx.x;
  if (n >= batch) return;
  const float* z = logits + static_cast<size_t>(n) * classes;
  float* g = dlogits + static_cast<size_t>(n) * classes;
  int best = 0;
  for (int j = 1; j < classes; ++j)
    if (z[j] > z[best]) best = j;
  const float m = z[best];
  double sum = 0.0;
  for (int j = 0; j < classes; ++j) sum += exp(static_cast<double>(z[j] - m));
  const int y = labels[n];
  loss[n] = log(sum) - static_cast<double>(z[y] - m);
  for (int j = 0; j < classes; ++j)
    g[j] = static_cast<float>(exp(static_cast<double>(z[j] - m)) / sum / batch);
  g[y] -= 1.0f / static_cast<float>(batch);
  correct[n] = best == y ? 1 : 0;
}

__global__ void adam_ema_kernel(float* params, const float* grads, float* m, float* v, float* ema,
                                size_t n, AdamStep s) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const float g = grads[i] + s.l2 * params[i];
    m[i] = s.beta1 * m[i] + (1.0f - s.beta1) * g;
    v[i] = s.beta2 * v[i] + (1.0f - s.beta2) * g * g;
    params[i] -= s.lr_t * m[i] / (sqrtf(v[i]) + s.eps);
    ema[i] = s.ema_decay * ema[i] + (1.0f - s.ema_decay) * params[i];
  }
}

}  // namespace

cudaError_t softmax_xent(const float* logits, const uint8_t* labels, int batch, int classes,
                         float* dlogits, double* loss, int* correct, cudaStream_t stream) {
  if (batch <= 0) return cudaSuccess;
  const int threads = 128;
  softmax_xent_kernel<<<(batch + threads - 1) / threads, threads, 0, stream>>>(
      logits, labels, batch, classes, dlogits, loss, correct);
  return cudaGetLastError();
}

cudaError_t adam_ema(float* params, const float* grads, float* m, float* v, float* ema, size_t n,
                     const AdamStep& step, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  const int threads = 256;
  const size_t blocks = (n + threads - 1) / threads;
  adam_ema_kernel<<<static_cast<unsigned>(blocks < 4096 ? blocks : 4096), threads, 0, stream>>>(
      params, grads, m, v, ema, n, step);
  return cudaGetLastError();
}

}  // namespace accord::trainer::gpu
