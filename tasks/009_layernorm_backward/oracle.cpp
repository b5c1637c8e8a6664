// LayerNorm parameter gradients: column sums of dy * x_hat and of dy over every
// row of every rank, the same on all ranks.
#include "kforge/oracle.h"

#include <cstdint>
#include <vector>

KF_ORACLE(layernorm_backward) {
  const auto& shape = io.in_shape(0, "x_hat");
  if (shape.size() != 2)
    return kforge::Error(kforge::ErrorKind::kHarness, "layernorm_backward: x_hat is not 2-D");
  const int64_t b = shape[0], h = shape[1];
  std::vector<double> dgamma(static_cast<size_t>(h), 0.0), dbeta(static_cast<size_t>(h), 0.0);
  for (int p = 0; p < io.world; ++p) {
    auto xh = io.in(p, "x_hat");
    auto dy = io.in(p, "dy");
    if (static_cast<int64_t>(xh.size()) != b * h || static_cast<int64_t>(dy.size()) != b * h)
      return kforge::Error(kforge::ErrorKind::kHarness, "layernorm_backward: input sizes differ");
    // The task hands over x_hat itself (om::LayerNormBackward would normalise
    // its x again), so the parameter gradients are plain column sums.
    for (int64_t i = 0; i < b; ++i) {
      for (int64_t c = 0; c < h; ++c) {
        dgamma[c] += dy[i * h + c] * xh[i * h + c];
        dbeta[c] += dy[i * h + c];
      }
    }
  }
  for (int r = 0; r < io.world; ++r) {
    auto og = io.out(r, "dgamma");
    auto ob = io.out(r, "dbeta");
    if (static_cast<int64_t>(og.size()) != h || static_cast<int64_t>(ob.size()) != h)
      return kforge::Error(kforge::ErrorKind::kHarness, "layernorm_backward: outputs are not [H]");
    for (int64_t c = 0; c < h; ++c) og[c] = dgamma[c], ob[c] = dbeta[c];
  }
  return kforge::Status::Ok();
}
