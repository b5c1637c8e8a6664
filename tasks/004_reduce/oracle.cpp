// Reduce (sum) to the root: the root's y is the elementwise sum of all ranks' x.
// Every other rank's y is its own x (NCCL leaves a non-root's buffer holding its
// input; PKB checks it).
#include "kforge/oracle.h"

#include <vector>

KF_ORACLE(reduce) {
  const int root = static_cast<int>(io.param("root"));
  if (root < 0 || root >= io.world) {
    return kforge::Error(kforge::ErrorKind::kHarness, "reduce: root is not a rank");
  }
  const size_t n = io.in(0, "x").size();
  std::vector<double> sum(n, 0.0);
  for (int p = 0; p < io.world; ++p) {
    auto x = io.in(p, "x");
    if (x.size() != n) return kforge::Error(kforge::ErrorKind::kHarness, "reduce: x sizes differ");
    for (size_t i = 0; i < n; ++i) sum[i] += x[i];
  }
  for (int r = 0; r < io.world; ++r) {
    auto y = io.out(r, "y");
    if (y.size() != n) return kforge::Error(kforge::ErrorKind::kHarness, "reduce: y is not N long");
    auto x = io.in(r, "x");
    for (size_t i = 0; i < n; ++i) y[i] = r == root ? sum[i] : x[i];
  }
  return kforge::Status::Ok();
}
