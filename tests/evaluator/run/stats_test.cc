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

}  // namespace
}  // namespace kforge::eval
