// DeepEP intranode dispatch (normal mode): rank r receives, grouped by source
// rank in rank order and in token order within one, every token that has at
// least one of its top-k experts on r, with its routing remapped to r's local
// experts (-1 and weight 0 elsewhere), and counts the rows per local expert.
// The generator draws k distinct experts per token: with probability hot_pct / 100
// experts 0..k-1 (in a random order), else uniformly from all E.
#include "kforge/oracle.h"

#include <cstdint>
#include <vector>

namespace {

int64_t Var(const std::map<std::string, double>& vars, const char* name) {
  return static_cast<int64_t>(vars.at(name));
}

}  // namespace

KF_INPUT_GENERATOR(deepep_dispatch) {
  const int64_t t_count = Var(gen.params, "T"), k = Var(gen.params, "k"), e = Var(gen.params, "E");
  const double hot = gen.params.at("hot_pct") / 100.0;
  auto& v = gen.tensor->data;
  if (static_cast<int64_t>(v.size()) != t_count * k || k > e)
    return kforge::Error(kforge::ErrorKind::kHarness, "deepep_dispatch: topk_idx is not T*k");
  std::vector<int64_t> pool(static_cast<size_t>(e));
  for (int64_t t = 0; t < t_count; ++t) {
    // A partial Fisher-Yates shuffle over the candidates: k distinct experts.
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

KF_ORACLE(deepep_dispatch) {
  const int w = io.world;
  const int64_t t_count = static_cast<int64_t>(io.param("T")),
                h = static_cast<int64_t>(io.param("H"));
  const int64_t k = static_cast<int64_t>(io.param("k")), e = static_cast<int64_t>(io.param("E"));
  const int64_t l_count = e / w;
  for (int r = 0; r < w; ++r) {
    auto recv_x = io.out(r, "recv_x");
    auto recv_src = io.out(r, "recv_src_idx");
    auto recv_idx = io.out(r, "recv_topk_idx");
    auto recv_w = io.out(r, "recv_topk_weights");
    auto per_expert = io.out(r, "num_recv_tokens_per_expert");
    if (static_cast<int64_t>(recv_x.size()) != w * t_count * h ||
        static_cast<int64_t>(per_expert.size()) != l_count)
      return kforge::Error(kforge::ErrorKind::kHarness, "deepep_dispatch: output shapes");
    for (double& c : per_expert) c = 0;
    const int64_t lo = r * l_count, hi = lo + l_count;
    int64_t j = 0;
    for (int p = 0; p < w; ++p) {
      auto x = io.in(p, "x");
      auto idx = io.in(p, "topk_idx");
      auto wt = io.in(p, "topk_weights");
      for (int64_t t = 0; t < t_count; ++t) {
        bool hit = false;
        for (int64_t s = 0; s < k; ++s) {
          const int64_t ex = static_cast<int64_t>(idx[static_cast<size_t>(t * k + s)]);
          hit = hit || (ex >= lo && ex < hi);
        }
        if (!hit) continue;
        for (int64_t c = 0; c < h; ++c)
          recv_x[static_cast<size_t>(j * h + c)] = x[static_cast<size_t>(t * h + c)];
        recv_src[static_cast<size_t>(j)] = static_cast<double>(t);
        for (int64_t s = 0; s < k; ++s) {
          const int64_t ex = static_cast<int64_t>(idx[static_cast<size_t>(t * k + s)]);
          const bool local = ex >= lo && ex < hi;
          recv_idx[static_cast<size_t>(j * k + s)] = local ? static_cast<double>(ex - lo) : -1.0;
          recv_w[static_cast<size_t>(j * k + s)] = local ? wt[static_cast<size_t>(t * k + s)] : 0.0;
          if (local) per_expert[static_cast<size_t>(ex - lo)] += 1;
        }
        ++j;
      }
    }
    io.out(r, "num_recv")[0] = static_cast<double>(j);
  }
  return kforge::Status::Ok();
}
