// The GPU backend (gpu_backend.hpp). Every CUDA, cuDNN and cuBLAS call is checked; an error
// names the call, the device and the library's error name and text.
#include "trainer/gpu_backend.hpp"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "trainer/gpu_kernels.hpp"

namespace accord::trainer {

namespace {

std::string cuda_text(cudaError_t e) {
  return std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e);
}

Status fail(int dev, const char* call, const std::string& why) {
  return Status::error("gpu " + std::to_string(dev) + ": " + call + " failed (" + why + ")");
}

Status check(int dev, const char* call, cudaError_t e) {
  return e == cudaSuccess ? ok_status() : fail(dev, call, cuda_text(e));
}
Status check(int dev, const char* call, cudnnStatus_t e) {
  return e == CUDNN_STATUS_SUCCESS ? ok_status() : fail(dev, call, cudnnGetErrorString(e));
}
Status check(int dev, const char* call, cublasStatus_t e) {
  return e == CUBLAS_STATUS_SUCCESS
             ? ok_status()
             : fail(dev, call,
                    std::string(cublasGetStatusName(e)) + ": " + cublasGetStatusString(e));
}

// Checks a CUDA, cuDNN or cuBLAS call on device dev_ and returns its error.
#define GPU_TRY(call) TRAINER_TRY(check(dev_, #call, (call)))

// Device memory of T, freed on destruction.
template <typename T>
class DeviceArray {
 public:
  DeviceArray() = default;
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  ~DeviceArray() {
    if (p_ != nullptr) (void)cudaFree(p_);
  }
  Status resize(int dev, size_t n) {
    if (n <= n_) return ok_status();
    if (p_ != nullptr) (void)cudaFree(p_);
    p_ = nullptr;
    n_ = 0;
    const int dev_ = dev;
    GPU_TRY(cudaMalloc(reinterpret_cast<void**>(&p_), std::max<size_t>(1, n) * sizeof(T)));
    n_ = n;
    return ok_status();
  }
  T* get() const { return p_; }
  size_t size() const { return n_; }

 private:
  T* p_ = nullptr;
  size_t n_ = 0;
};

enum class Kind { kConv, kPool, kRelu, kLinear, kCopy };

// One layer on the GPU: its kind, sizes, cuDNN descriptors (reset per batch size) and where
// its parameters are.
struct GpuLayer {
  Kind kind = Kind::kCopy;
  Shape in, out;
  int k = 0;                       // conv kernel / pool window
  int fin = 0, fout = 0;           // linear features
  size_t offset = 0, weights = 0;  // parameters in the flat buffer
  bool has_params = false;
  cudnnTensorDescriptor_t x = nullptr, y = nullptr, bias = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;
  cudnnPoolingDescriptor_t pool = nullptr;
  cudnnActivationDescriptor_t act = nullptr;
  cudnnConvolutionFwdAlgo_t fwd_algo = CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM;
  cudnnConvolutionBwdDataAlgo_t bwd_data_algo = CUDNN_CONVOLUTION_BWD_DATA_ALGO_0;
  cudnnConvolutionBwdFilterAlgo_t bwd_filter_algo = CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0;
};

class GpuBackend : public Backend, public DeviceGradients {
 public:
  GpuBackend(const GpuDevice& device, std::unique_ptr<Model> model, const OptimizerConfig& config)
      : device_(device),
        dev_(device.index),
        model_(std::move(model)),
        config_(config),
        opt_(config, model_->param_ranges(), model_->param_count()) {}
  ~GpuBackend() override;

  Status init();
  std::string describe() const override { return description_; }
  Model& model() override { return *model_; }
  Optimizer& optimizer() override { return opt_; }
  Status push_state() override;
  Status pull_state() override;
  Status forward(const float* images, int batch) override;
  Status loss(const uint8_t* labels, int batch, float* loss, int* correct) override;
  Status backward(int batch, const std::function<void(size_t)>& on_layer_done) override;
  float* grads() override { return grads_.get(); }
  DeviceGradients* device() override { return this; }
  Status apply(double* l2_loss) override;
  Status use_ema(bool on) override;
  Status logits(const float* images, int batch, const float** out) override;

  // DeviceGradients
  Status mark_ready(size_t bucket) override;
  Status wait_ready(size_t bucket, void** stream) override;
  Status to_host(const float* device, float* host, size_t count) override;
  Status to_device(const float* host, float* device, size_t count) override;
  Status join() override;

