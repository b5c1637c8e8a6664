// Element types: names, sizes, and conversion of one element to and from double.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "kforge/core/status.h"

namespace kforge::eval {

// Same order and values as kf_dtype in kforge/kernel.h.
enum class Dtype : int {
  kF64 = 0,
  kF32,
  kF16,
  kBF16,
  kFp8E4M3,
  kFp8E5M2,
  kI64,
  kI32,
  kI8,
  kU8,
  kBool
};

Result<Dtype> ParseDtype(std::string_view name);  // "f64", "bf16", "fp8_e4m3", ...
std::string_view DtypeName(Dtype dt);
size_t DtypeSize(Dtype dt);
bool IsFloating(Dtype dt);

// Reads element i of a buffer of dtype dt as a double (exact for every dtype).
double LoadAsDouble(const void* data, Dtype dt, size_t i);
// Elements [0, n) of a buffer of dtype dt into out: LoadAsDouble of each, bit
// for bit, without a per-element dispatch.
void LoadAllAsDouble(const void* data, Dtype dt, size_t n, double* out);
// Stores v into element i, rounding to nearest even (saturating for fp8, clamping for ints).
void StoreFromDouble(void* data, Dtype dt, size_t i, double v);

}  // namespace kforge::eval
