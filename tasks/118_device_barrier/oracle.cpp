// Device barrier as an in-place exchange of K words per rank: tokens[p][k] = rank p's slot[k]
// before the call, on every rank; every rank's slot ends holding its token. Exact.
#include "kforge/oracle.h"

#include <algorithm>

KF_ORACLE(device_barrier) {
  const int world = io.world;
  for (int r = 0; r < world; ++r) {
    auto out = io.out(r, "tokens");
    for (int p = 0; p < world; ++p) {
      const auto old = io.in(p, "slot");
      if (out.size() != old.size() * static_cast<size_t>(world))
        return kforge::Error(kforge::ErrorKind::kHarness, "device_barrier: shapes differ");
      std::copy(old.begin(), old.end(), out.begin() + static_cast<std::ptrdiff_t>(p * old.size()));
    }
    const auto token = io.in(r, "token");
    auto slot = io.out(r, "slot");
    std::copy(token.begin(), token.end(), slot.begin());
  }
  return kforge::Status::Ok();
}
