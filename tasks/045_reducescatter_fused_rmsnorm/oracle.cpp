// Reduce-scatter (mean) + RMSNorm: rank r's y is RMSNorm(gamma) of block r of
// the mean over ranks of x.
#include "kforge/oracle.h"

#include <cstdint>
#include <vector>

#include "kforge/oracle_math.h"

KF_ORACLE(reducescatter_fused_rmsnorm) {
  const int w = io.world;
  const auto& shape = io.in_shape(0, "x");
  if (shape.size() != 2 || shape[0] % w != 0)
    return kforge::Error(kforge::ErrorKind::kHarness,
                         "reducescatter_fused_rmsnorm: x is not [W*R, H]");
  const int64_t rows = shape[0] / w, h = shape[1];
  const double eps = io.param("eps");
  for (int r = 0; r < w; ++r) {
    std::vector<double> mean(static_cast<size_t>(rows * h), 0.0);
    for (int p = 0; p < w; ++p) {
      auto x = io.in(p, "x");
      if (static_cast<int64_t>(x.size()) != w * rows * h)
        return kforge::Error(kforge::ErrorKind::kHarness,
                             "reducescatter_fused_rmsnorm: x sizes differ");
      for (int64_t i = 0; i < rows * h; ++i) mean[i] += x[r * rows * h + i];
    }
    for (double& v : mean) v /= w;
    auto y = io.out(r, "y");
    if (static_cast<int64_t>(y.size()) != rows * h)
      return kforge::Error(kforge::ErrorKind::kHarness,
                           "reducescatter_fused_rmsnorm: y is not [R, H]");
    kforge::om::RmsNorm(mean, io.in(r, "gamma"), y, rows, h, eps);
  }
  return kforge::Status::Ok();
}
