// Finite-difference checks of every layer's backward (parameter and input gradients), of the
// whole LeNet model with its softmax cross-entropy loss, and of the layout conversions.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <numeric>

#include "trainer/layers.hpp"
#include "trainer/model.hpp"

namespace accord::trainer {
namespace {

// f(x, params) = sum(forward(x) * r): its gradients are exactly what backward computes with
// dy = r.
double probe(Layer& layer, const std::vector<float>& x, const std::vector<float>& r, int batch) {
  std::vector<float> y(r.size());
  layer.forward(x.data(), y.data(), batch);
  double f = 0;
  for (size_t i = 0; i < y.size(); ++i) f += static_cast<double>(y[i]) * r[i];
  return f;
}

enum class Inputs { kRandom, kAwayFromZero, kDistinct };

void check_layer(Layer& layer, Shape in, int batch, Inputs kind, double eps) {
  SCOPED_TRACE(layer.name());
  const Shape out = layer.configure(in);
  Rng rng(42);
  std::vector<float> params(layer.param_count()), grads(layer.param_count());
  layer.bind(params.data(), grads.data());
  layer.init_params(rng);
  for (float& p : params) p += static_cast<float>(0.1 * rng.normal());  // non-zero biases too
  std::vector<float> x(in.size() * batch), r(out.size() * batch), dx(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const double u = rng.uniform();
    if (kind == Inputs::kAwayFromZero) x[i] = static_cast<float>((u < 0.5 ? -1 : 1) * (0.1 + rng.uniform()));
    else x[i] = static_cast<float>(2 * u - 1);
  }
  if (kind == Inputs::kDistinct) {
    // Pooling: values at least 0.01 apart so that eps never changes which one is the max.
    std::vector<size_t> order(x.size());
    std::iota(order.begin(), order.end(), 0);
    for (size_t i = order.size(); i > 1; --i) std::swap(order[i - 1], order[rng.next() % i]);
    for (size_t i = 0; i < order.size(); ++i) x[order[i]] = 0.01f * static_cast<float>(i);
  }
  for (float& v : r) v = static_cast<float>(rng.normal());
  std::vector<float> y(r.size());
  layer.forward(x.data(), y.data(), batch);
  layer.backward(x.data(), y.data(), r.data(), dx.data(), batch);
  const std::vector<float> analytic_params = grads;

  auto check = [&](std::vector<float>& v, const std::vector<float>& analytic, const char* what) {
    const size_t step = std::max<size_t>(1, v.size() / 60);
    for (size_t i = 0; i < v.size(); i += step) {
      const float keep = v[i];
      v[i] = keep + static_cast<float>(eps);
      const double fp = probe(layer, x, r, batch);
      v[i] = keep - static_cast<float>(eps);
      const double fm = probe(layer, x, r, batch);
      v[i] = keep;
      const double numeric = (fp - fm) / (2 * eps);
      EXPECT_NEAR(numeric, analytic[i], 2e-3 + 2e-3 * std::fabs(analytic[i])) << what << " " << i;
    }
  };
  check(params, analytic_params, "parameter");
  check(x, dx, "input");
}

TEST(LayerGradients, Conv2dSinglePlane) {
  Conv2d conv(4, 5);
  check_layer(conv, Shape{1, 6, 7}, 2, Inputs::kRandom, 1e-2);
}

TEST(LayerGradients, Conv2dSeveralChannels) {
  Conv2d conv(3, 3);
  check_layer(conv, Shape{2, 5, 4}, 3, Inputs::kRandom, 1e-2);
}

TEST(LayerGradients, Linear) {
  Linear fc(5);
  check_layer(fc, Shape{3, 2, 2}, 4, Inputs::kRandom, 1e-2);
}

TEST(LayerGradients, Relu) {
  Relu relu;
  check_layer(relu, Shape{2, 3, 3}, 2, Inputs::kAwayFromZero, 1e-3);
}

TEST(LayerGradients, MaxPool) {
  MaxPool2d pool(2);
  check_layer(pool, Shape{2, 4, 6}, 2, Inputs::kDistinct, 1e-3);
}

TEST(LayerGradients, SwapAxesBothWays) {
  SwapAxes to_rows(true), to_channels(false);
  check_layer(to_rows, Shape{3, 2, 2}, 2, Inputs::kRandom, 1e-2);
  check_layer(to_channels, Shape{3, 2, 2}, 2, Inputs::kRandom, 1e-2);
}

TEST(Layers, SwapAxesRoundTrip) {
  SwapAxes a(false), b(true);
  a.configure(Shape{3, 2, 2});
  b.configure(Shape{3, 2, 2});
  std::vector<float> x(3 * 4 * 5), y(x.size()), z(x.size());
  std::iota(x.begin(), x.end(), 0.0f);
  a.forward(x.data(), y.data(), 5);
  b.forward(y.data(), z.data(), 5);
  EXPECT_EQ(x, z);
  // N x C x P -> C x N x P: sample 1, channel 2, pixel 3 moves to channel 2, sample 1.
  EXPECT_EQ(y[(2 * 5 + 1) * 4 + 3], x[(1 * 3 + 2) * 4 + 3]);
}

TEST(Layers, ConvMatchesDirectConvolution) {
  Conv2d conv(2, 3);
  const Shape in{2, 4, 5};
  conv.configure(in);
  std::vector<float> params(conv.param_count()), grads(params.size());
  conv.bind(params.data(), grads.data());
  Rng rng(3);
  for (float& p : params) p = static_cast<float>(rng.normal());
  const int batch = 2;
  std::vector<float> x(in.size() * batch), y(2 * 4 * 5 * batch);
  for (float& v : x) v = static_cast<float>(rng.normal());
  conv.forward(x.data(), y.data(), batch);
  // Channel-major layout (Note [Activation layouts]): x[c][n][y][x].
  for (int o = 0; o < 2; ++o)
    for (int n = 0; n < batch; ++n)
      for (int yy = 0; yy < 4; ++yy)
        for (int xx = 0; xx < 5; ++xx) {
          double s = params[conv.weight_count() + o];
          for (int c = 0; c < 2; ++c)
            for (int i = 0; i < 3; ++i)
              for (int j = 0; j < 3; ++j) {
                const int sy = yy + i - 1, sx = xx + j - 1;
                if (sy < 0 || sy >= 4 || sx < 0 || sx >= 5) continue;
                s += params[((o * 2 + c) * 3 + i) * 3 + j] * x[((c * batch + n) * 4 + sy) * 5 + sx];
              }
          EXPECT_NEAR(y[((o * batch + n) * 4 + yy) * 5 + xx], s, 1e-4);
        }
}

// The whole network and its loss: cross-entropy gradients through every layer of the CNN
// (with a 2-channel input, so the first layout swap is in the path too).
TEST(ModelGradients, CnnWithSoftmaxCrossEntropy) {
  std::unique_ptr<Model> model;
  ASSERT_TRUE(Model::create("cnn", Shape{2, 8, 8}, 10, &model).ok());
  model->init_params(5);
  Rng rng(9);
  for (float& p : model->params()) p += static_cast<float>(0.02 * rng.normal());
  const int batch = 3;
  std::vector<float> x(model->input_shape().size() * batch);
  for (float& v : x) v = static_cast<float>(rng.normal());
  const std::vector<uint8_t> labels = {1, 7, 3};
  auto loss_at = [&] {
    model->forward(x.data(), batch);
    return static_cast<double>(model->loss(labels.data(), batch, nullptr));
  };
  loss_at();
  std::vector<size_t> done_layers;
  model->backward(batch, [&](size_t l) { done_layers.push_back(l); });
  const std::vector<float> analytic(model->grads().begin(), model->grads().end());
  // Reported last layer first, once per layer with parameters.
  ASSERT_EQ(done_layers.size(), model->param_ranges().size());
  EXPECT_TRUE(std::is_sorted(done_layers.rbegin(), done_layers.rend()));

  const std::span<float> p = model->params();
  auto numeric_at = [&](size_t i, double eps) {
    const float keep = p[i];
    p[i] = keep + static_cast<float>(eps);
    const double fp = loss_at();
    p[i] = keep - static_cast<float>(eps);
    const double fm = loss_at();
    p[i] = keep;
    return (fp - fm) / (2 * eps);
  };
  int checked = 0, kinks = 0;
  for (const ParamRange& r : model->param_ranges()) {
    // The largest gradients of each layer (where a wrong one would show) and a few others.
    std::vector<size_t> idx(r.count);
    std::iota(idx.begin(), idx.end(), r.offset);
    std::partial_sort(idx.begin(), idx.begin() + 6, idx.end(),
                      [&](size_t a, size_t b) { return std::fabs(analytic[a]) > std::fabs(analytic[b]); });
    idx.resize(6);
    idx.push_back(r.offset + r.count / 3);
    idx.push_back(r.offset + r.count - 1);
    for (size_t i : idx) {
      const double tol = 3e-3 + 0.02 * std::fabs(analytic[i]);
      const double n1 = numeric_at(i, 1e-3), n2 = numeric_at(i, 1e-4);
      // Two step sizes that disagree mean a ReLU or a pooling choice flipped inside the
      // step (a kink, where no derivative exists): not a wrong gradient.
      if (std::fabs(n1 - n2) > tol) {
        ++kinks;
        continue;
      }
      EXPECT_NEAR(n1, analytic[i], tol) << model->layers()[r.layer]->name() << " parameter " << i - r.offset;
      ++checked;
    }
  }
  EXPECT_LE(kinks, 3);
  EXPECT_EQ(checked + kinks, 8 * 4);
}

TEST(Model, ShapesAndParameterCounts) {
  std::unique_ptr<Model> cnn, mlp;
  ASSERT_TRUE(Model::create("cnn", Shape{1, 28, 28}, 10, &cnn).ok());
  // LeNet-5 of the seeds: 5*5*1*32+32, 5*5*32*64+64, 7*7*64*512+512, 512*10+10.
  EXPECT_EQ(cnn->param_count(), 832u + 51264u + 1606144u + 5130u);
  EXPECT_EQ(cnn->classes(), 10);
  ASSERT_TRUE(Model::create("mlp", Shape{3, 32, 32}, 10, &mlp).ok());
  EXPECT_EQ(mlp->param_count(), 3072u * 512 + 512 + 512 * 256 + 256 + 256 * 10 + 10);
}

TEST(Model, BadKindOrShapeIsAnError) {
  std::unique_ptr<Model> m;
  Status s = Model::create("resnet", Shape{1, 28, 28}, 10, &m);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("resnet"), std::string::npos);
  s = Model::create("cnn", Shape{1, 30, 30}, 10, &m);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("divisible by 4"), std::string::npos);
}

}  // namespace
}  // namespace accord::trainer
