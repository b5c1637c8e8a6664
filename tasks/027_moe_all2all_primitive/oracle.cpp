// MoE dispatch all-to-all with equal splits: group p of rank r's y is group r
// of rank p's x (t rows of D values per group).
#include "kforge/oracle.h"

KF_ORACLE(moe_all2all_primitive) {
  const size_t w = static_cast<size_t>(io.world);
  const size_t group = static_cast<size_t>(io.param("t") * io.param("D"));
  for (int r = 0; r < io.world; ++r) {
    auto y = io.out(r, "y");
    if (y.size() != group * w)
      return kforge::Error(kforge::ErrorKind::kHarness, "moe_all2all_primitive: y is not W*t*D");
    for (int p = 0; p < io.world; ++p) {
      auto x = io.in(p, "x");
      for (size_t i = 0; i < group; ++i) y[p * group + i] = x[r * group + i];
    }
  }
  return kforge::Status::Ok();
}
