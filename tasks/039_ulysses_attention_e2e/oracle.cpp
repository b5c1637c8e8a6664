// Ulysses attention end to end, computed on the whole sequence in fp64: the projection of every
// token, non-causal attention of every head over all S = W*T tokens (kforge::om::Attention), the
// output projection, and rank r's tokens r*T .. r*T+T-1 written to rank r. No head split and no
// all-to-all, so the oracle shares nothing with the Ulysses layouts it checks.
#include "kforge/oracle.h"

#include <cmath>
#include <cstdint>
#include <vector>

#include "kforge/oracle_math.h"

namespace {

// y[rows, n] = x[rows, k] @ w[n, k]^T, rows spread over the host's cores.
void Linear(const std::vector<double>& x, std::span<const double> w, std::vector<double>& y,
            int64_t rows, int64_t n, int64_t k) {
  y.assign(static_cast<size_t>(rows * n), 0.0);
  kforge::OracleParallelFor(rows, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const double* xi = x.data() + i * k;
      for (int64_t j = 0; j < n; ++j) {
        const double* wj = w.data() + j * k;
        double s = 0.0;
        for (int64_t c = 0; c < k; ++c) s += xi[c] * wj[c];
        y[static_cast<size_t>(i * n + j)] = s;
      }
    }
  });
}

}  // namespace

KF_ORACLE(ulysses_attention_e2e) {
  const auto& hs = io.in_shape(0, "h");
  const auto& qs = io.in_shape(0, "wqkv");
  if (hs.size() != 3 || qs.size() != 2 || qs[1] != hs[2] || qs[0] != 3 * hs[2])
    return kforge::Error(kforge::ErrorKind::kHarness, "ulysses_attention_e2e: shapes");
  const int64_t b = hs[0], t = hs[1], hidden = hs[2], w = io.world, s = w * t;
  const int64_t heads = io.param("H"), d = io.param("D");
  if (heads * d != hidden)
    return kforge::Error(kforge::ErrorKind::kHarness, "ulysses_attention_e2e: hidden != H * D");

  // The global h [B, S, hidden]: rank p's shard holds positions p*T .. p*T+T-1.
  std::vector<double> h(static_cast<size_t>(b * s * hidden));
  for (int p = 0; p < io.world; ++p) {
    auto x = io.in(p, "h");
    for (int64_t bi = 0; bi < b; ++bi)
      for (int64_t i = 0; i < t * hidden; ++i)
        h[static_cast<size_t>((bi * s + p * t) * hidden + i)] = x[(bi * t) * hidden + i];
  }
  std::vector<double> qkv;
  Linear(h, io.in(0, "wqkv"), qkv, b * s, 3 * hidden, hidden);
  // Split [B*S, 3, hidden] into q, k, v, each [B, S, H, D].
  const size_t n = static_cast<size_t>(b * s * hidden);
  std::vector<double> q(n), k(n), v(n);
  for (size_t row = 0; row < static_cast<size_t>(b * s); ++row) {
    for (size_t c = 0; c < static_cast<size_t>(hidden); ++c) {
      const size_t from = row * 3 * hidden + c, to = row * hidden + c;
      q[to] = qkv[from];
      k[to] = qkv[from + hidden];
      v[to] = qkv[from + 2 * hidden];
    }
  }
  std::vector<double> o(n);
  kforge::om::AttentionDims dims{.batch = b,
                                 .q_len = s,
                                 .kv_len = s,
                                 .q_heads = heads,
                                 .kv_heads = heads,
                                 .head_dim = d,
                                 .causal = false};
  kforge::om::Attention(q, k, v, o, {}, dims, 1.0 / std::sqrt(static_cast<double>(d)));
  std::vector<double> y;
  Linear(o, io.in(0, "wo"), y, b * s, hidden, hidden);
  for (int r = 0; r < io.world; ++r) {
    auto out = io.out(r, "out");
    for (int64_t bi = 0; bi < b; ++bi)
      for (int64_t i = 0; i < t * hidden; ++i)
        out[(bi * t) * hidden + i] = y[static_cast<size_t>((bi * s + r * t) * hidden + i)];
  }
  return kforge::Status::Ok();
}
