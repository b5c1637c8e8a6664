// MAGI-1 CSO attention computed directly in fp64 (kforge::om::Attention): for
// every range, the global queries (all ranks' slices, padding included) attend
// to the keys of its k_range in the clipped global sequence, gathered from the
// ranks' slices. No all-to-all and no head redistribution, so the oracle shares
// nothing with the algorithm it checks.
#include "kforge/oracle.h"

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "kforge/oracle_math.h"

namespace {

int64_t Var(const kforge::OracleIo& io, const char* name) {
  return static_cast<int64_t>(std::llround(io.param(name)));
}

}  // namespace

// k_ranges from the size variable KR: 0 block-diagonal (PKB), 1 block-causal,
// 2 random (0 <= start < end <= R*C), the same on every rank (replicated).
KF_INPUT_GENERATOR(magi1_cso_async_attention) {
  auto it_r = gen.params.find("R"), it_c = gen.params.find("C"), it_k = gen.params.find("KR");
  if (gen.input_name != "k_ranges" || it_r == gen.params.end() || it_c == gen.params.end() ||
      it_k == gen.params.end())
    return kforge::Error(kforge::ErrorKind::kHarness, "magi1_cso_async_attention: generator");
  const int64_t r = std::llround(it_r->second), c = std::llround(it_c->second);
  const int64_t mode = std::llround(it_k->second);
  auto& d = gen.tensor->data;
  for (int64_t i = 0; i < r; ++i) {
    int64_t start = i * c, end = (i + 1) * c;
    if (mode == 1) {
      start = 0;
    } else if (mode == 2) {
      start = gen.rng->Int(0, r * c - 1);
      end = gen.rng->Int(start + 1, r * c);
    }
    d[static_cast<size_t>(2 * i)] = static_cast<double>(start);
    d[static_cast<size_t>(2 * i + 1)] = static_cast<double>(end);
  }
  return kforge::Status::Ok();
}

KF_ORACLE(magi1_cso_async_attention) {
  const int64_t r = Var(io, "R"), s = Var(io, "S"), h = Var(io, "H"), kvh = Var(io, "KVH");
  const int64_t d = Var(io, "D"), c = Var(io, "C");
  const int64_t w = io.world, n = w * s;
  if (c < 1 || c > n || kvh < 1 || h % kvh != 0)
    return kforge::Error(kforge::ErrorKind::kHarness, "magi1_cso_async_attention: sizes");
  // The clipped global keys and values [R*C, KVH, D]: token u < C of range i
  // is rank u / S's row u % S.
  std::vector<double> keys(static_cast<size_t>(r * c * kvh * d));
  std::vector<double> values(keys.size());
  for (int64_t i = 0; i < r; ++i)
    for (int64_t u = 0; u < c; ++u) {
      auto kv = io.in(static_cast<int>(u / s), "kv");
      for (int64_t hh = 0; hh < kvh; ++hh)
        for (int64_t e = 0; e < d; ++e) {
          const size_t src = static_cast<size_t>(((i * s + u % s) * kvh + hh) * 2 * d + e);
          const size_t dst = static_cast<size_t>(((i * c + u) * kvh + hh) * d + e);
          keys[dst] = kv[src];
          values[dst] = kv[src + static_cast<size_t>(d)];
        }
    }
  const auto ranges = io.in(0, "k_ranges");
  const size_t row = static_cast<size_t>(h * d), krow = static_cast<size_t>(kvh * d);
  for (int64_t i = 0; i < r; ++i) {
    const int64_t start = std::llround(ranges[2 * i]), end = std::llround(ranges[2 * i + 1]);
    if (start < 0 || end <= start || end > r * c)
      return kforge::Error(kforge::ErrorKind::kHarness,
                           "magi1_cso_async_attention: k_range " + std::to_string(i));
    // Range i's W*S global queries in token order.
    std::vector<double> q(static_cast<size_t>(n) * row), out(q.size());
    for (int p = 0; p < w; ++p) {
      auto qp = io.in(p, "q");
      for (size_t e = 0; e < static_cast<size_t>(s) * row; ++e)
        q[static_cast<size_t>(p * s) * row + e] = qp[static_cast<size_t>(i * s) * row + e];
    }
    kforge::om::AttentionDims dims{.batch = 1,
                                   .q_len = n,
                                   .kv_len = end - start,
                                   .q_heads = h,
                                   .kv_heads = kvh,
                                   .head_dim = d,
                                   .causal = false,
                                   .q_pos0 = 0,
                                   .kv_pos0 = 0};
    const std::span<const double> k_span(keys.data() + static_cast<size_t>(start) * krow,
                                         static_cast<size_t>(end - start) * krow);
    const std::span<const double> v_span(values.data() + static_cast<size_t>(start) * krow,
                                         static_cast<size_t>(end - start) * krow);
    kforge::om::Attention(q, k_span, v_span, out, {}, dims,
                          1.0 / std::sqrt(static_cast<double>(d)));
    for (int p = 0; p < w; ++p) {
      auto op = io.out(p, "out");
      for (size_t e = 0; e < static_cast<size_t>(s) * row; ++e)
        op[static_cast<size_t>(i * s) * row + e] = out[static_cast<size_t>(p * s) * row + e];
    }
  }
  return kforge::Status::Ok();
}
