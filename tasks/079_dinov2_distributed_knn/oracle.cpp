// fp64 oracle for the distributed k-NN: for every rank's queries, the similarities to every train
// vector of every shard, then the k largest by (similarity descending, global index ascending).
// The features are integers with D * amp^2 <= 2^24, so the fp64 dot products are exact, as are the
// fp32 ones a kernel computes.
#include "kforge/oracle.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

KF_ORACLE(dinov2_distributed_knn) {
  const int world = io.world;
  const auto& qs = io.in_shape(0, "test_features");
  const auto& ts = io.in_shape(0, "train_features_t");
  const int64_t q = qs[0], d = qs[1], n = ts[1];
  const int64_t k = io.out_shape(0, "topk_sims")[1];
  const int64_t total = static_cast<int64_t>(world) * n;
  if (ts[0] != d || k < 1 || k > n) {
    return kforge::Status(kforge::ErrorKind::kInvalidInput,
                          "dinov2_distributed_knn: shapes disagree or k is not in [1, n]");
  }
  // The global train matrix, one row per train vector: train[g][dd].
  std::vector<double> train(static_cast<size_t>(total * d));
  for (int p = 0; p < world; ++p) {
    auto t = io.in(p, "train_features_t");
    for (int64_t dd = 0; dd < d; ++dd)
      for (int64_t j = 0; j < n; ++j)
        train[static_cast<size_t>((p * n + j) * d + dd)] = t[dd * n + j];
  }
  // One item per (rank, query).
  kforge::OracleParallelFor(static_cast<int64_t>(world) * q, [&](int64_t begin, int64_t end) {
    std::vector<std::pair<double, int64_t>> sims(static_cast<size_t>(total));
    for (int64_t item = begin; item < end; ++item) {
      const int r = static_cast<int>(item / q);
      const int64_t i = item % q;
      auto feat = io.in(r, "test_features");
      for (int64_t g = 0; g < total; ++g) {
        double s = 0;
        const double* row = &train[static_cast<size_t>(g * d)];
        for (int64_t dd = 0; dd < d; ++dd) s += feat[i * d + dd] * row[dd];
        sims[static_cast<size_t>(g)] = {s, g};
      }
      // Similarity descending, then global index ascending: a total order.
      std::partial_sort(sims.begin(), sims.begin() + k, sims.end(),
                        [](const auto& a, const auto& b) {
                          return a.first != b.first ? a.first > b.first : a.second < b.second;
                        });
      auto out_sims = io.out(r, "topk_sims");
      auto out_labels = io.out(r, "topk_labels");
      for (int64_t j = 0; j < k; ++j) {
        const int64_t g = sims[static_cast<size_t>(j)].second;
        out_sims[i * k + j] = sims[static_cast<size_t>(j)].first;
        out_labels[i * k + j] = io.in(static_cast<int>(g / n), "train_labels")[g % n];
      }
    }
  });
  return kforge::Status::Ok();
}
