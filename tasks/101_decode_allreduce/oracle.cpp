// Decode all-reduce (sum): every rank's y is the elementwise sum of all ranks' x.
#include "kforge/oracle.h"

#include <vector>

KF_ORACLE(decode_allreduce) {
  const size_t n = io.in(0, "x").size();
  std::vector<double> sum(n, 0.0);
  for (int p = 0; p < io.world; ++p) {
    auto x = io.in(p, "x");
    if (x.size() != n)
      return kforge::Error(kforge::ErrorKind::kHarness, "decode_allreduce: x sizes differ");
    for (size_t i = 0; i < n; ++i) sum[i] += x[i];
  }
  for (int r = 0; r < io.world; ++r) {
    auto y = io.out(r, "y");
    if (y.size() != n)
      return kforge::Error(kforge::ErrorKind::kHarness, "decode_allreduce: y is not N long");
    for (size_t i = 0; i < n; ++i) y[i] = sum[i];
  }
  return kforge::Status::Ok();
}
