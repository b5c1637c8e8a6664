// Leaderboard output on a fixture store, in every format.
#include "kforge/results/leaderboard.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "kforge/results/fixture.h"
#include "test_util.h"

namespace kforge::results {
namespace {

class LeaderboardTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    tmp_ = new testing::TempDir();
    FixtureSpec spec;
    spec.run_name = "nightly";
    spec.tasks = 4;
    spec.strategies = {"refine"};
    spec.emulated_models = {"model-c"};
    ASSERT_STATUS_OK(WriteFixtureRun(tmp_->path() / "nightly", spec));
  }
  static void TearDownTestSuite() { delete tmp_; }

  Leaderboard Board(const std::string& by = "model,strategy") {
    auto samples = LoadRunDirs({tmp_->path() / "nightly"});
    EXPECT_TRUE(samples.ok());
    MetricsOptions options;
    options.group_by = *ParseGroupBy(by);
    return BuildLeaderboard(samples.ok() ? *samples : std::vector<SampleOutcome>{}, options);
  }

  static testing::TempDir* tmp_;
};
testing::TempDir* LeaderboardTest::tmp_ = nullptr;

TEST_F(LeaderboardTest, JsonRowsAgreeWithTheMetrics) {
  const Leaderboard board = Board();
  auto doc = nlohmann::json::parse(RenderJson(board));
  EXPECT_EQ(doc["schema"], "kforge.leaderboard/1");
  EXPECT_EQ(doc["runs"], nlohmann::json({"nightly"}));
  ASSERT_EQ(doc["rows"].size(), 3u);
  for (size_t i = 0; i < board.rows.size(); ++i) {
    const auto& row = doc["rows"][i];
    const GroupMetrics& g = board.rows[i];
    EXPECT_EQ(row["model"], g.key[0].second);
    EXPECT_EQ(row["problems"], 4);
    EXPECT_EQ(row["samples"], 8);
    EXPECT_DOUBLE_EQ(row["correct_rate"].get<double>(), g.correct_rate);
    EXPECT_DOUBLE_EQ(row["fast_p"]["1.2"].get<double>(), g.FastP(1.2));
    EXPECT_DOUBLE_EQ(row["pass_at_k"]["1"].get<double>(), g.pass_at_k[0].second);
    EXPECT_FALSE(row["pass_at_k"].contains("5")) << "2 samples per problem cannot give pass@5";
    EXPECT_DOUBLE_EQ(row["geomean_speedup_all"].get<double>(), g.geomean_all);
  }
  EXPECT_EQ(doc["rows"][2]["model"], "model-c");
  EXPECT_EQ(doc["rows"][2]["emulated"], true);
  EXPECT_EQ(doc["rows"][0]["emulated"], false);
}

TEST_F(LeaderboardTest, MarkdownAndCsvHaveOneLinePerRow) {
  const Leaderboard board = Board();
  const std::string md = RenderMarkdown(board);
  EXPECT_NE(md.find("| model | strategy | timings | problems | samples | correct | fast_1 | "
                    "fast_1.2 | fast_1.5 | "
                    "fast_2 | pass@1 | fast1@1 |"),
            std::string::npos)
      << md;
  EXPECT_NE(md.find("| model-a | refine | real | 4 | 8 |"), std::string::npos) << md;
  EXPECT_NE(md.find("| model-c | refine | emulated | 4 | 8 |"), std::string::npos) << md;
  EXPECT_NE(md.find("incorrect one counted as 1.0x"), std::string::npos);

  const std::string csv = RenderCsv(board);
  int lines = 0;
  for (char c : csv) lines += c == '\n';
  EXPECT_EQ(lines, 4);
  EXPECT_EQ(csv.rfind("model,strategy,timings,problems,samples,correct,fast_1,", 0), 0u) << csv;
  // Machine formats use plain numbers, not percentages.
  EXPECT_EQ(csv.find('%'), std::string::npos);
}

TEST_F(LeaderboardTest, GroupsByCategory) {
  const Leaderboard board = Board("model,category");
  // Tasks 1..4 cycle collective, fused, moe, collective: 3 categories × 3 models.
  EXPECT_EQ(board.rows.size(), 9u);
  for (const auto& r : board.rows) {
    EXPECT_EQ(r.key[1].first, "category");
    EXPECT_EQ(r.problems, r.key[1].second == "collective" ? 2 : 1);
  }
}

TEST_F(LeaderboardTest, HtmlPageIsSelfContainedWithThreeCharts) {
  const std::string page = RenderHtmlPage(Board());
  EXPECT_EQ(page.rfind("<!DOCTYPE html>", 0), 0u);
  for (const char* chart : {"chart-fastp", "chart-speedup", "chart-cost"}) {
    EXPECT_NE(page.find(std::string("<svg class=\"chart ") + chart), std::string::npos) << chart;
  }
  EXPECT_NE(page.find("<polyline"), std::string::npos);
  EXPECT_NE(page.find("model-a"), std::string::npos);
  EXPECT_NE(page.find("tag emulated"), std::string::npos);
  EXPECT_EQ(page.find("<script src"), std::string::npos);
  EXPECT_EQ(page.find("<link"), std::string::npos);
  EXPECT_EQ(page.find("https://"), std::string::npos);
}

TEST(LeaderboardFormatTest, RejectsUnknownFormat) {
  auto f = ParseLeaderboardFormat("xml");
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.status().message().find("xml"), std::string::npos);
  EXPECT_TRUE(ParseLeaderboardFormat("md").ok());
}

}  // namespace
}  // namespace kforge::results
