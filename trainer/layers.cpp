// CPU layer kernels. The heavy work is sgemm (OpenBLAS); the loops here are the memory-bound
// glue around it (im2col, pooling, ReLU), written as plain loops over contiguous rows that
// the compiler vectorises. See Note [Activation layouts] in layers.hpp.
#include "trainer/layers.hpp"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstring>

namespace accord::trainer {

double Rng::normal() {
  // Box-Muller; uniform() can be 0, so use 1 - u for the logarithm.
  const double u1 = 1.0 - uniform();
  const double u2 = uniform();
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}

namespace {

// He initialisation for layers followed by ReLU: N(0, 2 / fan_in).
void init_he(float* w, size_t count, size_t fan_in, Rng& rng) {
  const double stddev = std::sqrt(2.0 / static_cast<double>(fan_in));
  for (size_t i = 0; i < count; ++i) w[i] = static_cast<float>(rng.normal() * stddev);
}

}  // namespace

// ---- Conv2d --------------------------------------------------------------------------------

std::string Conv2d::name() const {
  return "conv" + std::to_string(k_) + "x" + std::to_string(k_) + "x" + std::to_string(out_);
}

Shape Conv2d::configure(Shape in) {
  in_ = in;
  return Shape{out_, in.h, in.w};
}

void Conv2d::bind(float* params, float* grads) {
  w_ = params;
  b_ = params + weight_count();
  dw_ = grads;
  db_ = grads + weight_count();
}

void Conv2d::init_params(Rng& rng) {
  init_he(w_, weight_count(), static_cast<size_t>(in_.c) * k_ * k_, rng);
  std::fill(b_, b_ + out_, 0.0f);
}

void Conv2d::im2col(const float* x, int batch) {
  const int H = in_.h, W = in_.w, pad = k_ / 2;
  const size_t np = static_cast<size_t>(batch) * H * W;
  col_.resize(static_cast<size_t>(in_.c) * k_ * k_ * np);
  for (int c = 0; c < in_.c; ++c) {
    for (int ki = 0; ki < k_; ++ki) {
      for (int kj = 0; kj < k_; ++kj) {
        float* dst = col_.data() + ((static_cast<size_t>(c) * k_ + ki) * k_ + kj) * np;
        const int dy = ki - pad, dx = kj - pad;
        // Columns x whose source x + dx lies inside the row.
        const int x0 = std::max(0, -dx), x1 = std::min(W, W - dx);
        for (int n = 0; n < batch; ++n) {
          const float* plane = x + (static_cast<size_t>(c) * batch + n) * H * W;
          for (int y = 0; y < H; ++y) {
            float* d = dst + (static_cast<size_t>(n) * H + y) * W;
            const int sy = y + dy;
            if (sy < 0 || sy >= H || x1 <= x0) {
              std::memset(d, 0, sizeof(float) * W);
              continue;
            }
            const float* s = plane + static_cast<size_t>(sy) * W + dx;
            for (int i = 0; i < x0; ++i) d[i] = 0.0f;
            std::memcpy(d + x0, s + x0, sizeof(float) * (x1 - x0));
            for (int i = x1; i < W; ++i) d[i] = 0.0f;
          }
        }
      }
    }
  }
}

void Conv2d::col2im(const float* dcol, float* dx_out, int batch) const {
  const int H = in_.h, W = in_.w, pad = k_ / 2;
  const size_t np = static_cast<size_t>(batch) * H * W;
  std::memset(dx_out, 0, sizeof(float) * in_.size() * batch);
  for (int c = 0; c < in_.c; ++c) {
    for (int ki = 0; ki < k_; ++ki) {
      for (int kj = 0; kj < k_; ++kj) {
        const float* src = dcol + ((static_cast<size_t>(c) * k_ + ki) * k_ + kj) * np;
        const int dy = ki - pad, dx = kj - pad;
        const int x0 = std::max(0, -dx), x1 = std::min(W, W - dx);
        for (int n = 0; n < batch; ++n) {
          float* plane = dx_out + (static_cast<size_t>(c) * batch + n) * H * W;
          for (int y = 0; y < H; ++y) {
            const int sy = y + dy;
            if (sy < 0 || sy >= H) continue;
            const float* s = src + (static_cast<size_t>(n) * H + y) * W;
            float* d = plane + static_cast<size_t>(sy) * W + dx;
            for (int i = x0; i < x1; ++i) d[i] += s[i];
          }
        }
      }
    }
  }
}

void Conv2d::forward(const float* x, float* y, int batch) {
  im2col(x, batch);
  const int K = in_.c * k_ * k_;
  const int np = batch * in_.h * in_.w;
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, out_, np, K, 1.0f, w_, K, col_.data(),
              np, 0.0f, y, np);
  for (int o = 0; o < out_; ++o) {
    float* row = y + static_cast<size_t>(o) * np;
    const float b = b_[o];
    for (int i = 0; i < np; ++i) row[i] += b;
  }
}

void Conv2d::backward(const float* /*x*/, const float* /*y*/, const float* dy, float* dx,
                      int batch) {
  const int K = in_.c * k_ * k_;
  const int np = batch * in_.h * in_.w;
  // dW = dY[Cout x NP] * col^T; db = row sums of dY.
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, out_, K, np, 1.0f, dy, np, col_.data(), np,
              0.0f, dw_, K);
  for (int o = 0; o < out_; ++o) {
    const float* row = dy + static_cast<size_t>(o) * np;
    double s = 0.0;
    for (int i = 0; i < np; ++i) s += row[i];
    db_[o] = static_cast<float>(s);
  }
  if (dx == nullptr) return;
  // dcol = W^T * dY, then scatter back to the input positions.
  dcol_.resize(static_cast<size_t>(K) * np);
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, K, np, out_, 1.0f, w_, K, dy, np, 0.0f,
              dcol_.data(), np);
  col2im(dcol_.data(), dx, batch);
}

