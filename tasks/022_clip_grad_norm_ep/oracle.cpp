// EP-aware clip-grad-norm (VeOmni): EP grads pre-scaled by 1/ep_size, one global
// norm over the non-EP and the scaled EP grads of all ranks, both clipped in place.
#include "kforge/oracle.h"

#include <algorithm>
#include <cmath>

KF_ORACLE(clip_grad_norm_ep) {
  const double ep_scale = 1.0 / std::max(1, io.world / 2);
  double sum_sq = 0;
  for (int r = 0; r < io.world; ++r) {
    for (double v : io.in(r, "non_ep")) sum_sq += v * v;
    for (double v : io.in(r, "ep")) sum_sq += (v * ep_scale) * (v * ep_scale);
  }
  const double norm = std::sqrt(sum_sq);
  const double max_norm = io.param("max_norm");
  const double coef = norm > max_norm ? max_norm / norm : 1.0;
  for (int r = 0; r < io.world; ++r) {
    io.out(r, "total_norm")[0] = norm;
    const struct {
      const char* name;
      double scale;
    } grads[] = {{"non_ep", coef}, {"ep", coef * ep_scale}};
    for (const auto& g : grads) {
      auto in = io.in(r, g.name);
      auto out = io.out(r, g.name);
      if (out.size() != in.size()) {
        return kforge::Error(kforge::ErrorKind::kHarness, "clip_grad_norm_ep: no inout state");
      }
      for (size_t i = 0; i < in.size(); ++i) out[i] = in[i] * g.scale;
    }
  }
  return kforge::Status::Ok();
}
