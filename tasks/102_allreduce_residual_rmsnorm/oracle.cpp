// All-reduce + residual add + RMSNorm: every rank's residual_out is the sum of
// all ranks' x plus the (replicated) residual, and y its RMSNorm with gamma.
#include "kforge/oracle.h"

#include <cstdint>
#include <vector>

#include "kforge/oracle_math.h"

KF_ORACLE(allreduce_residual_rmsnorm) {
  const auto& shape = io.in_shape(0, "x");
  if (shape.size() != 2)
    return kforge::Error(kforge::ErrorKind::kHarness, "allreduce_residual_rmsnorm: x is not 2-D");
  const int64_t rows = shape[0], h = shape[1];
  const size_t n = static_cast<size_t>(rows * h);
  std::vector<double> r(n, 0.0);
  for (int p = 0; p < io.world; ++p) {
    auto x = io.in(p, "x");
    if (x.size() != n)
      return kforge::Error(kforge::ErrorKind::kHarness,
                           "allreduce_residual_rmsnorm: x sizes differ");
    for (size_t i = 0; i < n; ++i) r[i] += x[i];
  }
  auto residual = io.in(0, "residual");  // replicated: rank 0's is every rank's
  for (size_t i = 0; i < n; ++i) r[i] += residual[i];
  std::vector<double> y(n);
  kforge::om::RmsNorm(r, io.in(0, "gamma"), y, rows, h, io.param("eps"));
  for (int q = 0; q < io.world; ++q) {
    auto out_y = io.out(q, "y");
    auto out_r = io.out(q, "residual_out");
    if (out_y.size() != n || out_r.size() != n)
      return kforge::Error(kforge::ErrorKind::kHarness,
                           "allreduce_residual_rmsnorm: outputs are not [T, H]");
    for (size_t i = 0; i < n; ++i) {
      out_y[i] = y[i];
      out_r[i] = r[i];
    }
  }
  return kforge::Status::Ok();
}
