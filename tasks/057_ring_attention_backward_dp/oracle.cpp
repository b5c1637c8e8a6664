// Gradients of full attention over each CP group's whole sequence, computed directly in fp64:
// the group's shards are concatenated in CP order, out and lse come from kforge::om::Attention
// over all N = CP * S tokens at once, and kforge::om::AttentionBackward differentiates it. No ring
// and no log-sum-exp merge, so the oracle shares nothing with the algorithm it checks. Each rank's
// outputs are then the average of its CP position's slice over the DP replicas.
#include "kforge/oracle.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <span>
#include <vector>

#include "kforge/oracle_math.h"

namespace {

// The [B, CP*S, heads, D] sequence of replica `rep` whose shards are its ranks' `name`.
std::vector<double> Concat(const kforge::OracleIo& io, const char* name, int rep, int cp, int64_t b,
                           int64_t s, int64_t row) {
  std::vector<double> all(static_cast<size_t>(b * cp * s * row));
  for (int c = 0; c < cp; ++c) {
    auto x = io.in(rep * cp + c, name);
    for (int64_t bi = 0; bi < b; ++bi)
      for (int64_t i = 0; i < s * row; ++i)
        all[static_cast<size_t>((bi * cp + c) * s * row + i)] = x[bi * s * row + i];
  }
  return all;
}

// Writes the average over the dp replicas of CP position c's slice of grads[rep] into y.
void AverageSlice(const std::vector<double> (&grads)[2], int dp, std::span<double> y, int c, int cp,
                  int64_t b, int64_t s, int64_t row) {
  for (int64_t bi = 0; bi < b; ++bi)
    for (int64_t i = 0; i < s * row; ++i) {
      const size_t at = static_cast<size_t>((bi * cp + c) * s * row + i);
      double sum = 0;
      for (int rep = 0; rep < dp; ++rep) sum += grads[rep][at];
      y[bi * s * row + i] = sum / dp;
    }
}

}  // namespace

KF_ORACLE(ring_attention_backward_dp) {
  const auto& qs = io.in_shape(0, "q");
  const auto& ks = io.in_shape(0, "k");
  if (qs.size() != 4 || ks.size() != 4 || ks[0] != qs[0] || ks[1] != qs[1] || ks[3] != qs[3] ||
      ks[2] <= 0 || qs[2] % ks[2] != 0 || io.world % 2 != 0)
    return kforge::Error(kforge::ErrorKind::kHarness, "ring_attention_backward_dp: shapes");
  const int64_t b = qs[0], s = qs[1], h = qs[2], kvh = ks[2], d = qs[3];
  // Groups: cp contiguous of max(2, W/2) ranks, dp strided {r, r + cp} of min(2, W/2).
  const int cp = std::max(2, io.world / 2), dp = io.world / cp;
  const kforge::om::AttentionDims dims{
      .batch = b, .q_len = cp * s, .kv_len = cp * s, .q_heads = h, .kv_heads = kvh, .head_dim = d};
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  std::vector<double> dq[2], dk[2], dv[2];
  for (int rep = 0; rep < dp; ++rep) {
    const std::vector<double> q = Concat(io, "q", rep, cp, b, s, h * d);
    const std::vector<double> k = Concat(io, "k", rep, cp, b, s, kvh * d);
    const std::vector<double> v = Concat(io, "v", rep, cp, b, s, kvh * d);
    const std::vector<double> dout = Concat(io, "dout", rep, cp, b, s, h * d);
    std::vector<double> out(q.size()), lse(static_cast<size_t>(b * h * cp * s));
    kforge::om::Attention(q, k, v, out, lse, dims, scale);
    dq[rep].resize(q.size());
    dk[rep].resize(k.size());
    dv[rep].resize(v.size());
    kforge::om::AttentionBackward(q, k, v, dout, out, lse, dq[rep], dk[rep], dv[rep], dims, scale);
  }
  for (int r = 0; r < io.world; ++r) {
    const int c = r % cp;
    AverageSlice(dq, dp, io.out(r, "dq"), c, cp, b, s, h * d);
    AverageSlice(dk, dp, io.out(r, "dk"), c, cp, b, s, kvh * d);
    AverageSlice(dv, dp, io.out(r, "dv"), c, cp, b, s, kvh * d);
  }
  return kforge::Status::Ok();
}
