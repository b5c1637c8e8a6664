// Which baselines an evaluator may reuse: only one timed for exactly this
// size, reference, dtype, world, GPUs and timing rule, and only while fresh.
#include "run/baseline_cache.h"

#include <gtest/gtest.h>

#include <thread>

#include "one_size_session.h"
#include "run/timing_rule.h"

namespace kforge::eval {
namespace {

struct Fixture : OneSizeSession {
  // A baseline as TimeBaselines leaves it.
  void TimeIt(double before_us, double after_us) {
    SizePlan& plan = s.plans[0];
    plan.baseline.side.claimed_us = {before_us, after_us};
    plan.baseline.side.wall_us = {before_us + 8, after_us + 8};
    plan.baseline.side.sm_clock_mhz = {1980, 1980};
    plan.baseline.before_us = before_us;
    plan.baseline.after_us = after_us;
    plan.baseline.warmup = 7;
    plan.baseline.call_wall_us = 40;
  }
  void Reset() {
    SizePlan& plan = s.plans[0];
    plan.baseline = BaselineTiming{};
    plan.candidate = Side{};
    plan.reused_baseline_age_s = -1;
    plan.reused_baseline_uses = 0;
  }
};

TEST(BaselineCache, AFreshRecordIsReusedWithItsCallsAndCounted) {
  Fixture f;
  EXPECT_EQ(ReuseBaselines(f.s), 1);  // nothing recorded yet
  f.TimeIt(30.0, 31.0);
  RecordBaselines(f.s);
  ASSERT_EQ(f.cache.size(), 1u);
  f.Reset();
  EXPECT_EQ(ReuseBaselines(f.s), 0);
  const SizePlan& plan = f.s.plans[0];
  EXPECT_TRUE(plan.BaselineReused());
  EXPECT_EQ(plan.reused_baseline_uses, 1);
  EXPECT_EQ(plan.baseline.side.claimed_us, (std::vector<double>{30.0, 31.0}));
  EXPECT_EQ(plan.baseline.before_us, 30.0);
  EXPECT_EQ(plan.baseline.after_us, 31.0);
  EXPECT_EQ(plan.baseline.warmup, 7);
  EXPECT_EQ(plan.baseline.call_wall_us, 40);
  // A reused baseline is not recorded again as if it were fresh.
  RecordBaselines(f.s);
  f.Reset();
  ASSERT_EQ(ReuseBaselines(f.s), 0);
  EXPECT_EQ(f.s.plans[0].reused_baseline_uses, 2);
}

TEST(BaselineCache, AnythingTheTimeDependsOnMakesAnotherKey) {
  Fixture f;
  const std::string key = BaselineCache::Key(f.s, f.s.plans[0]);
  auto differs = [&](auto&& change) {
    Fixture g;
    change(g);
    return BaselineCache::Key(g.s, g.s.plans[0]) != key;
  };
  EXPECT_FALSE(differs([](Fixture&) {}));
  EXPECT_TRUE(differs([](Fixture& g) { g.s.dtype = Dtype::kBF16; }));
  EXPECT_TRUE(differs([](Fixture& g) { g.s.devices = {0, 1}; }));
  EXPECT_TRUE(differs([](Fixture& g) { g.s.emulated = false; }));
  EXPECT_TRUE(differs([](Fixture& g) { g.s.plans[0].sets = 4; }));
  EXPECT_TRUE(differs([](Fixture& g) { g.options.timing_cap_s = 1.0; }));
  EXPECT_TRUE(differs([](Fixture& g) { g.options.timing_precision = 0.01; }));
  EXPECT_TRUE(differs([](Fixture& g) { g.s.reference_object = "/other/kernel.so"; }));
  EXPECT_TRUE(differs([](Fixture& g) { g.s.plans[0].problem.perf_bytes += 1; }));
  EXPECT_TRUE(differs([](Fixture& g) { g.s.plans[0].problem.inputs[0].shape[0] += 1; }));
}

TEST(BaselineCache, OldRecordsAndAZeroReuseWindowAreNeverReused) {
  Fixture f;
  f.options.baseline_reuse_s = 0.05;
  f.TimeIt(30.0, 31.0);
  RecordBaselines(f.s);
  std::this_thread::sleep_for(std::chrono::milliseconds(120));
  f.Reset();
  EXPECT_EQ(ReuseBaselines(f.s), 1);
  EXPECT_EQ(f.cache.size(), 0u);  // dropped when found stale

  Fixture off;
  off.options.baseline_reuse_s = 0;
  off.TimeIt(30.0, 31.0);
  RecordBaselines(off.s);
  EXPECT_EQ(off.cache.size(), 0u);
}

TEST(BaselineCache, AReusedBaselineTimedAtOtherClocksIsDropped) {
  Fixture f;
  f.TimeIt(30.0, 31.0);
  RecordBaselines(f.s);
  f.Reset();
  ASSERT_EQ(ReuseBaselines(f.s), 0);
  f.s.plans[0].candidate.sm_clock_mhz = {1975, 1990};  // within 3%
  EXPECT_EQ(DropStaleBaselines(f.s), 0);
  EXPECT_TRUE(f.s.plans[0].BaselineReused());
  f.s.plans[0].candidate.sm_clock_mhz = {1750, 1760};  // throttled since
  EXPECT_EQ(DropStaleBaselines(f.s), 1);
  EXPECT_FALSE(f.s.plans[0].BaselineReused());
  EXPECT_TRUE(f.s.plans[0].baseline.side.claimed_us.empty());
  EXPECT_EQ(f.s.plans[0].baseline.before_us, 0);
}

}  // namespace
}  // namespace kforge::eval

