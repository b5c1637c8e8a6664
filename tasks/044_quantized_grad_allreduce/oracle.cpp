// int8 block-quantized gradient all-reduce (mean). The fp32 steps the task
// specifies (scale, division, product) are evaluated in float, so each rank's
// dequantized values are exactly a kernel's; the mean over ranks is fp64.
#include "kforge/oracle.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "kforge/oracle_math.h"

KF_ORACLE(quantized_grad_allreduce) {
  const int w = io.world;
  const int64_t block = static_cast<int64_t>(io.param("block"));
  const int64_t n = static_cast<int64_t>(io.in(0, "g").size());
  if (block <= 0)
    return kforge::Error(kforge::ErrorKind::kHarness, "quantized_grad_allreduce: block");
  std::vector<double> sum(static_cast<size_t>(n), 0.0);
  for (int p = 0; p < w; ++p) {
    auto g = io.in(p, "g");
    if (static_cast<int64_t>(g.size()) != n)
      return kforge::Error(kforge::ErrorKind::kHarness, "quantized_grad_allreduce: g sizes differ");
    for (int64_t b0 = 0; b0 < n; b0 += block) {
      const int64_t b1 = std::min(n, b0 + block);
      float amax = 0;
      for (int64_t i = b0; i < b1; ++i) amax = std::max(amax, static_cast<float>(std::fabs(g[i])));
      const float scale = std::max(amax, 1e-8f) / 127.0f;
      for (int64_t i = b0; i < b1; ++i) {
        const double q = std::clamp(
            kforge::om::RoundHalfEven(static_cast<double>(static_cast<float>(g[i]) / scale)),
            -127.0, 127.0);
        sum[i] += static_cast<double>(static_cast<float>(q) * scale);
      }
    }
  }
  for (int r = 0; r < w; ++r) {
    auto out = io.out(r, "out");
    if (static_cast<int64_t>(out.size()) != n)
      return kforge::Error(kforge::ErrorKind::kHarness, "quantized_grad_allreduce: out size");
    for (int64_t i = 0; i < n; ++i) out[i] = sum[i] / w;
  }
  return kforge::Status::Ok();
}
