// Hyena's gated long convolution on the zigzag-sharded sequence, in fp64 and
// without FFTs: assemble the global X1, U = X2 * V from every rank's two
// chunks, take the causal convolution with each channel's filter row as a
// direct sum, gate, and cut each rank's two chunks back out, transposed.
#include "kforge/oracle.h"

#include <algorithm>
#include <cstdint>
#include <vector>

KF_ORACLE(hyena_forward_cp) {
  const auto& xs = io.in_shape(0, "x1");
  const auto& hs = io.in_shape(0, "h");
  if (xs.size() != 3 || hs.size() != 2 || xs[2] % 2 != 0 || hs[0] < 1 || xs[1] % hs[0] != 0)
    return kforge::Error(kforge::ErrorKind::kHarness, "hyena_forward_cp: x1 is not [B, D, 2C]");
  const int world = io.world;
  const int64_t b = xs[0], d = xs[1], c = xs[2] / 2, gd = d / hs[0], lh = hs[1];
  const int64_t len = 2 * world * c;
  auto chunk_of = [world](int rank, int half) { return half == 0 ? rank : 2 * world - 1 - rank; };

  // x1g, ug: [(bi * d + ch) * len + t]
  std::vector<double> x1g(static_cast<size_t>(b * d * len)), ug(x1g.size());
  for (int r = 0; r < world; ++r) {
    auto x1 = io.in(r, "x1");
    auto x2 = io.in(r, "x2");
    auto v = io.in(r, "v");
    for (int64_t row = 0; row < b * d; ++row)
      for (int half = 0; half < 2; ++half)
        for (int64_t i = 0; i < c; ++i) {
          const int64_t src = (row * 2 + half) * c + i;
          const int64_t dst = row * len + chunk_of(r, half) * c + i;
          x1g[dst] = x1[src];
          ug[dst] = x2[src] * v[src];
        }
  }
  auto h = io.in(0, "h");
  auto bias = io.in(0, "bias");
  std::vector<double> yg(x1g.size());
  kforge::OracleParallelFor(b * d, [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      const int64_t ch = row % d;
      const double* filt = &h[(ch / gd) * lh];
      const double* u = &ug[row * len];
      for (int64_t t = 0; t < len; ++t) {
        double s = 0;
        const int64_t taps = std::min(t + 1, lh);
        for (int64_t k = 0; k < taps; ++k) s += filt[k] * u[t - k];
        yg[row * len + t] = x1g[row * len + t] * (s + bias[ch] * u[t]);
      }
    }
  });
  for (int r = 0; r < world; ++r) {
    auto y = io.out(r, "y");
    for (int64_t bi = 0; bi < b; ++bi)
      for (int half = 0; half < 2; ++half)
        for (int64_t i = 0; i < c; ++i) {
          const int64_t t = chunk_of(r, half) * c + i;
          const int64_t j = half * c + i;
          for (int64_t ch = 0; ch < d; ++ch)
            y[(bi * 2 * c + j) * d + ch] = yg[(bi * d + ch) * len + t];
        }
  }
  return kforge::Status::Ok();
}