namespace kforge::eval {
namespace {

// A reused record is confirmed within EvalOptions::baseline_confirm_slack,
// widened to 5% only where more than four ranks share a GPU (speedups there
// repeat to about +-15%); "never" (negative) stays never.
TEST(BaselineCache, TheConfirmSlackWidensOnlyWhereSpeedupsAreIndicative) {
  Fixture f;
  f.options.baseline_confirm_slack = 0.01;
  EXPECT_DOUBLE_EQ(f.s.ConfirmSlack(), 0.01);  // W = 2, emulated
  f.s.world = 8;
  EXPECT_TRUE(f.s.SpeedupsIndicative());
  EXPECT_DOUBLE_EQ(f.s.ConfirmSlack(), EvalSession::kIndicativeConfirmSlack);
  f.options.baseline_confirm_slack = 0.2;
  EXPECT_DOUBLE_EQ(f.s.ConfirmSlack(), 0.2);
  f.options.baseline_confirm_slack = -1;
  EXPECT_LT(f.s.ConfirmSlack(), 0);
  f.options.baseline_confirm_slack = 0.01;
  f.s.emulated = false;  // eight real GPUs
  EXPECT_FALSE(f.s.SpeedupsIndicative());
  EXPECT_DOUBLE_EQ(f.s.ConfirmSlack(), 0.01);
}

// The same for the timing rule: +-2% at most finely, a quarter of a second
// at most and 10 calls at least where speedups are indicative, the options'
// (and 20 calls) elsewhere; a coarser precision or a shorter cap asked for is
// kept as it is.
TEST(BaselineCache, TheTimingRuleIsShorterOnlyWhereSpeedupsAreIndicative) {
  Fixture f;
  f.options.timing_precision = 0.005;
  f.options.timing_cap_s = 0.5;
  const TimingRule plain = f.s.Rule();  // W = 2, emulated
  EXPECT_DOUBLE_EQ(plain.precision, 0.005);
  EXPECT_DOUBLE_EQ(plain.cap_s, 0.5);
  EXPECT_EQ(plain.min_calls, 20);
  f.s.world = 8;
  const TimingRule indicative = f.s.Rule();
  EXPECT_DOUBLE_EQ(indicative.precision, EvalSession::kIndicativePrecision);
  EXPECT_DOUBLE_EQ(indicative.cap_s, EvalSession::kIndicativeCapS);
  EXPECT_EQ(indicative.min_calls, EvalSession::kIndicativeMinCalls);
  f.options.timing_precision = 0.05;
  f.options.timing_cap_s = 0.1;
  EXPECT_DOUBLE_EQ(f.s.Rule().precision, 0.05);
  EXPECT_DOUBLE_EQ(f.s.Rule().cap_s, 0.1);
  f.options.timing_precision = 0.005;
  f.options.timing_cap_s = 0.5;
  f.s.emulated = false;  // eight real GPUs
  EXPECT_DOUBLE_EQ(f.s.Rule().precision, 0.005);
  EXPECT_DOUBLE_EQ(f.s.Rule().cap_s, 0.5);
  EXPECT_EQ(f.s.Rule().min_calls, 20);
}

// What the shorter rule does to a side whose calls cost 40 ms (a 256 MiB
// call at W = 8 on one GPU, staging and verification included): one block
// of 10 calls, not 20, then the cap ends it.
TEST(BaselineCache, AnIndicativeSideOfSlowCallsStopsAfterTenCalls) {
  Fixture f;
  f.s.world = 8;
  const TimingRule rule = f.s.Rule();
  std::vector<double> times;
  std::vector<int> blocks;
  const int first = NextBlock(rule, times, blocks, 0, 40000);
  EXPECT_EQ(first, 10);
  // Honest times that vary (never zeros), as a first block of them reads.
  for (int k = 0; k < first; ++k) times.push_back(6000 + 150 * (k % 4));
  blocks.push_back(first);
  EXPECT_EQ(NextBlock(rule, times, blocks, 0.4, 40000), 0);
  f.s.world = 2;  // the plain rule wants 20 calls whatever the cap says
  EXPECT_EQ(NextBlock(f.s.Rule(), times, blocks, 0.4, 40000), 10);
}

}  // namespace
}  // namespace kforge::eval

