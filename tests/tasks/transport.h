// Block-scaled low-precision transports of a reduction's partials, for the
// tolerance tests: what a kernel that ships int8 or fp8 instead of bf16/f32
// would sum.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <span>
#include <vector>

#include "kforge/evaluator/dtype.h"

namespace kforge::eval::testing {

// v through int8 with a block scale amax / 127.
inline double Int8(double v, double amax) {
  const double scale = amax > 0 ? amax / 127 : 1;
  return std::clamp(std::nearbyint(v / scale), -127.0, 127.0) * scale;
}

// v through fp8 e4m3 with a block scale amax / 448.
inline double Fp8E4M3(double v, double amax) {
  const double scale = amax > 0 ? amax / 448 : 1;
  uint8_t cell = 0;
  StoreFromDouble(&cell, Dtype::kFp8E4M3, 0, v / scale);
  return LoadAsDouble(&cell, Dtype::kFp8E4M3, 0) * scale;
}

// Values rounded once to bf16 (a kernel that sums in f32 and stores bf16).
inline std::vector<uint16_t> ToBf16(std::span<const double> v) {
  std::vector<uint16_t> out(v.size());
  for (size_t j = 0; j < v.size(); ++j) StoreFromDouble(out.data(), Dtype::kBF16, j, v[j]);
  return out;
}

}  // namespace kforge::eval::testing
