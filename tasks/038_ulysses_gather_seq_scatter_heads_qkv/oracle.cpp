// Ulysses gather-sequence / scatter-heads of a fused QKV projection, with unpadding: position s is
// position s % T of rank s / T (T = cdiv(S, W)); rank r keeps columns r * ql .. r * ql + ql - 1 of
// each of q, k and v (each Q = W * ql wide) for the first S positions.
#include "kforge/oracle.h"

KF_ORACLE(ulysses_gather_seq_scatter_heads_qkv) {
  const auto w = static_cast<size_t>(io.world);
  const auto b = static_cast<size_t>(io.param("B"));
  const auto s = static_cast<size_t>(io.param("S"));
  const auto ql = static_cast<size_t>(io.param("ql"));
  const size_t t = (s + w - 1) / w, q = w * ql;
  for (int p = 0; p < io.world; ++p) {
    if (io.in(p, "x").size() != b * t * 3 * q)
      return kforge::Error(kforge::ErrorKind::kHarness, "x is not [B, cdiv(S, W), 3 * W * ql]");
  }
  for (int r = 0; r < io.world; ++r) {
    auto y = io.out(r, "y");
    if (y.size() != b * s * 3 * ql)
      return kforge::Error(kforge::ErrorKind::kHarness, "y is not [B, S, 3 * ql]");
    for (size_t bi = 0; bi < b; ++bi) {
      for (size_t si = 0; si < s; ++si) {
        auto x = io.in(static_cast<int>(si / t), "x");
        const size_t row = (bi * t + si % t) * 3 * q;
        for (size_t i = 0; i < 3; ++i) {
          for (size_t c = 0; c < ql; ++c)
            y[((bi * s + si) * 3 + i) * ql + c] = x[row + i * q + static_cast<size_t>(r) * ql + c];
        }
      }
    }
  }
  return kforge::Status::Ok();
}
