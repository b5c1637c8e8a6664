#include "kforge/results/compare.h"

#include <gtest/gtest.h>

#include "test_util.h"

namespace kforge::results {
namespace {

SampleOutcome S(const std::string& task, bool correct, std::optional<double> speedup,
                bool emulated = false) {
  SampleOutcome s;
  s.model = "m";
  s.strategy = "refine";
  s.task = task;
  s.world = 4;
  s.dtype = "bf16";
  s.correct = correct;
  s.speedup = speedup;
  s.emulated = emulated;
  return s;
}

std::vector<SampleOutcome> Many(int n, bool correct, double speedup) {
  std::vector<SampleOutcome> v;
  for (int i = 0; i < n; ++i) v.push_back(S("t" + std::to_string(i), correct, speedup));
  return v;
}

TEST(CompareTest, CountsWinsLossesAndTies) {
  std::vector<SampleOutcome> a = {S("t1", true, 1.5), S("t2", false, std::nullopt),
                                  S("t3", true, 1.00), S("t4", true, 1.2), S("only_a", true, 2.0)};
  std::vector<SampleOutcome> b = {S("t1", false, std::nullopt), S("t2", true, 0.9),
                                  S("t3", true, 1.01), S("t4", true, 1.5), S("only_b", true, 2.0)};
  const Comparison c = Compare(a, b, "A", "B", {});
  ASSERT_EQ(c.problems.size(), 4u);
  EXPECT_EQ(c.wins, 1);    // t1: only A correct
  EXPECT_EQ(c.losses, 2);  // t2: only B correct; t4: B faster
  EXPECT_EQ(c.ties, 1);    // t3: within 2%
  EXPECT_EQ(c.only_a, 1);
  EXPECT_EQ(c.only_b, 1);
  // fast_1: A has t1 (1.5), t4 (1.2) = 2/4; B has t3 (1.01), t4 (1.5) = 2/4.
  EXPECT_DOUBLE_EQ(c.fast1_diff.estimate, 0.0);
  // geomean_all ratio: (1.5*1*1*1.2)/(1*0.9*1.01*1.5) to the 1/4.
  EXPECT_NEAR(c.geomean_ratio.estimate, std::pow((1.5 * 1.2) / (0.9 * 1.01 * 1.5), 0.25), 1e-12);
}

// Human parity: over the paired problems whose task has an expert kernel,
// each side's count of problems at least as fast as the expert.
TEST(CompareTest, HumanParityCountsPairedProblemsWithAnExpert) {
  auto with = [](SampleOutcome s, double vs_expert) {
    s.expert_speedup = vs_expert;
    return s;
  };
  std::vector<SampleOutcome> a = {with(S("t1", true, 2.0), 1.1), with(S("t2", true, 1.2), 0.6),
                                  S("t3", true, 1.5)};
  std::vector<SampleOutcome> b = {with(S("t1", true, 1.5), 0.9), S("t2", false, std::nullopt),
                                  S("t3", true, 1.5)};
  const Comparison c = Compare(a, b, "A", "B", {});
  EXPECT_EQ(c.expert_problems, 2) << "t3 has no expert; t2's is known from A's sample";
  EXPECT_EQ(c.parity_a, 1);
  EXPECT_EQ(c.parity_b, 0);
  const std::string text = RenderComparisonText(c);
  EXPECT_NE(text.find("over 2 paired problems with one: A 1, B 0."), std::string::npos) << text;
  const auto j = nlohmann::json::parse(RenderComparisonJson(c));
  EXPECT_EQ(j["human_parity"]["problems"], 2);
  EXPECT_EQ(j["problems"][0]["a_vs_expert"], 1.1);
  EXPECT_TRUE(j["problems"][1]["b_vs_expert"].is_null());
  // Without experts, the text says nothing of them.
  EXPECT_EQ(RenderComparisonText(Compare(Many(3, true, 1.2), Many(3, true, 1.1), "A", "B", {}))
                .find("Human parity"),
            std::string::npos);
}

TEST(CompareTest, BootstrapIsDeterministicForASeed) {
  std::vector<SampleOutcome> a, b;
  for (int i = 0; i < 30; ++i) {
    a.push_back(S("t" + std::to_string(i), i % 3 != 0, 1.0 + 0.03 * i));
    b.push_back(S("t" + std::to_string(i), i % 4 != 0, 1.1));
  }
  CompareOptions o;
  o.seed = 42;
  const Comparison c1 = Compare(a, b, "A", "B", o);
  const Comparison c2 = Compare(a, b, "A", "B", o);
  EXPECT_EQ(c1.fast1_diff.lo, c2.fast1_diff.lo);
  EXPECT_EQ(c1.fast1_diff.hi, c2.fast1_diff.hi);
  EXPECT_EQ(c1.geomean_ratio.lo, c2.geomean_ratio.lo);
  EXPECT_EQ(RenderComparisonJson(c1), RenderComparisonJson(c2));
  o.seed = 43;
  const Comparison c3 = Compare(a, b, "A", "B", o);
  EXPECT_NE(c1.geomean_ratio.lo, c3.geomean_ratio.lo) << "the seed must matter";
  // The interval brackets the point estimate.
  EXPECT_LE(c1.fast1_diff.lo, c1.fast1_diff.estimate);
  EXPECT_GE(c1.fast1_diff.hi, c1.fast1_diff.estimate);
  EXPECT_LE(c1.geomean_ratio.lo, c1.geomean_ratio.estimate);
  EXPECT_GE(c1.geomean_ratio.hi, c1.geomean_ratio.estimate);
}

TEST(CompareTest, VerdictSaysWhenADifferenceIsNotSignificant) {
  // Identical sides: the interval is [0, 0] and nothing is significant.
  auto same = Many(20, true, 1.3);
  Comparison c = Compare(same, same, "A", "B", {});
  EXPECT_FALSE(c.fast1_diff.significant);
  EXPECT_FALSE(c.geomean_ratio.significant);
  EXPECT_NE(c.verdict.find("no significant difference"), std::string::npos) << c.verdict;

  // A clearly better on every problem.
  auto strong = Many(40, true, 1.8);
  auto weak = Many(40, false, 1.0);
  c = Compare(strong, weak, "A", "B", {});
  EXPECT_TRUE(c.fast1_diff.significant);
  EXPECT_TRUE(c.geomean_ratio.significant);
  EXPECT_DOUBLE_EQ(c.fast1_diff.estimate, 1.0);
  EXPECT_NE(c.verdict.find("fast_1: A is better than B"), std::string::npos) << c.verdict;

  // A mixed, small sample: half better, half worse.
  std::vector<SampleOutcome> a, b;
  for (int i = 0; i < 6; ++i) {
    a.push_back(S("t" + std::to_string(i), true, i % 2 ? 1.5 : 0.9));
    b.push_back(S("t" + std::to_string(i), true, i % 2 ? 0.9 : 1.5));
  }
  c = Compare(a, b, "A", "B", {});
  EXPECT_FALSE(c.fast1_diff.significant);
  EXPECT_NE(c.verdict.find("Only 6 paired problems"), std::string::npos);
}

TEST(CompareTest, EmulatedSessionsAreLeftOutByDefault) {
  std::vector<SampleOutcome> a = {S("t1", true, 3.0, /*emulated=*/true), S("t2", true, 1.2)};
  std::vector<SampleOutcome> b = {S("t1", true, 1.0), S("t2", true, 1.2)};
  Comparison c = Compare(a, b, "A", "B", {});
  EXPECT_EQ(c.excluded_emulated, 1);
  EXPECT_EQ(c.problems.size(), 1u);
  CompareOptions o;
  o.include_emulated = true;
  c = Compare(a, b, "A", "B", o);
  EXPECT_EQ(c.problems.size(), 2u);
  EXPECT_EQ(c.wins, 1);
}

TEST(SelectorTest, ParsesRunsAndFilters) {
  testing::TempDir tmp;
  ASSERT_STATUS_OK(MakeDirs(tmp.path() / "night1"));
  ASSERT_STATUS_OK(WriteFileAtomic(StorePath(tmp.path() / "night1"), ""));
  auto sel = ParseSelector("night1:model=gpt,strategy=refine", tmp.path(), {});
  ASSERT_OK(sel);
  ASSERT_EQ(sel->run_dirs.size(), 1u);
  EXPECT_EQ(sel->filters.at("model"), "gpt");
  EXPECT_EQ(sel->filters.at("strategy"), "refine");
  EXPECT_FALSE(ParseSelector("model=gpt", tmp.path(), {}).ok()) << "no run given anywhere";
  auto with_default = ParseSelector("model=gpt", tmp.path(), {tmp.path() / "night1"});
  ASSERT_OK(with_default);
  EXPECT_FALSE(ParseSelector("night1:colour=red", tmp.path(), {}).ok());
  auto missing = ParseSelector("nope", tmp.path(), {});
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("nope"), std::string::npos);
  SampleOutcome s = S("t", true, 1.0);
  s.model = "gpt";
  EXPECT_TRUE(Matches(*sel, s));
  s.strategy = "one-shot";
  EXPECT_FALSE(Matches(*sel, s));
}

// Every real model spec has a colon; the documented "model=M --run R" and
// "RUN:model=M" forms must take it as part of the value.
TEST(SelectorTest, ModelSpecsWithColonsAreFilterValues) {
  testing::TempDir tmp;
  ASSERT_STATUS_OK(MakeDirs(tmp.path() / "night1"));
  ASSERT_STATUS_OK(WriteFileAtomic(StorePath(tmp.path() / "night1"), ""));
  const std::vector<std::filesystem::path> runs = {tmp.path() / "night1"};

  auto bare = ParseSelector("model=openai:gpt-5.5", tmp.path(), runs);
  ASSERT_OK(bare);
  EXPECT_EQ(bare->run_dirs, runs);
  EXPECT_EQ(bare->filters.at("model"), "openai:gpt-5.5");

  auto two = ParseSelector("model=anthropic:claude-opus-4-7,strategy=refine", tmp.path(), runs);
  ASSERT_OK(two);
  EXPECT_EQ(two->filters.at("model"), "anthropic:claude-opus-4-7");
  EXPECT_EQ(two->filters.at("strategy"), "refine");

  auto in_run =
      ParseSelector("night1:model=compat:http://127.0.0.1:8000/v1#m,world=8", tmp.path(), {});
  ASSERT_OK(in_run);
  ASSERT_EQ(in_run->run_dirs.size(), 1u);
  EXPECT_EQ(in_run->filters.at("model"), "compat:http://127.0.0.1:8000/v1#m");
  EXPECT_EQ(in_run->filters.at("world"), "8");

  SampleOutcome s = S("t", true, 1.0);
  s.model = "openai:gpt-5.5";
  EXPECT_TRUE(Matches(*bare, s));
  s.model = "openai:gpt-5";
  EXPECT_FALSE(Matches(*bare, s));

  EXPECT_FALSE(ParseSelector("night1:colour=openai:x", tmp.path(), {}).ok());
}

}  // namespace
}  // namespace kforge::results

