// Broadcast: every rank's y is the root's x.
#include "kforge/oracle.h"

KF_ORACLE(broadcast) {
  const int root = static_cast<int>(io.param("root"));
  if (root < 0 || root >= io.world) {
    return kforge::Error(kforge::ErrorKind::kHarness, "broadcast: root is not a rank");
  }
  auto x = io.in(root, "x");
  for (int r = 0; r < io.world; ++r) {
    auto y = io.out(r, "y");
    if (y.size() != x.size())
      return kforge::Error(kforge::ErrorKind::kHarness, "broadcast: y is not N long");
    for (size_t i = 0; i < x.size(); ++i) y[i] = x[i];
  }
  return kforge::Status::Ok();
}
