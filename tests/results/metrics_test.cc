#include "kforge/results/metrics.h"

#include <gtest/gtest.h>

#include <cmath>

#include "kforge/results/fixture.h"
#include "test_util.h"

namespace kforge::results {
namespace {

SampleOutcome S(const std::string& model, const std::string& task, bool correct,
                std::optional<double> speedup, bool emulated = false,
                const std::string& category = "collective") {
  SampleOutcome s;
  s.run = "r";
  s.model = model;
  s.strategy = "refine";
  s.task = task;
  s.category = category;
  s.world = 4;
  s.dtype = "bf16";
  s.correct = correct;
  s.verdict = correct ? Verdict::kPassed : Verdict::kMismatch;
  s.speedup = speedup;
  s.emulated = emulated;
  s.tokens = 100;
  s.cost_usd = 0.5;
  s.wall_s = 10;
  return s;
}

TEST(PassAtKTest, MatchesHandComputedBinomials) {
  EXPECT_DOUBLE_EQ(PassAtK(5, 2, 1), 0.4);
  EXPECT_NEAR(PassAtK(5, 2, 2), 1.0 - 3.0 / 10.0, 1e-12);     // 1 - C(3,2)/C(5,2)
  EXPECT_NEAR(PassAtK(10, 3, 5), 1.0 - 21.0 / 252.0, 1e-12);  // 1 - C(7,5)/C(10,5)
  EXPECT_NEAR(PassAtK(20, 1, 10), 0.5, 1e-12);                // 1 - C(19,10)/C(20,10)
  EXPECT_DOUBLE_EQ(PassAtK(4, 0, 2), 0.0);
  EXPECT_DOUBLE_EQ(PassAtK(3, 1, 3), 1.0);  // n-c < k: every draw of k holds the success
  EXPECT_DOUBLE_EQ(PassAtK(3, 3, 1), 1.0);
  EXPECT_TRUE(std::isnan(PassAtK(2, 1, 3)));
  EXPECT_TRUE(std::isnan(PassAtK(2, 3, 1)));
}

class HandComputedTest : public ::testing::Test {
 protected:
  // Four problems, two samples each:
  //  t1: correct 1.5x, wrong     t2: correct 0.8x, correct 1.1x
  //  t3: wrong, wrong            t4: correct 2.5x, correct (untimed)
  std::vector<SampleOutcome> samples = {
      S("A", "t1", true, 1.5), S("A", "t1", false, std::nullopt), S("A", "t2", true, 0.8),
      S("A", "t2", true, 1.1), S("A", "t3", false, std::nullopt), S("A", "t3", false, std::nullopt),
      S("A", "t4", true, 2.5), S("A", "t4", true, std::nullopt),
  };
};

TEST_F(HandComputedTest, FastPPassAtKGeomeanAndCost) {
  MetricsOptions options;
  options.group_by = {"model"};
  auto rows = ComputeMetrics(samples, options);
  ASSERT_EQ(rows.size(), 1u);
  const GroupMetrics& g = rows[0];
  EXPECT_EQ(g.label, "A");
  EXPECT_EQ(g.problems, 4);
  EXPECT_EQ(g.samples, 8);
  EXPECT_EQ(g.solved, 3);
  EXPECT_DOUBLE_EQ(g.correct_rate, 0.75);
  EXPECT_DOUBLE_EQ(g.FastP(0), 0.75);
  EXPECT_DOUBLE_EQ(g.FastP(1), 0.75);
  EXPECT_DOUBLE_EQ(g.FastP(1.2), 0.5);
  EXPECT_DOUBLE_EQ(g.FastP(1.5), 0.25) << "speedup must exceed p strictly";
  EXPECT_DOUBLE_EQ(g.FastP(2), 0.25);
  ASSERT_EQ(g.pass_at_k.size(), 1u) << "k=5,10 exceed the 2 samples per problem";
  EXPECT_EQ(g.pass_at_k[0].first, 1);
  EXPECT_DOUBLE_EQ(g.pass_at_k[0].second, (0.5 + 1 + 0 + 1) / 4);
  EXPECT_DOUBLE_EQ(g.fast1_at_k[0].second, (0.5 + 0.5 + 0 + 0.5) / 4);
  EXPECT_NEAR(*g.geomean_correct, std::cbrt(1.5 * 1.1 * 2.5), 1e-12);
  EXPECT_NEAR(g.geomean_all, std::pow(1.5 * 1.1 * 1.0 * 2.5, 0.25), 1e-12);
  EXPECT_EQ(g.tokens, 800);
  EXPECT_NEAR(*g.tokens_per_solved, 800.0 / 3, 1e-9);
  EXPECT_NEAR(*g.cost_per_solved, 4.0 / 3, 1e-12);
  EXPECT_DOUBLE_EQ(g.wall_s, 80);
}

TEST_F(HandComputedTest, PassAtTwoUsesEveryProblem) {
  MetricsOptions options;
  options.group_by = {"model"};
  options.ks = {2};
  auto rows = ComputeMetrics(samples, options);
  ASSERT_EQ(rows[0].pass_at_k.size(), 1u);
  EXPECT_DOUBLE_EQ(rows[0].pass_at_k[0].second, 0.75);
  EXPECT_DOUBLE_EQ(rows[0].fast1_at_k[0].second, 0.75);
}

// Against the expert: only problems whose task had its expert timed count;
// an incorrect sample is below parity; a task without an expert stays out.
TEST(MetricsTest, HumanParityCountsProblemsWithAnExpert) {
  auto with = [](SampleOutcome s, std::optional<double> vs_expert) {
    s.expert_speedup = vs_expert;
    return s;
  };
  // t1: B beats the expert (1.2x), A reaches 0.9x; t2: B is wrong, and A's correct sample
  // (0.5x) shows the task has an expert; t3: no sample timed an expert.
  std::vector<SampleOutcome> samples = {
      with(S("A", "t1", true, 3.0), 0.9),
      with(S("B", "t1", true, 4.0), 1.2),
      with(S("A", "t2", true, 1.5), 0.5),
      S("B", "t2", false, std::nullopt),
      S("A", "t3", true, 2.0),
      S("B", "t3", true, 2.0),
  };
  MetricsOptions options;
  options.group_by = {"model"};
  auto rows = ComputeMetrics(samples, options);
  ASSERT_EQ(rows.size(), 2u);
  const GroupMetrics& a = rows[0].label == "A" ? rows[0] : rows[1];
  const GroupMetrics& b = rows[0].label == "B" ? rows[0] : rows[1];
  EXPECT_EQ(a.expert_problems, 2);
  EXPECT_EQ(b.expert_problems, 2) << "t2 has an expert although B's sample there was wrong";
  ASSERT_TRUE(a.human_parity && b.human_parity);
  EXPECT_DOUBLE_EQ(*a.human_parity, 0.0);
  EXPECT_DOUBLE_EQ(*b.human_parity, 0.5);
  EXPECT_NEAR(*a.geomean_vs_expert, std::sqrt(0.9 * 0.5), 1e-12);
  EXPECT_NEAR(*b.geomean_vs_expert, 1.2, 1e-12) << "over its correct problems only";
  ASSERT_FALSE(b.expert_fast_p.empty());
  EXPECT_EQ(b.expert_fast_p.front().first, 1);
  EXPECT_DOUBLE_EQ(b.expert_fast_p.front().second, 0.5);
  // No expert anywhere: no figures at all.
  auto plain = ComputeMetrics({S("A", "t3", true, 2.0)}, options);
  EXPECT_EQ(plain[0].expert_problems, 0);
  EXPECT_FALSE(plain[0].human_parity.has_value());
  EXPECT_TRUE(plain[0].expert_fast_p.empty());
}

TEST(MetricsTest, EmulatedRowsAreSeparateExcludedOrPooled) {
  std::vector<SampleOutcome> samples = {S("A", "t1", true, 2.0),
                                        S("A", "t2", true, 3.0, /*emulated=*/true)};
  MetricsOptions options;
  options.group_by = {"model"};
  auto rows = ComputeMetrics(samples, options);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_FALSE(rows[0].emulated);
  EXPECT_DOUBLE_EQ(*rows[0].geomean_correct, 2.0) << "real rows never see emulated timings";
  EXPECT_TRUE(rows[1].emulated);
  EXPECT_DOUBLE_EQ(*rows[1].geomean_correct, 3.0);

  options.emulated = EmulatedPolicy::kExclude;
  rows = ComputeMetrics(samples, options);
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].problems, 1);

