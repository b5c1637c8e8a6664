// Row-parallel GEMM + all-reduce: every rank's c is sum over ranks r of a_r @ b_r.
#include "kforge/oracle.h"

#include <cstdint>
#include <vector>

#include "kforge/oracle_math.h"

KF_ORACLE(gemm_allreduce) {
  const auto m = static_cast<int64_t>(io.param("M"));
  const auto n = static_cast<int64_t>(io.param("N"));
  const auto k = static_cast<int64_t>(io.param("K"));
  std::vector<double> sum(static_cast<size_t>(m * n), 0.0);
  for (int r = 0; r < io.world; ++r) {
    // beta = 1 accumulates rank r's partial into the running sum.
    kforge::om::Gemm(io.in(r, "a"), io.in(r, "b"), sum, m, n, k, false, false, 1.0,
                     r == 0 ? 0.0 : 1.0);
  }
  for (int r = 0; r < io.world; ++r) {
    auto c = io.out(r, "c");
    for (size_t i = 0; i < c.size(); ++i) c[i] = sum[i];
  }
  return kforge::Status::Ok();
}
