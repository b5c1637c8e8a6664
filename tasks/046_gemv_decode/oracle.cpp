// Vocab-parallel LM head: every rank's logits[t, q*V + v] = h[t, :] . w_q[v, :] + bias_q[v].
#include "kforge/oracle.h"

#include <cstdint>
#include <vector>

#include "kforge/oracle_math.h"

KF_ORACLE(gemv_decode) {
  const auto t = static_cast<int64_t>(io.param("B"));
  const auto h = static_cast<int64_t>(io.param("H"));
  const auto v = static_cast<int64_t>(io.param("V"));
  const int64_t vt = io.world * v;
  std::vector<double> logits(static_cast<size_t>(t * vt)), block(static_cast<size_t>(t * v));
  for (int q = 0; q < io.world; ++q) {
    // block[T, V] = h @ w_q^T; h is replicated, so rank q's copy is everyone's.
    kforge::om::Gemm(io.in(q, "h"), io.in(q, "w"), block, t, v, h, false, true);
    auto bias = io.in(q, "bias");
    for (int64_t i = 0; i < t; ++i)
      for (int64_t j = 0; j < v; ++j) logits[i * vt + q * v + j] = block[i * v + j] + bias[j];
  }
  for (int r = 0; r < io.world; ++r) {
    auto out = io.out(r, "logits");
    for (size_t i = 0; i < out.size(); ++i) out[i] = logits[i];
  }
  return kforge::Status::Ok();
}
