#include "kforge/evaluator/dtype.h"

#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "task/element_codec.h"

namespace kforge::eval {
namespace {

constexpr std::array<std::string_view, 11> kNames = {
    "f64", "f32", "f16", "bf16", "fp8_e4m3", "fp8_e5m2", "i64", "i32", "i8", "u8", "bool"};

}  // namespace

Result<Dtype> ParseDtype(std::string_view name) {
  for (size_t i = 0; i < kNames.size(); ++i) {
    if (kNames[i] == name) return static_cast<Dtype>(i);
  }
  std::string expected;
  for (auto n : kNames) expected += (expected.empty() ? "" : ", ") + std::string(n);
  return Error(ErrorKind::kInvalidInput,
               "unknown dtype '" + std::string(name) + "' (expected one of " + expected + ")");
}

std::string_view DtypeName(Dtype dt) {
  const auto i = static_cast<size_t>(dt);
  return i < kNames.size() ? kNames[i] : std::string_view("?");
}

size_t DtypeSize(Dtype dt) {
  switch (dt) {
    case Dtype::kF64:
    case Dtype::kI64:
      return 8;
    case Dtype::kF32:
    case Dtype::kI32:
      return 4;
    case Dtype::kF16:
    case Dtype::kBF16:
      return 2;
    default:
      return 1;
  }
}

bool IsFloating(Dtype dt) {
  switch (dt) {
    case Dtype::kF64:
    case Dtype::kF32:
    case Dtype::kF16:
    case Dtype::kBF16:
    case Dtype::kFp8E4M3:
    case Dtype::kFp8E5M2:
      return true;
    default:
      return false;
  }
}

double LoadAsDouble(const void* data, Dtype dt, size_t i) {
  return codec::Load(data, static_cast<int>(dt), i);
}

void StoreFromDouble(void* data, Dtype dt, size_t i, double v) {
  codec::Store(data, static_cast<int>(dt), i, v);
}

}  // namespace kforge::eval
