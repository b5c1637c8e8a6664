// All-reduce + residual add + RMSNorm + static fp8 quantisation: every rank's
// residual_out is the sum of all ranks' x plus the (replicated) residual, and q
// the RMSNorm of it with gamma over the scale, as the exact value (clamped to
// e4m3's +-448 as satfinite does, unrounded: the tolerance allows the rounding).
#include "kforge/oracle.h"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "kforge/oracle_math.h"

KF_ORACLE(allreduce_residual_rmsnorm_fp8) {
  const auto& shape = io.in_shape(0, "x");
  if (shape.size() != 2)
    return kforge::Error(kforge::ErrorKind::kHarness,
                         "allreduce_residual_rmsnorm_fp8: x is not 2-D");
  const int64_t rows = shape[0], h = shape[1];
  const size_t n = static_cast<size_t>(rows * h);
  std::vector<double> r(n, 0.0);
  for (int p = 0; p < io.world; ++p) {
    auto x = io.in(p, "x");
    if (x.size() != n)
      return kforge::Error(kforge::ErrorKind::kHarness,
                           "allreduce_residual_rmsnorm_fp8: x sizes differ");
    for (size_t i = 0; i < n; ++i) r[i] += x[i];
  }
  auto residual = io.in(0, "residual");  // replicated: rank 0's is every rank's
  for (size_t i = 0; i < n; ++i) r[i] += residual[i];
  const double scale = io.in(0, "scale")[0];
  if (!(scale > 0))
    return kforge::Error(kforge::ErrorKind::kHarness,
                         "allreduce_residual_rmsnorm_fp8: scale is not positive");
  std::vector<double> y(n);
  kforge::om::RmsNorm(r, io.in(0, "gamma"), y, rows, h, io.param("eps"));
  for (double& v : y) v = std::clamp(v / scale, -448.0, 448.0);
  for (int q = 0; q < io.world; ++q) {
    auto out_q = io.out(q, "q");
    auto out_r = io.out(q, "residual_out");
    if (out_q.size() != n || out_r.size() != n)
      return kforge::Error(kforge::ErrorKind::kHarness,
                           "allreduce_residual_rmsnorm_fp8: outputs are not [T, H]");
    for (size_t i = 0; i < n; ++i) {
      out_q[i] = y[i];
      out_r[i] = r[i];
    }
  }
  return kforge::Status::Ok();
}