 private:
  Status configure(int batch);
  Status layer_forward(GpuLayer& l, const float* x, float* y, int batch);
  Status layer_backward(GpuLayer& l, const float* x, const float* y, const float* dy, float* dx,
                        int batch);
  Status copy(float* dst, const float* src, size_t n, cudaMemcpyKind kind, cudaStream_t s);

  GpuDevice device_;
  int dev_;
  std::unique_ptr<Model> model_;
  OptimizerConfig config_;
  Optimizer opt_;
  std::string description_;
  cudaStream_t stream_ = nullptr, comm_stream_ = nullptr;
  cudnnHandle_t cudnn_ = nullptr;
  cublasHandle_t cublas_ = nullptr;
  std::vector<GpuLayer> layers_;
  DeviceArray<float> params_, grads_, m_, v_, ema_, saved_, ones_, workspace_;
  std::vector<std::unique_ptr<DeviceArray<float>>> acts_, dacts_;
  DeviceArray<uint8_t> labels_;
  DeviceArray<double> losses_;
  DeviceArray<int> correct_;
  std::vector<double> host_losses_;
  std::vector<int> host_correct_;
  std::vector<float> host_logits_;
  std::vector<cudaEvent_t> ready_;
  cudaEvent_t joined_ = nullptr;
  int configured_batch_ = 0, reserved_batch_ = 0;
};

GpuBackend::~GpuBackend() {
  (void)cudaSetDevice(dev_);
  if (stream_ != nullptr) (void)cudaStreamSynchronize(stream_);
  if (comm_stream_ != nullptr) (void)cudaStreamSynchronize(comm_stream_);
  for (GpuLayer& l : layers_) {
    for (cudnnTensorDescriptor_t d : {l.x, l.y, l.bias})
      if (d != nullptr) (void)cudnnDestroyTensorDescriptor(d);
    if (l.w != nullptr) (void)cudnnDestroyFilterDescriptor(l.w);
    if (l.conv != nullptr) (void)cudnnDestroyConvolutionDescriptor(l.conv);
    if (l.pool != nullptr) (void)cudnnDestroyPoolingDescriptor(l.pool);
    if (l.act != nullptr) (void)cudnnDestroyActivationDescriptor(l.act);
  }
  for (cudaEvent_t e : ready_) (void)cudaEventDestroy(e);
  if (joined_ != nullptr) (void)cudaEventDestroy(joined_);
  if (cublas_ != nullptr) (void)cublasDestroy(cublas_);
  if (cudnn_ != nullptr) (void)cudnnDestroy(cudnn_);
  if (stream_ != nullptr) (void)cudaStreamDestroy(stream_);
  if (comm_stream_ != nullptr) (void)cudaStreamDestroy(comm_stream_);
}

Status GpuBackend::init() {
  GPU_TRY(cudaSetDevice(dev_));
  GPU_TRY(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  GPU_TRY(cudaStreamCreateWithFlags(&comm_stream_, cudaStreamNonBlocking));
  GPU_TRY(cudaEventCreateWithFlags(&joined_, cudaEventDisableTiming));
  GPU_TRY(cudnnCreate(&cudnn_));
  GPU_TRY(cudnnSetStream(cudnn_, stream_));
  GPU_TRY(cublasCreate(&cublas_));
  GPU_TRY(cublasSetStream(cublas_, stream_));
  GPU_TRY(cublasSetPointerMode(cublas_, CUBLAS_POINTER_MODE_HOST));
  // Full float32 (no TF32), so that results stay within float rounding of the CPU's.
  GPU_TRY(cublasSetMathMode(cublas_, CUBLAS_DEFAULT_MATH));
  int cublas_version = 0;
  GPU_TRY(cublasGetVersion(cublas_, &cublas_version));
  const size_t cudnn_version = cudnnGetVersion();
  description_ = "gpu " + std::to_string(dev_) + " of " + std::to_string(device_.count) + ": " +
                 device_.name + " (cuDNN " + std::to_string(cudnn_version / 10000) + "." +
                 std::to_string(cudnn_version / 100 % 100) + ", cuBLAS " +
                 std::to_string(cublas_version / 10000) + "." +
                 std::to_string(cublas_version / 100 % 100) + ")";

  std::vector<size_t> offset_of(model_->layers().size(), 0);
  for (const ParamRange& r : model_->param_ranges()) offset_of[r.layer] = r.offset;
  const std::vector<Shape>& shapes = model_->shapes();
  for (size_t i = 0; i < model_->layers().size(); ++i) {
    Layer* layer = model_->layers()[i].get();
    GpuLayer l;
    l.in = shapes[i];
    l.out = shapes[i + 1];
    l.offset = offset_of[i];
    l.weights = layer->weight_count();
    l.has_params = layer->param_count() > 0;
    if (auto* c = dynamic_cast<Conv2d*>(layer)) {
      l.kind = Kind::kConv;
      l.k = c->kernel();
      GPU_TRY(cudnnCreateFilterDescriptor(&l.w));
      GPU_TRY(cudnnSetFilter4dDescriptor(l.w, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, l.out.c, l.in.c,
                                         l.k, l.k));
      GPU_TRY(cudnnCreateConvolutionDescriptor(&l.conv));
      GPU_TRY(cudnnSetConvolution2dDescriptor(l.conv, l.k / 2, l.k / 2, 1, 1, 1, 1,
                                              CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
      GPU_TRY(cudnnSetConvolutionMathType(l.conv, CUDNN_FMA_MATH));  // no TF32
      GPU_TRY(cudnnCreateTensorDescriptor(&l.bias));
      GPU_TRY(cudnnSetTensor4dDescriptor(l.bias, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1, l.out.c, 1,
                                         1));
    } else if (auto* p = dynamic_cast<MaxPool2d*>(layer)) {
      l.kind = Kind::kPool;
      l.k = p->size();
      GPU_TRY(cudnnCreatePoolingDescriptor(&l.pool));
      GPU_TRY(cudnnSetPooling2dDescriptor(l.pool, CUDNN_POOLING_MAX_DETERMINISTIC,
                                          CUDNN_NOT_PROPAGATE_NAN, l.k, l.k, 0, 0, l.k, l.k));
    } else if (dynamic_cast<Relu*>(layer) != nullptr) {
      l.kind = Kind::kRelu;
      GPU_TRY(cudnnCreateActivationDescriptor(&l.act));
      GPU_TRY(
          cudnnSetActivationDescriptor(l.act, CUDNN_ACTIVATION_RELU, CUDNN_NOT_PROPAGATE_NAN, 0.0));
    } else if (auto* f = dynamic_cast<Linear*>(layer)) {
      l.kind = Kind::kLinear;
      l.fin = f->in_features();
      l.fout = f->out_features();
    } else if (dynamic_cast<SwapAxes*>(layer) != nullptr) {
      l.kind = Kind::kCopy;  // N x C x H x W throughout: the swap is the identity
    } else {
      return Status::error("gpu " + std::to_string(dev_) + ": layer " + layer->name() +
                           " has no GPU version");
    }
    if (l.kind != Kind::kLinear && l.kind != Kind::kCopy) {
      GPU_TRY(cudnnCreateTensorDescriptor(&l.x));
      GPU_TRY(cudnnCreateTensorDescriptor(&l.y));
    }
    layers_.push_back(l);
  }
  const size_t n = model_->param_count();
  TRAINER_TRY(params_.resize(dev_, n));
  TRAINER_TRY(grads_.resize(dev_, n));
  TRAINER_TRY(m_.resize(dev_, n));
  TRAINER_TRY(v_.resize(dev_, n));
  TRAINER_TRY(ema_.resize(dev_, n));
  TRAINER_TRY(saved_.resize(dev_, n));
  GPU_TRY(cudaMemsetAsync(grads_.get(), 0, n * sizeof(float), stream_));
  return push_state();
}

Status GpuBackend::copy(float* dst, const float* src, size_t n, cudaMemcpyKind kind,
                        cudaStream_t s) {
  if (n == 0) return ok_status();
  GPU_TRY(cudaMemcpyAsync(dst, src, n * sizeof(float), kind, s));
  return ok_status();
}

Status GpuBackend::push_state() {
  const size_t n = model_->param_count();
  TRAINER_TRY(copy(params_.get(), model_->params().data(), n, cudaMemcpyHostToDevice, stream_));
  TRAINER_TRY(copy(m_.get(), opt_.m().data(), n, cudaMemcpyHostToDevice, stream_));
  TRAINER_TRY(copy(v_.get(), opt_.v().data(), n, cudaMemcpyHostToDevice, stream_));
  TRAINER_TRY(copy(ema_.get(), opt_.ema().data(), n, cudaMemcpyHostToDevice, stream_));
  GPU_TRY(cudaStreamSynchronize(stream_));
  return ok_status();
}

Status GpuBackend::pull_state() {
  const size_t n = model_->param_count();
  TRAINER_TRY(copy(model_->params().data(), params_.get(), n, cudaMemcpyDeviceToHost, stream_));
  TRAINER_TRY(copy(opt_.m().data(), m_.get(), n, cudaMemcpyDeviceToHost, stream_));
  TRAINER_TRY(copy(opt_.v().data(), v_.get(), n, cudaMemcpyDeviceToHost, stream_));
  TRAINER_TRY(copy(opt_.ema().data(), ema_.get(), n, cudaMemcpyDeviceToHost, stream_));
  GPU_TRY(cudaStreamSynchronize(stream_));
  return ok_status();
}

// Buffers for batch samples and the cuDNN descriptors and algorithms for exactly batch.
Status GpuBackend::configure(int batch) {
  if (batch > reserved_batch_) {
    const std::vector<Shape>& shapes = model_->shapes();
    acts_.resize(shapes.size());
    dacts_.resize(shapes.size());
    for (size_t i = 0; i < shapes.size(); ++i) {
      if (!acts_[i]) acts_[i] = std::make_unique<DeviceArray<float>>();
      if (!dacts_[i]) dacts_[i] = std::make_unique<DeviceArray<float>>();
      TRAINER_TRY(acts_[i]->resize(dev_, shapes[i].size() * batch));
      TRAINER_TRY(dacts_[i]->resize(dev_, shapes[i].size() * batch));
    }
    TRAINER_TRY(labels_.resize(dev_, batch));
    TRAINER_TRY(losses_.resize(dev_, batch));
    TRAINER_TRY(correct_.resize(dev_, batch));
    TRAINER_TRY(ones_.resize(dev_, batch));
    const std::vector<float> ones(batch, 1.0f);
    TRAINER_TRY(copy(ones_.get(), ones.data(), ones.size(), cudaMemcpyHostToDevice, stream_));
    GPU_TRY(cudaStreamSynchronize(stream_));
    reserved_batch_ = batch;
  }
  if (batch == configured_batch_) return ok_status();
  size_t workspace = 0;
  for (GpuLayer& l : layers_) {
    if (l.x == nullptr) continue;
    GPU_TRY(cudnnSetTensor4dDescriptor(l.x, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, batch, l.in.c,
                                       l.in.h, l.in.w));
    GPU_TRY(cudnnSetTensor4dDescriptor(l.y, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, batch, l.out.c,
                                       l.out.h, l.out.w));
    if (l.kind != Kind::kConv) continue;
    // cuDNN's heuristics, best first; the first that works with these descriptors.
    int found = 0;
    cudnnConvolutionFwdAlgoPerf_t fwd[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    GPU_TRY(cudnnGetConvolutionForwardAlgorithm_v7(cudnn_, l.x, l.w, l.conv, l.y,
                                                   CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &found, fwd));
    for (int i = found; i-- > 0;)
      if (fwd[i].status == CUDNN_STATUS_SUCCESS) l.fwd_algo = fwd[i].algo;
    cudnnConvolutionBwdDataAlgoPerf_t bd[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
    GPU_TRY(cudnnGetConvolutionBackwardDataAlgorithm_v7(
        cudnn_, l.w, l.y, l.conv, l.x, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &found, bd));
    for (int i = found; i-- > 0;)
      if (bd[i].status == CUDNN_STATUS_SUCCESS) l.bwd_data_algo = bd[i].algo;
    cudnnConvolutionBwdFilterAlgoPerf_t bf[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
    GPU_TRY(cudnnGetConvolutionBackwardFilterAlgorithm_v7(
        cudnn_, l.x, l.y, l.conv, l.w, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &found, bf));
    for (int i = found; i-- > 0;)
      if (bf[i].status == CUDNN_STATUS_SUCCESS) l.bwd_filter_algo = bf[i].algo;
    size_t s = 0;
    GPU_TRY(cudnnGetConvolutionForwardWorkspaceSize(cudnn_, l.x, l.w, l.conv, l.y, l.fwd_algo, &s));
    workspace = std::max(workspace, s);
    GPU_TRY(cudnnGetConvolutionBackwardDataWorkspaceSize(cudnn_, l.w, l.y, l.conv, l.x,
                                                         l.bwd_data_algo, &s));
    workspace = std::max(workspace, s);
    GPU_TRY(cudnnGetConvolutionBackwardFilterWorkspaceSize(cudnn_, l.x, l.y, l.conv, l.w,
                                                           l.bwd_filter_algo, &s));
    workspace = std::max(workspace, s);
  }
  TRAINER_TRY(workspace_.resize(dev_, (workspace + sizeof(float) - 1) / sizeof(float)));
  configured_batch_ = batch;
  return ok_status();
}

Status GpuBackend::layer_forward(GpuLayer& l, const float* x, float* y, int batch) {
  const float one = 1.0f, zero = 0.0f;
  const float* w = params_.get() + l.offset;
  const float* b = w + l.weights;
  switch (l.kind) {
    case Kind::kConv:
      GPU_TRY(cudnnConvolutionForward(cudnn_, &one, l.x, x, l.w, w, l.conv, l.fwd_algo,
                                      workspace_.get(), workspace_.size() * sizeof(float), &zero,
                                      l.y, y));
      GPU_TRY(cudnnAddTensor(cudnn_, &one, l.bias, b, &one, l.y, y));
      break;
    case Kind::kPool:
      GPU_TRY(cudnnPoolingForward(cudnn_, l.pool, &one, l.x, x, &zero, l.y, y));
      break;
    case Kind::kRelu:
      GPU_TRY(cudnnActivationForward(cudnn_, l.act, &one, l.x, x, &zero, l.y, y));
      break;
    case Kind::kLinear:
      // Row-major y[N x out] = x W^T + b is column-major y'[out x N] = W'^T x' + b 1^T.
      GPU_TRY(cublasSgemm(cublas_, CUBLAS_OP_N, CUBLAS_OP_N, l.fout, batch, 1, &one, b, l.fout,
                          ones_.get(), 1, &zero, y, l.fout));
      GPU_TRY(cublasSgemm(cublas_, CUBLAS_OP_T, CUBLAS_OP_N, l.fout, batch, l.fin, &one, w, l.fin,
                          x, l.fin, &one, y, l.fout));
      break;
    case Kind::kCopy:
      TRAINER_TRY(copy(y, x, l.in.size() * batch, cudaMemcpyDeviceToDevice, stream_));
      break;
  }
  return ok_status();
}

Status GpuBackend::layer_backward(GpuLayer& l, const float* x, const float* y, const float* dy,
                                  float* dx, int batch) {
  const float one = 1.0f, zero = 0.0f;
  const float* w = params_.get() + l.offset;
  float* dw = grads_.get() + l.offset;
  float* db = dw + l.weights;
  switch (l.kind) {
    case Kind::kConv:
      GPU_TRY(cudnnConvolutionBackwardBias(cudnn_, &one, l.y, dy, &zero, l.bias, db));
      GPU_TRY(cudnnConvolutionBackwardFilter(cudnn_, &one, l.x, x, l.y, dy, l.conv,
                                             l.bwd_filter_algo, workspace_.get(),
                                             workspace_.size() * sizeof(float), &zero, l.w, dw));
      if (dx != nullptr)
        GPU_TRY(cudnnConvolutionBackwardData(cudnn_, &one, l.w, w, l.y, dy, l.conv, l.bwd_data_algo,
                                             workspace_.get(), workspace_.size() * sizeof(float),
                                             &zero, l.x, dx));
      break;
    case Kind::kPool:
      if (dx != nullptr)
        GPU_TRY(
            cudnnPoolingBackward(cudnn_, l.pool, &one, l.y, y, l.y, dy, l.x, x, &zero, l.x, dx));
      break;
    case Kind::kRelu:
      if (dx != nullptr)
        GPU_TRY(
            cudnnActivationBackward(cudnn_, l.act, &one, l.y, y, l.y, dy, l.x, x, &zero, l.x, dx));
      break;
    case Kind::kLinear:
      // dW'[in x out] = x'[in x N] dy'^T; db = dy' 1; dx'[in x N] = W'[in x out] dy'.
      GPU_TRY(cublasSgemm(cublas_, CUBLAS_OP_N, CUBLAS_OP_T, l.fin, l.fout, batch, &one, x, l.fin,
                          dy, l.fout, &zero, dw, l.fin));
      GPU_TRY(cublasSgemv(cublas_, CUBLAS_OP_N, l.fout, batch, &one, dy, l.fout, ones_.get(), 1,
                          &zero, db, 1));
      if (dx != nullptr)
        GPU_TRY(cublasSgemm(cublas_, CUBLAS_OP_N, CUBLAS_OP_N, l.fin, batch, l.fout, &one, w, l.fin,
                            dy, l.fout, &zero, dx, l.fin));
      break;
    case Kind::kCopy:
      if (dx != nullptr)
        TRAINER_TRY(copy(dx, dy, l.in.size() * batch, cudaMemcpyDeviceToDevice, stream_));
      break;
  }
  return ok_status();
}

Status GpuBackend::forward(const float* images, int batch) {
  GPU_TRY(cudaSetDevice(dev_));
  TRAINER_TRY(configure(batch));
  TRAINER_TRY(copy(acts_[0]->get(), images, model_->input_shape().size() * batch,
                   cudaMemcpyHostToDevice, stream_));
  for (size_t i = 0; i < layers_.size(); ++i)
    TRAINER_TRY(layer_forward(layers_[i], acts_[i]->get(), acts_[i + 1]->get(), batch));
  return ok_status();
}

Status GpuBackend::loss(const uint8_t* labels, int batch, float* loss, int* correct) {
  GPU_TRY(cudaMemcpyAsync(labels_.get(), labels, batch, cudaMemcpyHostToDevice, stream_));
  GPU_TRY(gpu::softmax_xent(acts_.back()->get(), labels_.get(), batch, model_->classes(),
                            dacts_.back()->get(), losses_.get(), correct_.get(), stream_));
  host_losses_.resize(batch);
  host_correct_.resize(batch);
  GPU_TRY(cudaMemcpyAsync(host_losses_.data(), losses_.get(), batch * sizeof(double),
                          cudaMemcpyDeviceToHost, stream_));
  GPU_TRY(cudaMemcpyAsync(host_correct_.data(), correct_.get(), batch * sizeof(int),
                          cudaMemcpyDeviceToHost, stream_));
  GPU_TRY(cudaStreamSynchronize(stream_));
  double total = 0;
  int right = 0;
  for (int n = 0; n < batch; ++n) {
    total += host_losses_[n];
    right += host_correct_[n];
  }
  *loss = static_cast<float>(total / batch);
  if (correct != nullptr) *correct = right;
  return ok_status();
}

Status GpuBackend::backward(int batch, const std::function<void(size_t)>& on_layer_done) {
  for (size_t i = layers_.size(); i-- > 0;) {
    float* dx = i == 0 ? nullptr : dacts_[i]->get();
    TRAINER_TRY(layer_backward(layers_[i], acts_[i]->get(), acts_[i + 1]->get(),
                               dacts_[i + 1]->get(), dx, batch));
    if (layers_[i].has_params && on_layer_done) on_layer_done(i);
  }
  return ok_status();
}

Status GpuBackend::apply(double* l2_loss) {
  // The step size and decay of Optimizer::apply, from the host's step counter.
  const float lr = opt_.learning_rate();
  opt_.set_step(opt_.step() + 1);
  const double t = static_cast<double>(opt_.step());
  gpu::AdamStep s;
  s.beta1 = config_.beta1;
  s.beta2 = config_.beta2;
  s.eps = config_.eps;
  s.lr_t =
      static_cast<float>(lr * std::sqrt(1.0 - std::pow(s.beta2, t)) / (1.0 - std::pow(s.beta1, t)));
  s.ema_decay = std::min(config_.ema_decay, static_cast<float>((1.0 + t) / (10.0 + t)));
  for (const ParamRange& r : model_->param_ranges()) {
    const size_t o = r.offset;
    s.l2 = config_.l2;
    GPU_TRY(gpu::adam_ema(params_.get() + o, grads_.get() + o, m_.get() + o, v_.get() + o,
                          ema_.get() + o, r.weights, s, stream_));
    s.l2 = 0.0f;
    const size_t b = o + r.weights;
    GPU_TRY(gpu::adam_ema(params_.get() + b, grads_.get() + b, m_.get() + b, v_.get() + b,
                          ema_.get() + b, r.count - r.weights, s, stream_));
  }
  double sum = 0;
  for (const ParamRange& r : model_->param_ranges()) {
    float dot = 0;  // host pointer mode: returns when the stream got there
    const float* w = params_.get() + r.offset;
    GPU_TRY(cublasSdot(cublas_, static_cast<int>(r.weights), w, 1, w, 1, &dot));
    sum += dot;
  }
  *l2_loss = 0.5 * config_.l2 * sum;
  return ok_status();
}

Status GpuBackend::use_ema(bool on) {
  const size_t n = model_->param_count();
  if (on) {
    TRAINER_TRY(copy(saved_.get(), params_.get(), n, cudaMemcpyDeviceToDevice, stream_));
    TRAINER_TRY(copy(params_.get(), ema_.get(), n, cudaMemcpyDeviceToDevice, stream_));
  } else {
    TRAINER_TRY(copy(params_.get(), saved_.get(), n, cudaMemcpyDeviceToDevice, stream_));
  }
  return ok_status();
}

Status GpuBackend::logits(const float* images, int batch, const float** out) {
  TRAINER_TRY(forward(images, batch));
  const size_t n = static_cast<size_t>(model_->classes()) * batch;
  host_logits_.resize(n);
  TRAINER_TRY(copy(host_logits_.data(), acts_.back()->get(), n, cudaMemcpyDeviceToHost, stream_));
  GPU_TRY(cudaStreamSynchronize(stream_));
  *out = host_logits_.data();
  return ok_status();
}

Status GpuBackend::mark_ready(size_t bucket) {
  while (ready_.size() <= bucket) {
    cudaEvent_t e = nullptr;
    GPU_TRY(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    ready_.push_back(e);
  }
  GPU_TRY(cudaEventRecord(ready_[bucket], stream_));
  return ok_status();
}

Status GpuBackend::wait_ready(size_t bucket, void** stream) {
  GPU_TRY(cudaSetDevice(dev_));  // the communication thread's current device
  GPU_TRY(cudaStreamWaitEvent(comm_stream_, ready_[bucket], 0));
  *stream = comm_stream_;
  return ok_status();
}

Status GpuBackend::to_host(const float* device, float* host, size_t count) {
  TRAINER_TRY(copy(host, device, count, cudaMemcpyDeviceToHost, comm_stream_));
  GPU_TRY(cudaStreamSynchronize(comm_stream_));
  return ok_status();
}

Status GpuBackend::to_device(const float* host, float* device, size_t count) {
  TRAINER_TRY(copy(device, host, count, cudaMemcpyHostToDevice, comm_stream_));
  GPU_TRY(cudaStreamSynchronize(comm_stream_));
  return ok_status();
}

Status GpuBackend::join() {
  GPU_TRY(cudaEventRecord(joined_, comm_stream_));
  GPU_TRY(cudaStreamWaitEvent(stream_, joined_, 0));
  return ok_status();
}

}  // namespace

Status open_gpu(int local_rank, GpuDevice* out) {
  int count = 0;
  if (const cudaError_t e = cudaGetDeviceCount(&count); e != cudaSuccess)
    return Status::error("no CUDA device (" + cuda_text(e) + ")");
  if (count == 0) return Status::error("no CUDA device (cudaGetDeviceCount found none)");
  const int dev_ = local_rank % count;
  GPU_TRY(cudaSetDevice(dev_));
  cudaDeviceProp prop;
  GPU_TRY(cudaGetDeviceProperties(&prop, dev_));
  out->index = dev_;
  out->count = count;
  out->name = prop.name;
  return ok_status();
}

Status make_gpu_backend(const GpuDevice& device, std::unique_ptr<Model> model,
                        const OptimizerConfig& config, std::unique_ptr<Backend>* out) {
  auto b = std::make_unique<GpuBackend>(device, std::move(model), config);
  TRAINER_TRY(b->init());
  *out = std::move(b);
  return ok_status();
}

BackendFactory gpu_backend_factory(const GpuDevice& device) {
  return [device](std::unique_ptr<Model> model, const OptimizerConfig& config,
                  std::unique_ptr<Backend>* out) {
    return make_gpu_backend(device, std::move(model), config, out);
  };
}

}  // namespace accord::trainer
