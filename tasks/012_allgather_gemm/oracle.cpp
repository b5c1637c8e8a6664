// All-gather along K + GEMM: rank r's c is [a_0 | a_1 | ... | a_{W-1}] @ b_r.
#include "kforge/oracle.h"

#include <cstdint>
#include <vector>

#include "kforge/oracle_math.h"

KF_ORACLE(allgather_gemm) {
  const auto m = static_cast<int64_t>(io.param("M"));
  const auto n = static_cast<int64_t>(io.param("N"));
  const auto k = static_cast<int64_t>(io.param("K"));
  const int64_t kt = io.world * k;
  std::vector<double> x(static_cast<size_t>(m * kt));
  for (int q = 0; q < io.world; ++q) {
    auto a = io.in(q, "a");
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < k; ++j) x[i * kt + q * k + j] = a[i * k + j];
  }
  for (int r = 0; r < io.world; ++r) kforge::om::Gemm(x, io.in(r, "b"), io.out(r, "c"), m, n, kt);
  return kforge::Status::Ok();
}
