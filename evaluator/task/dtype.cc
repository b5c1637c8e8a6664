#include "kforge/evaluator/dtype.h"

#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "task/element_codec.h"

namespace kforge::eval {
namespace {

constexpr std::array<std::string_view, 11> kNames = {
    "f64", "f32", "f16", "bf16", "fp8_e4m3", "fp8_e5m2", "i64", "i32", "i8", "u8", "bool"};

// Every bit pattern of a 1- or 2-byte dtype, decoded once by the codec: a
// lookup gives the codec's value bit for bit, at a fraction of Decode's cost
// (the oracle's view and the check compare decode every element of every
// trial).
struct DecodeTable {
  std::vector<double> values;
  explicit DecodeTable(Dtype dt) {
    const size_t patterns = size_t{1} << (8 * DtypeSize(dt));
    values.resize(patterns);
    for (size_t b = 0; b < patterns; ++b) {
      const uint16_t bits = static_cast<uint16_t>(b);
      unsigned char raw[2];
      std::memcpy(raw, &bits, sizeof raw);  // little-endian: the low byte first
      values[b] = codec::Load(raw, static_cast<int>(dt), 0);
    }
  }
};

// The table of `dt`, or null for the dtypes of 4 and 8 bytes. All four are
// built at the first call (about 130 K decodes, a few milliseconds).
const double* TableOf(Dtype dt) {
  static const DecodeTable f16(Dtype::kF16), bf16(Dtype::kBF16), e4m3(Dtype::kFp8E4M3),
      e5m2(Dtype::kFp8E5M2);
  switch (dt) {
    case Dtype::kF16:
      return f16.values.data();
    case Dtype::kBF16:
      return bf16.values.data();
    case Dtype::kFp8E4M3:
      return e4m3.values.data();
    case Dtype::kFp8E5M2:
      return e5m2.values.data();
    default:
      return nullptr;  // a cast (and i8, u8, bool: one in the codec)
  }
}

template <typename T>
void CastAll(const void* data, size_t n, double* out) {
  const unsigned char* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) {
    T v;
    std::memcpy(&v, p + i * sizeof(T), sizeof(T));
    out[i] = static_cast<double>(v);
  }
}

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
  if (const double* table = TableOf(dt)) {
    const unsigned char* p = static_cast<const unsigned char*>(data);
    if (DtypeSize(dt) == 1) return table[p[i]];
    uint16_t bits;
    std::memcpy(&bits, p + 2 * i, sizeof bits);
    return table[bits];
  }
  return codec::Load(data, static_cast<int>(dt), i);
}

void LoadAllAsDouble(const void* data, Dtype dt, size_t n, double* out) {
  const unsigned char* p = static_cast<const unsigned char*>(data);
  if (const double* table = TableOf(dt)) {
    if (DtypeSize(dt) == 1) {
      for (size_t i = 0; i < n; ++i) out[i] = table[p[i]];
    } else {
      for (size_t i = 0; i < n; ++i) {
        uint16_t bits;
        std::memcpy(&bits, p + 2 * i, sizeof bits);
        out[i] = table[bits];
      }
    }
    return;
  }
  switch (dt) {
    case Dtype::kF64:
      std::memcpy(out, data, n * sizeof(double));
      return;
    case Dtype::kF32:
      return CastAll<float>(data, n, out);
    case Dtype::kI64:
      return CastAll<int64_t>(data, n, out);
    case Dtype::kI32:
      return CastAll<int32_t>(data, n, out);
    default:
      for (size_t i = 0; i < n; ++i) out[i] = codec::Load(data, static_cast<int>(dt), i);
  }
}

void StoreFromDouble(void* data, Dtype dt, size_t i, double v) {
  codec::Store(data, static_cast<int>(dt), i, v);
}

}  // namespace kforge::eval
