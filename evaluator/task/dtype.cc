#include "kforge/evaluator/dtype.h"

#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>

namespace kforge::eval {
namespace {

constexpr std::array<std::string_view, 11> kNames = {
    "f64", "f32", "f16", "bf16", "fp8_e4m3", "fp8_e5m2", "i64", "i32", "i8", "u8", "bool"};

// A binary floating format narrower than double: 1 sign bit, `exp_bits`,
// `mant_bits`, IEEE bias. `has_inf`: the all-ones exponent means inf/NaN
// (IEEE). Otherwise (OCP fp8 e4m3 "FN") only S.1111.111 is NaN and the rest of
// the top binade holds finite values.
struct SmallFloat {
  int exp_bits;
  int mant_bits;
  bool has_inf;
  bool saturate;      // overflow goes to the largest finite value instead of inf
  uint32_t nan_bits;  // the NaN we write (sign clear)
  int Bias() const { return (1 << (exp_bits - 1)) - 1; }
  uint32_t SignBit() const { return 1u << (exp_bits + mant_bits); }
  uint32_t InfBits() const { return ((1u << exp_bits) - 1) << mant_bits; }
  // Bit pattern (sign clear) of the largest finite value.
  uint32_t MaxFiniteBits() const {
    return has_inf ? InfBits() - 1 : InfBits() | ((1u << mant_bits) - 2);
  }
};

constexpr SmallFloat kF16{5, 10, true, false, 0x7E00};
constexpr SmallFloat kBF16{8, 7, true, false, 0x7FC0};
constexpr SmallFloat kE4M3{4, 3, false, true, 0x7F};
constexpr SmallFloat kE5M2{5, 2, true, true, 0x7E};

double Decode(const SmallFloat& f, uint32_t bits) {
  const bool neg = (bits & f.SignBit()) != 0;
  const uint32_t mag = bits & (f.SignBit() - 1);
  const uint32_t exp = mag >> f.mant_bits;
  const uint32_t mant = mag & ((1u << f.mant_bits) - 1);
  const uint32_t exp_all_ones = (1u << f.exp_bits) - 1;
  double v;
  if (f.has_inf && exp == exp_all_ones) {
    v = mant == 0 ? std::numeric_limits<double>::infinity()
                  : std::numeric_limits<double>::quiet_NaN();
  } else if (!f.has_inf && exp == exp_all_ones && mant == (1u << f.mant_bits) - 1) {
    v = std::numeric_limits<double>::quiet_NaN();
  } else if (exp == 0) {
    v = std::ldexp(static_cast<double>(mant), 1 - f.Bias() - f.mant_bits);
  } else {
    v = std::ldexp(static_cast<double>(mant | (1u << f.mant_bits)),
                   static_cast<int>(exp) - f.Bias() - f.mant_bits);
  }
  return neg ? -v : v;
}

// m >> shift, rounded to nearest with ties to even.
uint64_t ShiftRoundEven(uint64_t m, int shift) {
  if (shift <= 0) return m;
  if (shift >= 64) return 0;  // m < 2^53 is below half of one unit
  const uint64_t q = m >> shift;
  const uint64_t rem = m & ((uint64_t{1} << shift) - 1);
  const uint64_t half = uint64_t{1} << (shift - 1);
  return q + static_cast<uint64_t>((rem > half) | ((rem == half) & (q & 1)));
}

// One rounding, straight from the double's bits (going through float first
// would round twice and break ties-to-even).
uint32_t Encode(const SmallFloat& f, double v) {
  if (std::isnan(v)) return f.nan_bits;
  const uint32_t sign = std::signbit(v) ? f.SignBit() : 0;
  const uint32_t overflow = f.saturate ? f.MaxFiniteBits() : f.InfBits();
  if (std::isinf(v)) return sign | (f.has_inf ? f.InfBits() : f.MaxFiniteBits());
  if (v == 0) return sign;
  uint64_t dbits;
  std::memcpy(&dbits, &v, sizeof dbits);
  const int dexp = static_cast<int>((dbits >> 52) & 0x7FF);
  if (dexp == 0) return sign;  // double subnormals are far below every target's range
  const int e = dexp - 1023;
  const uint64_t m = (dbits & ((uint64_t{1} << 52) - 1)) | (uint64_t{1} << 52);
  const int emin = 1 - f.Bias();
  const int emax_field = (1 << f.exp_bits) - 1;
  if (e + f.Bias() > emax_field) return sign | overflow;
  uint64_t field;
  if (e < emin) {
    // Subnormal: the rounded count of the smallest unit is the field itself;
    // a carry into bit mant_bits lands exactly on the smallest normal.
    field = ShiftRoundEven(m, 52 - f.mant_bits + (emin - e));
  } else {
    // Normal: round the double's magnitude bits in place (branch-free: this
    // is the hot path of input generation). A mantissa carry ripples into the
    // exponent, which is what rounding up across a binade means; then rebias.
    const int shift = 52 - f.mant_bits;
    const uint64_t mag = dbits & ~(uint64_t{1} << 63);
    const uint64_t lsb = (mag >> shift) & 1;
    const uint64_t rounded = (mag + ((uint64_t{1} << (shift - 1)) - 1) + lsb) >> shift;
    field = rounded - (static_cast<uint64_t>(1023 - f.Bias()) << f.mant_bits);
  }
  if (field > f.MaxFiniteBits()) return sign | overflow;
  return sign | static_cast<uint32_t>(field);
}

template <typename T>
T Read(const void* data, size_t i) {
  T v;
  std::memcpy(&v, static_cast<const char*>(data) + i * sizeof(T), sizeof(T));
  return v;
}

template <typename T>
void Write(void* data, size_t i, T v) {
  std::memcpy(static_cast<char*>(data) + i * sizeof(T), &v, sizeof(T));
}

// Rounds to nearest even and clamps into T's range; NaN becomes 0.
template <typename T>
T ClampInt(double v) {
  if (std::isnan(v)) return 0;
  v = std::nearbyint(v);
  // 2^63 is exactly representable; INT64_MAX is not.
  constexpr double kHi = static_cast<double>(std::numeric_limits<T>::max()) + 1.0;
  constexpr double kLo = static_cast<double>(std::numeric_limits<T>::min());
  if (v >= kHi) return std::numeric_limits<T>::max();
  if (v <= kLo) return std::numeric_limits<T>::min();
  return static_cast<T>(v);
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
  switch (dt) {
    case Dtype::kF64:
      return Read<double>(data, i);
    case Dtype::kF32:
      return Read<float>(data, i);
    case Dtype::kF16:
      return Decode(kF16, Read<uint16_t>(data, i));
    case Dtype::kBF16:
      return Decode(kBF16, Read<uint16_t>(data, i));
    case Dtype::kFp8E4M3:
      return Decode(kE4M3, Read<uint8_t>(data, i));
    case Dtype::kFp8E5M2:
      return Decode(kE5M2, Read<uint8_t>(data, i));
    case Dtype::kI64:
      return static_cast<double>(Read<int64_t>(data, i));
    case Dtype::kI32:
      return Read<int32_t>(data, i);
    case Dtype::kI8:
      return Read<int8_t>(data, i);
    case Dtype::kU8:
      return Read<uint8_t>(data, i);
    case Dtype::kBool:
      return Read<uint8_t>(data, i) != 0 ? 1.0 : 0.0;
  }
  return 0;
}

void StoreFromDouble(void* data, Dtype dt, size_t i, double v) {
  switch (dt) {
    case Dtype::kF64:
      Write<double>(data, i, v);
      return;
    case Dtype::kF32:
      Write<float>(data, i, static_cast<float>(v));
      return;
    case Dtype::kF16:
      Write<uint16_t>(data, i, static_cast<uint16_t>(Encode(kF16, v)));
      return;
    case Dtype::kBF16:
      Write<uint16_t>(data, i, static_cast<uint16_t>(Encode(kBF16, v)));
      return;
    case Dtype::kFp8E4M3:
      Write<uint8_t>(data, i, static_cast<uint8_t>(Encode(kE4M3, v)));
      return;
    case Dtype::kFp8E5M2:
      Write<uint8_t>(data, i, static_cast<uint8_t>(Encode(kE5M2, v)));
      return;
    case Dtype::kI64:
      Write<int64_t>(data, i, ClampInt<int64_t>(v));
      return;
    case Dtype::kI32:
      Write<int32_t>(data, i, ClampInt<int32_t>(v));
      return;
    case Dtype::kI8:
      Write<int8_t>(data, i, ClampInt<int8_t>(v));
      return;
    case Dtype::kU8:
      Write<uint8_t>(data, i, ClampInt<uint8_t>(v));
      return;
    case Dtype::kBool:
      Write<uint8_t>(data, i, (v != 0 && !std::isnan(v)) ? 1 : 0);
      return;
  }
}

}  // namespace kforge::eval
