// Distributed irfft2 (PhysicsNeMo DistributedIRFFT2): every rank's column slab
// of Re(ifft2(Z, norm="ortho")), Z the full spectrum extended from the row
// slabs of the half spectrum by Z[p, k] = conj(X[-p, N - k]) for k > N/2. A
// direct fp64 inverse DFT, separable (along N, then along H, real part last),
// with exact twiddles (the angle's index reduced mod the length first).
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

KF_ORACLE(physicsnemo_distributed_irfft) {
  const int w = io.world;
  const size_t items = static_cast<size_t>(io.param("B") * io.param("C"));
  const size_t rows = static_cast<size_t>(io.param("H"));
  const size_t cols = static_cast<size_t>(io.param("N"));
  if (rows % w != 0 || cols % w != 0 || cols % 2 != 0)
    return kforge::Error(kforge::ErrorKind::kHarness, "H and N must be multiples of W, N even");
  const size_t rows_local = rows / w, cols_local = cols / w, half = cols / 2 + 1;
  const Twiddles tw_n(cols), tw_h(rows);
  const double scale = 1.0 / std::sqrt(static_cast<double>(rows * cols));
  std::vector<double> x(rows * half * 2), z(rows * cols * 2);
  for (size_t bc = 0; bc < items; ++bc) {
    // The global half spectrum from the row slabs.
    for (int r = 0; r < w; ++r) {
      auto in = io.in(r, "x");
      const size_t slab = rows_local * half * 2;
      for (size_t e = 0; e < slab; ++e) x[r * slab + e] = in[bc * slab + e];
    }
    // z[p, n] = sum_k Z[p, k] exp(+2 pi i k n / N).
    for (size_t p = 0; p < rows; ++p) {
      const size_t mirror = (rows - p) % rows;
      for (size_t n = 0; n < cols; ++n) {
        double re = 0, im = 0;
        for (size_t k = 0; k < cols; ++k) {
          double zr, zi;
          if (k < half) {
            zr = x[(p * half + k) * 2];
            zi = x[(p * half + k) * 2 + 1];
          } else {
            zr = x[(mirror * half + (cols - k)) * 2];
            zi = -x[(mirror * half + (cols - k)) * 2 + 1];
          }
          const size_t t = (k * n) % cols;
          re += zr * tw_n.c[t] - zi * tw_n.s[t];
          im += zr * tw_n.s[t] + zi * tw_n.c[t];
        }
        z[(p * cols + n) * 2] = re;
        z[(p * cols + n) * 2 + 1] = im;
      }
    }
    // y[h, n] = Re(sum_p z[p, n] exp(+2 pi i p h / H)) / sqrt(H N), rank r's columns n.
    for (int r = 0; r < w; ++r) {
      auto y = io.out(r, "y");
      for (size_t h = 0; h < rows; ++h) {
        for (size_t j = 0; j < cols_local; ++j) {
          const size_t n = r * cols_local + j;
          double re = 0;
          for (size_t p = 0; p < rows; ++p) {
            const size_t t = (p * h) % rows;
            re += z[(p * cols + n) * 2] * tw_h.c[t] - z[(p * cols + n) * 2 + 1] * tw_h.s[t];
          }
          y[(bc * rows + h) * cols_local + j] = re * scale;
        }
      }
    }
  }
  return kforge::Status::Ok();
}
