// Ring attention in a two-stage pipeline, computed directly in fp64: the stage-0 layer (QKV
// projection, causal attention over the whole sequence with kforge::om::Attention, output
// projection) on the sequence of h that the stage-0 ranks hold, then the stage-1 layer on its
// result. The result of stage 0 is kept in fp64 (the pipeline's bf16 hand-over is a rounding the
// tolerance covers). No ring, no merge, no send: nothing is shared with the algorithm it checks.
#include "kforge/oracle.h"

#include <cmath>
#include <cstdint>
#include <vector>

#include "kforge/oracle_math.h"

namespace {

// y[B * n, hid] = the attention layer with weights wqkv [3 * heads, d, hid], wo [hid, heads, d]
// applied to x[B * n, hid] (causal over each batch row's n positions).
void Layer(const std::vector<double>& x, std::span<const double> wqkv, std::span<const double> wo,
           std::vector<double>& y, int64_t b, int64_t n, int64_t hid, int64_t heads, int64_t d) {
  const int64_t width = heads * d;
  std::vector<double> qkv(static_cast<size_t>(b * n * 3 * width));
  kforge::om::Gemm(x, wqkv, qkv, b * n, 3 * width, hid, false, true);
  std::vector<double> q(static_cast<size_t>(b * n * width)), k(q.size()), v(q.size()),
      ctx(q.size());
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
  y.assign(static_cast<size_t>(b * n * hid), 0.0);
  kforge::om::Gemm(ctx, wo, y, b * n, hid, width, false, true);
}

}  // namespace

KF_ORACLE(ring_attention_pp) {
  const auto& hs = io.in_shape(0, "h");
  const auto& ws = io.in_shape(0, "wqkv");
  if (hs.size() != 3 || ws.size() != 3 || ws[0] % 3 != 0 || ws[2] != hs[2] || io.world % 2 != 0)
    return kforge::Error(kforge::ErrorKind::kHarness, "ring_attention_pp: shapes");
  const int64_t b = hs[0], s = hs[1], hid = hs[2], heads = ws[0] / 3, d = ws[1];
  // [[groups]]: cp of size W / 2, contiguous (stage p = r / CP, CP position c = r % CP); pp of
  // size 2, strided. Only the stage-0 ranks hold rows of h.
  const int cp = io.world / 2;
  const int64_t n = cp * s;
  std::vector<double> x(static_cast<size_t>(b * n * hid));
  for (int c = 0; c < cp; ++c) {
    auto hc = io.in(c, "h");
    for (int64_t bi = 0; bi < b; ++bi)
      for (int64_t i = 0; i < s * hid; ++i)
        x[static_cast<size_t>((bi * n + c * s) * hid + i)] = hc[bi * s * hid + i];
  }
  std::vector<double> y[2];
  Layer(x, io.in(0, "wqkv"), io.in(0, "wo"), y[0], b, n, hid, heads, d);
  Layer(y[0], io.in(cp, "wqkv"), io.in(cp, "wo"), y[1], b, n, hid, heads, d);
  for (int r = 0; r < io.world; ++r) {
    auto out = io.out(r, "out");
    const std::vector<double>& src = y[r / cp];
    const int64_t c = r % cp;
    for (int64_t bi = 0; bi < b; ++bi)
      for (int64_t i = 0; i < s * hid; ++i)
        out[bi * s * hid + i] = src[static_cast<size_t>((bi * n + c * s) * hid + i)];
  }
  return kforge::Status::Ok();
}