  options.emulated = EmulatedPolicy::kInclude;
  rows = ComputeMetrics(samples, options);
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_TRUE(rows[0].includes_emulated);
  EXPECT_NEAR(*rows[0].geomean_correct, std::sqrt(6.0), 1e-12);
}

TEST(MetricsTest, GroupsByCategoryAndSortsByFastOne) {
  std::vector<SampleOutcome> samples = {
      S("weak", "t1", true, 0.9, false, "moe"),
      S("weak", "t2", false, std::nullopt, false, "fused"),
      S("strong", "t1", true, 1.4, false, "moe"),
      S("strong", "t2", true, 1.2, false, "fused"),
  };
  MetricsOptions options;
  options.group_by = {"model"};
  auto rows = ComputeMetrics(samples, options);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].label, "strong");
  EXPECT_EQ(rows[1].label, "weak");

  auto dims = ParseGroupBy("model,category");
  ASSERT_OK(dims);
  options.group_by = *dims;
  rows = ComputeMetrics(samples, options);
  ASSERT_EQ(rows.size(), 4u);
  EXPECT_EQ(rows[0].key[1].first, "category");
  EXPECT_FALSE(ParseGroupBy("model,colour").ok());
}

TEST(MetricsTest, FixtureStoreLoadsAndRanksStrongerModelFirst) {
  testing::TempDir tmp;
  FixtureSpec spec;
  spec.emulated_models = {"model-c"};
  ASSERT_STATUS_OK(WriteFixtureRun(tmp.path() / "fx", spec));
  auto samples = LoadRunDirs({tmp.path() / "fx"});
  ASSERT_OK(samples);
  EXPECT_EQ(samples->size(), 3u * 2 * 6 * 2);
  MetricsOptions options;
  options.group_by = {"model"};
  auto rows = ComputeMetrics(*samples, options);
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[0].label, "model-a");
  EXPECT_EQ(rows[1].label, "model-b");
  EXPECT_EQ(rows[2].label, "model-c");
  EXPECT_TRUE(rows[2].emulated);
  for (const auto& r : rows) {
    EXPECT_EQ(r.problems, 6);
    EXPECT_EQ(r.samples, 24);
    ASSERT_FALSE(r.pass_at_k.empty());
  }
  EXPECT_GT(rows[0].pass_at_k[0].second, rows[1].pass_at_k[0].second);
}

}  // namespace
}  // namespace kforge::results
