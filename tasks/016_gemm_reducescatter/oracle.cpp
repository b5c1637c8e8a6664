// Row-parallel GEMM + reduce-scatter: rank r's c is rows [r*R, (r+1)*R) of sum over q of a_q @ b_q.
#include "kforge/oracle.h"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "kforge/oracle_math.h"

KF_ORACLE(gemm_reducescatter) {
  const auto rows = static_cast<int64_t>(io.param("R"));
  const auto n = static_cast<int64_t>(io.param("N"));
  const auto k = static_cast<int64_t>(io.param("K"));
  const int64_t m = io.world * rows;
  std::vector<double> sum(static_cast<size_t>(m * n), 0.0);
  for (int q = 0; q < io.world; ++q) {
    kforge::om::Gemm(io.in(q, "a"), io.in(q, "b"), sum, m, n, k, false, false, 1.0,
                     q == 0 ? 0.0 : 1.0);
  }
  for (int r = 0; r < io.world; ++r) {
    auto c = io.out(r, "c");
    const auto first = sum.begin() + static_cast<std::ptrdiff_t>(r * rows * n);
    std::copy(first, first + static_cast<std::ptrdiff_t>(rows * n), c.begin());
  }
  return kforge::Status::Ok();
}