// ---- MaxPool2d -----------------------------------------------------------------------------

std::string MaxPool2d::name() const { return "maxpool" + std::to_string(s_); }

Shape MaxPool2d::configure(Shape in) {
  in_ = in;
  out_ = Shape{in.c, in.h / s_, in.w / s_};
  return out_;
}

void MaxPool2d::forward(const float* x, float* y, int batch) {
  const size_t planes = static_cast<size_t>(in_.c) * batch;
  const int H = in_.h, W = in_.w, Ho = out_.h, Wo = out_.w;
  argmax_.resize(planes * Ho * Wo);
  for (size_t p = 0; p < planes; ++p) {
    const float* in = x + p * H * W;
    float* out = y + p * Ho * Wo;
    uint32_t* arg = argmax_.data() + p * Ho * Wo;
    for (int oy = 0; oy < Ho; ++oy) {
      for (int ox = 0; ox < Wo; ++ox) {
        uint32_t best = static_cast<uint32_t>(oy * s_ * W + ox * s_);
        float m = in[best];
        for (int i = 0; i < s_; ++i) {
          for (int j = 0; j < s_; ++j) {
            const uint32_t idx = static_cast<uint32_t>((oy * s_ + i) * W + ox * s_ + j);
            if (in[idx] > m) {
              m = in[idx];
              best = idx;
            }
          }
        }
        out[oy * Wo + ox] = m;
        arg[oy * Wo + ox] = best;
      }
    }
  }
}

void MaxPool2d::backward(const float* /*x*/, const float* /*y*/, const float* dy, float* dx,
                         int batch) {
  if (dx == nullptr) return;
  const size_t planes = static_cast<size_t>(in_.c) * batch;
  const size_t in_plane = static_cast<size_t>(in_.h) * in_.w;
  const size_t out_plane = static_cast<size_t>(out_.h) * out_.w;
  std::memset(dx, 0, sizeof(float) * planes * in_plane);
  for (size_t p = 0; p < planes; ++p) {
    const uint32_t* arg = argmax_.data() + p * out_plane;
    const float* g = dy + p * out_plane;
    float* d = dx + p * in_plane;
    for (size_t i = 0; i < out_plane; ++i) d[arg[i]] += g[i];
  }
}

// ---- Relu ----------------------------------------------------------------------------------

void Relu::forward(const float* x, float* y, int batch) {
  const size_t n = in_.size() * batch;
  for (size_t i = 0; i < n; ++i) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

void Relu::backward(const float* /*x*/, const float* y, const float* dy, float* dx, int batch) {
  if (dx == nullptr) return;
  const size_t n = in_.size() * batch;
  for (size_t i = 0; i < n; ++i) dx[i] = y[i] > 0.0f ? dy[i] : 0.0f;
}

// ---- Linear --------------------------------------------------------------------------------

std::string Linear::name() const { return "fc" + std::to_string(out_); }

Shape Linear::configure(Shape in) {
  in_ = static_cast<int>(in.size());
  return Shape{out_, 1, 1};
}

void Linear::bind(float* params, float* grads) {
  w_ = params;
  b_ = params + weight_count();
  dw_ = grads;
  db_ = grads + weight_count();
}

void Linear::init_params(Rng& rng) {
  init_he(w_, weight_count(), static_cast<size_t>(in_), rng);
  std::fill(b_, b_ + out_, 0.0f);
}

void Linear::forward(const float* x, float* y, int batch) {
  for (int n = 0; n < batch; ++n) std::memcpy(y + static_cast<size_t>(n) * out_, b_, sizeof(float) * out_);
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, batch, out_, in_, 1.0f, x, in_, w_, in_,
              1.0f, y, out_);
}

void Linear::backward(const float* x, const float* /*y*/, const float* dy, float* dx, int batch) {
  // dW[out x in] = dY^T * X; db = column sums of dY; dX = dY * W.
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, out_, in_, batch, 1.0f, dy, out_, x, in_,
              0.0f, dw_, in_);
  if (static_cast<int>(ones_.size()) < batch) ones_.assign(batch, 1.0f);
  cblas_sgemv(CblasRowMajor, CblasTrans, batch, out_, 1.0f, dy, out_, ones_.data(), 1, 0.0f, db_, 1);
  if (dx == nullptr) return;
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, batch, in_, out_, 1.0f, dy, out_, w_, in_,
              0.0f, dx, in_);
}

// ---- SwapAxes ------------------------------------------------------------------------------

namespace {

// dst[b][a][plane] = src[a][b][plane]
void swap_axes(const float* src, float* dst, size_t a, size_t b, size_t plane) {
  for (size_t i = 0; i < a; ++i)
    for (size_t j = 0; j < b; ++j)
      std::memcpy(dst + (j * a + i) * plane, src + (i * b + j) * plane, sizeof(float) * plane);
}

}  // namespace

void SwapAxes::forward(const float* x, float* y, int batch) {
  const size_t plane = static_cast<size_t>(in_.h) * in_.w;
  if (to_rows_)
    swap_axes(x, y, in_.c, batch, plane);  // C x N -> N x C
  else
    swap_axes(x, y, batch, in_.c, plane);  // N x C -> C x N
}

void SwapAxes::backward(const float* /*x*/, const float* /*y*/, const float* dy, float* dx,
                        int batch) {
  if (dx == nullptr) return;
  const size_t plane = static_cast<size_t>(in_.h) * in_.w;
  if (to_rows_)
    swap_axes(dy, dx, batch, in_.c, plane);
  else
    swap_axes(dy, dx, in_.c, batch, plane);
}

}  // namespace accord::trainer
