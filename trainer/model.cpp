// Model assembly, flat parameter buffers, and the softmax cross-entropy loss.
#include "trainer/model.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace accord::trainer {

Model::Model(std::string kind, Shape input) : kind_(std::move(kind)), input_(input) {
  shapes_.push_back(input);
}

void Model::add(std::unique_ptr<Layer> layer) {
  shapes_.push_back(layer->configure(shapes_.back()));
  layers_.push_back(std::move(layer));
}

void Model::finalize() {
  size_t offset = 0;
  for (size_t i = 0; i < layers_.size(); ++i) {
    const size_t n = layers_[i]->param_count();
    if (n == 0) continue;
    ranges_.push_back(ParamRange{i, offset, n, layers_[i]->weight_count()});
    offset += n;
  }
  params_.assign(offset, 0.0f);
  grads_.assign(offset, 0.0f);
  for (const ParamRange& r : ranges_)
    layers_[r.layer]->bind(params_.data() + r.offset, grads_.data() + r.offset);
}

Status Model::create(const std::string& kind, Shape input, int classes,
                     std::unique_ptr<Model>* out) {
  auto m = std::make_unique<Model>(kind, input);
  if (kind == "cnn") {
    if (input.h % 4 != 0 || input.w % 4 != 0)
      return Status::error("model cnn: input " + std::to_string(input.h) + "x" +
                           std::to_string(input.w) + " must be divisible by 4 (two 2x2 pools)");
    // Channel-major from the input on (Note [Activation layouts]); a no-op copy when C == 1.
    if (input.c > 1) m->add(std::make_unique<SwapAxes>(false));
    m->add(std::make_unique<Conv2d>(32, 5));
    m->add(std::make_unique<Relu>());
    m->add(std::make_unique<MaxPool2d>(2));
    m->add(std::make_unique<Conv2d>(64, 5));
    m->add(std::make_unique<Relu>());
    m->add(std::make_unique<MaxPool2d>(2));
    m->add(std::make_unique<SwapAxes>(true));
    m->add(std::make_unique<Linear>(512));
    m->add(std::make_unique<Relu>());
    m->add(std::make_unique<Linear>(classes));
  } else if (kind == "mlp") {
    m->add(std::make_unique<Linear>(512));
    m->add(std::make_unique<Relu>());
    m->add(std::make_unique<Linear>(256));
    m->add(std::make_unique<Relu>());
    m->add(std::make_unique<Linear>(classes));
  } else {
    return Status::error("unknown model '" + kind + "' (expected cnn or mlp)");
  }
  m->finalize();
  *out = std::move(m);
  return ok_status();
}

std::string Model::describe() const {
  std::string s = kind_ + ":";
  for (const auto& l : layers_) s += " " + l->name();
  s += " (" + std::to_string(params_.size()) + " parameters)";
  return s;
}

void Model::init_params(uint64_t seed) {
  Rng rng(seed * 0x2545F4914F6CDD1Dull + 17);
  for (const ParamRange& r : ranges_) layers_[r.layer]->init_params(rng);
}

void Model::reserve(int batch) {
  if (batch <= reserved_batch_) return;
  acts_.resize(shapes_.size());
  grad_acts_.resize(shapes_.size());
  for (size_t i = 0; i < shapes_.size(); ++i) {
    acts_[i].resize(shapes_[i].size() * batch);
    grad_acts_[i].resize(shapes_[i].size() * batch);
  }
  reserved_batch_ = batch;
}

const float* Model::forward(const float* input, int batch) {
  reserve(batch);
  std::memcpy(acts_[0].data(), input, sizeof(float) * input_.size() * batch);
  for (size_t i = 0; i < layers_.size(); ++i)
    layers_[i]->forward(acts_[i].data(), acts_[i + 1].data(), batch);
  return acts_.back().data();
}

float Model::loss(const uint8_t* labels, int batch, int* correct) {
  const int k = classes();
  const float* logits = acts_.back().data();
  float* dlogits = grad_acts_.back().data();
  double total = 0.0;
  int right = 0;
  for (int n = 0; n < batch; ++n) {
    const float* z = logits + static_cast<size_t>(n) * k;
    float* g = dlogits + static_cast<size_t>(n) * k;
    const int best = static_cast<int>(std::max_element(z, z + k) - z);
    const float m = z[best];
    double sum = 0.0;
    for (int j = 0; j < k; ++j) sum += std::exp(static_cast<double>(z[j] - m));
    const int y = labels[n];
    total += std::log(sum) - (z[y] - m);
    for (int j = 0; j < k; ++j)
      g[j] = static_cast<float>(std::exp(static_cast<double>(z[j] - m)) / sum / batch);
    g[y] -= 1.0f / static_cast<float>(batch);
    if (best == y) ++right;
  }
  if (correct != nullptr) *correct = right;
  return static_cast<float>(total / batch);
}

void Model::backward(int batch, const std::function<void(size_t)>& on_layer_done) {
  for (size_t i = layers_.size(); i-- > 0;) {
    float* dx = i == 0 ? nullptr : grad_acts_[i].data();
    layers_[i]->backward(acts_[i].data(), acts_[i + 1].data(), grad_acts_[i + 1].data(), dx, batch);
    if (layers_[i]->param_count() > 0 && on_layer_done) on_layer_done(i);
  }
}

}  // namespace accord::trainer
