// Task 062 (distributed DISCO convolution on the sphere): the generator's
// filter basis fits its capacity at every size, W and trial, is sorted and
// identical on both ranks of a polar row, and has the structure the card
// promises (rows summing to 1 over the polar rows, whole rings near the
// poles); the oracle on a psi small enough to apply by hand.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "kforge/evaluator/task.h"
#include "kforge/oracle.h"
#include "task/inputs.h"

namespace kforge::eval {
namespace {

const char kName[] = "torchharmonics_spherical_convolution";

const Task& ConvTask() {
  static const Task task = [] {
    auto t = LoadTask(std::filesystem::path(KFORGE_TEST_TASKS_DIR) /
                      "062_torchharmonics_spherical_convolution");
    EXPECT_TRUE(t.ok()) << t.status().ToString();
    return t.ok() ? *t : Task{};
  }();
  return task;
}

// Runs the task's generator for one psi input of one rank, without the other
// (large) inputs: what the bench sizes need.
std::vector<double> Generate(const std::map<std::string, double>& vars, int world, int rank,
                             const std::string& input, std::vector<int64_t> shape, uint64_t seed) {
  const GeneratorFn* fn = FindGenerator(kName);
  EXPECT_NE(fn, nullptr);
  OracleTensor t;
  t.name = input;
  t.shape = shape;
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  t.data.assign(static_cast<size_t>(n), 0.0);
  OracleRng rng(seed * 31 + static_cast<uint64_t>(rank));
  GeneratorIo gen;
  gen.world = world;
  gen.rank = rank;
  gen.input_name = input;
  gen.params = vars;
  gen.tensor = &t;
  gen.rng = &rng;
  gen.trial_seed = seed;
  Status s = (*fn)(gen);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return t.data;
}

TEST(SphericalConvolution, PsiFitsItsCapacityIsSortedAndSharedByAPolarRow) {
  const Task& t = ConvTask();
  std::vector<SizeSpec> sizes = t.check_sizes;
  sizes.insert(sizes.end(), t.bench_sizes.begin(), t.bench_sizes.end());
  for (const SizeSpec& size : sizes) {
    const bool bench = &size - sizes.data() >= static_cast<std::ptrdiff_t>(t.check_sizes.size());
    for (int w : {2, 4, 8}) {
      // A rank's psi is a slice of the global one (W = 2): the bench sizes need only that.
      if (bench && w > 2) continue;
      auto p = Instantiate(t, w, Dtype::kF32, size, true);
      ASSERT_TRUE(p.ok()) << p.status().ToString();
      const auto& v = p->vars;
      const int64_t cap = static_cast<int64_t>(v.at("cap")), K = static_cast<int64_t>(v.at("K"));
      const int64_t Ho = static_cast<int64_t>(v.at("Ho")), H = static_cast<int64_t>(v.at("H"));
      const int64_t L = static_cast<int64_t>(v.at("L")), hl = H * 2 / w;
      int64_t most = 0;
      for (uint64_t seed = 1; seed <= (bench ? 4u : w == 2 ? 12u : 3u); ++seed) {
        SCOPED_TRACE(size.label + " W=" + std::to_string(w) + " seed " + std::to_string(seed));
        std::vector<double> row_sum(static_cast<size_t>(K * Ho), 0.0);
        for (int r = 0; r < w; ++r) {
          auto nnz = Generate(v, w, r, "psi_nnz", {1}, seed);
          auto idx = Generate(v, w, r, "psi_idx", {3, cap}, seed);
          auto val = Generate(v, w, r, "psi_vals", {cap}, seed);
          const int64_t n = static_cast<int64_t>(nnz[0]);
          ASSERT_GE(n, 0);
          ASSERT_LE(n, cap);
          most = std::max(most, n);
          if (r % 2 == 1) {  // the same as its azimuth partner's, up to nnz
            auto idx0 = Generate(v, w, r - 1, "psi_idx", {3, cap}, seed);
            auto val0 = Generate(v, w, r - 1, "psi_vals", {cap}, seed);
            for (int64_t e = 0; e < n; ++e) {
              ASSERT_EQ(val[static_cast<size_t>(e)], val0[static_cast<size_t>(e)]);
              for (int64_t q = 0; q < 3; ++q)
                ASSERT_EQ(idx[static_cast<size_t>(q * cap + e)],
                          idx0[static_cast<size_t>(q * cap + e)]);
            }
            continue;
          }
          std::tuple<double, double, double> prev{-1, -1, -1};
          for (int64_t e = 0; e < n; ++e) {
            const double k = idx[static_cast<size_t>(e)], tt = idx[static_cast<size_t>(cap + e)],
                         s = idx[static_cast<size_t>(2 * cap + e)];
            ASSERT_TRUE(k >= 0 && k < K && tt >= 0 && tt < Ho && s >= 0 && s < hl * L);
            const std::tuple<double, double, double> cur{k, tt, s};
            ASSERT_LT(prev, cur) << "not sorted by (k, t, s) or duplicated at " << e;
            prev = cur;
            ASSERT_GT(val[static_cast<size_t>(e)], 0);
            row_sum[static_cast<size_t>(k * Ho + tt)] += val[static_cast<size_t>(e)];
          }
        }
        for (double s : row_sum) {
          if (s != 0) {
            EXPECT_NEAR(s, 1.0, 1e-12);
          }
        }
      }
      if (w == 2)
        std::printf("[ psi ] %s: at most %lld of cap %lld nonzeros per rank\n", size.label.c_str(),
                    static_cast<long long>(most), static_cast<long long>(cap));
    }
  }
}

// A ring near the pole: the first output latitude's rows reach every
// longitude of the first input latitude, while near the equator a row spans a
// few longitudes.
TEST(SphericalConvolution, PsiSpansWholeRingsNearThePolesAndAFewLongitudesAtTheEquator) {
  const Task& t = ConvTask();
  const SizeSpec& size = t.bench_sizes.front();
  auto p = Instantiate(t, 2, Dtype::kF32, size, true);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  const auto& v = p->vars;
  const int64_t cap = static_cast<int64_t>(v.at("cap")), Ho = static_cast<int64_t>(v.at("Ho"));
  const int64_t L = static_cast<int64_t>(v.at("L"));
  const int64_t n = static_cast<int64_t>(Generate(v, 2, 0, "psi_nnz", {1}, 7)[0]);
  auto idx = Generate(v, 2, 0, "psi_idx", {3, cap}, 7);
  std::map<int64_t, int64_t> polar_lons, equator_lons;  // over all k, lat 0 / lat H/2
  for (int64_t e = 0; e < n; ++e) {
    const int64_t tt = static_cast<int64_t>(idx[static_cast<size_t>(cap + e)]);
    const int64_t s = static_cast<int64_t>(idx[static_cast<size_t>(2 * cap + e)]);
    if (tt == 0 && s / L == 0) polar_lons[s % L] = 1;
    if (tt == Ho / 2 && s / L == Ho / 2) equator_lons[s % L] = 1;
  }
  EXPECT_EQ(static_cast<int64_t>(polar_lons.size()), L);
  EXPECT_GE(equator_lons.size(), 3u);
  EXPECT_LE(equator_lons.size(), 9u);
}

// W = 2 (one polar row), B = C = O = K = 1, H = 4, L = 4, output 4 x 2
// (pscale 2). psi: (k 0, t 1, s = 1*4 + 3) value 0.5 and (t 1, s = 2*4 + 0)
// value 0.25. So Y[t=1, l] = 0.5 X[1, (3 + 2l) % 4] + 0.25 X[2, 2l % 4]: l = 0
// reads X[1,3], X[2,0]; l = 1 reads X[1,1], X[2,2]. OUT = 2 Y + 0.5 (weight 2,
// bias 0.5); rank a holds output longitude a.
TEST(SphericalConvolution, OracleAppliesAHandBuiltPsi) {
  const Task& t = ConvTask();
  auto p = Instantiate(t, 2, Dtype::kF32,
                       SizeSpec{"hand",
                                {{"B", "1"},
                                 {"C", "1"},
                                 {"O", "1"},
                                 {"G", "1"},
                                 {"K", "1"},
                                 {"H", "4"},
                                 {"L", "4"},
                                 {"Ho", "4"},
                                 {"Lo", "2"},
                                 {"rct", "1"},
                                 {"cap", "4"}}},
                       true);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  auto io = BuildOracleIo(*p, 1, {});
  ASSERT_TRUE(io.ok()) << io.status().ToString();
  auto set = [&](int r, const char* name, std::vector<double> v) {
    for (OracleTensor& x : io->inputs[static_cast<size_t>(r)])
      if (x.name == name) x.data = v;
  };
  // X[i][j] = 10 i + j; rank 0 holds longitudes 0, 1 and rank 1 longitudes 2, 3.
  set(0, "x", {0, 1, 10, 11, 20, 21, 30, 31});
  set(1, "x", {2, 3, 12, 13, 22, 23, 32, 33});
  for (int r = 0; r < 2; ++r) {
    set(r, "psi_idx", {0, 0, 0, 0, 1, 1, 0, 0, 7, 8, 0, 0});  // entries 2, 3 are past nnz
    set(r, "psi_vals", {0.5, 0.25, 100, 100});
    set(r, "psi_nnz", {2});
    set(r, "weight", {2});
    set(r, "bias", {0.5});
  }
  ASSERT_TRUE(RunOracle(*p, *io).ok());
  const double y0 = 0.5 * 13 + 0.25 * 20, y1 = 0.5 * 11 + 0.25 * 22;
  EXPECT_EQ(io->out(0, "out")[0], 0.5);
  EXPECT_EQ(io->out(0, "out")[1], 2 * y0 + 0.5);
  EXPECT_EQ(io->out(1, "out")[1], 2 * y1 + 0.5);
  EXPECT_EQ(io->out(1, "out")[3], 0.5);
}

// An f32 kernel (the upstream order: psi rows per channel half and polar row,
// the polar partials summed in f32, then bias + weight . Y in f32) stays well
// inside the tolerance at the largest check size, so the bound leaves room for
// any f32 order; TF32-like products (operands rounded to 10 mantissa bits) in
// the weight contraction do not.
TEST(SphericalConvolution, AnF32KernelIsWellInsideTheToleranceAndTf32IsNot) {
  const Task& t = ConvTask();
  const SizeSpec& size = t.check_sizes.back();
  auto p = Instantiate(t, 4, Dtype::kF32, size, true);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  auto io = BuildOracleIo(*p, 3, {});
  ASSERT_TRUE(io.ok()) << io.status().ToString();
  ASSERT_TRUE(RunOracle(*p, *io).ok());
  const auto& v = p->vars;
  auto n = [&](const char* k) { return static_cast<int64_t>(v.at(k)); };
  const int64_t B = n("B"), C = n("C"), O = n("O"), K = n("K"), H = n("H"), L = n("L"),
                Ho = n("Ho"), Lo = n("Lo"), cap = n("cap"), P = 2, hl = H / P, wl = L / 2,
                ho = Ho / P, wo = Lo / 2, ps = L / Lo;
  ASSERT_EQ(n("G"), 1);
  auto tf32 = [](float f) {  // keep 10 mantissa bits, round to nearest
    uint32_t u;
    std::memcpy(&u, &f, 4);
    u = (u + 0x1000u) & ~0x1fffu;
    std::memcpy(&f, &u, 4);
    return f;
  };
  std::vector<float> X(static_cast<size_t>(B * C * H * L));
  for (int r = 0; r < 4; ++r) {
    auto x = io->in(r, "x");
    for (int64_t bc = 0; bc < B * C; ++bc)
      for (int64_t i = 0; i < hl; ++i)
        for (int64_t j = 0; j < wl; ++j)
          X[static_cast<size_t>((bc * H + (r / 2) * hl + i) * L + (r % 2) * wl + j)] =
              static_cast<float>(x[static_cast<size_t>((bc * hl + i) * wl + j)]);
  }
  std::vector<float> Y(static_cast<size_t>(B * C * K * Ho * Lo), 0.f);
  for (int64_t q = 0; q < P; ++q) {
    auto idx = io->in(static_cast<int>(2 * q), "psi_idx");
    auto val = io->in(static_cast<int>(2 * q), "psi_vals");
    const int64_t nnz = static_cast<int64_t>(io->in(static_cast<int>(2 * q), "psi_nnz")[0]);
    std::vector<float> part(Y.size(), 0.f);
    for (int64_t e = 0; e < nnz; ++e) {
      const int64_t k = static_cast<int64_t>(idx[static_cast<size_t>(e)]);
      const int64_t tt = static_cast<int64_t>(idx[static_cast<size_t>(cap + e)]);
      const int64_t s = static_cast<int64_t>(idx[static_cast<size_t>(2 * cap + e)]);
      const float w = static_cast<float>(val[static_cast<size_t>(e)]);
      for (int64_t bc = 0; bc < B * C; ++bc)
        for (int64_t l = 0; l < Lo; ++l)
          part[static_cast<size_t>(((bc * K + k) * Ho + tt) * Lo + l)] +=
              w * X[static_cast<size_t>((bc * H + q * hl + s / L) * L + (s % L + l * ps) % L)];
    }
    for (size_t m = 0; m < Y.size(); ++m) Y[m] += part[m];
  }
  auto wt = io->in(0, "weight");
  auto bias = io->in(0, "bias");
  const double atol = 3e-5, rtol = 1e-5;
  double worst_f32 = 0, worst_tf32 = 0;  // the largest error over the bound
  for (int r = 0; r < 4; ++r) {
    auto expected = io->out(r, "out");
    for (int64_t b = 0; b < B; ++b)
      for (int64_t o = 0; o < O; ++o)
        for (int64_t tt = 0; tt < ho; ++tt)
          for (int64_t l = 0; l < wo; ++l) {
            float f = static_cast<float>(bias[static_cast<size_t>(o)]), g = f;
            for (int64_t c = 0; c < C; ++c)
              for (int64_t k = 0; k < K; ++k) {
                const float w = static_cast<float>(wt[static_cast<size_t>((o * C + c) * K + k)]);
                const float y = Y[static_cast<size_t>(((b * C + c) * K + k) * Ho * Lo +
                                                      ((r / 2) * ho + tt) * Lo + (r % 2) * wo + l)];
                f += w * y;
                g += tf32(w) * tf32(y);
              }
            const double e = expected[static_cast<size_t>(((b * O + o) * ho + tt) * wo + l)];
            const double bound = atol + rtol * std::abs(e);
            worst_f32 = std::max(worst_f32, std::abs(f - e) / bound);
            worst_tf32 = std::max(worst_tf32, std::abs(g - e) / bound);
          }
  }
  std::printf("[ f32 ] worst error / bound: f32 %.3f, tf32 %.3f\n", worst_f32, worst_tf32);
  EXPECT_LT(worst_f32, 0.2);
  EXPECT_GT(worst_tf32, 1.0);
}

}  // namespace
}  // namespace kforge::eval
