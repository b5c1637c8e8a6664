// fp64 oracle helpers; the contracts are in kforge/oracle_math.h.
#include "kforge/oracle_math.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <numbers>
#include <string>

#include "oracle_math_checks.h"
#include "parallel.h"

namespace kforge::om {
namespace {

using eval::internal::ParallelFor;
using eval::internal::ThreadsFor;
using internal::CheckDim;
using internal::CheckOptional;
using internal::CheckSize;
using internal::Fail;

// Rows of a [rows, cols] matrix laid out as [cols, rows].
std::vector<double> Transpose(std::span<const double> src, int64_t rows, int64_t cols) {
  std::vector<double> dst(src.size());
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < cols; ++j) dst[j * rows + i] = src[i * cols + j];
  }
  return dst;
}

}  // namespace

// ---------------------------------------------------------------------------
// GEMM

void Gemm(std::span<const double> a, std::span<const double> b, std::span<double> c, int64_t m,
          int64_t n, int64_t k, bool trans_a, bool trans_b, double alpha, double beta) {
  CheckDim("Gemm", "m", m);
  CheckDim("Gemm", "n", n);
  CheckDim("Gemm", "k", k);
  CheckSize("Gemm", "a", a.size(), m * k);
  CheckSize("Gemm", "b", b.size(), k * n);
  CheckSize("Gemm", "c", c.size(), m * n);
  // Bring both operands to the plain layout so that the inner loop (i-p-j)
  // streams contiguous rows of B and C.
  std::vector<double> a_plain, b_plain;
  if (trans_a) a_plain = Transpose(a, k, m);
  if (trans_b) b_plain = Transpose(b, n, k);
  const double* pa = trans_a ? a_plain.data() : a.data();
  const double* pb = trans_b ? b_plain.data() : b.data();
  double* pc = c.data();

  // A thread per ~4 M multiply-adds, never more threads than rows. Each row
  // is summed by one thread in a fixed order, so the result does not depend
  // on the thread count.
  const int threads = static_cast<int>(std::min<int64_t>(
      ThreadsFor(m * n * std::max<int64_t>(k, 1), 0, int64_t{1} << 22), std::max<int64_t>(m, 1)));
  // (Tiling B and blocking C in registers measured slower than this plain
  // i-p-j loop at -O2, which does not vectorise either.)
  ParallelFor(m, threads, [&](int64_t begin, int64_t end) {
    std::vector<double> acc(n);
    for (int64_t i = begin; i < end; ++i) {
      std::fill(acc.begin(), acc.end(), 0.0);
      const double* arow = pa + i * k;
      for (int64_t p = 0; p < k; ++p) {
        const double aip = arow[p];
        const double* brow = pb + p * n;
        for (int64_t j = 0; j < n; ++j) acc[j] += aip * brow[j];
      }
      double* crow = pc + i * n;
      for (int64_t j = 0; j < n; ++j)
        crow[j] = beta == 0.0 ? alpha * acc[j] : alpha * acc[j] + beta * crow[j];
    }
  });
}

// ---------------------------------------------------------------------------
// Normalisation

void RmsNorm(std::span<const double> x, std::span<const double> weight, std::span<double> y,
             int64_t rows, int64_t cols, double eps) {
  CheckDim("RmsNorm", "rows", rows);
  CheckDim("RmsNorm", "cols", cols);
  CheckSize("RmsNorm", "x", x.size(), rows * cols);
  CheckOptional("RmsNorm", "weight", weight.size(), cols);
  CheckSize("RmsNorm", "y", y.size(), rows * cols);
  for (int64_t r = 0; r < rows; ++r) {
    const double* xr = x.data() + r * cols;
    double ss = 0.0;
    for (int64_t c = 0; c < cols; ++c) ss += xr[c] * xr[c];
    const double rstd = 1.0 / std::sqrt(ss / static_cast<double>(cols) + eps);
    for (int64_t c = 0; c < cols; ++c) {
      y[r * cols + c] = xr[c] * rstd * (weight.empty() ? 1.0 : weight[c]);
    }
  }
}

