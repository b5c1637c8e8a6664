// Tensor-parallel QK RMSNorm across heads: every token's q (and k) is normalised by the RMS over
// all W ranks' columns, then scaled by the rank's weight shard; in fp64.
#include "kforge/oracle.h"

#include <cmath>
#include <string>

namespace {

kforge::Status Normalise(kforge::OracleIo& io, const char* x_name, const char* w_name,
                         const char* out_name, int64_t tokens, int64_t full, double eps) {
  const int world = io.world;
  const int64_t local = full / world;
  for (int r = 0; r < world; ++r) {
    if (static_cast<int64_t>(io.in(r, x_name).size()) != tokens * local ||
        static_cast<int64_t>(io.in(r, w_name).size()) != local)
      return kforge::Error(kforge::ErrorKind::kHarness,
                           std::string("qk_rmsnorm: shape of ") + x_name);
  }
  for (int64_t t = 0; t < tokens; ++t) {
    double sum = 0;
    for (int r = 0; r < world; ++r) {
      const auto x = io.in(r, x_name);
      for (int64_t j = 0; j < local; ++j) sum += x[t * local + j] * x[t * local + j];
    }
    const double scale = 1.0 / std::sqrt(sum / static_cast<double>(full) + eps);
    for (int r = 0; r < world; ++r) {
      const auto x = io.in(r, x_name);
      const auto w = io.in(r, w_name);
      auto out = io.out(r, out_name);
      for (int64_t j = 0; j < local; ++j) out[t * local + j] = x[t * local + j] * scale * w[j];
    }
  }
  return kforge::Status::Ok();
}

}  // namespace

KF_ORACLE(tp_qk_rmsnorm_across_heads) {
  const int64_t tokens = static_cast<int64_t>(io.param("T"));
  const int64_t qd = static_cast<int64_t>(io.param("Qd"));
  const int64_t kd = static_cast<int64_t>(io.param("Kd"));
  const double eps = io.param("eps");
  if (qd % io.world != 0 || kd % io.world != 0)
    return kforge::Error(kforge::ErrorKind::kHarness, "qk_rmsnorm: W must divide Qd and Kd");
  auto st = Normalise(io, "q", "q_weight", "q_out", tokens, qd, eps);
  if (!st.ok()) return st;
  return Normalise(io, "k", "k_weight", "k_out", tokens, kd, eps);
}
