// MoE load-balancing loss (HF load_balancing_loss_func), mean over ranks.
#include "kforge/oracle.h"

#include <algorithm>
#include <vector>

#include "kforge/oracle_math.h"

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