void RmsNormBackward(std::span<const double> x, std::span<const double> weight,
                     std::span<const double> dy, std::span<double> dx, std::span<double> dweight,
                     int64_t rows, int64_t cols, double eps) {
  const char* fn = "RmsNormBackward";
  CheckDim(fn, "rows", rows);
  CheckDim(fn, "cols", cols);
  CheckSize(fn, "x", x.size(), rows * cols);
  CheckOptional(fn, "weight", weight.size(), cols);
  CheckSize(fn, "dy", dy.size(), rows * cols);
  CheckSize(fn, "dx", dx.size(), rows * cols);
  CheckOptional(fn, "dweight", dweight.size(), cols);
  std::fill(dweight.begin(), dweight.end(), 0.0);
  std::vector<double> xhat(cols), g(cols);
  for (int64_t r = 0; r < rows; ++r) {
    const double* xr = x.data() + r * cols;
    const double* dyr = dy.data() + r * cols;
    double ss = 0.0;
    for (int64_t c = 0; c < cols; ++c) ss += xr[c] * xr[c];
    const double rstd = 1.0 / std::sqrt(ss / static_cast<double>(cols) + eps);
    double g_dot_xhat = 0.0;
    for (int64_t c = 0; c < cols; ++c) {
      xhat[c] = xr[c] * rstd;
      g[c] = dyr[c] * (weight.empty() ? 1.0 : weight[c]);
      g_dot_xhat += g[c] * xhat[c];
    }
    const double mean_g_xhat = g_dot_xhat / static_cast<double>(cols);
    for (int64_t c = 0; c < cols; ++c) {
      dx[r * cols + c] = rstd * (g[c] - xhat[c] * mean_g_xhat);
      if (!dweight.empty()) dweight[c] += dyr[c] * xhat[c];
    }
  }
}

void LayerNorm(std::span<const double> x, std::span<const double> gamma,
               std::span<const double> beta, std::span<double> y, int64_t rows, int64_t cols,
               double eps) {
  CheckDim("LayerNorm", "rows", rows);
  CheckDim("LayerNorm", "cols", cols);
  CheckSize("LayerNorm", "x", x.size(), rows * cols);
  CheckOptional("LayerNorm", "gamma", gamma.size(), cols);
  CheckOptional("LayerNorm", "beta", beta.size(), cols);
  CheckSize("LayerNorm", "y", y.size(), rows * cols);
  for (int64_t r = 0; r < rows; ++r) {
    const double* xr = x.data() + r * cols;
    double sum = 0.0;
    for (int64_t c = 0; c < cols; ++c) sum += xr[c];
    const double mean = sum / static_cast<double>(cols);
    double sq = 0.0;
    for (int64_t c = 0; c < cols; ++c) sq += (xr[c] - mean) * (xr[c] - mean);
    const double rstd = 1.0 / std::sqrt(sq / static_cast<double>(cols) + eps);
    for (int64_t c = 0; c < cols; ++c) {
      const double xhat = (xr[c] - mean) * rstd;
      y[r * cols + c] = xhat * (gamma.empty() ? 1.0 : gamma[c]) + (beta.empty() ? 0.0 : beta[c]);
    }
  }
}

