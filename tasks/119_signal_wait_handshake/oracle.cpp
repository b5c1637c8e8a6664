// Signal-wait handshake ring: rank r's y = payload of rank r-1 (mod W) + its own x, exact.
#include "kforge/oracle.h"

KF_ORACLE(signal_wait_handshake) {
  const int world = io.world;
  for (int r = 0; r < world; ++r) {
    const auto payload = io.in((r - 1 + world) % world, "payload");
    const auto x = io.in(r, "x");
    auto y = io.out(r, "y");
    if (payload.size() != y.size() || x.size() != y.size())
      return kforge::Error(kforge::ErrorKind::kHarness, "signal_wait_handshake: shapes differ");
    for (size_t i = 0; i < y.size(); ++i) y[i] = payload[i] + x[i];
  }
  return kforge::Status::Ok();
}
