// One element to and from double, and the counter-based random values of the
// inputs, written once for both the host (the oracle's inputs, g++) and the
// GPU (inputs generated in the harness worker, nvcc). The two must produce the
// same bits for every element, so everything here is integer arithmetic or a
// single correctly rounded IEEE operation: no libm call (log, cos: their last
// bit differs between glibc and CUDA), no fused multiply-add (the device
// variants spell out __dmul_rn/__dadd_rn; host code is built without
// contraction, as ISO C++ mode is).
#pragma once

#include <cstdint>
#include <cstring>

#ifdef __CUDACC__
#define KF_HD __host__ __device__ __forceinline__
#else
#define KF_HD inline
#endif

namespace kforge::eval::codec {

// Dtype codes: the same values as kf_dtype (kforge/kernel.h) and eval::Dtype.
enum : int { kF64 = 0, kF32, kF16, kBF16, kFp8E4M3, kFp8E5M2, kI64, kI32, kI8, kU8, kBool };

KF_HD uint64_t DoubleBits(double v) {
  uint64_t b;
  memcpy(&b, &v, sizeof b);
  return b;
}
KF_HD double BitsDouble(uint64_t b) {
  double v;
  memcpy(&v, &b, sizeof v);
  return v;
}
KF_HD bool IsNan(double v) {
  return (DoubleBits(v) & ~(uint64_t{1} << 63)) > 0x7FF0000000000000ULL;
}
KF_HD bool IsInf(double v) {
  return (DoubleBits(v) & ~(uint64_t{1} << 63)) == 0x7FF0000000000000ULL;
}
KF_HD bool SignBit(double v) { return (DoubleBits(v) >> 63) != 0; }
KF_HD double Abs(double v) { return BitsDouble(DoubleBits(v) & ~(uint64_t{1} << 63)); }

// Correctly rounded double operations, never contracted into an fma.
KF_HD double Mul(double a, double b) {
#ifdef __CUDA_ARCH__
  return __dmul_rn(a, b);
#else
  return a * b;
#endif
}
KF_HD double Add(double a, double b) {
#ifdef __CUDA_ARCH__
  return __dadd_rn(a, b);
#else
  return a + b;
#endif
}

// x * 2^e for a double x and a small e (exact: a power of two scaling).
KF_HD double Ldexp(double x, int e) {
  // Build 2^e in two steps so that subnormal results stay exact.
  while (e > 1000) {
    x = Mul(x, BitsDouble(uint64_t{2023} << 52));  // 2^1000
    e -= 1000;
  }
  while (e < -1000) {
    x = Mul(x, BitsDouble(uint64_t{23} << 52));  // 2^-1000
    e += 1000;
  }
  return Mul(x, BitsDouble(static_cast<uint64_t>(e + 1023) << 52));
}

// A binary floating format narrower than double: 1 sign bit, exp_bits,
// mant_bits, IEEE bias. has_inf: the all-ones exponent means inf/NaN (IEEE).
// Otherwise (OCP fp8 e4m3 "FN") only S.1111.111 is NaN and the rest of the top
// binade holds finite values.
struct SmallFloat {
  int exp_bits;
  int mant_bits;
  bool has_inf;
  bool saturate;      // overflow goes to the largest finite value instead of inf
  uint32_t nan_bits;  // the NaN written (sign clear)
};
KF_HD int Bias(const SmallFloat& f) { return (1 << (f.exp_bits - 1)) - 1; }
KF_HD uint32_t SignBitOf(const SmallFloat& f) { return 1u << (f.exp_bits + f.mant_bits); }
KF_HD uint32_t InfBits(const SmallFloat& f) { return ((1u << f.exp_bits) - 1) << f.mant_bits; }
KF_HD uint32_t MaxFiniteBits(const SmallFloat& f) {
  return f.has_inf ? InfBits(f) - 1 : InfBits(f) | ((1u << f.mant_bits) - 2);
}

KF_HD SmallFloat FormatF16() { return {5, 10, true, false, 0x7E00}; }
KF_HD SmallFloat FormatBF16() { return {8, 7, true, false, 0x7FC0}; }
KF_HD SmallFloat FormatE4M3() { return {4, 3, false, true, 0x7F}; }
KF_HD SmallFloat FormatE5M2() { return {5, 2, true, true, 0x7E}; }

KF_HD double Decode(const SmallFloat& f, uint32_t bits) {
  const bool neg = (bits & SignBitOf(f)) != 0;
  const uint32_t mag = bits & (SignBitOf(f) - 1);
  const uint32_t exp = mag >> f.mant_bits;
  const uint32_t mant = mag & ((1u << f.mant_bits) - 1);
  const uint32_t exp_all_ones = (1u << f.exp_bits) - 1;
  double v;
  if (f.has_inf && exp == exp_all_ones) {
    v = mant == 0 ? BitsDouble(0x7FF0000000000000ULL) : BitsDouble(0x7FF8000000000000ULL);
  } else if (!f.has_inf && exp == exp_all_ones && mant == (1u << f.mant_bits) - 1) {
    v = BitsDouble(0x7FF8000000000000ULL);
  } else if (exp == 0) {
    v = Ldexp(static_cast<double>(mant), 1 - Bias(f) - f.mant_bits);
  } else {
    v = Ldexp(static_cast<double>(mant | (1u << f.mant_bits)),
              static_cast<int>(exp) - Bias(f) - f.mant_bits);
  }
  return neg ? -v : v;
}

// m >> shift, rounded to nearest with ties to even.
KF_HD uint64_t ShiftRoundEven(uint64_t m, int shift) {
  if (shift <= 0) return m;
  if (shift >= 64) return 0;  // m < 2^53 is below half of one unit
  const uint64_t q = m >> shift;
  const uint64_t rem = m & ((uint64_t{1} << shift) - 1);
  const uint64_t half = uint64_t{1} << (shift - 1);
  return q + static_cast<uint64_t>((rem > half) | ((rem == half) & (q & 1)));
}

// One rounding, straight from the double's bits (going through float first
// would round twice and break ties-to-even).
KF_HD uint32_t Encode(const SmallFloat& f, double v) {
  if (IsNan(v)) return f.nan_bits;
  const uint32_t sign = SignBit(v) ? SignBitOf(f) : 0;
  const uint32_t overflow = f.saturate ? MaxFiniteBits(f) : InfBits(f);
  if (IsInf(v)) return sign | (f.has_inf ? InfBits(f) : MaxFiniteBits(f));
  if (v == 0) return sign;
  const uint64_t dbits = DoubleBits(v);
  const int dexp = static_cast<int>((dbits >> 52) & 0x7FF);
  if (dexp == 0) return sign;  // double subnormals are far below every target's range
  const int e = dexp - 1023;
  const uint64_t m = (dbits & ((uint64_t{1} << 52) - 1)) | (uint64_t{1} << 52);
  const int emin = 1 - Bias(f);
  const int emax_field = (1 << f.exp_bits) - 1;
  if (e + Bias(f) > emax_field) return sign | overflow;
  uint64_t field;
  if (e < emin) {
    // Subnormal: the rounded count of the smallest unit is the field itself;
    // a carry into bit mant_bits lands exactly on the smallest normal.
    field = ShiftRoundEven(m, 52 - f.mant_bits + (emin - e));
  } else {
    // Normal: round the magnitude bits in place (branch-free: the hot path of
    // input generation). A mantissa carry ripples into the exponent, which is
    // what rounding up across a binade means; then rebias.
    const int shift = 52 - f.mant_bits;
    const uint64_t mag = dbits & ~(uint64_t{1} << 63);
    const uint64_t lsb = (mag >> shift) & 1;
    const uint64_t rounded = (mag + ((uint64_t{1} << (shift - 1)) - 1) + lsb) >> shift;
    field = rounded - (static_cast<uint64_t>(1023 - Bias(f)) << f.mant_bits);
  }
  if (field > MaxFiniteBits(f)) return sign | overflow;
  return sign | static_cast<uint32_t>(field);
}

// double -> float, round to nearest even (the hardware conversion on both sides).
KF_HD float ToFloat(double v) {
#ifdef __CUDA_ARCH__
  return __double2float_rn(v);
#else
  return static_cast<float>(v);
#endif
}

// Rounds half to even (an exact operation on doubles).
KF_HD double RoundEven(double v) {
#ifdef __CUDA_ARCH__
  return rint(v);
#else
  return __builtin_rint(v);
#endif
}

// Rounds to nearest even and clamps into [lo, hi]; NaN becomes 0. `hi_excl`
// is hi + 1 as a double (2^63 is exact where INT64_MAX is not).
KF_HD int64_t ClampInt(double v, double lo, double hi_excl, int64_t lo_i, int64_t hi_i) {
  if (IsNan(v)) return 0;
  v = RoundEven(v);
  if (v >= hi_excl) return hi_i;
  if (v <= lo) return lo_i;
  return static_cast<int64_t>(v);
}

KF_HD int DtypeBytes(int dt) {
  switch (dt) {
    case kF64:
    case kI64:
      return 8;
    case kF32:
    case kI32:
      return 4;
    case kF16:
    case kBF16:
      return 2;
    default:
      return 1;
  }
}

// Element i of `data` (dtype dt) as a double; exact for every dtype.
KF_HD double Load(const void* data, int dt, uint64_t i) {
  const unsigned char* p = static_cast<const unsigned char*>(data) + i * DtypeBytes(dt);
  switch (dt) {
    case kF64: {
      double v;
      memcpy(&v, p, 8);
      return v;
    }
    case kF32: {
      float v;
      memcpy(&v, p, 4);
      return v;
    }
    case kF16: {
      uint16_t b;
      memcpy(&b, p, 2);
      return Decode(FormatF16(), b);
    }
    case kBF16: {
      uint16_t b;
      memcpy(&b, p, 2);
      return Decode(FormatBF16(), b);
    }
    case kFp8E4M3:
      return Decode(FormatE4M3(), *p);
    case kFp8E5M2:
      return Decode(FormatE5M2(), *p);
    case kI64: {
      int64_t v;
      memcpy(&v, p, 8);
      return static_cast<double>(v);
    }
    case kI32: {
      int32_t v;
      memcpy(&v, p, 4);
      return v;
    }
    case kI8:
      return static_cast<int8_t>(*p);
    case kU8:
      return *p;
    default:
      return *p != 0 ? 1.0 : 0.0;
  }
}

// Stores v into element i, rounding to nearest even (saturating for fp8,
// clamping for integers).
KF_HD void Store(void* data, int dt, uint64_t i, double v) {
  unsigned char* p = static_cast<unsigned char*>(data) + i * DtypeBytes(dt);
  switch (dt) {
    case kF64:
      memcpy(p, &v, 8);
      return;
    case kF32: {
      float f = ToFloat(v);
      memcpy(p, &f, 4);
      return;
    }
    case kF16: {
      uint16_t b = static_cast<uint16_t>(Encode(FormatF16(), v));
      memcpy(p, &b, 2);
      return;
    }
    case kBF16: {
      uint16_t b = static_cast<uint16_t>(Encode(FormatBF16(), v));
      memcpy(p, &b, 2);
      return;
    }
    case kFp8E4M3:
      *p = static_cast<unsigned char>(Encode(FormatE4M3(), v));
      return;
    case kFp8E5M2:
      *p = static_cast<unsigned char>(Encode(FormatE5M2(), v));
      return;
    case kI64: {
      int64_t x = ClampInt(v, -0x1.0p63, 0x1.0p63, INT64_MIN, INT64_MAX);
      memcpy(p, &x, 8);
      return;
    }
    case kI32: {
      int32_t x =
          static_cast<int32_t>(ClampInt(v, -2147483648.0, 2147483648.0, INT32_MIN, INT32_MAX));
      memcpy(p, &x, 4);
      return;
    }
    case kI8:
      *p = static_cast<unsigned char>(static_cast<int8_t>(ClampInt(v, -128.0, 128.0, -128, 127)));
      return;
    case kU8:
      *p = static_cast<unsigned char>(ClampInt(v, 0.0, 256.0, 0, 255));
      return;
    default:
      *p = (v != 0 && !IsNan(v)) ? 1 : 0;
      return;
  }
}

}  // namespace kforge::eval::codec
