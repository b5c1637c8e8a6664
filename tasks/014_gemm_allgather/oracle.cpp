// Column-parallel GEMM + all-gather: every rank's c is [a @ b_0 | a @ b_1 | ... | a @ b_{W-1}].
#include "kforge/oracle.h"

#include <cstdint>
#include <vector>

#include "kforge/oracle_math.h"

KF_ORACLE(gemm_allgather) {
  const auto m = static_cast<int64_t>(io.param("M"));
  const auto n = static_cast<int64_t>(io.param("N"));
  const auto k = static_cast<int64_t>(io.param("K"));
  const int64_t nt = io.world * n;
  // a is replicated: every rank's copy is the same, so rank 0's serves for all blocks.
  std::vector<double> c(static_cast<size_t>(m * nt)), block(static_cast<size_t>(m * n));
  for (int q = 0; q < io.world; ++q) {
    kforge::om::Gemm(io.in(q, "a"), io.in(q, "b"), block, m, n, k);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) c[i * nt + q * n + j] = block[i * n + j];
  }
  for (int r = 0; r < io.world; ++r) {
    auto out = io.out(r, "c");
    for (size_t i = 0; i < out.size(); ++i) out[i] = c[i];
  }
  return kforge::Status::Ok();
}
