// Ring attention under CP x TP, computed directly in fp64: for each TP index t, the QKV projection
// of the CP group's whole sequence with TP rank t's weights, causal attention of every position
// over the whole sequence (kforge::om::Attention), the output projection with t's Wo, and the sum
// over t. No ring, no log-sum-exp merge and no partial sums per rank: nothing is shared with the
// algorithm it checks.
#include "kforge/oracle.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "kforge/oracle_math.h"

KF_ORACLE(ring_attention_tp) {
  const auto& hs = io.in_shape(0, "h");
  const auto& ws = io.in_shape(0, "wqkv");
  if (hs.size() != 3 || ws.size() != 3 || ws[0] % 3 != 0 || ws[2] != hs[2] || io.world < 2)
    return kforge::Error(kforge::ErrorKind::kHarness, "ring_attention_tp: shapes");
  const int64_t b = hs[0], s = hs[1], hid = hs[2], heads = ws[0] / 3, d = ws[1];
  const int64_t width = heads * d;  // q (and k, v) columns of one TP rank
  // [[groups]]: tp of size min(2, W / 2), contiguous; cp of size W / tp, strided. Rank
  // r = tp * c + t sits at CP position c and TP index t.
  const int tp = std::min(2, io.world / 2), cp = io.world / tp;
  const int64_t n = cp * s;  // the CP group's sequence
  std::vector<double> sum(static_cast<size_t>(b * n * hid), 0.0);
  std::vector<double> x(static_cast<size_t>(b * n * hid)),
      qkv(static_cast<size_t>(b * n * 3 * width));
  std::vector<double> q(static_cast<size_t>(b * n * width)), k(q.size()), v(q.size()),
      ctx(q.size());
  std::vector<double> part(sum.size());
  for (int t = 0; t < tp; ++t) {
    // The sequence of CP group t in order: position c * s + i is row i of rank 2 * c + t's h.
    for (int c = 0; c < cp; ++c) {
      auto hc = io.in(tp * c + t, "h");
      for (int64_t bi = 0; bi < b; ++bi)
        for (int64_t i = 0; i < s * hid; ++i)
          x[static_cast<size_t>((bi * n + c * s) * hid + i)] = hc[bi * s * hid + i];
    }
    auto w = io.in(t, "wqkv");  // [3 * heads * d, hid]: q, k, v rows of TP rank t
    kforge::om::Gemm(x, w, qkv, b * n, 3 * width, hid, false, true);
    for (int64_t row = 0; row < b * n; ++row)
      for (int64_t j = 0; j < width; ++j) {
        const size_t src = static_cast<size_t>(row * 3 * width + j);
        const size_t dst = static_cast<size_t>(row * width + j);
        q[dst] = qkv[src];
        k[dst] = qkv[src + width];
        v[dst] = qkv[src + 2 * width];
      }
    kforge::om::AttentionDims dims{.batch = b,
                                   .q_len = n,
                                   .kv_len = n,
                                   .q_heads = heads,
                                   .kv_heads = heads,
                                   .head_dim = d,
                                   .causal = true,
                                   .q_pos0 = 0,
                                   .kv_pos0 = 0};
    kforge::om::Attention(q, k, v, ctx, {}, dims, 1.0 / std::sqrt(static_cast<double>(d)));
    kforge::om::Gemm(ctx, io.in(t, "wo"), part, b * n, hid, width, false, true);
    for (size_t i = 0; i < sum.size(); ++i) sum[i] += part[i];
  }
  for (int r = 0; r < io.world; ++r) {
    auto out = io.out(r, "out");
    const int64_t c = r / tp;
    for (int64_t bi = 0; bi < b; ++bi)
      for (int64_t i = 0; i < s * hid; ++i)
        out[bi * s * hid + i] = sum[static_cast<size_t>((bi * n + c * s) * hid + i)];
  }
  return kforge::Status::Ok();
}
