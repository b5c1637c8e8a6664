// DeepEP intranode combine: rank p's token t gets the sum over its k slots of
// weight * the row its expert produced, found on the expert's rank in task
// 106's order (source rank, token, slot). The generator draws k distinct experts
// per token: with probability hot_pct / 100 experts 0..k-1 (in a random order), else
// uniformly from all E.
#include "kforge/oracle.h"

#include <cstdint>
#include <vector>

namespace {

int64_t Var(const std::map<std::string, double>& vars, const char* name) {
  return static_cast<int64_t>(vars.at(name));
}

}  // namespace

KF_INPUT_GENERATOR(deepep_combine) {
  const int64_t t_count = Var(gen.params, "T"), k = Var(gen.params, "k"), e = Var(gen.params, "E");
  const double hot = gen.params.at("hot_pct") / 100.0;
  auto& v = gen.tensor->data;
  if (static_cast<int64_t>(v.size()) != t_count * k || k > e)
    return kforge::Error(kforge::ErrorKind::kHarness, "deepep_combine: topk_idx is not T*k");
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

KF_ORACLE(deepep_combine) {
  const int w = io.world;
  const int64_t t_count = static_cast<int64_t>(io.param("T")),
                h = static_cast<int64_t>(io.param("H"));
  const int64_t k = static_cast<int64_t>(io.param("k")), e = static_cast<int64_t>(io.param("E"));
  const int64_t cap = static_cast<int64_t>(io.param("C"));
  const int64_t l_count = e / w;
  // next[d]: the next pair row on rank d, walking sources, tokens and slots in order.
  std::vector<int64_t> next(static_cast<size_t>(w), 0);
  for (int p = 0; p < w; ++p) {
    auto idx = io.in(p, "topk_idx");
    auto wt = io.in(p, "topk_weights");
    auto out = io.out(p, "out");
    std::vector<double> acc(static_cast<size_t>(h));
    for (int64_t t = 0; t < t_count; ++t) {
      std::fill(acc.begin(), acc.end(), 0.0);
      for (int d = 0; d < w; ++d) {
        auto y = io.in(d, "expert_out");
        for (int64_t s = 0; s < k; ++s) {
          const int64_t ex = static_cast<int64_t>(idx[static_cast<size_t>(t * k + s)]);
          if (ex / l_count != d) continue;
          const int64_t row = next[static_cast<size_t>(d)]++;
          if (row >= cap)
            return kforge::Error(kforge::ErrorKind::kHarness, "deepep_combine: more pairs than C");
          const double wv = wt[static_cast<size_t>(t * k + s)];
          for (int64_t c = 0; c < h; ++c)
            acc[static_cast<size_t>(c)] += wv * y[static_cast<size_t>(row * h + c)];
        }
      }
      for (int64_t c = 0; c < h; ++c)
        out[static_cast<size_t>(t * h + c)] = acc[static_cast<size_t>(c)];
    }
  }
  return kforge::Status::Ok();
}
