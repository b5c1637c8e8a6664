// Megatron-LM drop-and-pad MoE dispatch: on every source rank, each expert keeps
// its C most probable tokens (ties to the lower token index), in token order,
// padded with zero rows to C; expert rank r gathers [L, W, C] rows by local
// expert, then source rank. The generator routes k distinct experts per token
// (a share hot_pct / 100 to experts 0..k-1, the rest uniform) with probabilities uniform
// in (0, 1), or from 16 values when `ties` is set.
#include "kforge/oracle.h"

#include <algorithm>
#include <cstdint>
#include <vector>

namespace {

int64_t Var(const std::map<std::string, double>& vars, const char* name) {
  return static_cast<int64_t>(vars.at(name));
}

}  // namespace

KF_INPUT_GENERATOR(moe_capacity_alltoall) {
  const int64_t t_count = Var(gen.params, "T"), k = Var(gen.params, "k"), e = Var(gen.params, "E");
  auto& v = gen.tensor->data;
  if (static_cast<int64_t>(v.size()) != t_count * k || k > e)
    return kforge::Error(kforge::ErrorKind::kHarness, "moe_capacity_alltoall: routing is not T*k");
  if (gen.input_name == "topk_probs") {
    const bool ties = Var(gen.params, "ties") != 0;
    for (double& p : v)
      p = ties ? static_cast<double>(1 + gen.rng->Int(0, 15)) / 16.0
               : 1e-6 + (1 - 2e-6) * gen.rng->Uniform();
    return kforge::Status::Ok();
  }
  const double hot = gen.params.at("hot_pct") / 100.0;
  std::vector<int64_t> pool(static_cast<size_t>(e));
  for (int64_t t = 0; t < t_count; ++t) {
    const int64_t n = gen.rng->Uniform() < hot ? k : e;
    for (int64_t i = 0; i < n; ++i) pool[static_cast<size_t>(i)] = i;
    for (int64_t s = 0; s < k; ++s) {
      const int64_t j = gen.rng->Int(s, n - 1);
      std::swap(pool[static_cast<size_t>(s)], pool[static_cast<size_t>(j)]);
      v[static_cast<size_t>(t * k + s)] = static_cast<double>(pool[static_cast<size_t>(s)]);
    }
  }
  return kforge::Status::Ok();
}

KF_ORACLE(moe_capacity_alltoall) {
  const int w = io.world;
  const int64_t t_count = static_cast<int64_t>(io.param("T")),
                h = static_cast<int64_t>(io.param("H"));
  const int64_t k = static_cast<int64_t>(io.param("k")),
                e_count = static_cast<int64_t>(io.param("E"));
  const int64_t l_count = e_count / w;
  const std::vector<int64_t>& shape = io.out_shape(0, "y");
  if (shape.size() != 4)
    return kforge::Error(kforge::ErrorKind::kHarness, "moe_capacity_alltoall: y shape");
  const int64_t cap = shape[2];
  for (int r = 0; r < w; ++r) {
    auto y = io.out(r, "y");
    auto yp = io.out(r, "y_probs");
    std::fill(y.begin(), y.end(), 0.0);
    std::fill(yp.begin(), yp.end(), 0.0);
    for (int64_t l = 0; l < l_count; ++l) {
      const int64_t e = r * l_count + l;
      for (int p = 0; p < w; ++p) {
        auto x = io.in(p, "x");
        auto idx = io.in(p, "topk_idx");
        auto probs = io.in(p, "topk_probs");
        std::vector<std::pair<double, int64_t>> cand;  // (prob, token)
        for (int64_t t = 0; t < t_count; ++t)
          for (int64_t s = 0; s < k; ++s)
            if (static_cast<int64_t>(idx[static_cast<size_t>(t * k + s)]) == e)
              cand.emplace_back(probs[static_cast<size_t>(t * k + s)], t);
        std::sort(cand.begin(), cand.end(), [](const auto& a, const auto& b) {
          return a.first != b.first ? a.first > b.first : a.second < b.second;
        });
        if (static_cast<int64_t>(cand.size()) > cap) cand.resize(static_cast<size_t>(cap));
        std::sort(cand.begin(), cand.end(),
                  [](const auto& a, const auto& b) { return a.second < b.second; });
        const int64_t block = (l * w + p) * cap;
        for (size_t i = 0; i < cand.size(); ++i) {
          const int64_t t = cand[i].second;
          for (int64_t c = 0; c < h; ++c)
            y[static_cast<size_t>((block + static_cast<int64_t>(i)) * h + c)] =
                x[static_cast<size_t>(t * h + c)];
          yp[static_cast<size_t>(block + static_cast<int64_t>(i))] = cand[i].first;
        }
      }
    }
  }
  return kforge::Status::Ok();
}
