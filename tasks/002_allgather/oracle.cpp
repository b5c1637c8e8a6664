// All-gather: every rank's y[W, N] stacks all ranks' x[N] in rank order.
#include "kforge/oracle.h"

KF_ORACLE(allgather) {
  const size_t n = io.in(0, "x").size();
  for (int r = 0; r < io.world; ++r) {
    auto y = io.out(r, "y");
    if (y.size() != n * io.world) {
      return kforge::Error(kforge::ErrorKind::kHarness, "allgather: y is not W * N long");
    }
    for (int p = 0; p < io.world; ++p) {
      auto x = io.in(p, "x");
      if (x.size() != n)
        return kforge::Error(kforge::ErrorKind::kHarness, "allgather: x sizes differ");
      for (size_t i = 0; i < n; ++i) y[p * n + i] = x[i];
    }
  }
  return kforge::Status::Ok();
}
