// All-to-all: row p of rank r's y[W, N] is row r of rank p's x[W, N].
#include "kforge/oracle.h"

KF_ORACLE(alltoall) {
  const size_t w = static_cast<size_t>(io.world);
  for (int r = 0; r < io.world; ++r) {
    auto y = io.out(r, "y");
    const size_t n = y.size() / w;
    if (y.size() != n * w)
      return kforge::Error(kforge::ErrorKind::kHarness, "alltoall: y is not W * N long");
    for (int p = 0; p < io.world; ++p) {
      auto x = io.in(p, "x");
      if (x.size() != n * w) {
        return kforge::Error(kforge::ErrorKind::kHarness, "alltoall: x and y sizes differ");
      }
      for (size_t i = 0; i < n; ++i) y[p * n + i] = x[r * n + i];
    }
  }
  return kforge::Status::Ok();
}
