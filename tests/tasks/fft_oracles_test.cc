// The FFT oracles (tasks 059 and 060) against what a 2-D DFT must do: a single
// Fourier mode lands on one coefficient, Parseval holds, the inverse of the
// forward is the identity across the slab decompositions, and the inverse
// keeps the imaginary parts of the self-conjugate columns (the real part of
// the full inverse, not a C2R transform's).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <numbers>
#include <vector>

#include "kforge/oracle.h"

namespace kforge {
namespace {

constexpr double kPi = std::numbers::pi;

// 059: rank r holds f[:, :, r*N/W : (r+1)*N/W]; y is [B, H/W, N/2+1, 2].
OracleIo ForwardIo(const std::vector<double>& f, int world, int64_t batch, int64_t rows,
                   int64_t cols) {
  OracleIo io;
  io.world = world;
  io.params = {{"B", static_cast<double>(batch)},
               {"H", static_cast<double>(rows)},
               {"N", static_cast<double>(cols)}};
  const int64_t cl = cols / world, rl = rows / world, kept = cols / 2 + 1;
  for (int r = 0; r < world; ++r) {
    std::vector<double> x(batch * rows * cl);
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t h = 0; h < rows; ++h)
        for (int64_t j = 0; j < cl; ++j)
          x[(b * rows + h) * cl + j] = f[(b * rows + h) * cols + r * cl + j];
    io.inputs.push_back({OracleTensor{"x", {batch, rows, cl}, x}});
    io.outputs.push_back(
        {OracleTensor{"y", {batch, rl, kept, 2}, std::vector<double>(batch * rl * kept * 2, -9)}});
  }
  return io;
}

// 060: rank r holds rows [r*H/W, (r+1)*H/W) of the half spectrum x[B, C=1, H, N/2+1, 2].
OracleIo InverseIo(const std::vector<double>& spectrum, int world, int64_t batch, int64_t rows,
                   int64_t cols) {
  OracleIo io;
  io.world = world;
  io.params = {{"B", static_cast<double>(batch)},
               {"C", 1.0},
               {"H", static_cast<double>(rows)},
               {"N", static_cast<double>(cols)}};
  const int64_t rl = rows / world, half = cols / 2 + 1, cl = cols / world;
  for (int r = 0; r < world; ++r) {
    std::vector<double> x(batch * rl * half * 2);
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t i = 0; i < rl * half * 2; ++i)
        x[b * rl * half * 2 + i] = spectrum[(b * rows + r * rl) * half * 2 + i];
    io.inputs.push_back({OracleTensor{"x", {batch, 1, rl, half, 2}, x}});
    io.outputs.push_back(
        {OracleTensor{"y", {batch, 1, rows, cl}, std::vector<double>(batch * rows * cl, -9)}});
  }
  return io;
}

void RunOracle(const char* name, OracleIo& io) {
  const OracleFn* fn = FindOracle(name);
  ASSERT_NE(fn, nullptr) << name;
  Status s = (*fn)(io);
  ASSERT_TRUE(s.ok()) << s.ToString();
}

// The global half spectrum [B, H, N/2+1, 2] from 059's row slabs.
std::vector<double> Spectrum(OracleIo& io, int64_t batch, int64_t rows, int64_t cols) {
  const int64_t rl = rows / io.world, kept = cols / 2 + 1;
  std::vector<double> out(batch * rows * kept * 2);
  for (int r = 0; r < io.world; ++r) {
    auto y = io.out(r, "y");
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t i = 0; i < rl * kept * 2; ++i)
        out[(b * rows + r * rl) * kept * 2 + i] = y[b * rl * kept * 2 + i];
  }
  return out;
}

// The global field [B, H, N] from 060's column slabs.
std::vector<double> Field(OracleIo& io, int64_t batch, int64_t rows, int64_t cols) {
  const int64_t cl = cols / io.world;
  std::vector<double> f(batch * rows * cols);
  for (int r = 0; r < io.world; ++r) {
    auto y = io.out(r, "y");
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t h = 0; h < rows; ++h)
        for (int64_t j = 0; j < cl; ++j)
          f[(b * rows + h) * cols + r * cl + j] = y[(b * rows + h) * cl + j];
  }
  return f;
}

std::vector<double> Noise(size_t n, uint64_t seed) {
  OracleRng rng(seed);
  std::vector<double> v(n);
  for (double& x : v) x = rng.Normal();
  return v;
}

