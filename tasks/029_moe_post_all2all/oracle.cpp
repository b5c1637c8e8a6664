// MoE combine (VeOmni tokens_post_all2all): inverse regroup and all-to-all,
// then the router-weighted sum of each token's k expert rows.
#include "kforge/oracle.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

namespace {

uint64_t Mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// One rank's routing, the same for each of its inputs: k distinct experts per
// token (PKB: randperm(E)[:k]) in increasing order, and softmax weights.
struct Routing {
  std::vector<int64_t> selected;  // [T, k], ascending per token
  std::vector<double> weights;    // [T, k]
};

Routing MakeRouting(uint64_t trial_seed, int rank, int64_t experts, int64_t slots, int64_t tokens) {
  kforge::OracleRng rng(Mix(trial_seed ^ (0x726f757465ull + static_cast<uint64_t>(rank) * 0x9e37)));
  Routing r;
  r.selected.resize(static_cast<size_t>(tokens * slots));
  r.weights.resize(r.selected.size());
  std::vector<int64_t> order(static_cast<size_t>(experts));
  std::vector<double> logits(static_cast<size_t>(slots));
  for (int64_t t = 0; t < tokens; ++t) {
    std::iota(order.begin(), order.end(), 0);
    for (int64_t s = 0; s < slots; ++s) std::swap(order[s], order[rng.Int(s, experts - 1)]);
    std::sort(order.begin(), order.begin() + slots);
    double sum = 0;
    for (int64_t s = 0; s < slots; ++s) {
      logits[s] = rng.Normal();
      sum += std::exp(logits[s]);
    }
    for (int64_t s = 0; s < slots; ++s) {
      r.selected[t * slots + s] = order[s];
      r.weights[t * slots + s] = std::exp(logits[s]) / sum;
    }
  }
  return r;
}

}  // namespace

KF_INPUT_GENERATOR(moe_post_all2all) {
  const int64_t experts = static_cast<int64_t>(gen.params.at("E"));
  const int64_t slots = static_cast<int64_t>(gen.params.at("k"));
  const int64_t tokens = static_cast<int64_t>(gen.params.at("T"));
  if (slots > experts) return kforge::Error(kforge::ErrorKind::kHarness, "k > E");
  const Routing r = MakeRouting(gen.trial_seed, gen.rank, experts, slots, tokens);
  auto& v = gen.tensor->data;
  if (gen.input_name == "selected_experts") {
    for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<double>(r.selected[i]);
  } else if (gen.input_name == "routing_weights") {
    v = r.weights;
  } else if (gen.input_name == "routing_map") {
    std::fill(v.begin(), v.end(), 0.0);
    for (int64_t t = 0; t < tokens; ++t)
      for (int64_t s = 0; s < slots; ++s) v[r.selected[t * slots + s] * tokens + t] = 1.0;
  } else if (gen.input_name == "perm") {
    size_t j = 0;
    for (int64_t e = 0; e < experts; ++e) {
      for (int64_t t = 0; t < tokens; ++t) {
        for (int64_t s = 0; s < slots; ++s) {
          if (r.selected[t * slots + s] == e) v[j++] = static_cast<double>(t);
        }
      }
    }
  } else {
    return kforge::Error(kforge::ErrorKind::kHarness, "moe_post_all2all: unknown input");
  }
  return kforge::Status::Ok();
}

KF_ORACLE(moe_post_all2all) {
  const int w = io.world;
  const size_t tokens = static_cast<size_t>(io.param("T"));
  const size_t hidden = static_cast<size_t>(io.param("D"));
  const size_t experts = static_cast<size_t>(io.param("E"));
  const size_t slots = static_cast<size_t>(io.param("k"));
  const size_t rows = tokens * slots, per_rank = rows / w, chunk = rows / experts;
  for (int r = 0; r < w; ++r) {
    auto map = io.in(r, "routing_map");
    auto selected = io.in(r, "selected_experts");
    auto weights = io.in(r, "routing_weights");
    auto perm = io.in(r, "perm");
    auto out = io.out(r, "out");
    std::fill(out.begin(), out.end(), 0.0);
    size_t j = 0;
    for (size_t e = 0; e < experts; ++e) {
      size_t routed = 0;
      for (size_t t = 0; t < tokens; ++t) routed += map[e * tokens + t] != 0 ? 1 : 0;
      for (size_t n = 0; n < routed; ++n, ++j) {
        const size_t t = static_cast<size_t>(perm[j]);
        double weight = NAN;
        for (size_t s = 0; s < slots; ++s)
          if (selected[t * slots + s] == static_cast<double>(e)) weight = weights[t * slots + s];
        // Row j of U: from rank p = j / S, local expert l, row i of its chunk.
        const size_t p = j / per_rank, l = (j % per_rank) / chunk, i = j % chunk;
        auto x = io.in(static_cast<int>(p), "expert_outputs");
        const size_t src = ((l * w + static_cast<size_t>(r)) * chunk + i) * hidden;
        for (size_t d = 0; d < hidden; ++d) out[t * hidden + d] += weight * x[src + d];
      }
    }
    if (j != rows) return kforge::Error(kforge::ErrorKind::kHarness, "not k experts a token");
  }
  return kforge::Status::Ok();
}
