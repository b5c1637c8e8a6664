// kforge::om's rounding onto the narrow float formats and its block
// quantisation (evaluator/task/oracle_math_rounding.cc), on hand-computed
// cases and, for the rounding, against its definition on random values.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "kforge/oracle_math.h"
#include "vec_test_util.h"

namespace kforge::om {
namespace {

using testing::ExpectNear;
using testing::kInf;
using testing::kNan;
using testing::Vec;

// ---------------------------------------------------------------------------
// Narrow float formats

TEST(OracleMathRound, E4M3) {
  // E4M3: 3 fraction bits, so in [2^e, 2^(e+1)) the step is 2^(e-3).
  // 0.3 in [0.25, 0.5): step 1/32; 0.3*32 = 9.6 -> 10 -> 0.3125.
  EXPECT_EQ(RoundToE4M3(0.3), 0.3125);
  EXPECT_EQ(RoundToE4M3(-0.3), -0.3125);
  // 0.2 in [0.125, 0.25): step 1/64; 12.8 -> 13 -> 0.203125.
  EXPECT_EQ(RoundToE4M3(0.2), 0.203125);
  // Ties to even, step 1/8 in [1, 2): 1.0625 = 8.5 steps -> 8 -> 1; 1.1875 = 9.5 -> 10 -> 1.25.
  EXPECT_EQ(RoundToE4M3(1.0625), 1.0);
  EXPECT_EQ(RoundToE4M3(1.1875), 1.25);
  // In [128, 256) the step is 16: 232 = 14.5 -> 14 -> 224; 248 = 15.5 -> 16 -> 256.
  EXPECT_EQ(RoundToE4M3(232.0), 224.0);
  EXPECT_EQ(RoundToE4M3(248.0), 256.0);
  EXPECT_EQ(RoundToE4M3(240.0), 240.0);
  // Subnormals: step 2^-9 below 2^-6. Half the smallest subnormal ties to 0; 0.75 of it
  // rounds up; 1.5 ulp -> 2 ulp; 7.5 ulp -> 8 ulp = 2^-6, the smallest normal.
  EXPECT_EQ(RoundToE4M3(std::ldexp(1, -10)), 0.0);
  EXPECT_EQ(RoundToE4M3(std::ldexp(3, -11)), std::ldexp(1, -9));
  EXPECT_EQ(RoundToE4M3(std::ldexp(1.5, -9)), std::ldexp(1, -8));
  EXPECT_EQ(RoundToE4M3(std::ldexp(2.5, -9)), std::ldexp(1, -8));
  EXPECT_EQ(RoundToE4M3(std::ldexp(7, -9)), std::ldexp(7, -9));
  EXPECT_EQ(RoundToE4M3(std::ldexp(7.5, -9)), std::ldexp(1, -6));
  EXPECT_EQ(RoundToE4M3(1e-5), 0.0);
  EXPECT_TRUE(std::signbit(RoundToE4M3(-1e-5)));
  // Saturation at 448 = 1.75 * 2^8 (step 32 there): 460 -> 448; beyond it clamps.
  EXPECT_EQ(RoundToE4M3(448.0), 448.0);
  EXPECT_EQ(RoundToE4M3(460.0), 448.0);
  EXPECT_EQ(RoundToE4M3(470.0), 448.0);
  EXPECT_EQ(RoundToE4M3(1e6), 448.0);
  EXPECT_EQ(RoundToE4M3(-1e6), -448.0);
  EXPECT_EQ(RoundToE4M3(kInf), 448.0);
  EXPECT_EQ(RoundToE4M3(416.0), 416.0);  // 13 * 32: the next value below 448
  EXPECT_TRUE(std::isnan(RoundToE4M3(kNan)));
  EXPECT_TRUE(std::signbit(RoundToE4M3(-0.0)));
}

TEST(OracleMathRound, E5M2) {
  // 2 fraction bits: 0.3 in [0.25, 0.5): step 1/16; 4.8 -> 5 -> 0.3125.
  // 0.2 in [0.125, 0.25): step 1/32; 6.4 -> 6 -> 0.1875 (E4M3 gives 0.203125).
  EXPECT_EQ(RoundToE5M2(0.3), 0.3125);
  EXPECT_EQ(RoundToE5M2(0.2), 0.1875);
  // Ties to even in [1, 2), step 1/4: 1.125 -> 1; 1.375 -> 1.5.
  EXPECT_EQ(RoundToE5M2(1.125), 1.0);
  EXPECT_EQ(RoundToE5M2(1.375), 1.5);
  // Subnormals: step 2^-16 below 2^-14.
  EXPECT_EQ(RoundToE5M2(std::ldexp(1, -17)), 0.0);
  EXPECT_EQ(RoundToE5M2(std::ldexp(3, -18)), std::ldexp(1, -16));
  EXPECT_EQ(RoundToE5M2(std::ldexp(3, -16)), std::ldexp(3, -16));
  // Max 57344 = 1.75 * 2^15, step 8192: 60000 -> 57344; 61440 = 7.5 steps ties to 8 steps
  // = 65536, which overflows: inf.
  EXPECT_EQ(RoundToE5M2(60000.0), 57344.0);
  EXPECT_EQ(RoundToE5M2(61440.0), kInf);
  EXPECT_EQ(RoundToE5M2(-1e6), -kInf);
  EXPECT_EQ(RoundToE5M2(kInf), kInf);
  EXPECT_TRUE(std::isnan(RoundToE5M2(kNan)));
}

TEST(OracleMathRound, Bf16AndF16) {
  // bf16, 7 fraction bits: 1/3 in [0.25, 0.5), step 2^-9; 512/3 = 170.67 -> 171 ->
  // 171/512 = 0.333984375.
  EXPECT_EQ(RoundToBf16(1.0 / 3), 0.333984375);
  // Ties in [1, 2), step 2^-7: 1 + 2^-8 -> 1; 1 + 3*2^-8 -> 1 + 2^-6.
  EXPECT_EQ(RoundToBf16(1 + std::ldexp(1, -8)), 1.0);
  EXPECT_EQ(RoundToBf16(1 + std::ldexp(3, -8)), 1 + std::ldexp(1, -6));
  // Max (2 - 2^-7) * 2^127; max + half a step (2^119) ties up to 2^128: inf.
  const double bf_max = std::ldexp(255, 120);
  EXPECT_EQ(RoundToBf16(bf_max + std::ldexp(1, 118)), bf_max);
  EXPECT_EQ(RoundToBf16(bf_max + std::ldexp(1, 119)), kInf);
  EXPECT_EQ(RoundToBf16(std::ldexp(1, -133)), std::ldexp(1, -133));  // smallest subnormal
  EXPECT_EQ(RoundToBf16(std::ldexp(1, -134)), 0.0);                  // its half: tie to 0
  // f16, 10 fraction bits: 1/3 -> step 2^-12; 4096/3 = 1365.33 -> 1365/4096 = 0.333251953125.
  EXPECT_EQ(RoundToF16(1.0 / 3), 0.333251953125);
  // Max 65504, step 32: 65519 -> 65504; 65520 ties up to 65536: inf.
  EXPECT_EQ(RoundToF16(65519.0), 65504.0);
  EXPECT_EQ(RoundToF16(65520.0), kInf);
  // Subnormals: step 2^-24.
  EXPECT_EQ(RoundToF16(std::ldexp(1, -25)), 0.0);
  EXPECT_EQ(RoundToF16(std::ldexp(3, -26)), std::ldexp(1, -24));
  EXPECT_TRUE(std::isnan(RoundToF16(kNan)));
  EXPECT_TRUE(std::isnan(RoundToBf16(kNan)));
}

// The rounding works on the double's bits; this is the plain definition
// (frexp, scale, round half to even, scale back) it must agree with.
double GridByDefinition(double x, int mant_bits, int emin) {
  if (x == 0.0 || !std::isfinite(x)) return x;
  int e2 = 0;
  std::frexp(std::fabs(x), &e2);
  const int shift = std::max(e2 - 1, emin) - mant_bits;
  return std::copysign(std::ldexp(RoundHalfEven(std::ldexp(std::fabs(x), -shift)), shift), x);
}

TEST(OracleMathRound, BitRoundingAgreesWithTheDefinitionEverywhere) {
  struct Format {
    const char* name;
    double (*round)(double);
    int mant_bits, emin;
    double max_finite;
    bool saturates;  // e4m3fn saturates, the IEEE formats overflow to inf
  };
  const Format formats[] = {
      {"e4m3", RoundToE4M3, 3, -6, 448.0, true},
      {"e5m2", RoundToE5M2, 2, -14, 57344.0, false},
      {"bf16", RoundToBf16, 7, -126, std::ldexp(255.0 / 128.0, 127), false},
      {"f16", RoundToF16, 10, -14, 65504.0, false},
  };
  uint64_t state = 0x243f6a8885a308d3ull;
  auto next = [&state] {
    state += 0x9e3779b97f4a7c15ull;
    uint64_t z = state;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  };
  for (const Format& f : formats) {
    const double max_exp = std::ilogb(f.max_finite) + 2;
    for (int i = 0; i < 400000; ++i) {
      const uint64_t r = next();
      // Exponents from far below the smallest subnormal to past the largest
      // value; a quarter of the values are exact ties of normal numbers, a
      // quarter exactly on the grid.
      const int e =
          static_cast<int>(r % static_cast<uint64_t>(max_exp - f.emin + f.mant_bits + 8)) + f.emin -
          f.mant_bits - 6;
      double m = 1.0 + static_cast<double>(next() >> 12) * 0x1p-52;
      const double steps = std::ldexp(1.0, f.mant_bits);  // grid points per octave
      if (i % 4 == 0) m = 1.0 + (std::floor((m - 1) * steps) + 0.5) / steps;  // a tie
      if (i % 4 == 1) m = 1.0 + std::floor((m - 1) * steps) / steps;          // on the grid
      const double x = std::copysign(std::ldexp(m, e), (r >> 63) != 0 ? -1.0 : 1.0);
      double want = GridByDefinition(x, f.mant_bits, f.emin);
      if (std::fabs(want) > f.max_finite)
        want = std::copysign(f.saturates ? f.max_finite : INFINITY, x);
      const double got = f.round(x);
      ASSERT_EQ(got, want) << f.name << " x = " << std::hexfloat << x;
      ASSERT_EQ(std::signbit(got), std::signbit(x)) << f.name << " x = " << std::hexfloat << x;
    }
    // Double subnormals and the extremes.
    for (double x : {std::numeric_limits<double>::denorm_min(), -std::numeric_limits<double>::min(),
                     std::numeric_limits<double>::max(), -0.0}) {
      double want = GridByDefinition(x, f.mant_bits, f.emin);
      if (std::fabs(want) > f.max_finite)
        want = std::copysign(f.saturates ? f.max_finite : INFINITY, x);
      EXPECT_EQ(f.round(x), want) << f.name << " x = " << std::hexfloat << x;
      EXPECT_EQ(std::signbit(f.round(x)), std::signbit(x)) << f.name;
    }
  }
}

TEST(OracleMathRound, HalfEven) {
  EXPECT_EQ(RoundHalfEven(2.5), 2.0);
  EXPECT_EQ(RoundHalfEven(3.5), 4.0);
  EXPECT_EQ(RoundHalfEven(-2.5), -2.0);
  EXPECT_EQ(RoundHalfEven(-3.5), -4.0);
  EXPECT_EQ(RoundHalfEven(2.4999), 2.0);
  EXPECT_EQ(RoundHalfEven(-0.7), -1.0);
  EXPECT_TRUE(std::signbit(RoundHalfEven(-0.5)));
  EXPECT_EQ(RoundHalfEven(0x1p53 + 2), 0x1p53 + 2);
}

// ---------------------------------------------------------------------------
// Block quantization

TEST(OracleMathQuant, Fp8BlockedByHand) {
  // x [3,3] = [1 2 3; 4 5 6; 7 8 9] in 2x2 blocks -> a 2x2 grid with partial edges:
  //   (0,0) = {1 2 4 5} amax 5; (0,1) = {3 6} amax 6; (1,0) = {7 8} amax 8; (1,1) = {9}.
  // scale = amax/448. q = x*448/amax rounded to E4M3:
  //   1 -> 89.6 (step 8 in [64,128)) -> 88;   2 -> 179.2 (step 16) -> 176;
  //   4 -> 358.4 (step 32) -> 352;            5 -> 448;
  //   3 -> 224; 6 -> 448; 7 -> 392 (step 32: 12.25) -> 384; 8 -> 448; 9 -> 448.
  const Vec x{1, 2, 3, 4, 5, 6, 7, 8, 9};
  const BlockQuant bq = QuantizeFp8Blocked(x, 3, 3, 2, 2);
  ExpectNear(bq.scale, {5.0 / 448, 6.0 / 448, 8.0 / 448, 9.0 / 448}, 1e-18);
  EXPECT_EQ(bq.q, (Vec{88, 176, 224, 352, 448, 448, 384, 448, 448}));
  // Dequantized: q * scale, e.g. 88 * 5/448 = 0.982142857; 384 * 8/448 = 6.857142857.
  const Vec dq = DequantizeBlocked(bq, 3, 3, 2, 2);
  ExpectNear(dq, {88 * 5.0 / 448, 176 * 5.0 / 448, 3, 352 * 5.0 / 448, 5, 6, 384 * 8.0 / 448, 8, 9},
             1e-14);
}

TEST(OracleMathQuant, Fp8ZeroBlockAndFlat) {
  // Flat, block 3: [448 1.0625 -0.3 | 0 0 0 | 0.5]. Block 0 amax 448 -> scale 1 and the
  // E4M3 ties show through: 1.0625 -> 1, -0.3 -> -0.3125. Block 1 is all zero -> scale 1,
  // q 0. Block 2 = {0.5}: scale 0.5/448, q = 448.
  const Vec x{448, 1.0625, -0.3, 0, 0, 0, 0.5};
  const BlockQuant bq = QuantizeFp8Flat(x, 3);
  EXPECT_EQ(bq.scale, (Vec{1, 1, 0.5 / 448}));
  EXPECT_EQ(bq.q, (Vec{448, 1, -0.3125, 0, 0, 0, 448}));
  ExpectNear(DequantizeFlat(bq, 3), {448, 1, -0.3125, 0, 0, 0, 0.5}, 1e-15);
  // The 2-D form with one row is the same thing.
  const BlockQuant bq2 = QuantizeFp8Blocked(x, 1, 7, 1, 3);
  EXPECT_EQ(bq2.q, bq.q);
  EXPECT_EQ(bq2.scale, bq.scale);
}

TEST(OracleMathQuant, Int8ByHand) {
  // n = 7, block 3: [127 2.5 -3.5 | 254 5 -1 | 0].
  // Block 0: amax 127 -> scale 1; q = [127, 2 (2.5 ties to even), -4 (-3.5 ties to even)].
  // Block 1: amax 254 -> scale 2; x/2 = [127, 2.5 -> 2, -0.5 -> -0].
  // Block 2: all zero -> scale 1, q 0. (Half away from zero would give 3, -4, 3, -1.)
  const Vec x{127, 2.5, -3.5, 254, 5, -1, 0};
  const BlockQuant bq = QuantizeInt8Blocked(x, 7, 3);
  EXPECT_EQ(bq.scale, (Vec{1, 2, 1}));
  EXPECT_EQ(bq.q, (Vec{127, 2, -4, 127, 2, 0, 0}));
  EXPECT_TRUE(std::signbit(bq.q[5]));
  ExpectNear(DequantizeBlocked(bq, 1, 7, 1, 3), {127, 2, -4, 254, 4, 0, 0}, 0.0);
  // Generic block: amax 1 -> scale 1/127; q stays within [-127, 127].
  const BlockQuant b1 = QuantizeInt8Blocked(Vec{1, -1, 0.5}, 3, 3);
  EXPECT_EQ(b1.q[0], 127);
  EXPECT_EQ(b1.q[1], -127);
  EXPECT_NEAR(b1.q[2], 64, 1);  // 63.5 within rounding of the scale
}

TEST(OracleMathQuantDeathTest, BadBlockAborts) {
  EXPECT_DEATH(QuantizeInt8Blocked(Vec{1, 2}, 3, 2), "QuantizeInt8Blocked: x has 2 elements");
  EXPECT_DEATH(QuantizeFp8Blocked(Vec{1, 2}, 1, 2, 1, 0), "block_cols must be positive");
}

}  // namespace
}  // namespace kforge::om
