// All-gather of K-major shards + GEMM: rank r's c = X @ b_r with X^T = [a_t_0; ...; a_t_{W-1}].
#include "kforge/oracle.h"

#include <cstdint>
#include <vector>

#include "kforge/oracle_math.h"

KF_ORACLE(allgather_gemm_at) {
  const auto m = static_cast<int64_t>(io.param("M"));
  const auto n = static_cast<int64_t>(io.param("N"));
  const auto k = static_cast<int64_t>(io.param("K"));
  const int64_t kt = io.world * k;
  // X^T[W*K, M]: the shards stacked in rank order.
  std::vector<double> xt;
  xt.reserve(static_cast<size_t>(kt * m));
  for (int q = 0; q < io.world; ++q) {
    auto a = io.in(q, "a_t");
    xt.insert(xt.end(), a.begin(), a.end());
  }
  for (int r = 0; r < io.world; ++r)
    kforge::om::Gemm(xt, io.in(r, "b"), io.out(r, "c"), m, n, kt, /*trans_a=*/true);
  return kforge::Status::Ok();
}
