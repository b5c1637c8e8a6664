// MoE token preprocessing: per-expert token counts, then the split sizes of
// the expert-parallel all-to-all and the per-local-expert counts.
#include "kforge/oracle.h"

#include <vector>

// PKB's mask: one_hot(randint(0, E, (T, k))) as [E, k, T]; slots may repeat an expert.
KF_INPUT_GENERATOR(moe_token_preprocess) {
  const int64_t experts = static_cast<int64_t>(gen.params.at("E"));
  const int64_t slots = static_cast<int64_t>(gen.params.at("k"));
  const int64_t tokens = static_cast<int64_t>(gen.params.at("T"));
  auto& v = gen.tensor->data;
  if (static_cast<int64_t>(v.size()) != experts * slots * tokens)
    return kforge::Error(kforge::ErrorKind::kHarness, "moe_token_preprocess: mask is not E*k*T");
  std::fill(v.begin(), v.end(), 0.0);
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t s = 0; s < slots; ++s) {
      const int64_t e = gen.rng->Int(0, experts - 1);
      v[static_cast<size_t>((e * slots + s) * tokens + t)] = 1.0;
    }
  }
  return kforge::Status::Ok();
}

KF_ORACLE(moe_token_preprocess) {
  const int w = io.world;
  const int64_t experts = static_cast<int64_t>(io.param("E"));
  const int64_t local = experts / w;
  std::vector<std::vector<double>> n(static_cast<size_t>(w), std::vector<double>(experts, 0.0));
  for (int p = 0; p < w; ++p) {
    auto mask = io.in(p, "expert_mask");
    const size_t per_expert = mask.size() / static_cast<size_t>(experts);
    for (int64_t e = 0; e < experts; ++e) {
      for (size_t i = 0; i < per_expert; ++i) n[p][e] += mask[e * per_expert + i];
    }
  }
  for (int r = 0; r < w; ++r) {
    auto in_splits = io.out(r, "input_splits");
    auto out_splits = io.out(r, "output_splits");
    auto per_local = io.out(r, "per_local");
    auto sums = io.out(r, "local_sums");
    for (int d = 0; d < w; ++d) {
      in_splits[d] = 0;
      out_splits[d] = 0;
      for (int64_t l = 0; l < local; ++l) {
        in_splits[d] += n[r][d * local + l];
        out_splits[d] += n[d][r * local + l];
        per_local[d * local + l] = n[d][r * local + l];
      }
    }
    for (int64_t l = 0; l < local; ++l) {
      sums[l] = 0;
      for (int p = 0; p < w; ++p) sums[l] += n[p][r * local + l];
    }
  }
  return kforge::Status::Ok();
}
