// The update rule of the seeds' recipe: Adam with an exponentially decayed learning rate,
// L2 regularisation of the weights (not the biases), and an exponential moving average of
// the parameters that is used for evaluation.
//
//   lr(t)   = lr * decay^(t / decay_steps)              (tf.train.exponential_decay)
//   g      += l2 * w                                     (tf.contrib.layers.l2_regularizer)
//   Adam as tf.train.AdamOptimizer (bias correction folded into the step size, eps 1e-8)
//   ema     = d * ema + (1 - d) * w, d = min(ema_decay, (1 + t) / (10 + t))
//                                                        (tf.train.ExponentialMovingAverage)
//
// The L2 term is added after gradients were averaged: it is the same on every rank (the
// weights are), so adding it before would only move more arithmetic through the average.
#pragma once

#include <cstdint>
#include <vector>

#include "trainer/model.hpp"

namespace accord::trainer {

struct OptimizerConfig {
  float lr = 1e-3f;
  float lr_decay = 0.99f;
  int lr_decay_steps = 64;
  float l2 = 1e-4f;
  float ema_decay = 0.99f;
  float beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f;
};

class Optimizer {
 public:
  Optimizer(const OptimizerConfig& config, const std::vector<ParamRange>& ranges, size_t count);

  // One step on params with the averaged grads; increments step().
  void apply(float* params, const float* grads);
  float learning_rate() const;  // at the current step
  // 0.5 * l2 * sum(w^2) over the weights: the regulariser's part of the loss.
  double l2_loss(const float* params) const;
  // Sets the moving average to the parameters (at start).
  void reset_ema(const float* params);

  int64_t step() const { return step_; }
  void set_step(int64_t step) { step_ = step; }
  std::vector<float>& m() { return m_; }
  std::vector<float>& v() { return v_; }
  std::vector<float>& ema() { return ema_; }

 private:
  OptimizerConfig config_;
  std::vector<ParamRange> ranges_;
  int64_t step_ = 0;
  std::vector<float> m_, v_, ema_;
};

}  // namespace accord::trainer
