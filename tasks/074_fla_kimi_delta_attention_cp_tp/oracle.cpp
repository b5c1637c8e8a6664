// Kimi Delta Attention under CP x TP: each CP group's sequence runs through the per-channel gated
// delta rule token by token in fp64, and every rank gets the sum over its TP group of the outputs
// at its own positions.
#include "kforge/oracle.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace {

constexpr double kLowerBound = -5.0;  // KDA's gate lower bound (PKB's lower_bound)

// x / max(|x|, 1e-12) * scale, as F.normalize(p=2) with its default eps.
void Normalize(const double* x, int64_t n, double scale, double* out) {
  double ss = 0;
  for (int64_t i = 0; i < n; ++i) ss += x[i] * x[i];
  const double inv = scale / std::max(std::sqrt(ss), 1e-12);
  for (int64_t i = 0; i < n; ++i) out[i] = x[i] * inv;
}

}  // namespace

KF_ORACLE(fla_kimi_delta_attention_cp_tp) {
  const auto& qs = io.in_shape(0, "q");
  const auto& vs = io.in_shape(0, "v");
  if (qs.size() != 3 || vs.size() != 3 || qs[0] != vs[0] || qs[1] != vs[1])
    return kforge::Error(kforge::ErrorKind::kHarness,
                         "fla_kimi_delta_attention_cp_tp: q/v are not [S, H, DK] / [S, H, DV]");
  const int64_t s_local = qs[0], heads = qs[1], dk = qs[2], dv = vs[2];
  // [[groups]]: tp (size min(2, W/2), contiguous) and cp (size W / tp, strided): rank r is at CP
  // position r / tp of CP group r % tp, and its TP group is r - r % tp .. r - r % tp + tp - 1.
  const int tp = std::min(2, io.world / 2), cp = io.world / tp;
  const int64_t total = cp * s_local;
  const double scale = 1.0 / std::sqrt(static_cast<double>(dk));
  // full[c]: CP group c's output over the whole sequence, [T, H, DV].
  std::vector<std::vector<double>> full(tp, std::vector<double>(total * heads * dv));
  kforge::OracleParallelFor(tp * heads, [&](int64_t begin, int64_t end) {
    std::vector<double> state(dk * dv), q(dk), k(dk), decay(dk), u(dv);
    for (int64_t item = begin; item < end; ++item) {
      const int c = static_cast<int>(item / heads);
      const int64_t h = item % heads;
      // Replicated: every rank holds the same a_log and dt_bias.
      const double a = std::exp(io.in(0, "a_log")[h]);
      const double* dt_bias = io.in(0, "dt_bias").data() + h * dk;
      std::fill(state.begin(), state.end(), 0.0);
      for (int64_t t = 0; t < total; ++t) {
        const int p = c + static_cast<int>(t / s_local) * tp;  // the world rank holding t
        const int64_t row = (t % s_local) * heads + h;
        Normalize(io.in(p, "q").data() + row * dk, dk, scale, q.data());
        Normalize(io.in(p, "k").data() + row * dk, dk, 1.0, k.data());
        const double* v = io.in(p, "v").data() + row * dv;
        const double* g = io.in(p, "g").data() + row * dk;
        const double beta = 1.0 / (1.0 + std::exp(-io.in(p, "beta")[row]));
        for (int64_t i = 0; i < dk; ++i)
          decay[i] = std::exp(kLowerBound / (1.0 + std::exp(-a * (g[i] + dt_bias[i]))));
        for (int64_t i = 0; i < dk; ++i)
          for (int64_t j = 0; j < dv; ++j) state[i * dv + j] *= decay[i];
        std::fill(u.begin(), u.end(), 0.0);
        for (int64_t i = 0; i < dk; ++i)
          for (int64_t j = 0; j < dv; ++j) u[j] += k[i] * state[i * dv + j];
        for (int64_t j = 0; j < dv; ++j) u[j] = (v[j] - u[j]) * beta;
        for (int64_t i = 0; i < dk; ++i)
          for (int64_t j = 0; j < dv; ++j) state[i * dv + j] += k[i] * u[j];
        double* o = full[c].data() + (t * heads + h) * dv;
        for (int64_t j = 0; j < dv; ++j) {
          double acc = 0;
          for (int64_t i = 0; i < dk; ++i) acc += q[i] * state[i * dv + j];
          o[j] = acc;
        }
      }
    }
  });
  for (int r = 0; r < io.world; ++r) {
    auto o = io.out(r, "o");
    const int64_t first = static_cast<int64_t>(r / tp) * s_local * heads * dv;
    for (size_t e = 0; e < o.size(); ++e) {
      double sum = 0;
      for (int c = 0; c < tp; ++c) sum += full[c][first + e];
      o[e] = sum;
    }
  }
  return kforge::Status::Ok();
}
