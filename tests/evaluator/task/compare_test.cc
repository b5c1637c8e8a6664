#include "task/compare.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

namespace kforge::eval {
namespace {

ConcreteTensor Out(std::vector<int64_t> shape, Dtype dt = Dtype::kF32,
                   Tolerance tol = {1e-3, 1e-3}) {
  ConcreteTensor t;
  t.name = "y";
  t.dtype = dt;
  t.shape = std::move(shape);
  t.numel = 1;
  for (int64_t d : t.shape) t.numel *= d;
  t.nbytes = static_cast<size_t>(t.numel) * DtypeSize(dt);
  t.tolerance = tol;
  return t;
}

std::vector<float> F32(const std::vector<double>& v) {
  return std::vector<float>(v.begin(), v.end());
}

bool HasHint(const CompareReport& r, const std::string& h) {
  for (const auto& x : r.hints) {
    if (x == h) return true;
  }
  return false;
}

std::string Hints(const CompareReport& r) {
  std::string s;
  for (const auto& h : r.hints) s += "[" + h + "] ";
  return s;
}

TEST(Compare, PassesWithinTolerance) {
  const auto out = Out({4}, Dtype::kF32, {0.01, 0.1});
  const std::vector<double> exp = {1, -2, 100, 0};
  // |got - exp| <= 0.01 + 0.1 * |exp|
  const auto got = F32({1.1, -2.2, 110, 0.01});
  CompareContext ctx;
  auto r = CompareOutput(out, got.data(), exp, ctx);
  EXPECT_TRUE(r.passed) << r.bad_count;
  EXPECT_EQ(r.bad_count, 0);
  EXPECT_TRUE(r.hints.empty());
  EXPECT_NEAR(r.max_abs_err, 10, 1e-4);
  EXPECT_NEAR(r.max_rel_err, 0.1, 1e-6);
  const auto worse = F32({1.2, -2, 100, 0});
  EXPECT_FALSE(CompareOutput(out, worse.data(), exp, ctx).passed);
}

TEST(Compare, ReportsCountsAndFirstBadWithMultiDimensionalIndex) {
  const auto out = Out({3, 5});
  std::vector<double> exp(15);
  for (int i = 0; i < 15; ++i) exp[i] = i + 1;
  auto got = F32(exp);
  for (int i : {1, 6, 7, 8, 9, 10, 11, 12, 13, 14}) got[i] += 1;  // 10 bad: report the first 8
  got[0] = std::numeric_limits<float>::quiet_NaN();
  CompareContext ctx;
  ctx.rank = 3;
  auto r = CompareOutput(out, got.data(), exp, ctx);
  EXPECT_FALSE(r.passed);
  EXPECT_EQ(r.rank, 3);
  EXPECT_EQ(r.output, "y");
  EXPECT_EQ(r.bad_count, 11);
  EXPECT_EQ(r.nan_count, 1);
  EXPECT_DOUBLE_EQ(r.max_abs_err, 1);
  EXPECT_DOUBLE_EQ(r.max_rel_err, 0.5);  // element 1: |3 - 2| / 2
  ASSERT_EQ(r.first_bad.size(), kMaxFirstBad);
  EXPECT_EQ(r.first_bad[0].index, (std::vector<int64_t>{0, 0}));
  EXPECT_TRUE(std::isnan(r.first_bad[0].got));
  EXPECT_EQ(r.first_bad[1].index, (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(r.first_bad[1].got, 3);
  EXPECT_EQ(r.first_bad[1].expected, 2);
  EXPECT_EQ(r.first_bad[2].index, (std::vector<int64_t>{1, 1}));  // flat 6
  EXPECT_EQ(r.first_bad[7].index, (std::vector<int64_t>{2, 1}));  // flat 11

  const auto j = ToJson(r);
  EXPECT_EQ(j["rank"], 3);
  EXPECT_EQ(j["output"], "y");
  EXPECT_EQ(j["bad_count"], 11);
  EXPECT_EQ(j["nan_count"], 1);
  EXPECT_EQ(j["first_bad"].size(), 8u);
  EXPECT_TRUE(j["first_bad"][0]["got"].is_null());  // NaN is not JSON
  EXPECT_EQ(j["first_bad"][2]["index"], nlohmann::json({1, 1}));
  EXPECT_EQ(j["first_bad"][1]["expected"], 2.0);
  EXPECT_TRUE(j["hints"].is_array());
  EXPECT_EQ(j["max_abs_err"], 1.0);
}

TEST(Compare, NanAndInfNeverPass) {
  const auto out = Out({3}, Dtype::kF32, {1e30, 1});
  const std::vector<double> exp = {1, std::numeric_limits<double>::infinity(), 3};
  const auto got =
      F32({std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity(), 3});
  auto r = CompareOutput(out, got.data(), exp, {});
  EXPECT_FALSE(r.passed);
  EXPECT_EQ(r.bad_count, 2);
  EXPECT_EQ(r.nan_count, 1);
}

TEST(Compare, HintAllZeros) {
  const auto out = Out({4});
  const std::vector<double> exp = {1, 2, 3, 4};
  const auto got = F32({0, 0, 0, 0});
  CompareContext ctx;
  ctx.world = 4;
  auto r = CompareOutput(out, got.data(), exp, ctx);
  EXPECT_TRUE(HasHint(r, "all zeros")) << Hints(r);
  EXPECT_EQ(r.hints.size(), 1u) << Hints(r);
}

TEST(Compare, HintUnwrittenAndPartiallyWritten) {
  const auto out = Out({2, 3}, Dtype::kBF16);
  const std::vector<double> exp = {1, 2, 3, 4, 5, 6};
  std::vector<uint8_t> raw(12, 0xFF);
  auto r = CompareOutput(out, raw.data(), exp, {});
  EXPECT_FALSE(r.passed);
  EXPECT_EQ(r.nan_count, 6);  // 0xFFFF is a bf16 NaN
  EXPECT_EQ(r.hints,
            std::vector<std::string>{"unwritten (still holds the harness's poison pattern)"});

  for (int i = 0; i < 4; ++i) StoreFromDouble(raw.data(), Dtype::kBF16, i, exp[i]);
  r = CompareOutput(out, raw.data(), exp, {});
  EXPECT_EQ(r.bad_count, 2);
  EXPECT_TRUE(HasHint(r, "partially written (2 of 6 elements still poisoned)")) << Hints(r);

  // Integers: -1 is all 0xFF bytes but a legitimate value when expected.
  const auto ints = Out({3}, Dtype::kI32, {0, 0});
  const std::vector<int32_t> got = {-1, -1, 7};
  r = CompareOutput(ints, got.data(), std::vector<double>{-1, 5, 7}, {});
  EXPECT_EQ(r.bad_count, 1);
  EXPECT_TRUE(HasHint(r, "partially written (1 of 3 elements still poisoned)")) << Hints(r);
}

TEST(Compare, HintEqualsAnInputOfThisRank) {
  const auto out = Out({4});
  ConcreteTensor a = Out({4}), x = Out({4}, Dtype::kBF16);
  a.name = "a";
  x.name = "x";
  const auto a_data = F32({9, 9, 9, 9});
  std::vector<uint16_t> x_data(4);
  for (int i = 0; i < 4; ++i) StoreFromDouble(x_data.data(), Dtype::kBF16, i, 0.5 * i);
  CompareContext ctx;
  ctx.input_specs = {&a, &x};
  ctx.inputs = {a_data.data(), x_data.data()};
  const auto got = F32({0, 0.5, 1, 1.5});
  auto r = CompareOutput(out, got.data(), std::vector<double>{4, 5, 6, 7}, ctx);
  EXPECT_TRUE(HasHint(r, "equals input x of this rank")) << Hints(r);
  EXPECT_FALSE(HasHint(r, "equals input a of this rank")) << Hints(r);
}

TEST(Compare, HintEqualsAnotherRanksExpectedOutput) {
  const auto out = Out({3});
  const std::vector<double> r0 = {1, 2, 3}, r1 = {4, 5, 6}, r2 = {7, 8, 9};
  CompareContext ctx;
  ctx.world = 3;
  ctx.rank = 1;
  ctx.expected_by_rank = {r0, r1, r2};
  const auto got = F32(r2);
  auto r = CompareOutput(out, got.data(), r1, ctx);
  EXPECT_TRUE(HasHint(r, "equals rank 2's expected output")) << Hints(r);
  EXPECT_FALSE(HasHint(r, "equals rank 0's expected output")) << Hints(r);
}

TEST(Compare, HintOffByAFactorOfW) {
  const auto out = Out({3});
  const std::vector<double> exp = {1, -2, 3};
  CompareContext ctx;
  ctx.world = 4;
  const auto times = F32({4, -8, 12});
  auto r = CompareOutput(out, times.data(), exp, ctx);
  EXPECT_TRUE(HasHint(r, "off by a factor of W (4)")) << Hints(r);
  const auto over = F32({0.25, -0.5, 0.75});
  r = CompareOutput(out, over.data(), exp, ctx);
  EXPECT_TRUE(HasHint(r, "off by a factor of 1/W (1/4)")) << Hints(r);
  const auto other = F32({2, -4, 6});
  r = CompareOutput(out, other.data(), exp, ctx);
  EXPECT_TRUE(r.hints.empty()) << Hints(r);
}

TEST(Compare, WrongExpectedSizeNeverPasses) {
  const auto out = Out({3});
  const auto got = F32({1, 2, 3});
  auto r = CompareOutput(out, got.data(), std::vector<double>{1, 2}, {});
  EXPECT_FALSE(r.passed);
}

}  // namespace
}  // namespace kforge::eval

namespace kforge::eval {
namespace {

// The relative RMS bound: an output whose every element is within atol but
// that is off as a whole (a biased, low-precision transport) fails, on outputs
// large enough for the statistic; an honest one with the same worst element
// passes.
TEST(Compare, RelativeRmsBoundRefusesAnOutputOffAsAWhole) {
  const Tolerance tol{0.01, 0, /*rms=*/0.002};
  auto make = [](int64_t n, double err_everywhere, double err_at_one) {
    std::vector<double> expected(static_cast<size_t>(n)), got(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      expected[static_cast<size_t>(i)] = (i % 2 ? 1.0 : -1.0);
      got[static_cast<size_t>(i)] = expected[static_cast<size_t>(i)] + err_everywhere;
    }
    got[7] += err_at_one;
    return std::pair{expected, F32(got)};
  };
  {
    auto [e, g] = make(4096, 0.004, 0);  // within atol everywhere, RMS 0.004
    CompareReport r = CompareOutput(Out({4096}, Dtype::kF32, tol), g.data(), e, {});
    EXPECT_FALSE(r.passed);
    EXPECT_EQ(r.bad_count, 0);
    EXPECT_NEAR(r.rms_rel_err, 0.004, 1e-6);
    ASSERT_EQ(r.hints.size(), 1u) << Hints(r);
    EXPECT_NE(r.hints[0].find("relative RMS of 0.00400 (allowed 0.00200)"), std::string::npos);
  }
  {
    auto [e, g] = make(4096, 0, 0.009);  // one element near atol, the rest exact
    EXPECT_TRUE(CompareOutput(Out({4096}, Dtype::kF32, tol), g.data(), e, {}).passed);
  }
  {
    auto [e, g] = make(kRmsMinElements - 1, 0.004, 0);  // too few elements for the statistic
    EXPECT_TRUE(
        CompareOutput(Out({kRmsMinElements - 1}, Dtype::kF32, tol), g.data(), e, {}).passed);
  }
}

// Against the baseline's outputs: sqrt(rms^2 + b^2) for a baseline measured
// b off the oracle, rms * sqrt(2) without a measurement, never more.
TEST(Compare, RmsBoundAgainstTheBaselineAddsItsMeasuredErrorInQuadrature) {
  EXPECT_DOUBLE_EQ(BaselineRmsBound(0.004, 0.003), 0.005);
  EXPECT_DOUBLE_EQ(BaselineRmsBound(0.004, 0), 0.004);
  EXPECT_DOUBLE_EQ(BaselineRmsBound(0.004, kNotMeasured), 0.004 * std::sqrt(2.0));
  EXPECT_DOUBLE_EQ(BaselineRmsBound(0.004, std::numeric_limits<double>::quiet_NaN()),
                   0.004 * std::sqrt(2.0));
  EXPECT_DOUBLE_EQ(BaselineRmsBound(0.004, std::numeric_limits<double>::infinity()),
                   0.004 * std::sqrt(2.0));
  // A baseline further off than the task allows widens no more than before.
  EXPECT_DOUBLE_EQ(BaselineRmsBound(0.004, 0.01), 0.004 * std::sqrt(2.0));
  // No RMS bound stays none.
  EXPECT_EQ(BaselineRmsBound(0, 0.002), 0);
  EXPECT_EQ(BaselineRmsBound(0, kNotMeasured), 0);
  // Element-wise bounds are kept as they are.
  const Tolerance t{0.01, 0.02, 0.004};
  const Tolerance wide = AgainstBaseline(t, 0.003);
  EXPECT_EQ(wide.atol, 0.01);
  EXPECT_EQ(wide.rtol, 0.02);
  EXPECT_DOUBLE_EQ(wide.rms, 0.005);
  EXPECT_DOUBLE_EQ(AgainstBaseline(t).rms, 0.004 * std::sqrt(2.0));
}

// An output 0.0055 off the baseline as a whole: within rms * sqrt(2) = 0.00566
// (unmeasured), refused once the baseline is measured 0.002 off (bound 0.0045).
TEST(Compare, AMeasuredBaselineRefusesWhatTheSqrt2WideningLetThrough) {
  const Tolerance tol{0.05, 0, /*rms=*/0.004};
  const int64_t n = 4096;
  std::vector<double> baseline(static_cast<size_t>(n));
  std::vector<double> got(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    baseline[static_cast<size_t>(i)] = (i % 3 ? 1.0 : -1.0);
    got[static_cast<size_t>(i)] = baseline[static_cast<size_t>(i)] + (i % 2 ? 0.0055 : -0.0055);
  }
  const auto g = F32(got);
  ConcreteTensor out = Out({n}, Dtype::kF32, tol);
  out.tolerance = AgainstBaseline(tol);
  const CompareReport unmeasured = CompareOutput(out, g.data(), baseline, {});
  EXPECT_TRUE(unmeasured.passed) << Hints(unmeasured);
  EXPECT_NEAR(unmeasured.rms_rel_err, 0.0055, 1e-6);
  out.tolerance = AgainstBaseline(tol, 0.002);
  const CompareReport measured = CompareOutput(out, g.data(), baseline, {});
  EXPECT_FALSE(measured.passed);
  EXPECT_EQ(measured.bad_count, 0);
  // A baseline measured as far off as the task allows gives the old bound back.
  out.tolerance = AgainstBaseline(tol, 0.004);
  EXPECT_TRUE(CompareOutput(out, g.data(), baseline, {}).passed);
}

// A counted output: only the first `count` rows (the expected count) are
// compared; what lies past them is never read, and a row inside them that is
// wrong fails.
TEST(Compare, ACountedOutputIsComparedOnTheExpectedRowsOnly) {
  ConcreteTensor out = Out({4, 2});
  out.count_output = 1;
  const std::vector<double> expected = {1, 2, 3, 4, 0, 0, 0, 0};
  const std::vector<double> two = {2};
  // Right rows, garbage (NaN and poison-like values) past them: passes.
  std::vector<float> got = {1, 2, 3, 4, NAN, 9e9f, -1, 7};
  CompareContext ctx;
  auto r = CompareOutputRows(out, got.data(), expected, two, ctx);
  EXPECT_TRUE(r.passed) << Hints(r);
  EXPECT_EQ(r.numel, 4);
  EXPECT_EQ(r.counted_rows, 2);
  EXPECT_EQ(ToJson(r)["counted_rows"], 2);
  // A wrong value inside the counted rows fails, at its 2-D index.
  got[3] = 5;
  r = CompareOutputRows(out, got.data(), expected, two, ctx);
  EXPECT_FALSE(r.passed);
  ASSERT_EQ(r.first_bad.size(), 1u);
  EXPECT_EQ(r.first_bad[0].index, (std::vector<int64_t>{1, 1}));
  // Zero rows: nothing is compared, nothing is required.
  const std::vector<double> none = {0};
  EXPECT_TRUE(CompareOutputRows(out, got.data(), expected, none, ctx).passed);
}

TEST(Compare, AnExpectedCountThatIsNoRowCountNeverPasses) {
  ConcreteTensor out = Out({4});
  out.count_output = 1;
  const std::vector<double> expected = {1, 2, 3, 4};
  const std::vector<float> got = {1, 2, 3, 4};
  CompareContext ctx;
  for (double bad : {-1.0, 5.0, 1.5, static_cast<double>(NAN)}) {
    const std::vector<double> count = {bad};
    auto r = CompareOutputRows(out, got.data(), expected, count, ctx);
    EXPECT_FALSE(r.passed) << bad;
    ASSERT_FALSE(r.hints.empty());
    EXPECT_EQ(r.hints[0].rfind("harness: ", 0), 0u) << r.hints[0];
  }
  EXPECT_FALSE(CompareOutputRows(out, got.data(), expected, {}, ctx).passed);
  auto rows = CountedRows(out, 0, 4);
  ASSERT_TRUE(rows.ok());
  EXPECT_EQ(*rows, 4);
}

// An output of several of the comparison's chunks (32768 elements each),
// bad elements in the last and the first: the counts are exact, the first
// bad ones come in index order, poisoned ones are told apart, and the RMS
// is the one a single pass gives.
TEST(Compare, ALargeOutputIsTalliedOverItsChunksInIndexOrder) {
  const int64_t n = 3 * 32768 + 5;
  const auto out = Out({n}, Dtype::kBF16);
  std::vector<double> exp(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    exp[static_cast<size_t>(i)] = 1.0 + static_cast<double>(i % 97) / 8;
  std::vector<uint8_t> raw(static_cast<size_t>(n) * 2);
  for (int64_t i = 0; i < n; ++i)
    StoreFromDouble(raw.data(), Dtype::kBF16, i, exp[static_cast<size_t>(i)]);
  auto r = CompareOutput(out, raw.data(), exp, {});
  EXPECT_TRUE(r.passed) << Hints(r);

  const std::vector<int64_t> wrong = {n - 1, 3 * 32768, 70000, 40000, 5, 32767, 32768, 1, 2, 3};
  for (int64_t i : wrong)
    StoreFromDouble(raw.data(), Dtype::kBF16, i, 100.0 + static_cast<double>(i % 7));
  raw[2 * 50000] = 0xFF;  // one element left poisoned
  raw[2 * 50000 + 1] = 0xFF;
  r = CompareOutput(out, raw.data(), exp, {});
  EXPECT_FALSE(r.passed);
  EXPECT_EQ(r.bad_count, static_cast<int64_t>(wrong.size()) + 1);
  EXPECT_EQ(r.nan_count, 1);
  ASSERT_EQ(r.first_bad.size(), kMaxFirstBad);
  const std::vector<int64_t> first = {1, 2, 3, 5, 32767, 32768, 40000, 50000};
  for (size_t k = 0; k < kMaxFirstBad; ++k) {
    EXPECT_EQ(r.first_bad[k].index, std::vector<int64_t>{first[k]}) << k;
    EXPECT_EQ(r.first_bad[k].expected, exp[static_cast<size_t>(first[k])]) << k;
  }
  EXPECT_TRUE(
      HasHint(r, "partially written (1 of " + std::to_string(n) + " elements still poisoned)"))
      << Hints(r);
  double sq_err = 0, sq_exp = 0, max_abs = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double g = LoadAsDouble(raw.data(), Dtype::kBF16, static_cast<size_t>(i));
    const double e = exp[static_cast<size_t>(i)];
    if (!std::isfinite(g)) continue;
    sq_err += (g - e) * (g - e);
    sq_exp += e * e;
    max_abs = std::max(max_abs, std::fabs(g - e));
  }
  EXPECT_NEAR(r.rms_rel_err, std::sqrt(sq_err / sq_exp), 1e-12);
  EXPECT_EQ(r.max_abs_err, max_abs);
}

}  // namespace
}  // namespace kforge::eval
