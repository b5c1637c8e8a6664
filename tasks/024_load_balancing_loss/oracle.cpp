// MoE load-balancing loss (HF load_balancing_loss_func), mean over ranks.
#include "kforge/oracle.h"

#include <algorithm>
#include <vector>

#include "kforge/oracle_math.h"

namespace {

// Splitmix64 finaliser: per-trial values that every rank must agree on.
uint64_t Mix(uint64_t seed, uint64_t salt) {
  uint64_t z = seed + 0x9e3779b97f4a7c15ull * (salt + 1);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

}  // namespace

// Logits = N(0, 1) per token + a per-expert router bias N(0, 1) drawn once per
// trial (the same router on every rank), so that routing is imbalanced.
KF_INPUT_GENERATOR(load_balancing_loss) {
  const auto& shape = gen.tensor->shape;
  if (shape.size() != 2) return kforge::Error(kforge::ErrorKind::kHarness, "gate_logits: 2-D");
  const int64_t rows = shape[0], experts = shape[1];
  kforge::OracleRng bias_rng(Mix(gen.trial_seed, 24));
  std::vector<double> bias(static_cast<size_t>(experts));
  for (double& b : bias) b = bias_rng.Normal();
  auto& v = gen.tensor->data;
  for (int64_t t = 0; t < rows; ++t) {
    for (int64_t e = 0; e < experts; ++e) v[t * experts + e] = gen.rng->Normal() + bias[e];
  }
  return kforge::Status::Ok();
}

KF_ORACLE(load_balancing_loss) {
  const int k = static_cast<int>(io.param("top_k"));
  double total = 0;
  for (int r = 0; r < io.world; ++r) {
    const auto& shape = io.in_shape(r, "gate_logits");
    const int64_t rows = shape[0], experts = shape[1];
    if (k < 1 || k > experts) return kforge::Error(kforge::ErrorKind::kHarness, "top_k > E");
    auto x = io.in(r, "gate_logits");
    std::vector<double> p(x.size());
    kforge::om::Softmax(x, p, rows, experts);
    std::vector<double> count(static_cast<size_t>(experts), 0.0), prob(count);
    std::vector<int> order(static_cast<size_t>(experts));
    for (int64_t t = 0; t < rows; ++t) {
      const double* pt = p.data() + t * experts;
      for (int64_t e = 0; e < experts; ++e) prob[e] += pt[e];
      for (int64_t e = 0; e < experts; ++e) order[e] = static_cast<int>(e);
      std::partial_sort(order.begin(), order.begin() + k, order.end(),
                        [&](int a, int b) { return pt[a] > pt[b] || (pt[a] == pt[b] && a < b); });
      for (int j = 0; j < k; ++j) count[order[j]] += 1;
    }
    double s = 0;
    for (int64_t e = 0; e < experts; ++e) s += (count[e] / rows) * (prob[e] / rows);
    total += experts * s;
  }
  for (int r = 0; r < io.world; ++r) io.out(r, "loss")[0] = total / io.world;
  return kforge::Status::Ok();
}