void LayerNormBackward(std::span<const double> x, std::span<const double> gamma,
                       std::span<const double> dy, std::span<double> dx, std::span<double> dgamma,
                       std::span<double> dbeta, int64_t rows, int64_t cols, double eps) {
  const char* fn = "LayerNormBackward";
  CheckDim(fn, "rows", rows);
  CheckDim(fn, "cols", cols);
  CheckSize(fn, "x", x.size(), rows * cols);
  CheckOptional(fn, "gamma", gamma.size(), cols);
  CheckSize(fn, "dy", dy.size(), rows * cols);
  CheckSize(fn, "dx", dx.size(), rows * cols);
  CheckOptional(fn, "dgamma", dgamma.size(), cols);
  CheckOptional(fn, "dbeta", dbeta.size(), cols);
  std::fill(dgamma.begin(), dgamma.end(), 0.0);
  std::fill(dbeta.begin(), dbeta.end(), 0.0);
  const double inv_n = 1.0 / static_cast<double>(cols);
  std::vector<double> xhat(cols), g(cols);
  for (int64_t r = 0; r < rows; ++r) {
    const double* xr = x.data() + r * cols;
    const double* dyr = dy.data() + r * cols;
    double sum = 0.0;
    for (int64_t c = 0; c < cols; ++c) sum += xr[c];
    const double mean = sum * inv_n;
    double sq = 0.0;
    for (int64_t c = 0; c < cols; ++c) sq += (xr[c] - mean) * (xr[c] - mean);
    const double rstd = 1.0 / std::sqrt(sq * inv_n + eps);
    double g_sum = 0.0, g_dot_xhat = 0.0;
    for (int64_t c = 0; c < cols; ++c) {
      xhat[c] = (xr[c] - mean) * rstd;
      g[c] = dyr[c] * (gamma.empty() ? 1.0 : gamma[c]);
      g_sum += g[c];
      g_dot_xhat += g[c] * xhat[c];
    }
    for (int64_t c = 0; c < cols; ++c) {
      dx[r * cols + c] = rstd * (g[c] - g_sum * inv_n - xhat[c] * g_dot_xhat * inv_n);
      if (!dgamma.empty()) dgamma[c] += dyr[c] * xhat[c];
      if (!dbeta.empty()) dbeta[c] += dyr[c];
    }
  }
}

// ---------------------------------------------------------------------------
// Activations

namespace {
constexpr double kSqrt2OverPi = std::numbers::sqrt2 * std::numbers::inv_sqrtpi;  // sqrt(2/pi)
constexpr double kGeluCubic = 0.044715;
double Sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }
}  // namespace

double Gelu(double x) {
  return 0.5 * x * (1.0 + std::tanh(kSqrt2OverPi * (x + kGeluCubic * x * x * x)));
}

double GeluGrad(double x) {
  const double t = std::tanh(kSqrt2OverPi * (x + kGeluCubic * x * x * x));
  return 0.5 * (1.0 + t) +
         0.5 * x * (1.0 - t * t) * kSqrt2OverPi * (1.0 + 3.0 * kGeluCubic * x * x);
}

double GeluExact(double x) { return 0.5 * x * (1.0 + std::erf(x / std::numbers::sqrt2)); }

double GeluExactGrad(double x) {
  const double pdf = std::exp(-0.5 * x * x) / std::sqrt(2.0 * std::numbers::pi);
  return 0.5 * (1.0 + std::erf(x / std::numbers::sqrt2)) + x * pdf;
}

double Silu(double x) { return x * Sigmoid(x); }

double SiluGrad(double x) {
  const double s = Sigmoid(x);
  return s * (1.0 + x * (1.0 - s));
}

double Activate(Activation act, double x) {
  switch (act) {
    case Activation::kGelu:
      return Gelu(x);
    case Activation::kGeluExact:
      return GeluExact(x);
    case Activation::kSilu:
      return Silu(x);
    case Activation::kRelu:
      return x > 0.0 ? x : 0.0;
    case Activation::kIdentity:
      return x;
  }
  Fail("Activate", "unknown Activation");
}

double ActivateGrad(Activation act, double x) {
  switch (act) {
    case Activation::kGelu:
      return GeluGrad(x);
    case Activation::kGeluExact:
      return GeluExactGrad(x);
    case Activation::kSilu:
      return SiluGrad(x);
    case Activation::kRelu:
      return x > 0.0 ? 1.0 : 0.0;
    case Activation::kIdentity:
      return 1.0;
  }
  Fail("ActivateGrad", "unknown Activation");
}

