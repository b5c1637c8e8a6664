// Ulysses gather-sequence / scatter-heads with unpadding: position s of the sequence is position
// s % T of rank s / T (T = cdiv(S, W)); rank r keeps heads r * hl .. r * hl + hl - 1 of the first
// S positions.
#include "kforge/oracle.h"

KF_ORACLE(ulysses_gather_seq_scatter_heads) {
  const auto w = static_cast<size_t>(io.world);
  const auto b = static_cast<size_t>(io.param("B"));
  const auto s = static_cast<size_t>(io.param("S"));
  const auto hl = static_cast<size_t>(io.param("hl"));
  const auto d = static_cast<size_t>(io.param("D"));
  const size_t t = (s + w - 1) / w, run = hl * d;  // run: one position's heads for one rank
  for (int p = 0; p < io.world; ++p) {
    if (io.in(p, "x").size() != b * t * w * run)
      return kforge::Error(kforge::ErrorKind::kHarness, "x is not [B, cdiv(S, W), W * hl, D]");
  }
  for (int r = 0; r < io.world; ++r) {
    auto y = io.out(r, "y");
    if (y.size() != b * s * run)
      return kforge::Error(kforge::ErrorKind::kHarness, "y is not [B, S, hl, D]");
    for (size_t bi = 0; bi < b; ++bi) {
      for (size_t si = 0; si < s; ++si) {
        auto x = io.in(static_cast<int>(si / t), "x");
        const size_t src = ((bi * t + si % t) * w + static_cast<size_t>(r)) * run;
        for (size_t k = 0; k < run; ++k) y[(bi * s + si) * run + k] = x[src + k];
      }
    }
  }
  return kforge::Status::Ok();
}
