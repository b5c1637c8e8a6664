// The baseline's error against the oracle at the check sizes, and the RMS
// bounds it gives the bench sizes (evaluator/run/baseline_error.cc). Host
// buffers only, no GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "run/session.h"
#include "task/compare.h"

namespace kforge::eval {
namespace {

using nlohmann::json;
using Raw = std::vector<std::vector<std::vector<char>>>;  // [rank][output] bytes

constexpr int64_t kN = 4096;

ConcreteTensor F32Out(const char* name, int64_t n, double rms) {
  ConcreteTensor t;
  t.name = name;
  t.dtype = Dtype::kF32;
  t.shape = {n};
  t.numel = n;
  t.nbytes = static_cast<size_t>(n) * 4;
  t.tolerance = {0.05, 0.05, rms};
  return t;
}

// Two ranks; y (kN elements, rms 0.004) and z (kN elements, no rms bound).
SizePlan Plan(const char* label, bool check) {
  SizePlan plan;
  plan.size.label = label;
  plan.check = check;
  plan.problem.world = 2;
  plan.problem.dtype = Dtype::kF32;
  plan.problem.outputs = {F32Out("y", kN, 0.004), F32Out("z", kN, 0)};
  return plan;
}

// The oracle's outputs: +-1 alternating, on every rank and output.
OracleIo Oracle(const Problem& p) {
  OracleIo io;
  io.world = p.world;
  io.outputs.resize(static_cast<size_t>(p.world));
  for (auto& rank : io.outputs) {
    for (const ConcreteTensor& t : p.outputs) {
      OracleTensor o{t.name, t.shape, std::vector<double>(static_cast<size_t>(t.numel))};
      for (size_t i = 0; i < o.data.size(); ++i) o.data[i] = i % 2 ? 1.0 : -1.0;
      rank.push_back(std::move(o));
    }
  }
  return io;
}

// The baseline's outputs: the oracle's, off by `off[r]` times each value on rank r.
Raw Baseline(const OracleIo& io, std::vector<double> off) {
  Raw raw(io.outputs.size());
  for (size_t r = 0; r < io.outputs.size(); ++r) {
    for (const OracleTensor& o : io.outputs[r]) {
      std::vector<float> v(o.data.size());
      for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(o.data[i] * (1 + off[r]));
      std::vector<char> bytes(v.size() * 4);
      std::memcpy(bytes.data(), v.data(), bytes.size());
      raw[r].push_back(std::move(bytes));
    }
  }
  return raw;
}

TEST(BaselineError, MeasuredAtCheckSizesWithAnRmsBoundAndEnoughElements) {
  EXPECT_TRUE(MeasuresBaselineError(Plan("aligned", true)));
  EXPECT_FALSE(MeasuresBaselineError(Plan("1MiB", false)));  // no oracle at bench sizes
  SizePlan none = Plan("aligned", true);
  none.problem.outputs[0].tolerance.rms = 0;
  EXPECT_FALSE(MeasuresBaselineError(none));
  SizePlan small = Plan("seven", true);
  small.problem.outputs[0] = F32Out("y", kRmsMinElements - 1, 0.004);
  EXPECT_FALSE(MeasuresBaselineError(small));
}

TEST(BaselineError, TheLargestErrorOverRanksSizesAndTrialsSetsTheBound) {
  EvalSession s;
  SizePlan aligned = Plan("aligned", true), odd = Plan("odd", true), bench = Plan("1MiB", false);
  // Nothing measured yet: no bounds for the harness (it applies rms * sqrt(2)).
  EXPECT_TRUE(RmsVsBaseline(s, bench.problem).empty());
  json report = VsBaselineReport(s, bench.problem);
  ASSERT_EQ(report.size(), 1u) << report.dump();  // z has no rms bound
  EXPECT_TRUE(report[0]["baseline_rms_vs_oracle"].is_null());
  EXPECT_DOUBLE_EQ(report[0]["rms_bound"].get<double>(), 0.004 * std::sqrt(2.0));

  const OracleIo io = Oracle(aligned.problem);
  json trial = RecordBaselineError(s, aligned, Baseline(io, {0.001, 0.002}), io);
  ASSERT_TRUE(trial.contains("y")) << trial.dump();
  EXPECT_FALSE(trial.contains("z"));
  EXPECT_NEAR(trial["y"].get<double>(), 0.002, 1e-6);
  // A smaller error elsewhere does not lower it; a larger one raises it.
  RecordBaselineError(s, odd, Baseline(io, {0.0015, 0.0005}), io);
  EXPECT_EQ(s.baseline_error[0].size, "aligned");
  RecordBaselineError(s, odd, Baseline(io, {0.003, 0}), io);
  EXPECT_EQ(s.baseline_error[0].size, "odd");
  EXPECT_NEAR(s.baseline_error[0].rms_vs_oracle, 0.003, 1e-6);

  const std::vector<double> bounds = RmsVsBaseline(s, bench.problem);
  ASSERT_EQ(bounds.size(), 2u);
  EXPECT_NEAR(bounds[0], 0.005, 1e-6);  // sqrt(0.004^2 + 0.003^2)
  EXPECT_EQ(bounds[1], 0);              // no rms bound
  report = VsBaselineReport(s, bench.problem);
  ASSERT_EQ(report.size(), 1u);
  EXPECT_EQ(report[0]["output"], "y");
  EXPECT_NEAR(report[0]["baseline_rms_vs_oracle"].get<double>(), 0.003, 1e-6);
  EXPECT_EQ(report[0]["measured_at"], "odd");
  EXPECT_NEAR(report[0]["rms_bound"].get<double>(), 0.005, 1e-6);
  EXPECT_DOUBLE_EQ(report[0]["rms"].get<double>(), 0.004);
}

TEST(BaselineError, ABaselineOutsideTheElementBoundsMeasuresNothing) {
  EvalSession s;
  SizePlan aligned = Plan("aligned", true);
  const OracleIo io = Oracle(aligned.problem);
  Raw raw = Baseline(io, {0, 0});
  const float nan = std::nanf("");
  for (auto& rank : raw) std::memcpy(rank[0].data(), &nan, sizeof nan);  // one NaN each
  json trial = RecordBaselineError(s, aligned, raw, io);
  EXPECT_FALSE(trial.contains("y")) << trial.dump();
  const std::vector<double> bounds = RmsVsBaseline(s, aligned.problem);
  ASSERT_EQ(bounds.size(), 2u);
  EXPECT_DOUBLE_EQ(bounds[0], 0.004 * std::sqrt(2.0));
}

}  // namespace
}  // namespace kforge::eval
