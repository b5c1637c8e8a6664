// Gather to the root: the root's y[W, N] stacks all ranks' x[N] in rank order;
// every other rank's y[1, N] is its own x (PKB checks non-root ranks too).
#include "kforge/oracle.h"

KF_ORACLE(gather) {
  const int root = static_cast<int>(io.param("root"));
  if (root < 0 || root >= io.world) {
    return kforge::Error(kforge::ErrorKind::kHarness, "gather: root is not a rank");
  }
  const size_t n = io.in(0, "x").size();
  for (int r = 0; r < io.world; ++r) {
    auto y = io.out(r, "y");
    const int rows = r == root ? io.world : 1;
    if (y.size() != n * rows) {
      return kforge::Error(kforge::ErrorKind::kHarness, "gather: y is not (W or 1) * N long");
    }
    if (r != root) {
      auto x = io.in(r, "x");
      for (size_t i = 0; i < n; ++i) y[i] = x[i];
      continue;
    }
    for (int p = 0; p < io.world; ++p) {
      auto x = io.in(p, "x");
      if (x.size() != n)
        return kforge::Error(kforge::ErrorKind::kHarness, "gather: x sizes differ");
      for (size_t i = 0; i < n; ++i) y[p * n + i] = x[i];
    }
  }
  return kforge::Status::Ok();
}
