// Sparse embedding exchange: every (id, row) pair goes to rank id mod W;
// received pairs are grouped by source rank, each group in source order.
#include "kforge/oracle.h"

#include <cmath>

KF_ORACLE(gnn_sparse_embedding_all2all) {
  const int w = io.world;
  const size_t hidden = static_cast<size_t>(io.param("H"));
  for (int r = 0; r < w; ++r) {
    auto recv_idx = io.out(r, "recv_idx");
    auto recv_value = io.out(r, "recv_value");
    size_t got = 0;
    for (int p = 0; p < w; ++p) {
      auto idx = io.in(p, "idx");
      auto value = io.in(p, "value");
      for (size_t i = 0; i < idx.size(); ++i) {
        if (!(idx[i] >= 0) || idx[i] != std::floor(idx[i]))
          return kforge::Error(kforge::ErrorKind::kHarness, "a negative or fractional id");
        if (static_cast<int64_t>(idx[i]) % w != r) continue;
        if (got >= recv_idx.size())
          return kforge::Error(kforge::ErrorKind::kHarness, "more pairs than the capacity");
        recv_idx[got] = idx[i];
        for (size_t j = 0; j < hidden; ++j) recv_value[got * hidden + j] = value[i * hidden + j];
        ++got;
      }
    }
    io.out(r, "recv_count")[0] = static_cast<double>(got);
  }
  return kforge::Status::Ok();
}
