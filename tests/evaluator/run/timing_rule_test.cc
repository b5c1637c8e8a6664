// The stopping rule of timed calls and the median's interval it rests on.
#include "run/timing_rule.h"

#include <gtest/gtest.h>

#include <cmath>

#include "kforge/core/stats.h"

namespace kforge::eval {
namespace {

std::vector<double> OneTo(int n) {
  std::vector<double> v;
  for (int k = n; k >= 1; --k) v.push_back(k);  // unsorted on purpose
  return v;
}

TEST(MedianIntervalTest, MatchesTheOrderStatisticsOfTheTables) {
  // Exact binomial tables give ranks (6, 15) for n = 20 and (40, 61) for n = 100.
  Interval a = MedianInterval(OneTo(20));
  EXPECT_EQ(a.lo, 6);
  EXPECT_EQ(a.hi, 15);
  Interval b = MedianInterval(OneTo(100));
  EXPECT_EQ(b.lo, 40);
  EXPECT_EQ(b.hi, 61);
  Interval tiny = MedianInterval({3, 1, 2});
  EXPECT_EQ(tiny.lo, 1);
  EXPECT_EQ(tiny.hi, 3);
  Interval none = MedianInterval({});
  EXPECT_EQ(none.lo, 0);
  EXPECT_EQ(none.hi, 0);
}

TEST(MedianIntervalTest, CoversTheTrueMedianAboutNinetyFivePercentOfTheTime) {
  // Exponential samples (skewed, like kernel times): true median ln 2.
  SplitMix64 rng(12345);
  int covered = 0;
  const int reps = 4000;
  for (int rep = 0; rep < reps; ++rep) {
    std::vector<double> v;
    for (int k = 0; k < 60; ++k) {
      const double u = (static_cast<double>(rng.Next() >> 11) + 0.5) * 0x1.0p-53;
      v.push_back(-std::log(u));
    }
    Interval ci = MedianInterval(v);
    covered += ci.lo <= std::log(2.0) && std::log(2.0) <= ci.hi;
  }
  EXPECT_GT(covered, reps * 0.93);
  EXPECT_LT(covered, reps * 0.98);
}

TEST(TimingRuleTest, QuietTimesStopAtTheMinimum) {
  TimingRule rule;
  std::vector<double> times;
  // The first block reaches the minimum whatever the block time says.
  int first = NextBlock(rule, times, 0, 1e6);
  EXPECT_EQ(first, rule.min_calls);
  for (int k = 0; k < first; ++k) times.push_back(100.0 + 0.01 * (k % 3));
  EXPECT_EQ(NextBlock(rule, times, 0.01, 100), 0);
}

TEST(TimingRuleTest, NoisyTimesGetMoreCallsUntilPreciseOrCapped) {
  TimingRule rule;
  rule.cap_s = 1.0;
  SplitMix64 rng(7);
  std::vector<double> times;
  double spent = 0;
  const double call_us = 50;
  int blocks = 0;
  for (int block; (block = NextBlock(rule, times, spent, call_us)) > 0; ++blocks) {
    for (int k = 0; k < block; ++k)  // +-10% uniform noise around 50 us
      times.push_back(call_us * (0.9 + 0.2 * static_cast<double>(rng.Next() >> 11) * 0x1.0p-53));
    spent += block * call_us * 1e-6;
  }
  EXPECT_GT(blocks, 1);
  EXPECT_LE(RelativeHalfWidth(times), rule.precision);
  // A block is about block_s of calls: far fewer than the cap allows.
  EXPECT_LT(spent, rule.cap_s);

  // Noise no number of calls within the cap can beat: it stops at the cap.
  std::vector<double> wild;
  spent = 0;
  for (int block; (block = NextBlock(rule, wild, spent, call_us)) > 0;) {
    for (int k = 0; k < block; ++k)
      wild.push_back(call_us * (0.1 + 10 * static_cast<double>(rng.Next() >> 11) * 0x1.0p-53));
    spent += block * call_us * 1e-6 * 40;  // each call costs 40x its time (a slow drive)
  }
  EXPECT_GE(spent, rule.cap_s);
  EXPECT_GT(RelativeHalfWidth(wild), rule.precision);
  EXPECT_LE(static_cast<int>(wild.size()), rule.max_calls);
}

TEST(TimingRuleTest, BlocksNeverPassTheMaximum) {
  TimingRule rule;
  rule.max_calls = 25;
  std::vector<double> times(20, 1.0);
  times[0] = 1000;  // a spread the rule would want to shrink
  for (int k = 1; k < 20; ++k) times[k] = k;
  EXPECT_EQ(NextBlock(rule, times, 0, 1), 5);
  times.resize(25, 3.0);
  EXPECT_EQ(NextBlock(rule, times, 0, 1), 0);
}

TEST(TimingRuleTest, WarmupIsAboutFiftyMillisecondsOfCalls) {
  TimingRule rule;
  EXPECT_EQ(WarmupCalls(rule, 1000), 50);
  EXPECT_EQ(WarmupCalls(rule, 1e6), 10);
  EXPECT_EQ(WarmupCalls(rule, 1), 5000);
}

}  // namespace
}  // namespace kforge::eval
