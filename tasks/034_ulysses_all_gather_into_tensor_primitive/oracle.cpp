// Ulysses all-gather into one tensor: y[p * R + i][j] = x_p[i][j] on every rank.
#include "kforge/oracle.h"

KF_ORACLE(ulysses_all_gather_into_tensor_primitive) {
  for (int r = 0; r < io.world; ++r) {
    auto y = io.out(r, "y");
    size_t at = 0;
    for (int p = 0; p < io.world; ++p) {
      auto x = io.in(p, "x");
      if (at + x.size() > y.size())
        return kforge::Error(kforge::ErrorKind::kHarness, "y is not [W * R, C]");
      for (double v : x) y[at++] = v;
    }
    if (at != y.size()) return kforge::Error(kforge::ErrorKind::kHarness, "y is not [W * R, C]");
  }
  return kforge::Status::Ok();
}
