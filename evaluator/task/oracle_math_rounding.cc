// fp64 rounding onto the narrow float formats and block quantisation; the
// contracts are in kforge/oracle_math.h.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "kforge/oracle_math.h"
#include "oracle_math_checks.h"

namespace kforge::om {
namespace {

using internal::CeilDiv;
using internal::CheckBlock;
using internal::CheckDim;
using internal::CheckSize;

// Round-to-nearest-even onto a binary floating format with `mant_bits`
// fraction bits and smallest normal exponent `emin`; no overflow handling
// (the caller decides between saturation and infinity). On the double's bits:
// the significand's low bits are rounded off in integer arithmetic and the
// result scaled by a power of two, both exact (the fp8 oracles round every
// element of every rank, so this is on their hot path).
double RoundToGrid(double x, int mant_bits, int emin) {
  if (x == 0.0 || !std::isfinite(x)) return x;
  uint64_t bits = 0;
  std::memcpy(&bits, &x, sizeof bits);
  const int biased = static_cast<int>((bits >> 52) & 0x7ff);
  uint64_t sig = bits & ((uint64_t{1} << 52) - 1);
  int e = biased - 1023;  // x = sig * 2^(e - 52), sig with its leading one
  if (biased == 0) {
    e = -1022;  // a double subnormal: no leading one
  } else {
    sig |= uint64_t{1} << 52;
  }
  const int shift = std::max(e, emin) - mant_bits;  // the result is a multiple of 2^shift
  const int drop = shift - (e - 52);                // low bits of sig below 2^shift
  if (drop <= 0) return x;                          // already on the grid
  if (drop > 54) return std::copysign(0.0, x);      // under half a step
  const uint64_t rem = sig & ((uint64_t{1} << drop) - 1), half = uint64_t{1} << (drop - 1);
  uint64_t q = sig >> drop;
  if (rem > half || (rem == half && (q & 1) != 0)) ++q;
  // q <= 2^(mant_bits + 1) is exact in a double, and so is the power of two
  // (shift >= -1022 for every format here).
  uint64_t scale_bits = static_cast<uint64_t>(shift + 1023) << 52;
  double scale = 0;
  std::memcpy(&scale, &scale_bits, sizeof scale);
  return std::copysign(static_cast<double>(q) * scale, x);
}

// IEEE round-to-nearest with overflow to infinity: anything that rounds past
// the largest finite value is infinite.
double RoundIeee(double x, int mant_bits, int emin, double max_finite) {
  const double r = RoundToGrid(x, mant_bits, emin);
  if (std::fabs(r) > max_finite) return std::copysign(std::numeric_limits<double>::infinity(), x);
  return r;
}

// max |x| over one block, NaN if the block has one.
struct AbsMax {
  double value = 0.0;
  void Add(double x) {
    if (std::isnan(x) || std::isnan(value)) {
      value = std::numeric_limits<double>::quiet_NaN();
    } else {
      value = std::max(value, std::fabs(x));
    }
  }
};

double ScaleFor(double amax, double qmax) { return amax == 0.0 ? 1.0 : amax / qmax; }

}  // namespace

// ---------------------------------------------------------------------------
// Rounding

double RoundHalfEven(double x) {
  // Every double of magnitude >= 2^52 is already an integer.
  if (!std::isfinite(x) || std::fabs(x) >= 0x1p52) return x;
  const double fl = std::floor(x);
  const double diff = x - fl;  // exact
  double r = fl;
  if (diff > 0.5 || (diff == 0.5 && std::fmod(fl, 2.0) != 0.0)) r = fl + 1.0;
  return std::copysign(r, x);  // keeps -0 for -0.5 .. -0
}

double RoundToE4M3(double x) {
  constexpr double kMax = 448.0;
  if (std::isnan(x)) return x;
  if (std::isinf(x)) return std::copysign(kMax, x);
  const double r = RoundToGrid(x, /*mant_bits=*/3, /*emin=*/-6);
  return std::fabs(r) > kMax ? std::copysign(kMax, x) : r;
}

double RoundToE5M2(double x) { return RoundIeee(x, 2, -14, 57344.0); }

double RoundToBf16(double x) {
  return RoundIeee(x, 7, -126, std::ldexp(255.0 / 128.0, 127));  // (2 - 2^-7) * 2^127
}

double RoundToF16(double x) { return RoundIeee(x, 10, -14, 65504.0); }

// ---------------------------------------------------------------------------
// Block quantization

BlockQuant QuantizeFp8Blocked(std::span<const double> x, int64_t rows, int64_t cols,
                              int64_t block_rows, int64_t block_cols) {
  const char* fn = "QuantizeFp8Blocked";
  CheckDim(fn, "rows", rows);
  CheckDim(fn, "cols", cols);
  CheckBlock(fn, "block_rows", block_rows);
  CheckBlock(fn, "block_cols", block_cols);
  CheckSize(fn, "x", x.size(), rows * cols);
  const int64_t grid_rows = CeilDiv(rows, block_rows), grid_cols = CeilDiv(cols, block_cols);
  BlockQuant bq;
  bq.q.resize(x.size());
  bq.scale.resize(grid_rows * grid_cols);
  for (int64_t br = 0; br < grid_rows; ++br) {
    const int64_t r0 = br * block_rows, r1 = std::min(rows, r0 + block_rows);
    for (int64_t bc = 0; bc < grid_cols; ++bc) {
      const int64_t c0 = bc * block_cols, c1 = std::min(cols, c0 + block_cols);
      AbsMax amax;
      for (int64_t r = r0; r < r1; ++r) {
        for (int64_t c = c0; c < c1; ++c) amax.Add(x[r * cols + c]);
      }
      const double scale = ScaleFor(amax.value, 448.0);
      bq.scale[br * grid_cols + bc] = scale;
      for (int64_t r = r0; r < r1; ++r) {
        for (int64_t c = c0; c < c1; ++c) bq.q[r * cols + c] = RoundToE4M3(x[r * cols + c] / scale);
      }
    }
  }
  return bq;
}

BlockQuant QuantizeInt8Blocked(std::span<const double> x, int64_t n, int64_t block) {
  const char* fn = "QuantizeInt8Blocked";
  CheckDim(fn, "n", n);
  CheckBlock(fn, "block", block);
  CheckSize(fn, "x", x.size(), n);
  BlockQuant bq;
  bq.q.resize(n);
  bq.scale.resize(CeilDiv(n, block));
  for (int64_t b = 0; b * block < n; ++b) {
    const int64_t i0 = b * block, i1 = std::min(n, i0 + block);
    AbsMax amax;
    for (int64_t i = i0; i < i1; ++i) amax.Add(x[i]);
    const double scale = ScaleFor(amax.value, 127.0);
    bq.scale[b] = scale;
    for (int64_t i = i0; i < i1; ++i) {
      bq.q[i] = std::clamp(RoundHalfEven(x[i] / scale), -127.0, 127.0);
    }
  }
  return bq;
}

std::vector<double> DequantizeBlocked(const BlockQuant& bq, int64_t rows, int64_t cols,
                                      int64_t block_rows, int64_t block_cols) {
  const char* fn = "DequantizeBlocked";
  CheckDim(fn, "rows", rows);
  CheckDim(fn, "cols", cols);
  CheckBlock(fn, "block_rows", block_rows);
  CheckBlock(fn, "block_cols", block_cols);
  CheckSize(fn, "q", bq.q.size(), rows * cols);
  const int64_t grid_cols = CeilDiv(cols, block_cols);
  CheckSize(fn, "scale", bq.scale.size(), CeilDiv(rows, block_rows) * grid_cols);
  std::vector<double> out(bq.q.size());
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      out[r * cols + c] =
          bq.q[r * cols + c] * bq.scale[(r / block_rows) * grid_cols + c / block_cols];
    }
  }
  return out;
}

BlockQuant QuantizeFp8Flat(std::span<const double> x, int64_t block) {
  return QuantizeFp8Blocked(x, 1, static_cast<int64_t>(x.size()), 1, block);
}

std::vector<double> DequantizeFlat(const BlockQuant& bq, int64_t block) {
  return DequantizeBlocked(bq, 1, static_cast<int64_t>(bq.q.size()), 1, block);
}

}  // namespace kforge::om
