// Ulysses gather-heads / scatter-sequence with zero padding: rank r keeps positions
// r * T .. r * T + T - 1 (T = cdiv(S, W)) of every rank's heads; positions past S are zeros.
#include "kforge/oracle.h"

KF_ORACLE(ulysses_gather_heads_scatter_seq) {
  const auto w = static_cast<size_t>(io.world);
  const auto b = static_cast<size_t>(io.param("B"));
  const auto s = static_cast<size_t>(io.param("S"));
  const auto run = static_cast<size_t>(io.param("hl") * io.param("D"));  // one position's heads
  const size_t t = (s + w - 1) / w;
  for (int p = 0; p < io.world; ++p) {
    if (io.in(p, "x").size() != b * s * run)
      return kforge::Error(kforge::ErrorKind::kHarness, "x is not [B, S, hl, D]");
  }
  for (int r = 0; r < io.world; ++r) {
    auto y = io.out(r, "y");
    if (y.size() != b * t * w * run)
      return kforge::Error(kforge::ErrorKind::kHarness, "y is not [B, cdiv(S, W), W * hl, D]");
    for (size_t bi = 0; bi < b; ++bi) {
      for (size_t ti = 0; ti < t; ++ti) {
        const size_t pos = static_cast<size_t>(r) * t + ti;
        for (size_t p = 0; p < w; ++p) {
          auto x = io.in(static_cast<int>(p), "x");
          double* dst = &y[((bi * t + ti) * w + p) * run];
          for (size_t k = 0; k < run; ++k) dst[k] = pos < s ? x[(bi * s + pos) * run + k] : 0.0;
        }
      }
    }
  }
  return kforge::Status::Ok();
}