TEST(FftOracles, AFourierModeLandsOnOneCoefficient) {
  const int64_t rows = 6, cols = 8, p0 = 2, k0 = 3;
  std::vector<double> f(rows * cols);
  for (int64_t h = 0; h < rows; ++h)
    for (int64_t n = 0; n < cols; ++n)
      f[h * cols + n] = std::cos(
          2 * kPi * (static_cast<double>(p0 * h) / rows + static_cast<double>(k0 * n) / cols));
  OracleIo io = ForwardIo(f, 2, 1, rows, cols);
  RunOracle("physicsnemo_distributed_rfft", io);
  std::vector<double> s = Spectrum(io, 1, rows, cols);
  const int64_t kept = cols / 2 + 1;
  // cos = (e^{i..} + e^{-i..}) / 2: sqrt(H N) / 2 at (p0, k0); its partner (H-p0, N-k0) is not
  // kept.
  for (int64_t p = 0; p < rows; ++p) {
    for (int64_t k = 0; k < kept; ++k) {
      const double want = (p == p0 && k == k0) ? std::sqrt(rows * cols) / 2 : 0.0;
      EXPECT_NEAR(s[(p * kept + k) * 2], want, 1e-12) << p << "," << k;
      EXPECT_NEAR(s[(p * kept + k) * 2 + 1], 0.0, 1e-12) << p << "," << k;
    }
  }
}

TEST(FftOracles, ForwardKeepsTheEnergyAndTheInverseUndoesIt) {
  for (int world : {2, 4}) {
    const int64_t batch = 2, rows = 3 * world, cols = 5 * world, kept = cols / 2 + 1;
    std::vector<double> f = Noise(batch * rows * cols, 7 + world);
    OracleIo fwd = ForwardIo(f, world, batch, rows, cols);
    RunOracle("physicsnemo_distributed_rfft", fwd);
    std::vector<double> s = Spectrum(fwd, batch, rows, cols);
    // Parseval over the half spectrum: columns 0 < k < N/2 stand for two.
    for (int64_t b = 0; b < batch; ++b) {
      double field = 0, spec = 0;
      for (int64_t i = 0; i < rows * cols; ++i)
        field += f[b * rows * cols + i] * f[b * rows * cols + i];
      for (int64_t p = 0; p < rows; ++p) {
        for (int64_t k = 0; k < kept; ++k) {
          const double* v = &s[((b * rows + p) * kept + k) * 2];
          spec += (k == 0 || 2 * k == cols ? 1.0 : 2.0) * (v[0] * v[0] + v[1] * v[1]);
        }
      }
      EXPECT_NEAR(spec, field, 1e-9 * field) << "W=" << world;
    }
    OracleIo inv = InverseIo(s, world, batch, rows, cols);
    RunOracle("physicsnemo_distributed_irfft", inv);
    std::vector<double> back = Field(inv, batch, rows, cols);
    for (size_t i = 0; i < f.size(); ++i) ASSERT_NEAR(back[i], f[i], 1e-12) << i;
  }
}

// A spectrum that is not Hermitian on column 0 (i at (p0, 0) only): the real part of the full
// inverse is -sin(2 pi p0 h / H) / sqrt(H N) in every column; a C2R transform would drop it.
// A mode at 0 < k < N/2 counts twice (its conjugate partner is implied).
TEST(FftOracles, InverseIsTheRealPartOfTheExtendedSpectrum) {
  const int64_t rows = 4, cols = 6, half = cols / 2 + 1, p0 = 1;
  std::vector<double> s(rows * half * 2, 0.0);
  s[(p0 * half + 0) * 2 + 1] = 1.0;  // i at (p0, 0)
  s[(2 * half + 1) * 2] = 1.0;       // 1 at (2, 1)
  OracleIo io = InverseIo(s, 2, 1, rows, cols);
  RunOracle("physicsnemo_distributed_irfft", io);
  std::vector<double> y = Field(io, 1, rows, cols);
  const double norm = std::sqrt(static_cast<double>(rows * cols));
  for (int64_t h = 0; h < rows; ++h) {
    for (int64_t n = 0; n < cols; ++n) {
      const double want = (-std::sin(2 * kPi * p0 * h / rows) +
                           2 * std::cos(2 * kPi * (2.0 * h / rows + 1.0 * n / cols))) /
                          norm;
      EXPECT_NEAR(y[h * cols + n], want, 1e-12) << h << "," << n;
    }
  }
}

}  // namespace
}  // namespace kforge
