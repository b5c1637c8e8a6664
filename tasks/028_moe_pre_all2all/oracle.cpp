// MoE dispatch (VeOmni token_pre_all2all): permute by expert, equal-split
// all-to-all, regroup by local expert.
#include "kforge/oracle.h"

#include <numeric>
#include <vector>

// k distinct experts per token (PKB: randperm(E)[:k]), slot s of token t.
KF_INPUT_GENERATOR(moe_pre_all2all) {
  const int64_t experts = static_cast<int64_t>(gen.params.at("E"));
  const int64_t slots = static_cast<int64_t>(gen.params.at("k"));
  const int64_t tokens = static_cast<int64_t>(gen.params.at("T"));
  auto& v = gen.tensor->data;
  if (static_cast<int64_t>(v.size()) != experts * slots * tokens || slots > experts)
    return kforge::Error(kforge::ErrorKind::kHarness, "moe_pre_all2all: bad mask shape");
  std::fill(v.begin(), v.end(), 0.0);
  std::vector<int64_t> order(static_cast<size_t>(experts));
  for (int64_t t = 0; t < tokens; ++t) {
    std::iota(order.begin(), order.end(), 0);
    for (int64_t s = 0; s < slots; ++s) {
      std::swap(order[s], order[gen.rng->Int(s, experts - 1)]);
      v[static_cast<size_t>((order[s] * slots + s) * tokens + t)] = 1.0;
    }
  }
  return kforge::Status::Ok();
}

KF_ORACLE(moe_pre_all2all) {
  const int w = io.world;
  const size_t tokens = static_cast<size_t>(io.param("T"));
  const size_t hidden = static_cast<size_t>(io.param("D"));
  const size_t experts = static_cast<size_t>(io.param("E"));
  const size_t slots = static_cast<size_t>(io.param("k"));
  const size_t rows = tokens * slots, per_rank = rows / w, chunk = rows / experts;
  const size_t local = experts / w;
  std::vector<std::vector<size_t>> perm(static_cast<size_t>(w));
  for (int r = 0; r < w; ++r) {
    auto mask = io.in(r, "expert_mask");
    auto map = io.out(r, "routing_map");
    auto out_perm = io.out(r, "perm");
    for (size_t e = 0; e < experts; ++e) {
      for (size_t t = 0; t < tokens; ++t) {
        double m = 0;
        for (size_t s = 0; s < slots; ++s) m += mask[(e * slots + s) * tokens + t];
        map[e * tokens + t] = m;
        if (m != 0) perm[r].push_back(t);
      }
    }
    if (perm[r].size() != rows)
      return kforge::Error(kforge::ErrorKind::kHarness, "moe_pre_all2all: not k experts a token");
    for (size_t j = 0; j < rows; ++j) out_perm[j] = static_cast<double>(perm[r][j]);
  }
  for (int r = 0; r < w; ++r) {
    auto out = io.out(r, "global_permuted");
    for (size_t l = 0; l < local; ++l) {
      for (int p = 0; p < w; ++p) {
        auto h = io.in(p, "hidden_states");
        for (size_t i = 0; i < chunk; ++i) {
          const size_t token = perm[p][r * per_rank + l * chunk + i];
          const size_t dst = ((l * w + p) * chunk + i) * hidden;
          for (size_t d = 0; d < hidden; ++d) out[dst + d] = h[token * hidden + d];
        }
      }
    }
  }
  return kforge::Status::Ok();
}
