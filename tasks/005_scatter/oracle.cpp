// Scatter from the root: rank r's y is row r of the root's x[W, N].
#include "kforge/oracle.h"

KF_ORACLE(scatter) {
  const int root = static_cast<int>(io.param("root"));
  if (root < 0 || root >= io.world) {
    return kforge::Error(kforge::ErrorKind::kHarness, "scatter: root is not a rank");
  }
  auto x = io.in(root, "x");
  for (int r = 0; r < io.world; ++r) {
    auto y = io.out(r, "y");
    const size_t n = y.size();
    if (x.size() != n * io.world) {
      return kforge::Error(kforge::ErrorKind::kHarness, "scatter: x is not W * N long");
    }
    for (size_t i = 0; i < n; ++i) y[i] = x[r * n + i];
  }
  return kforge::Status::Ok();
}
