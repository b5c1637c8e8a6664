// Row-parallel linear at decode: every rank's y is the sum over ranks of
// x_r @ w_r^T (w stored [N, Kr], as torch and vLLM store a linear weight).
#include "kforge/oracle.h"

#include <cstdint>
#include <vector>

#include "kforge/oracle_math.h"

KF_ORACLE(gemv_allreduce) {
  const auto& xs = io.in_shape(0, "x");
  const auto& ws = io.in_shape(0, "w");
  if (xs.size() != 2 || ws.size() != 2 || xs[1] != ws[1])
    return kforge::Error(kforge::ErrorKind::kHarness, "gemv_allreduce: x or w is not [B|N, Kr]");
  const int64_t b = xs[0], n = ws[0], kr = xs[1];
  std::vector<double> sum(static_cast<size_t>(b * n), 0.0), part(static_cast<size_t>(b * n));
  for (int p = 0; p < io.world; ++p) {
    kforge::om::Gemm(io.in(p, "x"), io.in(p, "w"), part, b, n, kr, false, /*trans_b=*/true);
    for (size_t i = 0; i < sum.size(); ++i) sum[i] += part[i];
  }
  for (int r = 0; r < io.world; ++r) {
    auto y = io.out(r, "y");
    if (y.size() != sum.size())
      return kforge::Error(kforge::ErrorKind::kHarness, "gemv_allreduce: y is not [B, N]");
    for (size_t i = 0; i < sum.size(); ++i) y[i] = sum[i];
  }
  return kforge::Status::Ok();
}
