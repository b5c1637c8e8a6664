// RoPE (HF rotate_half) on each rank's sequence shard, then the sequence
// all-gather: every rank holds the whole rotated q and k.
#include "kforge/oracle.h"

#include <cstdint>
#include <string>

namespace {

// Writes rank p's rotated shard of `x` into rows p*S.. of `out` ([B, W*S, NH, D]).
kforge::Status Rotate(const kforge::OracleIo& io, int p, const char* x_name,
                      std::span<double> out) {
  const auto& shape = io.in_shape(p, x_name);
  if (shape.size() != 4 || shape[3] % 2 != 0)
    return kforge::Error(kforge::ErrorKind::kHarness, "rope_allgather: q/k is not [B, S, NH, D]");
  const int64_t b = shape[0], s = shape[1], nh = shape[2], d = shape[3], half = d / 2;
  const int64_t total = io.world * s;
  auto x = io.in(p, x_name);
  auto cs = io.in(p, "cos");
  auto sn = io.in(p, "sin");
  if (static_cast<int64_t>(cs.size()) != b * s * d ||
      static_cast<int64_t>(out.size()) != b * total * nh * d)
    return kforge::Error(kforge::ErrorKind::kHarness, "rope_allgather: sizes");
  for (int64_t bi = 0; bi < b; ++bi)
    for (int64_t si = 0; si < s; ++si)
      for (int64_t h = 0; h < nh; ++h) {
        const double* row = x.data() + ((bi * s + si) * nh + h) * d;
        const double* c = cs.data() + (bi * s + si) * d;
        const double* sv = sn.data() + (bi * s + si) * d;
        double* o = out.data() + ((bi * total + p * s + si) * nh + h) * d;
        for (int64_t j = 0; j < d; ++j) {
          const double rot = j < half ? -row[j + half] : row[j - half];
          o[j] = row[j] * c[j] + rot * sv[j];
        }
      }
  return kforge::Status::Ok();
}

}  // namespace

KF_ORACLE(rope_allgather) {
  for (int r = 0; r < io.world; ++r) {
    for (int p = 0; p < io.world; ++p) {
      if (auto s = Rotate(io, p, "q", io.out(r, "q_out")); !s.ok()) return s;
      if (auto s = Rotate(io, p, "k", io.out(r, "k_out")); !s.ok()) return s;
    }
  }
  return kforge::Status::Ok();
}
