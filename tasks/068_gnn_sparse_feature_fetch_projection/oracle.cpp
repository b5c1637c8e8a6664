// GNN remote feature fetch + projection: every rank's ids name rows of a table
// sharded by rows (owner = id / rows); out_r = (the named rows, in id order) @ proj.
#include "kforge/oracle.h"

#include <cmath>
#include <cstdint>
#include <vector>

#include "kforge/oracle_math.h"

KF_ORACLE(gnn_sparse_feature_fetch_projection) {
  const int w = io.world;
  const auto q_len = static_cast<int64_t>(io.param("Q"));
  const auto rows = static_cast<int64_t>(io.param("rows"));
  const auto d = static_cast<int64_t>(io.param("D"));
  const auto o = static_cast<int64_t>(io.param("O"));
  std::vector<double> emb(static_cast<size_t>(q_len * d));
  for (int r = 0; r < w; ++r) {
    auto ids = io.in(r, "input_node_ids");
    if (static_cast<int64_t>(ids.size()) != q_len)
      return kforge::Error(kforge::ErrorKind::kHarness, "input_node_ids is not [Q]");
    for (int64_t q = 0; q < q_len; ++q) {
      const double id = ids[static_cast<size_t>(q)];
      if (!(id >= 0 && id < static_cast<double>(w) * static_cast<double>(rows)) ||
          id != std::floor(id))
        return kforge::Error(kforge::ErrorKind::kHarness, "a node id outside the table");
      const auto global = static_cast<int64_t>(id);
      const int owner = static_cast<int>(global / rows);
      const int64_t local = global - owner * rows;
      auto shard = io.in(owner, "local_embedding_shard");
      for (int64_t k = 0; k < d; ++k)
        emb[static_cast<size_t>(q * d + k)] = shard[static_cast<size_t>(local * d + k)];
    }
    // proj_matrix is replicated; rank r's copy is the one rank r multiplies by.
    kforge::om::Gemm(emb, io.in(r, "proj_matrix"), io.out(r, "out"), q_len, o, d);
  }
  return kforge::Status::Ok();
}
