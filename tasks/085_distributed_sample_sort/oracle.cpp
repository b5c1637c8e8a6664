// Distributed sort: all ranks' keys sorted ascending, rank r ends with the
// balanced slice [r * base + min(r, extra), + base + (r < extra)) of them,
// base = total / W, extra = total % W. Values only, so ties need no rule.
#include "kforge/oracle.h"

#include <algorithm>
#include <cmath>
#include <vector>

KF_ORACLE(distributed_sample_sort) {
  const int w = io.world;
  std::vector<double> keys;
  for (int r = 0; r < w; ++r) {
    auto x = io.in(r, "x");
    keys.insert(keys.end(), x.begin(), x.end());
  }
  for (double k : keys) {
    if (std::isnan(k)) return kforge::Error(kforge::ErrorKind::kHarness, "a NaN key");
  }
  std::sort(keys.begin(), keys.end());
  const size_t total = keys.size();
  const size_t base = total / static_cast<size_t>(w);
  const size_t extra = total % static_cast<size_t>(w);
  for (int r = 0; r < w; ++r) {
    const size_t rank = static_cast<size_t>(r);
    const size_t start = rank * base + std::min(rank, extra);
    const size_t len = base + (rank < extra ? 1 : 0);
    auto y = io.out(r, "y");
    if (y.size() != len) {
      return kforge::Error(kforge::ErrorKind::kHarness,
                           "distributed_sample_sort: y's shape expression disagrees with "
                           "total / W + (rank < total % W)");
    }
    std::copy(keys.begin() + static_cast<std::ptrdiff_t>(start),
              keys.begin() + static_cast<std::ptrdiff_t>(start + len), y.begin());
  }
  return kforge::Status::Ok();
}