// ---------------------------------------------------------------------------
// Softmax and cross-entropy

double LogSumExp(std::span<const double> row) {
  double mx = -std::numeric_limits<double>::infinity();
  for (double v : row) {
    if (std::isnan(v)) return v;
    mx = std::max(mx, v);
  }
  if (std::isinf(mx)) return mx;  // empty, all -inf, or some +inf
  double sum = 0.0;
  for (double v : row) sum += std::exp(v - mx);
  return mx + std::log(sum);
}

void Softmax(std::span<const double> x, std::span<double> y, int64_t rows, int64_t cols) {
  CheckDim("Softmax", "rows", rows);
  CheckDim("Softmax", "cols", cols);
  CheckSize("Softmax", "x", x.size(), rows * cols);
  CheckSize("Softmax", "y", y.size(), rows * cols);
  for (int64_t r = 0; r < rows; ++r) {
    const double* xr = x.data() + r * cols;
    double* yr = y.data() + r * cols;
    double mx = -std::numeric_limits<double>::infinity();
    for (int64_t c = 0; c < cols; ++c) mx = std::max(mx, xr[c]);
    double sum = 0.0;
    for (int64_t c = 0; c < cols; ++c) sum += (yr[c] = std::exp(xr[c] - mx));
    for (int64_t c = 0; c < cols; ++c) yr[c] /= sum;
  }
}

namespace {

// The target of row r, or -1 for an ignored row; an error for a target outside [0, cols).
Status CheckTarget(const char* fn, int64_t r, int64_t t, int64_t cols, int64_t ignore_index,
                   int64_t* out) {
  if (t == ignore_index) {
    *out = -1;
    return Status::Ok();
  }
  if (t < 0 || t >= cols) {
    return Error(ErrorKind::kInvalidInput, std::string(fn) + ": target " + std::to_string(t) +
                                               " of row " + std::to_string(r) + " is outside [0, " +
                                               std::to_string(cols) + ")");
  }
  *out = t;
  return Status::Ok();
}

}  // namespace

Status CrossEntropy(std::span<const double> logits, std::span<const int64_t> targets,
                    std::span<double> loss, int64_t rows, int64_t cols, int64_t ignore_index) {
  CheckDim("CrossEntropy", "rows", rows);
  CheckDim("CrossEntropy", "cols", cols);
  CheckSize("CrossEntropy", "logits", logits.size(), rows * cols);
  CheckSize("CrossEntropy", "targets", targets.size(), rows);
  CheckSize("CrossEntropy", "loss", loss.size(), rows);
  for (int64_t r = 0; r < rows; ++r) {
    int64_t t = -1;
    Status s = CheckTarget("CrossEntropy", r, targets[r], cols, ignore_index, &t);
    if (!s.ok()) return s;
    const auto row = logits.subspan(r * cols, cols);
    loss[r] = t < 0 ? 0.0 : LogSumExp(row) - row[t];
  }
  return Status::Ok();
}

Status CrossEntropy(std::span<const double> logits, std::span<const double> targets,
                    std::span<double> loss, int64_t rows, int64_t cols, int64_t ignore_index) {
  std::vector<int64_t> idx(targets.size());
  for (size_t r = 0; r < targets.size(); ++r) {
    const double t = targets[r];
    // 2^62 keeps the cast defined; any such target is out of range anyway.
    if (!(std::fabs(t) < 0x1p62) || t != std::trunc(t)) {
      return Error(ErrorKind::kInvalidInput, "CrossEntropy: target " + std::to_string(t) +
                                                 " of row " + std::to_string(r) +
                                                 " is not an integer");
    }
    idx[r] = static_cast<int64_t>(t);
  }
  return CrossEntropy(logits, idx, loss, rows, cols, ignore_index);
}

