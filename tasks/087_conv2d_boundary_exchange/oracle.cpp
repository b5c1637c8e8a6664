// Patch-parallel 3x3 conv2d: stack every rank's rows into the whole image and
// convolve it directly (zero padding 1), each rank's output rows from the
// global rows it owns.
#include "kforge/oracle.h"

#include <cstdint>
#include <vector>

KF_ORACLE(conv2d_boundary_exchange) {
  const auto& xs = io.in_shape(0, "x");
  const auto& ws = io.in_shape(0, "w");
  if (xs.size() != 4 || ws.size() != 4 || ws[0] != xs[1] || ws[1] != xs[1] || ws[2] != 3 ||
      ws[3] != 3)
    return kforge::Error(kforge::ErrorKind::kHarness, "conv2d: x is not [1, C, h, Wd]");
  const int world = io.world;
  const int64_t c = xs[1], h = xs[2], wd = xs[3], rows = world * h;

  // image[(ch * rows + gi) * wd + j]
  std::vector<double> image(static_cast<size_t>(c * rows * wd));
  for (int r = 0; r < world; ++r) {
    auto x = io.in(r, "x");
    for (int64_t ch = 0; ch < c; ++ch)
      for (int64_t i = 0; i < h; ++i)
        for (int64_t j = 0; j < wd; ++j)
          image[(ch * rows + r * h + i) * wd + j] = x[(ch * h + i) * wd + j];
  }
  auto w = io.in(0, "w");
  auto b = io.in(0, "b");
  kforge::OracleParallelFor(world * c, [&](int64_t begin, int64_t end) {
    for (int64_t item = begin; item < end; ++item) {
      const int r = static_cast<int>(item / c);
      const int64_t o = item % c;
      auto y = io.out(r, "y");
      for (int64_t i = 0; i < h; ++i)
        for (int64_t j = 0; j < wd; ++j) {
          double s = b[o];
          for (int64_t ch = 0; ch < c; ++ch)
            for (int64_t u = 0; u < 3; ++u) {
              const int64_t gi = r * h + i + u - 1;
              if (gi < 0 || gi >= rows) continue;
              for (int64_t v = 0; v < 3; ++v) {
                const int64_t gj = j + v - 1;
                if (gj < 0 || gj >= wd) continue;
                s += w[((o * c + ch) * 3 + u) * 3 + v] * image[(ch * rows + gi) * wd + gj];
              }
            }
          y[(o * h + i) * wd + j] = s;
        }
    }
  });
  return kforge::Status::Ok();
}
