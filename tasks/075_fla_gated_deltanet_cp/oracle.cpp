// Gated DeltaNet under context parallelism: each head's gated delta rule run
// token by token over the whole (gathered) sequence in fp64, written back to
// the rank that holds each position.
#include "kforge/oracle.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace {

// PyTorch's F.softplus (beta 1, threshold 20).
double Softplus(double x) { return x > 20.0 ? x : std::log1p(std::exp(x)); }

// x / max(|x|, 1e-6) * scale, as F.normalize(p=2, eps=1e-6).
void Normalize(const double* x, int64_t n, double scale, double* out) {
  double ss = 0;
  for (int64_t i = 0; i < n; ++i) ss += x[i] * x[i];
  const double inv = scale / std::max(std::sqrt(ss), 1e-6);
  for (int64_t i = 0; i < n; ++i) out[i] = x[i] * inv;
}

}  // namespace

KF_ORACLE(fla_gated_deltanet_cp) {
  const auto& qs = io.in_shape(0, "q");
  const auto& vs = io.in_shape(0, "v");
  if (qs.size() != 3 || vs.size() != 3 || qs[0] != vs[0] || qs[1] != vs[1] || qs[1] % io.world != 0)
    return kforge::Error(kforge::ErrorKind::kHarness,
                         "fla_gated_deltanet_cp: q/v are not [S, H, DK] / [S, H, DV]");
  const int64_t s_local = qs[0], heads = qs[1], dk = qs[2], dv = vs[2];
  const int64_t heads_local = heads / io.world, total = io.world * s_local;
  const double scale = 1.0 / std::sqrt(static_cast<double>(dk));
  // Heads are independent and each writes only its own columns of the outputs.
  kforge::OracleParallelFor(heads, [&](int64_t h_begin, int64_t h_end) {
    std::vector<double> state(dk * dv), q(dk), k(dk), proj(dv);
    for (int64_t h = h_begin; h < h_end; ++h) {
      const int owner = static_cast<int>(h / heads_local);
      const int64_t hl = h % heads_local;
      const double a = std::exp(io.in(owner, "a_log")[hl]);
      const double dt_bias = io.in(owner, "dt_bias")[hl];
      std::fill(state.begin(), state.end(), 0.0);
      for (int64_t t = 0; t < total; ++t) {
        const int p = static_cast<int>(t / s_local);
        const int64_t s = t % s_local, row = s * heads + h;
        Normalize(io.in(p, "q").data() + row * dk, dk, scale, q.data());
        Normalize(io.in(p, "k").data() + row * dk, dk, 1.0, k.data());
        const double* v = io.in(p, "v").data() + row * dv;
        const double decay = std::exp(-a * Softplus(io.in(p, "gate")[row] + dt_bias));
        const double beta = io.in(p, "beta")[row];
        for (double& x : state) x *= decay;
        std::fill(proj.begin(), proj.end(), 0.0);
        for (int64_t i = 0; i < dk; ++i)
          for (int64_t j = 0; j < dv; ++j) proj[j] += k[i] * state[i * dv + j];
        for (int64_t j = 0; j < dv; ++j) proj[j] = (v[j] - proj[j]) * beta;  // the update
        for (int64_t i = 0; i < dk; ++i)
          for (int64_t j = 0; j < dv; ++j) state[i * dv + j] += k[i] * proj[j];
        double* o = io.out(p, "o").data() + row * dv;
        for (int64_t j = 0; j < dv; ++j) {
          double acc = 0;
          for (int64_t i = 0; i < dk; ++i) acc += q[i] * state[i * dv + j];
          o[j] = acc;
        }
      }
    }
  });
  return kforge::Status::Ok();
}
