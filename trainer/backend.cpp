// The CPU backend (backend.hpp): exactly the Model and Optimizer calls of the loop before the
// seam existed, so CPU results are unchanged bit for bit.
#include "trainer/backend.hpp"

#include <algorithm>
#include <vector>

namespace accord::trainer {

namespace {

class CpuBackend : public Backend {
 public:
  CpuBackend(std::unique_ptr<Model> model, const OptimizerConfig& config)
      : model_(std::move(model)), opt_(config, model_->param_ranges(), model_->param_count()) {}

  std::string describe() const override { return "cpu (OpenBLAS)"; }
  Model& model() override { return *model_; }
  Optimizer& optimizer() override { return opt_; }
  Status push_state() override { return ok_status(); }
  Status pull_state() override { return ok_status(); }

  Status forward(const float* images, int batch) override {
    model_->forward(images, batch);
    return ok_status();
  }
  Status loss(const uint8_t* labels, int batch, float* loss, int* correct) override {
    *loss = model_->loss(labels, batch, correct);
    return ok_status();
  }
  Status backward(int batch, const std::function<void(size_t)>& on_layer_done) override {
    model_->backward(batch, on_layer_done);
    return ok_status();
  }
  float* grads() override { return model_->grads().data(); }
  Status apply(double* l2_loss) override {
    opt_.apply(model_->params().data(), model_->grads().data());
    *l2_loss = opt_.l2_loss(model_->params().data());
    return ok_status();
  }
  Status use_ema(bool on) override {
    // Copies, never assignment or swap: the layers hold pointers into params' buffer.
    const std::span<float> params = model_->params();
    if (on) {
      saved_.assign(params.begin(), params.end());
      std::copy(opt_.ema().begin(), opt_.ema().end(), params.begin());
    } else {
      std::copy(saved_.begin(), saved_.end(), params.begin());
    }
    return ok_status();
  }
  Status logits(const float* images, int batch, const float** out) override {
    *out = model_->forward(images, batch);
    return ok_status();
  }

 private:
  std::unique_ptr<Model> model_;
  Optimizer opt_;
  std::vector<float> saved_;
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(std::unique_ptr<Model> model,
                                          const OptimizerConfig& config) {
  return std::make_unique<CpuBackend>(std::move(model), config);
}

BackendFactory cpu_backend_factory() {
  return [](std::unique_ptr<Model> model, const OptimizerConfig& config,
            std::unique_ptr<Backend>* out) {
    *out = make_cpu_backend(std::move(model), config);
    return ok_status();
  };
}

}  // namespace accord::trainer
