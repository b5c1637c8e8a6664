// DINOv2 Sinkhorn-Knopp teacher centering over the union of all ranks' samples.
#include "kforge/oracle.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

KF_ORACLE(sinkhorn_knopp) {
  const auto& shape = io.in_shape(0, "teacher_output");
  const int64_t b = shape[0], k = shape[1];
  const double temp = io.param("teacher_temp");
  const int iters = static_cast<int>(io.param("n_iterations"));
  // q[r][i * k + p]: rank r's sample i, prototype p (the transpose of dinov2's Q).
  std::vector<std::vector<double>> q(static_cast<size_t>(io.world));
  for (int r = 0; r < io.world; ++r) {
    auto x = io.in(r, "teacher_output");
    q[r].resize(x.size());
    for (size_t i = 0; i < x.size(); ++i) q[r][i] = std::exp(x[i] / temp);
  }
  std::vector<double> row(static_cast<size_t>(k));
  for (int it = 0; it < iters; ++it) {
    std::fill(row.begin(), row.end(), 0.0);
    for (int r = 0; r < io.world; ++r)
      for (int64_t i = 0; i < b; ++i)
        for (int64_t p = 0; p < k; ++p) row[p] += q[r][i * k + p];
    for (int r = 0; r < io.world; ++r) {
      for (int64_t i = 0; i < b; ++i) {
        double* s = q[r].data() + i * k;
        double col = 0;
        for (int64_t p = 0; p < k; ++p) col += s[p] = s[p] / row[p] / static_cast<double>(k);
        for (int64_t p = 0; p < k; ++p) s[p] /= col;
      }
    }
  }
  for (int r = 0; r < io.world; ++r) {
    auto y = io.out(r, "q");
    for (size_t i = 0; i < y.size(); ++i) y[i] = q[r][i];
  }
  return kforge::Status::Ok();
}
