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

// Calls in blocks whose levels differ (the GPU's state moves at the scale of
// milliseconds): within a block the calls agree closely, so MedianInterval
// alone, which takes every call as independent, is far too narrow. The
// blocked interval takes the spread of the blocks' medians into account.
// k blocks of per_block calls: each block's level drawn around 1 with sd
// block_sd, each call uniform within +-call_spread/2 of its block's level.
std::vector<double> Blocks(SplitMix64& rng, int k, int per_block, double block_sd,
                           double call_spread, std::vector<int>* sizes) {
  std::vector<double> v;
  for (int b = 0; b < k; ++b) {
    // A block's level: roughly normal (sum of uniforms) around 1, sd block_sd.
    double z = -6;
    for (int i = 0; i < 12; ++i) z += static_cast<double>(rng.Next() >> 11) * 0x1.0p-53;
    const double level = 1 + block_sd * z;
    for (int c = 0; c < per_block; ++c)
      v.push_back(level * (1 - call_spread / 2 +
                           call_spread * static_cast<double>(rng.Next() >> 11) * 0x1.0p-53));
    sizes->push_back(per_block);
  }
  return v;
}

TEST(MedianIntervalTest, BlocksThatDifferWidenTheIntervalToCoverTheTrueLevel) {
  SplitMix64 rng(99);
  int covered_blocked = 0, covered_plain = 0;
  const int reps = 2000;
  for (int rep = 0; rep < reps; ++rep) {
    std::vector<int> sizes;
    std::vector<double> v = Blocks(rng, 6, 200, 0.03, 0.01, &sizes);
    const Interval blocked = BlockedMedianInterval(v, sizes), plain = MedianInterval(v);
    covered_blocked += blocked.lo <= 1.0 && 1.0 <= blocked.hi;
    covered_plain += plain.lo <= 1.0 && 1.0 <= plain.hi;
    EXPECT_LE(blocked.lo, plain.lo);
    EXPECT_GE(blocked.hi, plain.hi);
  }
  // Six blocks with a 3% spread of levels: the calls' own interval covers the
  // true level in a small minority of samples, the blocked one in about 95%.
  EXPECT_LT(covered_plain, reps * 0.3);
  EXPECT_GT(covered_blocked, reps * 0.92);
  EXPECT_LT(covered_blocked, reps * 0.99);
}

TEST(MedianIntervalTest, BlocksThatAgreeLeaveTheIntervalAsItWas) {
  std::vector<double> v;
  std::vector<int> sizes;
  for (int b = 0; b < 4; ++b) {
    for (int c = 1; c <= 25; ++c) v.push_back(c);  // every block the same
    sizes.push_back(25);
  }
  const Interval blocked = BlockedMedianInterval(v, sizes), plain = MedianInterval(v);
  EXPECT_EQ(blocked.lo, plain.lo);
  EXPECT_EQ(blocked.hi, plain.hi);
  // One block, or block sizes that do not add up: the calls' own interval.
  EXPECT_EQ(BlockedMedianInterval(v, {100}).lo, plain.lo);
  EXPECT_EQ(BlockedMedianInterval(v, {50, 40}).hi, plain.hi);
  EXPECT_EQ(BlockedMedianInterval(v, {100, 0}).hi, plain.hi);
}

TEST(MedianIntervalTest, StudentsTMatchesItsTable) {
  EXPECT_NEAR(StudentT975(1), 12.706, 1e-3);
  EXPECT_NEAR(StudentT975(4), 2.776, 1e-3);
  EXPECT_NEAR(StudentT975(30), 2.042, 1e-3);
  EXPECT_NEAR(StudentT975(60), 2.000, 0.002);
  EXPECT_NEAR(StudentT975(1000), 1.962, 0.002);
}

// Blocks whose levels differ by 3%: the rule does not stop on precision at
// +-0.5% (no number of calls per block beats the spread between blocks); it
// runs to the cap, and the interval it reports is wide enough to say so.
TEST(TimingRuleTest, BlocksThatDifferRunToTheCap) {
  TimingRule rule;
  SplitMix64 rng(5);
  std::vector<double> times;
  std::vector<int> blocks;
  double spent = 0;
  const double call_us = 40;
  for (int block; (block = NextBlock(rule, times, blocks, spent, call_us)) > 0;) {
    std::vector<int> one;
    // Calls within +-8% of their block's level (as measured at 1 MiB).
    std::vector<double> more = Blocks(rng, 1, block, 0.03, 0.16, &one);
    times.insert(times.end(), more.begin(), more.end());
    blocks.push_back(block);
    spent += block * call_us * 1e-6 * 3;  // a driven call costs about 3x its time
  }
  EXPECT_GE(spent, rule.cap_s);
  EXPECT_GT(RelativeHalfWidth(times, blocks), rule.precision);
  EXPECT_LT(RelativeHalfWidth(times), rule.precision);  // what the calls alone would claim
}

