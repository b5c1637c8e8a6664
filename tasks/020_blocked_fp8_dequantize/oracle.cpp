// Block-scaled fp8 dequantization + all-to-all: row block p of rank r's output
// is rank p's chunk r times its per-128-element scales.
#include "kforge/oracle.h"

#include <cstdint>

KF_ORACLE(blocked_fp8_dequantize) {
  const int w = io.world;
  const int64_t block = static_cast<int64_t>(io.param("block"));
  const int64_t chunk = static_cast<int64_t>(io.in(0, "y").size()) / w;
  if (block <= 0 || chunk % block != 0)
    return kforge::Error(kforge::ErrorKind::kHarness, "blocked_fp8_dequantize: bad chunk size");
  for (int r = 0; r < w; ++r) {
    auto out = io.out(r, "out");
    if (static_cast<int64_t>(out.size()) != w * chunk)
      return kforge::Error(kforge::ErrorKind::kHarness, "blocked_fp8_dequantize: out size");
    for (int p = 0; p < w; ++p) {
      auto y = io.in(p, "y");
      auto s = io.in(p, "s");
      if (static_cast<int64_t>(y.size()) != w * chunk ||
          static_cast<int64_t>(s.size()) != w * chunk / block)
        return kforge::Error(kforge::ErrorKind::kHarness, "blocked_fp8_dequantize: input size");
      for (int64_t e = 0; e < chunk; ++e)
        out[p * chunk + e] = y[r * chunk + e] * s[(r * chunk + e) / block];
    }
  }
  return kforge::Status::Ok();
}
