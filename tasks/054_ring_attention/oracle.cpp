// Causal attention of each rank's query shard over the whole sequence,
// computed directly in fp64 (kforge::om::Attention): the keys and values of
// all ranks are concatenated in rank order, rank r's queries sit at positions
// r*S .. r*S+S-1. No ring and no log-sum-exp merge, so the oracle shares
// nothing with the algorithm it checks.
#include "kforge/oracle.h"

#include <cmath>
#include <cstdint>
#include <vector>

#include "kforge/oracle_math.h"

namespace {

// The global [B, W*S, KVH, D] tensor whose shards are ranks' `name`.
std::vector<double> Gather(const kforge::OracleIo& io, const char* name, int64_t b, int64_t s,
                           int64_t row) {
  std::vector<double> all(static_cast<size_t>(b * io.world * s * row));
  for (int p = 0; p < io.world; ++p) {
    auto x = io.in(p, name);
    for (int64_t bi = 0; bi < b; ++bi)
      for (int64_t i = 0; i < s * row; ++i)
        all[static_cast<size_t>((bi * io.world + p) * s * row + i)] = x[bi * s * row + i];
  }
  return all;
}

}  // namespace

KF_ORACLE(ring_attention) {
  const auto& qs = io.in_shape(0, "q");
  const auto& ks = io.in_shape(0, "k");
  if (qs.size() != 4 || ks.size() != 4 || ks[0] != qs[0] || ks[1] != qs[1] || ks[3] != qs[3] ||
      ks[2] <= 0 || qs[2] % ks[2] != 0)
    return kforge::Error(kforge::ErrorKind::kHarness, "ring_attention: shapes");
  const int64_t b = qs[0], s = qs[1], h = qs[2], kvh = ks[2], d = qs[3];
  const std::vector<double> k = Gather(io, "k", b, s, kvh * d);
  const std::vector<double> v = Gather(io, "v", b, s, kvh * d);
  for (int r = 0; r < io.world; ++r) {
    kforge::om::AttentionDims dims{.batch = b,
                                   .q_len = s,
                                   .kv_len = io.world * s,
                                   .q_heads = h,
                                   .kv_heads = kvh,
                                   .head_dim = d,
                                   .causal = true,
                                   .q_pos0 = r * s,
                                   .kv_pos0 = 0};
    kforge::om::Attention(io.in(r, "q"), k, v, io.out(r, "out"), {}, dims,
                          1.0 / std::sqrt(static_cast<double>(d)));
  }
  return kforge::Status::Ok();
}
