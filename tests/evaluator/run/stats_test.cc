#include "run/stats.h"

#include <gtest/gtest.h>

namespace kforge::eval {
namespace {

TEST(StatsTest, QuantilesInterpolate) {
  std::vector<double> v = {4, 1, 3, 2};
  EXPECT_DOUBLE_EQ(Quantile(v, 0.5), 2.5);
  EXPECT_DOUBLE_EQ(Quantile(v, 0.0), 1.0);
  EXPECT_DOUBLE_EQ(Quantile(v, 1.0), 4.0);
  EXPECT_DOUBLE_EQ(Quantile(v, 0.25), 1.75);
}

TEST(StatsTest, SummaryOfKnownSample) {
  TimingStats s = Summarize({10, 12, 11, 13, 14}, {20, 20, 20, 20, 20});
  EXPECT_EQ(s.iters, 5);
  EXPECT_DOUBLE_EQ(s.median_us, 12);
  EXPECT_DOUBLE_EQ(s.min_us, 10);
  EXPECT_DOUBLE_EQ(s.mean_us, 12);
  // sample std = sqrt(2.5)
  EXPECT_NEAR(s.cv, std::sqrt(2.5) / 12, 1e-12);
  EXPECT_DOUBLE_EQ(s.host_median_us, 20);
}

TEST(StatsTest, MaxOverRanksTakesTheSlowestRankPerIteration) {
  auto m = MaxOverRanks({{1, 5, 3}, {2, 4, 6}, {0, 9}});
  EXPECT_EQ(m, (std::vector<double>{2, 9}));  // truncated to the shortest rank
}

// The call gaps of the wall-vs-claimed check, on a trace of the shape an H100
// gave at W = 8 emulated (a one-shot all-reduce at 256 MiB, whose ranks never
// wait for each other): rank 1's work queued behind rank 0's, so its claim
// is short and its wall long, and the largest claim (rank 0's) explains
// neither rank's wall.
TEST(StatsTest, CallGapsJudgeRanksSharingAGpuOnTheirOwnWallAndClaim) {
  const std::vector<std::vector<double>> wall = {{4700, 100}, {5700, 104}};
  const std::vector<std::vector<double>> claimed = {{4650, 60}, {4700, 62}};
  // Own GPUs: the slowest rank's wall minus the largest claim.
  EXPECT_EQ(CallGaps(wall, claimed, false), (std::vector<double>{1000, 42}));
  // Shared GPU: each rank's own gap, the smallest per call.
  EXPECT_EQ(CallGaps(wall, claimed, true), (std::vector<double>{50, 40}));
  EXPECT_EQ(WallSpread(wall), (std::vector<double>{1000, 4}));
  // A process that forges every rank's claim leaves every gap wide.
  const std::vector<std::vector<double>> forged = {{400, 6}, {400, 6}};
  EXPECT_EQ(CallGaps(wall, forged, true), (std::vector<double>{4300, 94}));
  EXPECT_TRUE(CallGaps({}, {}, true).empty());
}

}  // namespace
}  // namespace kforge::eval
