// Sequence-parallel MLP: rank r's y = rows [r*R, (r+1)*R) of sum over q of silu(X @ w1_q) @ w2_q,
// X = [x_0; x_1; ...; x_{W-1}].
#include "kforge/oracle.h"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "kforge/oracle_math.h"

KF_ORACLE(combined_sharded_gemms) {
  const auto rows = static_cast<int64_t>(io.param("R"));
  const auto h = static_cast<int64_t>(io.param("H"));
  const auto f = static_cast<int64_t>(io.param("F"));
  const int64_t m = io.world * rows;
  std::vector<double> x;
  x.reserve(static_cast<size_t>(m * h));
  for (int q = 0; q < io.world; ++q) {
    auto xq = io.in(q, "x");
    x.insert(x.end(), xq.begin(), xq.end());
  }
  std::vector<double> act(static_cast<size_t>(m * f)), y(static_cast<size_t>(m * h), 0.0);
  for (int q = 0; q < io.world; ++q) {
    kforge::om::Gemm(x, io.in(q, "w1"), act, m, f, h);
    for (double& v : act) v = kforge::om::Silu(v);
    kforge::om::Gemm(act, io.in(q, "w2"), y, m, h, f, false, false, 1.0, q == 0 ? 0.0 : 1.0);
  }
  for (int r = 0; r < io.world; ++r) {
    auto out = io.out(r, "y");
    const auto first = y.begin() + static_cast<std::ptrdiff_t>(r * rows * h);
    std::copy(first, first + static_cast<std::ptrdiff_t>(rows * h), out.begin());
  }
  return kforge::Status::Ok();
}