Status CrossEntropyBackward(std::span<const double> logits, std::span<const int64_t> targets,
                            std::span<const double> dloss, std::span<double> dlogits, int64_t rows,
                            int64_t cols, int64_t ignore_index) {
  const char* fn = "CrossEntropyBackward";
  CheckDim(fn, "rows", rows);
  CheckDim(fn, "cols", cols);
  CheckSize(fn, "logits", logits.size(), rows * cols);
  CheckSize(fn, "targets", targets.size(), rows);
  CheckSize(fn, "dloss", dloss.size(), rows);
  CheckSize(fn, "dlogits", dlogits.size(), rows * cols);
  for (int64_t r = 0; r < rows; ++r) {
    int64_t t = -1;
    Status s = CheckTarget(fn, r, targets[r], cols, ignore_index, &t);
    if (!s.ok()) return s;
    auto out = dlogits.subspan(r * cols, cols);
    if (t < 0) {
      std::fill(out.begin(), out.end(), 0.0);
      continue;
    }
    Softmax(logits.subspan(r * cols, cols), out, 1, cols);
    out[t] -= 1.0;
    for (double& v : out) v *= dloss[r];
  }
  return Status::Ok();
}

// ---------------------------------------------------------------------------
// MLP

void MlpForward(std::span<const double> x, std::span<const double> w1, std::span<const double> w2,
                std::span<double> hidden_out, std::span<double> y, int64_t tokens, int64_t d_model,
                int64_t d_ff, Activation act) {
  const char* fn = "MlpForward";
  CheckSize(fn, "x", x.size(), tokens * d_model);
  CheckSize(fn, "w1", w1.size(), d_model * d_ff);
  CheckSize(fn, "w2", w2.size(), d_ff * d_model);
  CheckOptional(fn, "hidden_out", hidden_out.size(), tokens * d_ff);
  CheckSize(fn, "y", y.size(), tokens * d_model);
  std::vector<double> h(tokens * d_ff);
  Gemm(x, w1, h, tokens, d_ff, d_model);
  if (!hidden_out.empty()) std::copy(h.begin(), h.end(), hidden_out.begin());
  for (double& v : h) v = Activate(act, v);
  Gemm(h, w2, y, tokens, d_model, d_ff);
}

MlpGrads MlpBackward(std::span<const double> x, std::span<const double> w1,
                     std::span<const double> w2, std::span<const double> dy, int64_t tokens,
                     int64_t d_model, int64_t d_ff, Activation act) {
  const char* fn = "MlpBackward";
  CheckSize(fn, "x", x.size(), tokens * d_model);
  CheckSize(fn, "w1", w1.size(), d_model * d_ff);
  CheckSize(fn, "w2", w2.size(), d_ff * d_model);
  CheckSize(fn, "dy", dy.size(), tokens * d_model);
  std::vector<double> h(tokens * d_ff);
  Gemm(x, w1, h, tokens, d_ff, d_model);
  std::vector<double> a(h.size());
  for (size_t i = 0; i < h.size(); ++i) a[i] = Activate(act, h[i]);

  MlpGrads g;
  g.dw2.resize(d_ff * d_model);
  Gemm(a, dy, g.dw2, d_ff, d_model, tokens, /*trans_a=*/true);  // a^T [d_ff, tokens] * dy
  std::vector<double> dh(tokens * d_ff);
  Gemm(dy, w2, dh, tokens, d_ff, d_model, false, /*trans_b=*/true);  // dy * w2^T
  for (size_t i = 0; i < dh.size(); ++i) dh[i] *= ActivateGrad(act, h[i]);
  g.dw1.resize(d_model * d_ff);
  Gemm(x, dh, g.dw1, d_model, d_ff, tokens, /*trans_a=*/true);  // x^T * dh
  g.dx.resize(tokens * d_model);
  Gemm(dh, w1, g.dx, tokens, d_model, d_ff, false, /*trans_b=*/true);  // dh * w1^T
  return g;
}

