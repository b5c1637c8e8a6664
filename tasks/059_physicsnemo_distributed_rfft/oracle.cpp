// Distributed rfft2 (PhysicsNeMo DistributedRFFT2): every rank's row slab of
// rfft2(f, norm="ortho") of the global field f assembled from the column
// slabs. A direct fp64 DFT, separable (along N first, only the N/2+1 kept
// frequencies, then along H), with exact twiddles (the angle's index reduced
// mod the length first): O(B H N (N/2 + H)), instant at the check sizes.
#include "kforge/oracle.h"

#include <cmath>
#include <numbers>
#include <vector>

namespace {

// cos and sin of 2 pi k / n for k in [0, n).
struct Twiddles {
  std::vector<double> c, s;
  explicit Twiddles(size_t n) : c(n), s(n) {
    for (size_t k = 0; k < n; ++k) {
      const double a = 2.0 * std::numbers::pi * static_cast<double>(k) / static_cast<double>(n);
      c[k] = std::cos(a);
      s[k] = std::sin(a);
    }
  }
};

}  // namespace

KF_ORACLE(physicsnemo_distributed_rfft) {
  const int w = io.world;
  const size_t batch = static_cast<size_t>(io.param("B"));
  const size_t rows = static_cast<size_t>(io.param("H"));
  const size_t cols = static_cast<size_t>(io.param("N"));
  if (rows % w != 0 || cols % w != 0)
    return kforge::Error(kforge::ErrorKind::kHarness, "H and N must be multiples of W");
  const size_t cols_local = cols / w, rows_local = rows / w, kept = cols / 2 + 1;
  const Twiddles tw_n(cols), tw_h(rows);
  const double scale = 1.0 / std::sqrt(static_cast<double>(rows * cols));
  std::vector<double> f(rows * cols), g(rows * kept * 2);
  for (size_t b = 0; b < batch; ++b) {
    // The global field from the column slabs.
    for (int r = 0; r < w; ++r) {
      auto x = io.in(r, "x");
      for (size_t h = 0; h < rows; ++h) {
        for (size_t j = 0; j < cols_local; ++j) {
          f[h * cols + r * cols_local + j] = x[(b * rows + h) * cols_local + j];
        }
      }
    }
    // g[h, k] = sum_n f[h, n] exp(-2 pi i k n / N).
    for (size_t h = 0; h < rows; ++h) {
      for (size_t k = 0; k < kept; ++k) {
        double re = 0, im = 0;
        for (size_t n = 0; n < cols; ++n) {
          const size_t t = (k * n) % cols;
          re += f[h * cols + n] * tw_n.c[t];
          im -= f[h * cols + n] * tw_n.s[t];
        }
        g[(h * kept + k) * 2] = re;
        g[(h * kept + k) * 2 + 1] = im;
      }
    }
    // F[p, k] = sum_h g[h, k] exp(-2 pi i p h / H), rank r's rows p.
    for (int r = 0; r < w; ++r) {
      auto y = io.out(r, "y");
      for (size_t i = 0; i < rows_local; ++i) {
        const size_t p = r * rows_local + i;
        for (size_t k = 0; k < kept; ++k) {
          double re = 0, im = 0;
          for (size_t h = 0; h < rows; ++h) {
            const size_t t = (p * h) % rows;
            const double gr = g[(h * kept + k) * 2], gi = g[(h * kept + k) * 2 + 1];
            // (gr + i gi)(c - i s)
            re += gr * tw_h.c[t] + gi * tw_h.s[t];
            im += gi * tw_h.c[t] - gr * tw_h.s[t];
          }
          const size_t o = ((b * rows_local + i) * kept + k) * 2;
          y[o] = re * scale;
          y[o + 1] = im * scale;
        }
      }
    }
  }
  return kforge::Status::Ok();
}
