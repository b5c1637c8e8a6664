// Signal-wait handshake ring, in place: rank r's y = payload of rank r-1 (mod W) before the call
// + its own x, and every rank's payload ends holding its next_payload. Exact.
#include "kforge/oracle.h"

#include <algorithm>

KF_ORACLE(signal_wait_handshake) {
  const int world = io.world;
  for (int r = 0; r < world; ++r) {
    const auto payload = io.in((r - 1 + world) % world, "payload");
    const auto x = io.in(r, "x");
    auto y = io.out(r, "y");
    if (payload.size() != y.size() || x.size() != y.size())
      return kforge::Error(kforge::ErrorKind::kHarness, "signal_wait_handshake: shapes differ");
    for (size_t i = 0; i < y.size(); ++i) y[i] = payload[i] + x[i];
    const auto next = io.in(r, "next_payload");
    auto refilled = io.out(r, "payload");
    std::copy(next.begin(), next.end(), refilled.begin());
  }
  return kforge::Status::Ok();
}
