// Ulysses all-gather of shards of different lengths along the sequence (dim 1 of [B, n_r, C]):
// y[b][off_p + i][j] = x_p[b][i][j], off_p = n_0 + ... + n_{p-1}.
#include "kforge/oracle.h"

#include <vector>

KF_ORACLE(ulysses_all_gather_variable_primitive) {
  const auto b = static_cast<size_t>(io.param("B"));
  const auto c = static_cast<size_t>(io.param("C"));
  std::vector<size_t> n, off;  // every rank's length, and where its positions start in y
  size_t total = 0;
  for (int p = 0; p < io.world; ++p) {
    const size_t numel = io.in(p, "x").size();
    if (numel % (b * c) != 0)
      return kforge::Error(kforge::ErrorKind::kHarness, "x is not [B, n, C]");
    n.push_back(numel / (b * c));
    off.push_back(total);
    total += n.back();
  }
  for (int r = 0; r < io.world; ++r) {
    auto y = io.out(r, "y");
    if (y.size() != b * total * c)
      return kforge::Error(kforge::ErrorKind::kHarness, "y is not [B, N, C]");
    for (int p = 0; p < io.world; ++p) {
      auto x = io.in(p, "x");
      for (size_t bi = 0; bi < b; ++bi) {
        for (size_t k = 0; k < n[p] * c; ++k)
          y[(bi * total + off[p]) * c + k] = x[bi * n[p] * c + k];
      }
    }
  }
  return kforge::Status::Ok();
}
