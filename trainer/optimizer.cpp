// Adam + exponential decay + L2 + moving average (formulas in optimizer.hpp).
#include "trainer/optimizer.hpp"

#include <algorithm>
#include <cmath>

namespace accord::trainer {

Optimizer::Optimizer(const OptimizerConfig& config, const std::vector<ParamRange>& ranges,
                     size_t count)
    : config_(config), ranges_(ranges), m_(count, 0.0f), v_(count, 0.0f), ema_(count, 0.0f) {}

float Optimizer::learning_rate() const {
  return static_cast<float>(config_.lr * std::pow(static_cast<double>(config_.lr_decay),
                                                  static_cast<double>(step_) / config_.lr_decay_steps));
}

double Optimizer::l2_loss(const float* params) const {
  double s = 0.0;
  for (const ParamRange& r : ranges_)
    for (size_t i = 0; i < r.weights; ++i) s += static_cast<double>(params[r.offset + i]) * params[r.offset + i];
  return 0.5 * config_.l2 * s;
}

void Optimizer::reset_ema(const float* params) { std::copy(params, params + ema_.size(), ema_.begin()); }

void Optimizer::apply(float* params, const float* grads) {
  const float lr = learning_rate();
  ++step_;
  const double t = static_cast<double>(step_);
  const float b1 = config_.beta1, b2 = config_.beta2;
  const float lr_t = static_cast<float>(lr * std::sqrt(1.0 - std::pow(b2, t)) / (1.0 - std::pow(b1, t)));
  const float d = std::min(config_.ema_decay, static_cast<float>((1.0 + t) / (10.0 + t)));
  const float eps = config_.eps, l2 = config_.l2;
  float* m = m_.data();
  float* v = v_.data();
  float* ema = ema_.data();
  // Weights and biases in separate loops so that each vectorises without a branch.
  auto update = [&](size_t begin, size_t end, float decay) {
    for (size_t i = begin; i < end; ++i) {
      const float g = grads[i] + decay * params[i];
      m[i] = b1 * m[i] + (1.0f - b1) * g;
      v[i] = b2 * v[i] + (1.0f - b2) * g * g;
      params[i] -= lr_t * m[i] / (std::sqrt(v[i]) + eps);
      ema[i] = d * ema[i] + (1.0f - d) * params[i];
    }
  };
  for (const ParamRange& r : ranges_) {
    update(r.offset, r.offset + r.weights, l2);
    update(r.offset + r.weights, r.offset + r.count, 0.0f);
  }
}

}  // namespace accord::trainer
