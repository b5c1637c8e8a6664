// Device barrier carrying K words per rank: tokens[p][k] = rank p's token[k] on every rank (an
// all-gather of the words), exact.
#include "kforge/oracle.h"

#include <algorithm>

KF_ORACLE(device_barrier) {
  const int world = io.world;
  for (int r = 0; r < world; ++r) {
    auto out = io.out(r, "tokens");
    for (int p = 0; p < world; ++p) {
      const auto tok = io.in(p, "token");
      if (out.size() != tok.size() * static_cast<size_t>(world))
        return kforge::Error(kforge::ErrorKind::kHarness, "device_barrier: shapes differ");
      std::copy(tok.begin(), tok.end(), out.begin() + static_cast<std::ptrdiff_t>(p * tok.size()));
    }
  }
  return kforge::Status::Ok();
}
