// GNN feature exchange backward: the rank-rotated all-to-all of the gradient
// rows, then a scatter-add by this rank's ids.
#include "kforge/oracle.h"

#include <algorithm>

KF_ORACLE(gnn_feature_exchange_all2all_backward) {
  const int w = io.world;
  const size_t rows = static_cast<size_t>(io.param("R"));
  const size_t hidden = static_cast<size_t>(io.param("H"));
  const size_t nodes = static_cast<size_t>(io.param("S"));
  for (int r = 0; r < w; ++r) {
    auto out = io.out(r, "grad_features");
    std::fill(out.begin(), out.end(), 0.0);
    auto ids = io.in(r, "seed_inverse_ids");
    for (int c = 0; c < w; ++c) {
      const int q = (r + c) % w;
      const size_t from = static_cast<size_t>((w - c) % w) * rows;
      auto grad = io.in(q, "grad_output");
      for (size_t i = 0; i < rows; ++i) {
        const double id = ids[static_cast<size_t>(c) * rows + i];
        if (!(id >= 0 && id < static_cast<double>(nodes)))
          return kforge::Error(kforge::ErrorKind::kHarness, "an id outside [0, S)");
        const size_t dst = static_cast<size_t>(id) * hidden;
        const size_t src = (from + i) * hidden;
        for (size_t j = 0; j < hidden; ++j) out[dst + j] += grad[src + j];
      }
    }
  }
  return kforge::Status::Ok();
}
