#include "kforge/evaluator/dtype.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "task/element_codec.h"

namespace kforge::eval {
namespace {

const double kInf = std::numeric_limits<double>::infinity();
const double kNaN = std::numeric_limits<double>::quiet_NaN();

uint32_t Bits(Dtype dt, double v) {
  uint8_t buf[8] = {};
  StoreFromDouble(buf, dt, 0, v);
  uint32_t b = 0;
  std::memcpy(&b, buf, DtypeSize(dt) < 4 ? DtypeSize(dt) : 4);
  return b;
}

double Value(Dtype dt, uint32_t bits) {
  uint8_t buf[8] = {};
  std::memcpy(buf, &bits, DtypeSize(dt) < 4 ? DtypeSize(dt) : 4);
  return LoadAsDouble(buf, dt, 0);
}

TEST(Dtype, NamesAndSizes) {
  const char* names[] = {"f64", "f32", "f16", "bf16", "fp8_e4m3", "fp8_e5m2",
                         "i64", "i32", "i8",  "u8",   "bool"};
  const size_t sizes[] = {8, 4, 2, 2, 1, 1, 8, 4, 1, 1, 1};
  for (int i = 0; i < 11; ++i) {
    auto dt = ParseDtype(names[i]);
    ASSERT_TRUE(dt.ok()) << names[i];
    EXPECT_EQ(static_cast<int>(*dt), i);
    EXPECT_EQ(DtypeName(*dt), names[i]);
    EXPECT_EQ(DtypeSize(*dt), sizes[i]) << names[i];
    EXPECT_EQ(IsFloating(*dt), i < 6) << names[i];
  }
  auto bad = ParseDtype("bf17");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(),
            "unknown dtype 'bf17' (expected one of f64, f32, f16, bf16, fp8_e4m3, fp8_e5m2, i64, "
            "i32, i8, u8, bool)");
}

TEST(Dtype, Bf16BitPatterns) {
  EXPECT_EQ(Bits(Dtype::kBF16, 1.0), 0x3F80u);
  EXPECT_EQ(Bits(Dtype::kBF16, -2.0), 0xC000u);
  EXPECT_EQ(Bits(Dtype::kBF16, 0.0), 0x0000u);
  EXPECT_EQ(Bits(Dtype::kBF16, -0.0), 0x8000u);
  EXPECT_EQ(Bits(Dtype::kBF16, std::ldexp(1.0, -133)), 0x0001u);  // smallest subnormal
  EXPECT_EQ(Bits(Dtype::kBF16, std::ldexp(1.0, -134)), 0x0000u);  // half of it: tie to even (0)
  EXPECT_EQ(Bits(Dtype::kBF16, std::ldexp(3.0, -134)), 0x0002u);  // 1.5 units: tie to even (2)
  EXPECT_EQ(Bits(Dtype::kBF16, 1.0 + std::ldexp(1.0, -8)),
            0x3F80u);  // tie between 0x3F80 and 0x3F81
  EXPECT_EQ(Bits(Dtype::kBF16, 1.0 + std::ldexp(3.0, -8)),
            0x3F82u);  // tie between 0x3F81 and 0x3F82
  EXPECT_EQ(Bits(Dtype::kBF16, 1.0 + std::ldexp(1.0, -8) + std::ldexp(1.0, -30)),
            0x3F81u);  // just above a tie
  EXPECT_EQ(Bits(Dtype::kBF16, kInf), 0x7F80u);
  EXPECT_EQ(Bits(Dtype::kBF16, -1e39), 0xFF80u);  // overflow: IEEE rounds to inf
  EXPECT_TRUE(std::isnan(Value(Dtype::kBF16, Bits(Dtype::kBF16, kNaN))));
  EXPECT_EQ(Value(Dtype::kBF16, 0x7F7F), 0x1.FEp127);  // largest finite
}

TEST(Dtype, F16BitPatterns) {
  EXPECT_EQ(Bits(Dtype::kF16, 1.0), 0x3C00u);
  EXPECT_EQ(Bits(Dtype::kF16, -1.5), 0xBE00u);
  EXPECT_EQ(Bits(Dtype::kF16, 65504.0), 0x7BFFu);
  EXPECT_EQ(Bits(Dtype::kF16, 65519.0), 0x7BFFu);  // below the rounding point
  EXPECT_EQ(Bits(Dtype::kF16, 65520.0), 0x7C00u);  // tie with 65536: rounds to inf
  EXPECT_EQ(Bits(Dtype::kF16, std::ldexp(1.0, -24)), 0x0001u);
  EXPECT_EQ(Bits(Dtype::kF16, std::ldexp(1.0, -25)), 0x0000u);
  EXPECT_EQ(Bits(Dtype::kF16, std::ldexp(3.0, -25)), 0x0002u);
  EXPECT_EQ(Bits(Dtype::kF16, std::ldexp(1023.0, -24)), 0x03FFu);  // largest subnormal
  EXPECT_EQ(Bits(Dtype::kF16, std::ldexp(2047.0, -25)),
            0x0400u);  // rounds up into the smallest normal
  EXPECT_EQ(Bits(Dtype::kF16, std::ldexp(1.0, -14)), 0x0400u);
  EXPECT_EQ(Bits(Dtype::kF16, 1e-10), 0x0000u);
  EXPECT_EQ(Bits(Dtype::kF16, 2049.0), 0x6800u);  // tie: 2048 (even) not 2050
  EXPECT_EQ(Bits(Dtype::kF16, 2051.0), 0x6802u);  // tie: 2052 (even)
  EXPECT_EQ(Bits(Dtype::kF16, 0.1), 0x2E66u);
  EXPECT_EQ(Value(Dtype::kF16, 0x7C00), kInf);
  EXPECT_EQ(Value(Dtype::kF16, 0xFC00), -kInf);
  EXPECT_TRUE(std::isnan(Value(Dtype::kF16, 0x7E00)));
  EXPECT_EQ(Bits(Dtype::kF16, kNaN) & 0x7C00u, 0x7C00u);
  EXPECT_NE(Bits(Dtype::kF16, kNaN) & 0x03FFu, 0u);
}

TEST(Dtype, Fp8E4m3BitPatterns) {
  EXPECT_EQ(Bits(Dtype::kFp8E4M3, 1.0), 0x38u);
  EXPECT_EQ(Bits(Dtype::kFp8E4M3, -1.0), 0xB8u);
  EXPECT_EQ(Bits(Dtype::kFp8E4M3, 448.0), 0x7Eu);
  EXPECT_EQ(Bits(Dtype::kFp8E4M3, -448.0), 0xFEu);
  EXPECT_EQ(Bits(Dtype::kFp8E4M3, 464.0), 0x7Eu);  // tie between 448 and (unrepresentable) 480
  EXPECT_EQ(Bits(Dtype::kFp8E4M3, 500.0), 0x7Eu);  // saturates
  EXPECT_EQ(Bits(Dtype::kFp8E4M3, 1e9), 0x7Eu);
  EXPECT_EQ(Bits(Dtype::kFp8E4M3, kInf), 0x7Eu);  // no inf in e4m3: saturate
  EXPECT_EQ(Bits(Dtype::kFp8E4M3, -kInf), 0xFEu);
  EXPECT_EQ(Bits(Dtype::kFp8E4M3, kNaN), 0x7Fu);
  EXPECT_EQ(Bits(Dtype::kFp8E4M3, std::ldexp(1.0, -9)), 0x01u);   // smallest subnormal
  EXPECT_EQ(Bits(Dtype::kFp8E4M3, std::ldexp(1.0, -10)), 0x00u);  // tie to even
  EXPECT_EQ(Bits(Dtype::kFp8E4M3, std::ldexp(7.0, -9)), 0x07u);   // largest subnormal
  EXPECT_EQ(Bits(Dtype::kFp8E4M3, std::ldexp(1.0, -6)), 0x08u);   // smallest normal
  EXPECT_EQ(Bits(Dtype::kFp8E4M3, 1.0625), 0x38u);  // tie between 1 and 1.125: even (1)
  EXPECT_EQ(Bits(Dtype::kFp8E4M3, 1.1875), 0x3Au);  // tie between 1.125 and 1.25: even (1.25)
  EXPECT_TRUE(std::isnan(Value(Dtype::kFp8E4M3, 0x7F)));
  EXPECT_TRUE(std::isnan(Value(Dtype::kFp8E4M3, 0xFF)));
  EXPECT_EQ(Value(Dtype::kFp8E4M3, 0x78), 256.0);  // the top binade holds finite values
  EXPECT_EQ(Value(Dtype::kFp8E4M3, 0x7E), 448.0);
}

TEST(Dtype, Fp8E5m2BitPatterns) {
  EXPECT_EQ(Bits(Dtype::kFp8E5M2, 1.0), 0x3Cu);
  EXPECT_EQ(Bits(Dtype::kFp8E5M2, 57344.0), 0x7Bu);
  EXPECT_EQ(Bits(Dtype::kFp8E5M2, -57344.0), 0xFBu);
  EXPECT_EQ(Bits(Dtype::kFp8E5M2, 1e6), 0x7Bu);  // saturates
  EXPECT_EQ(Bits(Dtype::kFp8E5M2, kInf), 0x7Cu);
  EXPECT_EQ(Bits(Dtype::kFp8E5M2, -kInf), 0xFCu);
  EXPECT_EQ(Bits(Dtype::kFp8E5M2, std::ldexp(1.0, -16)), 0x01u);
  EXPECT_EQ(Bits(Dtype::kFp8E5M2, 1.125), 0x3Cu);  // tie between 1 and 1.25: even (1)
  EXPECT_EQ(Bits(Dtype::kFp8E5M2, 1.375), 0x3Eu);  // tie between 1.25 and 1.5: even (1.5)
  EXPECT_EQ(Value(Dtype::kFp8E5M2, 0x7C), kInf);
  EXPECT_TRUE(std::isnan(Value(Dtype::kFp8E5M2, 0x7E)));
  EXPECT_TRUE(std::isnan(Value(Dtype::kFp8E5M2, Bits(Dtype::kFp8E5M2, kNaN))));
}

// Every non-NaN pattern decodes to a value that encodes back to itself.
void ExpectEveryPatternRoundTrips(Dtype dt, uint32_t count) {
  int nans = 0;
  for (uint32_t b = 0; b < count; ++b) {
    const double v = Value(dt, b);
    if (std::isnan(v)) {
      ++nans;
      continue;
    }
    ASSERT_EQ(Bits(dt, v), b) << DtypeName(dt) << " pattern " << b << " value " << v;
  }
  const int expected_nans = dt == Dtype::kFp8E4M3 ? 2 : dt == Dtype::kFp8E5M2 ? 6 : 2046;
  EXPECT_EQ(nans, dt == Dtype::kBF16 ? 2 * 127 : expected_nans) << DtypeName(dt);
}

TEST(Dtype, EveryPatternRoundTrips) {
  ExpectEveryPatternRoundTrips(Dtype::kF16, 1u << 16);
  ExpectEveryPatternRoundTrips(Dtype::kBF16, 1u << 16);
  ExpectEveryPatternRoundTrips(Dtype::kFp8E4M3, 1u << 8);
  ExpectEveryPatternRoundTrips(Dtype::kFp8E5M2, 1u << 8);
}

TEST(Dtype, WideFloats) {
  double buf[2];
  StoreFromDouble(buf, Dtype::kF64, 1, 0.1);
  EXPECT_EQ(LoadAsDouble(buf, Dtype::kF64, 1), 0.1);
  float f[1];
  StoreFromDouble(f, Dtype::kF32, 0, 0.1);
  EXPECT_EQ(f[0], 0.1f);
  EXPECT_EQ(LoadAsDouble(f, Dtype::kF32, 0), static_cast<double>(0.1f));
  StoreFromDouble(f, Dtype::kF32, 0, 1e300);
  EXPECT_TRUE(std::isinf(f[0]));
}

TEST(Dtype, IntegersRoundToEvenAndClamp) {
  auto i32 = [](double v) {
    int32_t x;
    StoreFromDouble(&x, Dtype::kI32, 0, v);
    return x;
  };
  EXPECT_EQ(i32(2.5), 2);
  EXPECT_EQ(i32(3.5), 4);
  EXPECT_EQ(i32(-2.5), -2);
  EXPECT_EQ(i32(2.6), 3);
  EXPECT_EQ(i32(1e12), 2147483647);
  EXPECT_EQ(i32(-1e12), -2147483647 - 1);
  EXPECT_EQ(i32(kNaN), 0);
  int8_t i8;
  StoreFromDouble(&i8, Dtype::kI8, 0, 300);
  EXPECT_EQ(i8, 127);
  StoreFromDouble(&i8, Dtype::kI8, 0, -300);
  EXPECT_EQ(i8, -128);
  uint8_t u8;
  StoreFromDouble(&u8, Dtype::kU8, 0, -5);
  EXPECT_EQ(u8, 0);
  StoreFromDouble(&u8, Dtype::kU8, 0, 255.4);
  EXPECT_EQ(u8, 255);
  EXPECT_EQ(LoadAsDouble(&u8, Dtype::kU8, 0), 255.0);
  int64_t i64;
  StoreFromDouble(&i64, Dtype::kI64, 0, 1e30);
  EXPECT_EQ(i64, std::numeric_limits<int64_t>::max());
  StoreFromDouble(&i64, Dtype::kI64, 0, -9007199254740993.0);
  EXPECT_EQ(LoadAsDouble(&i64, Dtype::kI64, 0), -9007199254740992.0);
  uint8_t b[3];
  StoreFromDouble(b, Dtype::kBool, 0, 0.5);
  StoreFromDouble(b, Dtype::kBool, 1, 0.0);
  StoreFromDouble(b, Dtype::kBool, 2, -3);
  EXPECT_EQ(b[0], 1);
  EXPECT_EQ(b[1], 0);
  EXPECT_EQ(b[2], 1);
  b[0] = 7;
  EXPECT_EQ(LoadAsDouble(b, Dtype::kBool, 0), 1.0);
}

// The host reads 1- and 2-byte dtypes through decode tables: each pattern's
// value is the codec's (the device's decode), bit for bit, NaNs included.
TEST(Dtype, DecodeTablesAreTheCodecForEveryPattern) {
  for (Dtype dt : {Dtype::kF16, Dtype::kBF16, Dtype::kFp8E4M3, Dtype::kFp8E5M2, Dtype::kI8,
                   Dtype::kU8, Dtype::kBool}) {
    const uint32_t patterns = 1u << (8 * DtypeSize(dt));
    int differ = 0;
    for (uint32_t b = 0; b < patterns; ++b) {
      uint8_t buf[2];
      std::memcpy(buf, &b, sizeof buf);
      const double table = LoadAsDouble(buf, dt, 0);
      const double codec = codec::Load(buf, static_cast<int>(dt), 0);
      if (std::memcmp(&table, &codec, sizeof(double)) != 0) ++differ;
    }
    EXPECT_EQ(differ, 0) << DtypeName(dt);
  }
}

// LoadAllAsDouble is LoadAsDouble of every element, for every dtype, from any
// offset (the oracle's view decodes ranges on several threads).
TEST(Dtype, LoadAllIsLoadOfEveryElement) {
  std::mt19937_64 rng(7);
  for (int d = 0; d <= static_cast<int>(Dtype::kBool); ++d) {
    const Dtype dt = static_cast<Dtype>(d);
    std::vector<uint8_t> raw(4099 * DtypeSize(dt));
    for (auto& b : raw) b = static_cast<uint8_t>(rng());
    if (dt == Dtype::kBool) {
      for (auto& b : raw) b &= 1;
    }
    for (size_t from : {size_t{0}, size_t{3}}) {
      const size_t n = raw.size() / DtypeSize(dt) - from;
      std::vector<double> all(n);
      LoadAllAsDouble(raw.data() + from * DtypeSize(dt), dt, n, all.data());
      size_t differ = 0;
      for (size_t i = 0; i < n; ++i) {
        const double one = LoadAsDouble(raw.data(), dt, from + i);
        if (std::memcmp(&one, &all[i], sizeof(double)) != 0) ++differ;
      }
      EXPECT_EQ(differ, 0u) << DtypeName(dt) << " from " << from;
    }
  }
}

}  // namespace
}  // namespace kforge::eval
