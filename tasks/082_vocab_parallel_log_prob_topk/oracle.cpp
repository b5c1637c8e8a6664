// Vocabulary-parallel log-probabilities of target tokens under top-k / top-p
// filtering (NeMo-RL DistributedLogprobWithSampling.forward), in fp64. Every
// token's global row is the ranks' vocabulary shards side by side; the answer
// is the same on every rank.
#include "kforge/oracle.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace {

// One token: the filtered distribution's support is {v : z[v] >= theta} plus
// the target; log_z is log(sum of exp(z[v] - m)) over that support.
struct RowStats {
  double m = 0, theta = 0, log_z = 0;
};

// z: the global row (V values), t: the target. top_k >= 1, 0 < top_p <= 1.
RowStats Filter(const std::vector<double>& z, int64_t t, int64_t top_k, double top_p) {
  const int64_t v = static_cast<int64_t>(z.size());
  const int64_t k = std::min(top_k, v);
  std::vector<double> s(z);
  std::sort(s.begin(), s.end(), std::greater<double>());
  RowStats r;
  r.m = s[0];
  // tau: the k-th largest, counted with multiplicity; the top-k set is every
  // value >= tau (ties kept), the first n_k of the sorted row.
  const double tau = s[static_cast<size_t>(k - 1)];
  int64_t n_k = k;
  while (n_k < v && s[static_cast<size_t>(n_k)] >= tau) ++n_k;
  double z_k = 0;
  for (int64_t i = 0; i < n_k; ++i) z_k += std::exp(s[i] - r.m);
  // Top-p over groups of equal values, largest first: a group is kept while the
  // mass of the strictly larger values is < top_p * z_k (always the first).
  double above = 0;
  r.theta = s[0];
  for (int64_t i = 0; i < n_k;) {
    int64_t j = i;
    double group = 0;
    while (j < n_k && s[j] == s[i]) group += std::exp(s[j++] - r.m);
    if (!(above < top_p * z_k)) break;
    r.theta = s[i];
    above += group;
    i = j;
  }
  double z_s = 0;
  for (int64_t i = 0; i < n_k && s[i] >= r.theta; ++i) z_s += std::exp(s[i] - r.m);
  const double zt = z[static_cast<size_t>(t)];
  if (zt < r.theta) z_s += std::exp(zt - r.m);  // the target is always part of the support
  r.log_z = std::log(z_s);
  return r;
}

}  // namespace

KF_ORACLE(vocab_parallel_log_prob_topk) {
  const int w = io.world;
  const auto& shape = io.in_shape(0, "logits");
  if (shape.size() != 3)
    return kforge::Error(kforge::ErrorKind::kHarness, "vocab_parallel_log_prob_topk: logits shape");
  const int64_t rows = shape[0] * shape[1], vl = shape[2], v = vl * w;
  const int64_t top_k = static_cast<int64_t>(io.param("top_k"));
  const double top_p = io.param("top_p");
  if (top_k < 1 || !(top_p > 0 && top_p <= 1) || rows % w != 0)
    return kforge::Error(kforge::ErrorKind::kHarness, "vocab_parallel_log_prob_topk: params");
  auto target = io.in(0, "target");
  std::vector<double> lp(static_cast<size_t>(rows));
  std::vector<double> z(static_cast<size_t>(v));
  for (int64_t n = 0; n < rows; ++n) {
    for (int r = 0; r < w; ++r) {
      auto l = io.in(r, "logits");
      std::copy(l.begin() + n * vl, l.begin() + (n + 1) * vl, z.begin() + r * vl);
    }
    const int64_t t = static_cast<int64_t>(target[static_cast<size_t>(n)]);
    if (t < 0 || t >= v)
      return kforge::Error(kforge::ErrorKind::kHarness, "vocab_parallel_log_prob_topk: target");
    const RowStats st = Filter(z, t, top_k, top_p);
    lp[static_cast<size_t>(n)] = z[static_cast<size_t>(t)] - st.m - st.log_z;
  }
  for (int r = 0; r < w; ++r) {
    auto out = io.out(r, "logprobs");
    if (static_cast<int64_t>(out.size()) != rows)
      return kforge::Error(kforge::ErrorKind::kHarness, "vocab_parallel_log_prob_topk: output");
    std::copy(lp.begin(), lp.end(), out.begin());
  }
  return kforge::Status::Ok();
}
