// Link-prediction ranking: every positive's rank among its K negatives, 1 + the number of
// negatives scoring >= it (ties count against the positive), for every rank's rows in rank
// order; every rank ends with the same list.
#include "kforge/oracle.h"

#include <cstdint>
#include <vector>

KF_ORACLE(gnn_negative_scoring) {
  const int w = io.world;
  const auto k = static_cast<size_t>(io.param("K"));
  std::vector<double> rankings;
  for (int p = 0; p < w; ++p) {
    auto pos = io.in(p, "local_pos_scores");
    auto neg = io.in(p, "local_neg_scores");
    if (neg.size() != pos.size() * k)
      return kforge::Error(kforge::ErrorKind::kHarness, "local_neg_scores is not [n_r, K]");
    for (size_t i = 0; i < pos.size(); ++i) {
      int64_t ahead = 0;
      for (size_t j = 0; j < k; ++j) ahead += neg[i * k + j] >= pos[i] ? 1 : 0;
      rankings.push_back(static_cast<double>(1 + ahead));
    }
  }
  for (int r = 0; r < w; ++r) {
    auto out = io.out(r, "rankings");
    if (out.size() != rankings.size())
      return kforge::Error(kforge::ErrorKind::kHarness,
                           "rankings is not [sum of the ranks' row counts]");
    for (size_t i = 0; i < out.size(); ++i) out[i] = rankings[i];
  }
  return kforge::Status::Ok();
}