namespace kforge::results {
namespace {

TEST(CompareTest, NotEvaluatedSessionsAreNeitherWinsNorLosses) {
  auto a = Many(3, true, 1.5);
  auto b = Many(3, false, 1.0);
  for (auto& s : b) s.not_evaluated = true;
  const Comparison c = Compare(a, b, "A", "B", CompareOptions{});
  EXPECT_EQ(c.problems.size(), 0u);
  EXPECT_EQ(c.wins, 0);
  EXPECT_EQ(c.not_evaluated_b, 3);
  EXPECT_NE(c.verdict.find("No problem was evaluated on both sides"), std::string::npos);
  EXPECT_NE(RenderComparisonText(c).find("not evaluated (left out): 0 in A, 3 in B"),
            std::string::npos);
}

TEST(CompareTest, ValidatesConfidenceAndResamples) {
  CompareOptions o;
  EXPECT_TRUE(ValidateCompareOptions(o).ok());
  o.confidence = 5;
  Status s = ValidateCompareOptions(o);
  EXPECT_EQ(s.kind(), ErrorKind::kInvalidInput);
  EXPECT_NE(s.message().find("--confidence 5"), std::string::npos) << s.message();
  o.confidence = 0.9;
  o.resamples = 0;
  EXPECT_NE(ValidateCompareOptions(o).message().find("--resamples 0"), std::string::npos);
}

}  // namespace
}  // namespace kforge::results