LinearReluMseGrads LinearReluMseBackward(std::span<const double> x, std::span<const double> y,
                                         std::span<const double> w1, std::span<const double> b1,
                                         std::span<const double> w2, std::span<const double> b2,
                                         int64_t n, int64_t d_in, int64_t hidden, int64_t d_out) {
  const char* fn = "LinearReluMseBackward";
  CheckSize(fn, "x", x.size(), n * d_in);
  CheckSize(fn, "y", y.size(), n * d_out);
  CheckSize(fn, "w1", w1.size(), hidden * d_in);
  CheckSize(fn, "b1", b1.size(), hidden);
  CheckSize(fn, "w2", w2.size(), d_out * hidden);
  CheckSize(fn, "b2", b2.size(), d_out);
  std::vector<double> z(n * hidden), h(n * hidden), out(n * d_out);
  Gemm(x, w1, z, n, hidden, d_in, false, /*trans_b=*/true);
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t k = 0; k < hidden; ++k) {
      z[i * hidden + k] += b1[k];
      h[i * hidden + k] = std::max(z[i * hidden + k], 0.0);
    }
  }
  Gemm(h, w2, out, n, d_out, hidden, false, /*trans_b=*/true);
  LinearReluMseGrads g;
  std::vector<double> dout(n * d_out);
  const double scale = 2.0 / static_cast<double>(n * d_out);
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < d_out; ++j) {
      const double e = out[i * d_out + j] + b2[j] - y[i * d_out + j];
      g.loss += e * e;
      dout[i * d_out + j] = scale * e;
    }
  }
  g.loss /= static_cast<double>(n * d_out);
  g.w2.resize(d_out * hidden);
  Gemm(dout, h, g.w2, d_out, hidden, n, /*trans_a=*/true);  // dout^T * h
  g.b2.assign(d_out, 0.0);
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < d_out; ++j) g.b2[j] += dout[i * d_out + j];
  }
  std::vector<double> dh(n * hidden);
  Gemm(dout, w2, dh, n, hidden, d_out);  // dout * w2
  for (size_t i = 0; i < dh.size(); ++i) {
    if (z[i] <= 0) dh[i] = 0;
  }
  g.w1.resize(hidden * d_in);
  Gemm(dh, x, g.w1, hidden, d_in, n, /*trans_a=*/true);  // dh^T * x
  g.b1.assign(hidden, 0.0);
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t k = 0; k < hidden; ++k) g.b1[k] += dh[i * hidden + k];
  }
  return g;
}

// ---------------------------------------------------------------------------
// Adam

void AdamStep(std::span<double> param, std::span<const double> grad, std::span<double> m,
              std::span<double> v, const AdamConfig& cfg) {
  const int64_t n = static_cast<int64_t>(param.size());
  CheckSize("AdamStep", "grad", grad.size(), n);
  CheckSize("AdamStep", "m", m.size(), n);
  CheckSize("AdamStep", "v", v.size(), n);
  if (cfg.step < 1) Fail("AdamStep", "step must be >= 1, got " + std::to_string(cfg.step));
  const double t = static_cast<double>(cfg.step);
  const double bias1 = 1.0 - std::pow(cfg.beta1, t);
  const double bias2_sqrt = std::sqrt(1.0 - std::pow(cfg.beta2, t));
  const double step_size = cfg.lr / bias1;
  for (int64_t i = 0; i < n; ++i) {
    double g = grad[i];
    if (cfg.weight_decay != 0.0) {
      if (cfg.decoupled) {
        param[i] *= 1.0 - cfg.lr * cfg.weight_decay;
      } else {
        g += cfg.weight_decay * param[i];
      }
    }
    m[i] = cfg.beta1 * m[i] + (1.0 - cfg.beta1) * g;
    v[i] = cfg.beta2 * v[i] + (1.0 - cfg.beta2) * g * g;
    const double denom = std::sqrt(v[i]) / bias2_sqrt + cfg.eps;
    param[i] -= step_size * m[i] / denom;
  }
}

}  // namespace kforge::om
