// Narrow expert-parallel MoE layer forward (PKB #51 moe_ep_narrow: PKB #31 with E = W / 2 experts
// on EP subgroups of W / 2 ranks; the layer of task 031): softmax router, top-k, the k experts'
// SwiGLU MLPs and the router-weighted sum, in fp64 from every rank's inputs. The EP groups are
// the task's [[groups]] `ep` (size W / 2, contiguous): rank r is in group r / G at group rank
// r % G; expert e lives on group rank e / L of the token's own group as its local expert e % L.
#include "kforge/oracle.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <span>
#include <vector>

#include "kforge/oracle_math.h"

namespace {

// One expert's MLP on one token: silu(x Wg^T + bg) * (x Wu^T + bu), then Wd^T + bd, with the
// expert's nn.Linear weights (wg, wu [F, H], wd [H, F]) and biases.
void ExpertForward(std::span<const double> x, std::span<const double> wg,
                   std::span<const double> bg, std::span<const double> wu,
                   std::span<const double> bu, std::span<const double> wd,
                   std::span<const double> bd, int64_t hidden, int64_t ffn, double weight,
                   std::span<double> acc, std::vector<double>& act) {
  act.assign(static_cast<size_t>(ffn), 0.0);
  for (int64_t f = 0; f < ffn; ++f) {
    double g = bg[f], u = bu[f];
    const double* wgr = wg.data() + f * hidden;
    const double* wur = wu.data() + f * hidden;
    for (int64_t h = 0; h < hidden; ++h) {
      g += x[h] * wgr[h];
      u += x[h] * wur[h];
    }
    act[f] = kforge::om::Silu(g) * u;
  }
  for (int64_t h = 0; h < hidden; ++h) {
    double y = bd[h];
    const double* wdr = wd.data() + h * ffn;
    for (int64_t f = 0; f < ffn; ++f) y += act[f] * wdr[f];
    acc[h] += weight * y;
  }
}

}  // namespace

KF_ORACLE(moe_ep_narrow) {
  const int world = io.world;
  const int ep = world / 2;  // [[groups]] ep: size W / 2, contiguous
  const int64_t experts = static_cast<int64_t>(io.param("E"));
  const int64_t top_k = static_cast<int64_t>(io.param("k"));
  const int64_t hidden = static_cast<int64_t>(io.param("H"));
  const int64_t ffn = static_cast<int64_t>(io.param("F"));
  const int64_t tokens = static_cast<int64_t>(io.param("T"));
  if (world % 2 != 0 || experts % ep != 0 || top_k < 1 || top_k > experts) {
    return kforge::Error(kforge::ErrorKind::kHarness,
                         "moe_ep_narrow: need even W, (W / 2) | E and 1 <= k <= E");
  }
  const int64_t local = experts / ep;
  for (int r = 0; r < world; ++r) {
    const int group_base = (r / ep) * ep;  // world rank of group rank 0 of r's group
    const auto x = io.in(r, "hidden_states");
    const auto logits = io.in(r, "router_logits");
    auto out = io.out(r, "out");
    kforge::OracleParallelFor(tokens, [&](int64_t begin, int64_t end) {
      std::vector<double> p(static_cast<size_t>(experts)), act;
      std::vector<int64_t> order(static_cast<size_t>(experts));
      for (int64_t t = begin; t < end; ++t) {
        const auto row = logits.subspan(static_cast<size_t>(t * experts), experts);
        kforge::om::Softmax(row, p, 1, experts);
        // The k largest logits (distinct by construction: init.distinct), i.e. the k largest p.
        std::iota(order.begin(), order.end(), 0);
        std::partial_sort(order.begin(), order.begin() + top_k, order.end(),
                          [&](int64_t a, int64_t b) { return row[a] > row[b]; });
        auto acc = out.subspan(static_cast<size_t>(t * hidden), hidden);
        std::fill(acc.begin(), acc.end(), 0.0);
        const auto xt = x.subspan(static_cast<size_t>(t * hidden), hidden);
        for (int64_t s = 0; s < top_k; ++s) {
          const int64_t e = order[s];
          const int owner = group_base + static_cast<int>(e / local);
          const int64_t l = e % local;
          auto part = [&](const char* name, int64_t n) {
            return io.in(owner, name).subspan(static_cast<size_t>(l * n), static_cast<size_t>(n));
          };
          ExpertForward(xt, part("w_gate", ffn * hidden), part("b_gate", ffn),
                        part("w_up", ffn * hidden), part("b_up", ffn), part("w_down", hidden * ffn),
                        part("b_down", hidden), hidden, ffn, p[static_cast<size_t>(e)], acc, act);
        }
      }
    });
  }
  return kforge::Status::Ok();
}
