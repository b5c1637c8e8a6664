// Reduce-scatter (sum): rank r's y[N] is the sum over ranks p of x_p[r*N, (r+1)*N).
#include "kforge/oracle.h"

KF_ORACLE(reducescatter) {
  for (int r = 0; r < io.world; ++r) {
    auto y = io.out(r, "y");
    const size_t n = y.size();
    for (size_t i = 0; i < n; ++i) y[i] = 0.0;
    for (int p = 0; p < io.world; ++p) {
      auto x = io.in(p, "x");
      if (x.size() != n * io.world) {
        return kforge::Error(kforge::ErrorKind::kHarness, "reducescatter: x is not W * N long");
      }
      for (size_t i = 0; i < n; ++i) y[i] += x[r * n + i];
    }
  }
  return kforge::Status::Ok();
}
