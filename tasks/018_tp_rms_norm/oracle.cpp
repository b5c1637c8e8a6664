// TP RMSNorm: every rank's y is its column slice of RMSNorm over the global
// hidden dimension (the shards of all ranks side by side).
#include "kforge/oracle.h"

#include <cstdint>
#include <vector>

#include "kforge/oracle_math.h"

KF_ORACLE(tp_rms_norm) {
  const int w = io.world;
  const auto& shape = io.in_shape(0, "h");
  if (shape.size() != 2)
    return kforge::Error(kforge::ErrorKind::kHarness, "tp_rms_norm: h is not 2-D");
  const int64_t m = shape[0], n = shape[1], g = n * w;
  std::vector<double> h(static_cast<size_t>(m * g)), weight(static_cast<size_t>(g));
  for (int r = 0; r < w; ++r) {
    auto hr = io.in(r, "h");
    auto wr = io.in(r, "w");
    if (static_cast<int64_t>(hr.size()) != m * n || static_cast<int64_t>(wr.size()) != n)
      return kforge::Error(kforge::ErrorKind::kHarness, "tp_rms_norm: shard sizes differ");
    for (int64_t i = 0; i < m; ++i)
      for (int64_t c = 0; c < n; ++c) h[i * g + r * n + c] = hr[i * n + c];
    for (int64_t c = 0; c < n; ++c) weight[r * n + c] = wr[c];
  }
  std::vector<double> y(h.size());
  kforge::om::RmsNorm(h, weight, y, m, g, io.param("eps"));
  for (int r = 0; r < w; ++r) {
    auto out = io.out(r, "y");
    if (static_cast<int64_t>(out.size()) != m * n)
      return kforge::Error(kforge::ErrorKind::kHarness, "tp_rms_norm: y is not [M, N]");
    for (int64_t i = 0; i < m; ++i)
      for (int64_t c = 0; c < n; ++c) out[i * n + c] = y[i * g + r * n + c];
  }
  return kforge::Status::Ok();
}
