// Hyena's causal depthwise conv1d on the zigzag-sharded sequence: assemble the
// global sequence from every rank's two chunks, convolve it directly, and cut
// each rank's two chunks back out of the result.
#include "kforge/oracle.h"

#include <cstdint>
#include <vector>

KF_ORACLE(hyena_conv1d_boundary_exchange) {
  const auto& xs = io.in_shape(0, "x");
  const auto& ws = io.in_shape(0, "w");
  if (xs.size() != 3 || ws.size() != 2 || xs[2] % 2 != 0 || ws[0] != xs[1])
    return kforge::Error(kforge::ErrorKind::kHarness, "hyena_conv1d: x is not [B, D, 2C]");
  const int world = io.world;
  const int64_t b = xs[0], d = xs[1], c = xs[2] / 2, k = ws[1];
  const int64_t len = 2 * world * c;
  auto chunk_of = [world](int rank, int half) { return half == 0 ? rank : 2 * world - 1 - rank; };

  // global[(bi * d + ch) * len + t]
  std::vector<double> global(static_cast<size_t>(b * d * len));
  for (int r = 0; r < world; ++r) {
    auto x = io.in(r, "x");
    for (int64_t row = 0; row < b * d; ++row)
      for (int half = 0; half < 2; ++half)
        for (int64_t i = 0; i < c; ++i)
          global[row * len + chunk_of(r, half) * c + i] = x[(row * 2 + half) * c + i];
  }
  auto w = io.in(0, "w");
  for (int r = 0; r < world; ++r) {
    auto y = io.out(r, "y");
    for (int64_t row = 0; row < b * d; ++row) {
      const int64_t ch = row % d;
      for (int half = 0; half < 2; ++half)
        for (int64_t i = 0; i < c; ++i) {
          const int64_t t = chunk_of(r, half) * c + i;
          double s = 0;
          for (int64_t j = 0; j < k; ++j) {
            const int64_t src = t - (k - 1) + j;
            if (src >= 0) s += w[ch * k + j] * global[row * len + src];
          }
          y[(row * 2 + half) * c + i] = s;
        }
    }
  }
  return kforge::Status::Ok();
}
