// GNN feature exchange: gather local rows by id, then GraphBolt's rank-rotated
// all-to-all (rank r's chunk c goes to rank (r + c) mod W as its chunk -c).
#include "kforge/oracle.h"

KF_ORACLE(gnn_feature_exchange_all2all) {
  const int w = io.world;
  const size_t rows = static_cast<size_t>(io.param("R"));
  const size_t hidden = static_cast<size_t>(io.param("H"));
  const size_t seeds = static_cast<size_t>(io.param("S"));
  for (int r = 0; r < w; ++r) {
    auto out = io.out(r, "out");
    for (int c = 0; c < w; ++c) {
      const int q = (r + c) % w;
      const size_t from = static_cast<size_t>((w - c) % w) * rows;
      auto feats = io.in(q, "local_features");
      auto ids = io.in(q, "seed_inverse_ids");
      for (size_t i = 0; i < rows; ++i) {
        const double id = ids[from + i];
        if (!(id >= 0 && id < static_cast<double>(seeds)))
          return kforge::Error(kforge::ErrorKind::kHarness, "an id outside [0, S)");
        const size_t src = static_cast<size_t>(id) * hidden;
        const size_t dst = (static_cast<size_t>(c) * rows + i) * hidden;
        for (size_t j = 0; j < hidden; ++j) out[dst + j] = feats[src + j];
      }
    }
  }
  return kforge::Status::Ok();
}