namespace kforge::eval {
namespace {

TimingStats Stats(double lo, double median, double hi) {
  TimingStats t;
  t.iters = 20;
  t.ci_lo_us = lo;
  t.median_us = median;
  t.ci_hi_us = hi;
  return t;
}

// A fresh block confirms a record where their intervals (the fresh one
// widened by the slack) overlap: a record whose own blocks spread by 3% is
// not refused for a block 2% off its median; a GPU that has changed is.
TEST(BaselineCache, AFreshBlockConfirmsARecordWhoseIntervalItMeets) {
  const TimingStats record = Stats(29.0, 30.0, 31.0);                 // +-3.3%, blocks that differ
  EXPECT_TRUE(RecordAgrees(record, Stats(30.4, 30.6, 30.8), 0.01));   // 2% off the median
  EXPECT_TRUE(RecordAgrees(record, Stats(31.2, 31.4, 31.6), 0.01));   // within the slack
  EXPECT_FALSE(RecordAgrees(record, Stats(33.0, 33.3, 33.6), 0.01));  // 11% slower now
  EXPECT_FALSE(RecordAgrees(record, Stats(25.0, 25.2, 25.4), 0.01));  // 16% faster now
  // A tight record (a large size) keeps the tight test it had.
  const TimingStats tight = Stats(1000.0, 1001.0, 1002.0);
  EXPECT_TRUE(RecordAgrees(tight, Stats(1005.0, 1008.0, 1011.0), 0.01));
  EXPECT_FALSE(RecordAgrees(tight, Stats(1025.0, 1030.0, 1035.0), 0.01));
  // Never with a negative slack, nor without calls on either side.
  EXPECT_FALSE(RecordAgrees(record, Stats(29.5, 30.0, 30.5), -1));
  EXPECT_FALSE(RecordAgrees(TimingStats{}, Stats(29.5, 30.0, 30.5), 0.01));
  EXPECT_FALSE(RecordAgrees(record, TimingStats{}, 0.01));
}

}  // namespace
}  // namespace kforge::eval
