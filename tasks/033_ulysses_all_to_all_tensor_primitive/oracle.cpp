// Ulysses all-to-all, scatter rows and gather columns: y_r[i][p * C + j] = x_p[r * m + i][j].
#include "kforge/oracle.h"

KF_ORACLE(ulysses_all_to_all_tensor_primitive) {
  const auto w = static_cast<size_t>(io.world);
  const auto m = static_cast<size_t>(io.param("m"));
  const auto c = static_cast<size_t>(io.param("C"));
  for (int r = 0; r < io.world; ++r) {
    auto y = io.out(r, "y");
    if (y.size() != m * w * c)
      return kforge::Error(kforge::ErrorKind::kHarness, "y is not [m, W * C]");
    for (size_t p = 0; p < w; ++p) {
      auto x = io.in(static_cast<int>(p), "x");
      if (x.size() != w * m * c)
        return kforge::Error(kforge::ErrorKind::kHarness, "x is not [W * m, C]");
      for (size_t i = 0; i < m; ++i) {
        for (size_t j = 0; j < c; ++j) y[(i * w + p) * c + j] = x[(r * m + i) * c + j];
      }
    }
  }
  return kforge::Status::Ok();
}
