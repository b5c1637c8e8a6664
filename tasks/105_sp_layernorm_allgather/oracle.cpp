// Sequence-parallel LayerNorm + all-gather: block p of every rank's y is the
// LayerNorm (gamma, beta) of rank p's x.
#include "kforge/oracle.h"

#include <cstdint>
#include <span>
#include <vector>

#include "kforge/oracle_math.h"

KF_ORACLE(sp_layernorm_allgather) {
  const auto& shape = io.in_shape(0, "x");
  if (shape.size() != 2)
    return kforge::Error(kforge::ErrorKind::kHarness, "sp_layernorm_allgather: x is not 2-D");
  const int64_t rows = shape[0], h = shape[1];
  const size_t block = static_cast<size_t>(rows * h);
  std::vector<double> all(block * static_cast<size_t>(io.world));
  for (int p = 0; p < io.world; ++p) {
    auto x = io.in(p, "x");
    if (x.size() != block)
      return kforge::Error(kforge::ErrorKind::kHarness, "sp_layernorm_allgather: x sizes differ");
    kforge::om::LayerNorm(x, io.in(p, "gamma"), io.in(p, "beta"),
                          std::span<double>(all).subspan(static_cast<size_t>(p) * block, block),
                          rows, h, io.param("eps"));
  }
  for (int r = 0; r < io.world; ++r) {
    auto y = io.out(r, "y");
    if (y.size() != all.size())
      return kforge::Error(kforge::ErrorKind::kHarness,
                           "sp_layernorm_allgather: y is not [W*R, H]");
    for (size_t i = 0; i < all.size(); ++i) y[i] = all[i];
  }
  return kforge::Status::Ok();
}