TEST(TimingRuleTest, QuietTimesStopAtTheMinimum) {
  TimingRule rule;
  std::vector<double> times;
  // The first block reaches the minimum whatever the block time says.
  std::vector<int> blocks;
  int first = NextBlock(rule, times, blocks, 0, 1e6);
  EXPECT_EQ(first, rule.min_calls);
  for (int k = 0; k < first; ++k) times.push_back(100.0 + 0.01 * (k % 3));
  blocks.push_back(first);
  // One block cannot show how much blocks differ: more are asked for, of
  // about block_s each, until there are min_blocks.
  const int second = NextBlock(rule, times, blocks, 0.01, 100);
  EXPECT_EQ(second, static_cast<int>(rule.block_s * 1e6 / 100));
  for (int b = 1; b < rule.min_blocks; ++b) {
    for (int k = 0; k < second; ++k) times.push_back(100.0 + 0.01 * (k % 3));
    blocks.push_back(second);
  }
  EXPECT_EQ(NextBlock(rule, times, blocks, 0.03, 100), 0);
}

TEST(TimingRuleTest, NoisyTimesGetMoreCallsUntilPreciseOrCapped) {
  TimingRule rule;
  rule.cap_s = 1.0;
  SplitMix64 rng(7);
  std::vector<double> times;
  double spent = 0;
  const double call_us = 50;
  std::vector<int> blocks;
  for (int block; (block = NextBlock(rule, times, blocks, spent, call_us)) > 0;) {
    for (int k = 0; k < block; ++k)  // +-10% uniform noise around 50 us
      times.push_back(call_us * (0.9 + 0.2 * static_cast<double>(rng.Next() >> 11) * 0x1.0p-53));
    blocks.push_back(block);
    spent += block * call_us * 1e-6;
  }
  EXPECT_GE(static_cast<int>(blocks.size()), rule.min_blocks);
  EXPECT_LE(RelativeHalfWidth(times, blocks), rule.precision);
  // A block is about block_s of calls: far fewer than the cap allows.
  EXPECT_LT(spent, rule.cap_s);

  // Noise no number of calls within the cap can beat: it stops at the cap.
  std::vector<double> wild;
  std::vector<int> wild_blocks;
  spent = 0;
  for (int block; (block = NextBlock(rule, wild, wild_blocks, spent, call_us)) > 0;) {
    for (int k = 0; k < block; ++k)
      wild.push_back(call_us * (0.1 + 10 * static_cast<double>(rng.Next() >> 11) * 0x1.0p-53));
    wild_blocks.push_back(block);
    spent += block * call_us * 1e-6 * 40;  // each call costs 40x its time (a slow drive)
  }
  EXPECT_GE(spent, rule.cap_s);
  EXPECT_GT(RelativeHalfWidth(wild, wild_blocks), rule.precision);
  EXPECT_LE(static_cast<int>(wild.size()), rule.max_calls);
}

TEST(TimingRuleTest, BlocksNeverPassTheMaximum) {
  TimingRule rule;
  rule.max_calls = 25;
  std::vector<double> times(20, 1.0);
  times[0] = 1000;  // a spread the rule would want to shrink
  for (int k = 1; k < 20; ++k) times[k] = k;
  EXPECT_EQ(NextBlock(rule, times, {20}, 0, 1), 5);
  times.resize(25, 3.0);
  EXPECT_EQ(NextBlock(rule, times, {20, 5}, 0, 1), 0);
}

TEST(TimingRuleTest, WarmupIsAboutFiftyMillisecondsOfCalls) {
  TimingRule rule;
  EXPECT_EQ(WarmupCalls(rule, 1000), 50);
  EXPECT_EQ(WarmupCalls(rule, 1e6), 10);
  EXPECT_EQ(WarmupCalls(rule, 1), 5000);
}

}  // namespace
}  // namespace kforge::eval
