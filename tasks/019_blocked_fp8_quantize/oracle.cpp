// Block-scaled fp8 quantization + all-gather. The fp32 steps the task
// specifies (scale, division) are evaluated in float, so the expected bytes
// are exactly what a kernel following the task produces; om::RoundToE4M3 does
// the e4m3 rounding (from the float quotient, as the conversion does).
#include "kforge/oracle.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "kforge/oracle_math.h"

KF_ORACLE(blocked_fp8_quantize) {
  const int w = io.world;
  const int64_t block = static_cast<int64_t>(io.param("block"));
  const auto& shape = io.in_shape(0, "x");
  if (shape.size() != 2 || block <= 0 || shape[1] % block != 0)
    return kforge::Error(kforge::ErrorKind::kHarness, "blocked_fp8_quantize: x is not [M, KB*128]");
  const int64_t m = shape[0], k = shape[1], kb = k / block;
  for (int r = 0; r < w; ++r) {
    if (static_cast<int64_t>(io.out(r, "y").size()) != w * m * k ||
        static_cast<int64_t>(io.out(r, "scales").size()) != w * m * kb)
      return kforge::Error(kforge::ErrorKind::kHarness, "blocked_fp8_quantize: output sizes");
  }
  // Rank 0's gathered outputs, computed once; every rank holds the same.
  auto y0 = io.out(0, "y");
  auto scales0 = io.out(0, "scales");
  for (int p = 0; p < w; ++p) {
    auto x = io.in(p, "x");
    if (static_cast<int64_t>(x.size()) != m * k)
      return kforge::Error(kforge::ErrorKind::kHarness, "blocked_fp8_quantize: x sizes differ");
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t b = 0; b < kb; ++b) {
        const double* xs = x.data() + i * k + b * block;
        double amax = 0;
        for (int64_t c = 0; c < block; ++c) amax = std::max(amax, std::fabs(xs[c]));
        const float s = static_cast<float>(amax) / 448.0f;
        const float s_safe = s == 0.0f ? 1.0f : s;
        scales0[(p * m + i) * kb + b] = s;
        double* ys = y0.data() + (p * m + i) * k + b * block;
        for (int64_t c = 0; c < block; ++c)
          ys[c] = kforge::om::RoundToE4M3(static_cast<double>(static_cast<float>(xs[c]) / s_safe));
      }
    }
  }
  for (int r = 1; r < w; ++r) {
    std::copy(y0.begin(), y0.end(), io.out(r, "y").begin());
    std::copy(scales0.begin(), scales0.end(), io.out(r, "scales").begin());
  }
  return kforge::Status::Ok();
}
