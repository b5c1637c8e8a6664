// Tensor-parallel Muon: the quintic Newton-Schulz iteration on the global
// matrix assembled from every rank's column shard, each rank's columns back.
#include "kforge/oracle.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "kforge/oracle_math.h"

namespace {

constexpr double kQuintic[5][3] = {{4.0848, -6.8946, 2.9270},
                                   {3.9505, -6.3029, 2.6377},
                                   {3.7418, -5.5913, 2.3037},
                                   {2.8769, -3.1427, 1.2046},
                                   {2.8366, -3.0525, 1.2012}};

}  // namespace

KF_ORACLE(tp_muon_orthogonalization) {
  const int64_t rows = io.in_shape(0, "x")[0];
  const int64_t local = io.in_shape(0, "x")[1];
  const int64_t cols = local * io.world;
  const int steps = static_cast<int>(io.param("steps"));
  if (steps % 5 != 0) {
    return kforge::Error(kforge::ErrorKind::kHarness, "tp_muon: steps must be a multiple of 5");
  }
  std::vector<double> x(rows * cols);
  double norm_sq = 0;
  for (int r = 0; r < io.world; ++r) {
    auto shard = io.in(r, "x");
    for (int64_t i = 0; i < rows; ++i) {
      for (int64_t j = 0; j < local; ++j) {
        const double v = shard[i * local + j];
        x[i * cols + r * local + j] = v;
        norm_sq += v * v;
      }
    }
  }
  const double scale = 1.0 / std::max(std::sqrt(norm_sq), 1e-7);
  for (double& v : x) v *= scale;
  std::vector<double> a(rows * rows), aa(rows * rows), next(rows * cols);
  for (int s = 0; s < steps; ++s) {
    const double* k = kQuintic[s % 5];
    kforge::om::Gemm(x, x, a, rows, rows, cols, false, /*trans_b=*/true);  // X X^T
    kforge::om::Gemm(a, a, aa, rows, rows, rows);
    for (size_t i = 0; i < aa.size(); ++i) aa[i] = k[1] * a[i] + k[2] * aa[i];
    next = x;
    kforge::om::Gemm(aa, x, next, rows, cols, rows, false, false, 1.0, k[0]);
    x.swap(next);
  }
  for (int r = 0; r < io.world; ++r) {
    auto y = io.out(r, "y");
    for (int64_t i = 0; i < rows; ++i) {
      for (int64_t j = 0; j < local; ++j) y[i * local + j] = x[i * cols + r * local + j];
    }
  }
  return kforge::Status::Ok();
}
