// FSDP2 clip-grad-norm: the L2 norm of all ranks' gradient shards together,
// and every shard scaled in place by max_norm / norm when the norm exceeds max_norm.
#include "kforge/oracle.h"

#include <cmath>
#include <string>

namespace {
constexpr const char* kGrads[] = {"g0", "g1", "g2"};
}  // namespace

KF_ORACLE(clip_grad_norm_no_ep) {
  double sum_sq = 0;
  for (int r = 0; r < io.world; ++r) {
    for (const char* g : kGrads) {
      for (double v : io.in(r, g)) sum_sq += v * v;
    }
  }
  const double norm = std::sqrt(sum_sq);
  const double max_norm = io.param("max_norm");
  const double coef = norm > max_norm ? max_norm / norm : 1.0;
  for (int r = 0; r < io.world; ++r) {
    io.out(r, "total_norm")[0] = norm;
    for (const char* g : kGrads) {
      auto in = io.in(r, g);
      auto out = io.out(r, g);
      if (out.size() != in.size()) {
        return kforge::Error(kforge::ErrorKind::kHarness,
                             std::string("clip_grad_norm_no_ep: no inout state for ") + g);
      }
      for (size_t i = 0; i < in.size(); ++i) out[i] = in[i] * coef;
    }
  }
  return kforge::Status::Ok();
}
