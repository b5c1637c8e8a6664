// Leaderboard output on a fixture store, in every format.
#include "kforge/results/leaderboard.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "kforge/results/fixture.h"
#include "kforge/results/store.h"
#include "test_util.h"
#include "web/html.h"

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

namespace kforge::results {
namespace {

TurnRecord Turn(int64_t session, int index, const std::string& kernel) {
  TurnRecord t;
  t.session_id = session;
  t.index = index;
  t.prompt = "p";
  t.reply = "r";
  t.kernel = kernel;
  return t;
}

// Sessions nothing judged (model never reached, compile-only) are named and
// left out of every figure; they must not read as wrong answers.
TEST(NotEvaluatedTest, UnreachedAndCompileOnlySessionsAreNamedNotScored) {
  testing::TempDir tmp;
  auto store = RunStore::Open(tmp.path() / "nokey");
  ASSERT_OK(store);
  auto run = (*store)->CreateOrGetRun("nokey", {}, "v", "h", {});
  ASSERT_OK(run);
  // 1: the model was never reached (no turn at all).
  auto s1 = (*store)->UpsertSession(
      run->id, {"openai:gpt-5.5", "001_allreduce", "refine", 0, 2, "bf16", "collective"});
  ASSERT_OK(s1);
  ASSERT_STATUS_OK(
      (*store)->SetSessionState(*s1, "stopped", "provider: auth: no API key; set OPENAI_API_KEY"));
  // 2: compile-only: a compile error, then a kernel that compiled and never ran.
  auto s2 = (*store)->UpsertSession(
      run->id, {"replay:demo", "001_allreduce", "refine", 0, 2, "bf16", "collective"});
  ASSERT_OK(s2);
  const std::string k = "kernel";
  TurnRecord t0 = Turn(*s2, 0, k);
  auto t0id = (*store)->AppendTurn(t0);
  ASSERT_OK(t0id);
  ASSERT_OK((*store)->RecordEvaluation(*s2, *t0id, {{"status", "compile_error"}}));
  TurnRecord t1 = Turn(*s2, 1, k);
  ASSERT_OK((*store)->AppendTurn(t1));
  ASSERT_STATUS_OK((*store)->AppendEvent(run->id, "compiled", {{"session", *s2}, {"turn", 1}}));
  ASSERT_STATUS_OK((*store)->SetSessionState(*s2, "stopped", "compiled; evaluation needs a GPU"));
  // 3: judged: every turn failed to compile.
  auto s3 = (*store)->UpsertSession(
      run->id, {"replay:demo", "002_allgather", "refine", 0, 2, "bf16", "collective"});
  ASSERT_OK(s3);
  TurnRecord t2 = Turn(*s3, 0, k);
  auto t2id = (*store)->AppendTurn(t2);
  ASSERT_OK(t2id);
  ASSERT_OK((*store)->RecordEvaluation(*s3, *t2id, {{"status", "compile_error"}}));
  ASSERT_STATUS_OK((*store)->SetSessionState(*s3, "done", "turn limit"));
  store->reset();

  auto samples = LoadRunDirs({tmp.path() / "nokey"});
  ASSERT_OK(samples);
  ASSERT_EQ(samples->size(), 3u);
  EXPECT_TRUE((*samples)[0].not_evaluated);
  EXPECT_EQ((*samples)[0].not_evaluated_reason, "provider: auth: no API key; set OPENAI_API_KEY");
  EXPECT_TRUE((*samples)[1].not_evaluated);
  EXPECT_FALSE((*samples)[2].not_evaluated);

  MetricsOptions options;
  const Leaderboard board = BuildLeaderboard(*samples, options);
  ASSERT_EQ(board.rows.size(), 2u);
  // replay:demo: one judged problem (002), the compile-only session apart.
  EXPECT_EQ(board.rows[0].key[0].second, "replay:demo");
  EXPECT_EQ(board.rows[0].problems, 1);
  EXPECT_EQ(board.rows[0].samples, 1);
  EXPECT_EQ(board.rows[0].not_evaluated, 1);
  // openai: nothing evaluated, so no figures at all (never "0.0%").
  EXPECT_FALSE(board.rows[1].evaluated());
  auto doc = nlohmann::json::parse(RenderJson(board));
  EXPECT_TRUE(doc["rows"][1]["correct_rate"].is_null());
  EXPECT_TRUE(doc["rows"][1]["geomean_speedup_all"].is_null());
  EXPECT_EQ(doc["rows"][1]["not_evaluated"], 1);
  ASSERT_EQ(doc["not_evaluated"].size(), 2u);
  const std::string md = RenderMarkdown(board);
  EXPECT_NE(md.find("not evaluated"), std::string::npos) << md;
  EXPECT_NE(md.find("nokey / openai:gpt-5.5 / 001_allreduce (sample 0): provider: auth"),
            std::string::npos)
      << md;
  const std::string csv = RenderCsv(board);
  EXPECT_EQ(csv.find("openai:gpt-5.5,refine,real,0,0,0.0000"), std::string::npos) << csv;
  EXPECT_NE(csv.find("openai:gpt-5.5,refine,none,0,0,,"), std::string::npos) << csv;
  EXPECT_NE(csv.find(",1\n"), std::string::npos) << csv;
}

}  // namespace
}  // namespace kforge::results

namespace kforge::results {
namespace {

// Every format renders the same figures: the HTML table's cells are the
// Markdown table's, a row nothing evaluated says "not evaluated" everywhere
// (never 0.0% or 1.000x), and the not-evaluated sessions are named.

// N14: a session a budget or the deadline stopped before any evaluation was
// not attempted, whatever its replies held: it is named with its stop reason
// and left out of the denominators, so the model that happened to be
// scheduled last is not scored wrong for it. One with an evaluation counts.
TEST(NotEvaluatedTest, SessionsABudgetOrDeadlineStoppedAreNamedNotScored) {
  testing::TempDir tmp;
  auto store = RunStore::Open(tmp.path() / "budget1");
  ASSERT_OK(store);
  auto run = (*store)->CreateOrGetRun("budget1", {}, "v", "h", {});
  ASSERT_OK(run);
  const std::string budget = "budget: run spent $0.0361 of $0.0100";
  // A reply without a kernel, then the budget or the deadline stopped it.
  auto add = [&](const std::string& task, const std::string& reason, const std::string& status) {
    auto sid = (*store)->UpsertSession(run->id, {"modelB", task, "refine", 0, 2, "bf16", "x"});
    EXPECT_TRUE(sid.ok());
    auto tid = (*store)->AppendTurn(Turn(*sid, 0, ""));
    EXPECT_TRUE(tid.ok());
    if (!status.empty()) {
      EXPECT_TRUE((*store)->RecordEvaluation(*sid, *tid, {{"status", status}}).ok());
    }
    EXPECT_TRUE((*store)
                    ->SetSessionState(*sid, reason.starts_with("turn") ? "done" : "stopped", reason)
                    .ok());
  };
  add("001_allreduce", budget, "");
  add("002_allgather", "deadline reached", "");
  add("003_broadcast", budget, "compile_error");             // judged before the stop: counts
  add("004_reduce", "turn limit reached (1 round(s))", "");  // its own end: a wrong answer
  store->reset();

  auto samples = LoadRunDirs({tmp.path() / "budget1"});
  ASSERT_OK(samples);
  ASSERT_EQ(samples->size(), 4u);
  EXPECT_TRUE((*samples)[0].not_evaluated);
  EXPECT_EQ((*samples)[0].not_evaluated_reason, budget);
  EXPECT_TRUE((*samples)[1].not_evaluated);
  EXPECT_EQ((*samples)[1].not_evaluated_reason, "deadline reached");
  EXPECT_FALSE((*samples)[2].not_evaluated);
  EXPECT_FALSE((*samples)[3].not_evaluated);

  const Leaderboard board = BuildLeaderboard(*samples, MetricsOptions{});
  ASSERT_EQ(board.rows.size(), 1u);
  EXPECT_EQ(board.rows[0].problems, 2);
  EXPECT_EQ(board.rows[0].not_evaluated, 2);
  auto doc = nlohmann::json::parse(RenderJson(board));
  ASSERT_EQ(doc["not_evaluated"].size(), 2u);
  EXPECT_EQ(doc["not_evaluated"][0]["reason"], budget);
  EXPECT_EQ(doc["not_evaluated"][1]["reason"], "deadline reached");
  const std::string md = RenderMarkdown(board);
  EXPECT_NE(md.find(budget), std::string::npos) << md;
}
TEST(LeaderboardFormats, EveryFormatShowsTheSameFiguresForEveryRow) {
  std::vector<SampleOutcome> samples;
  SampleOutcome judged;
  judged.run = "r";
  judged.model = "model-a";
  judged.strategy = "refine";
  judged.task = "001_allreduce";
  judged.category = "collective";
  judged.world = 2;
  judged.dtype = "bf16";
  judged.evaluated = true;
  judged.correct = true;
  judged.speedup = 1.5;
  samples.push_back(judged);
  SampleOutcome unjudged = judged;
  unjudged.model = "model-b";
  unjudged.evaluated = false;
  unjudged.correct = false;
  unjudged.speedup.reset();
  unjudged.not_evaluated = true;
  unjudged.not_evaluated_reason = "compiled; evaluation needs a GPU";
  samples.push_back(unjudged);
  MetricsOptions options;
  const Leaderboard board = BuildLeaderboard(samples, options);
  ASSERT_EQ(board.rows.size(), 2u);

  const LeaderboardTable human = BuildLeaderboardTable(board, true);
  const std::string md = RenderMarkdown(board);
  const std::string html = RenderHtmlPage(board);
  for (const auto& row : human.rows) {
    std::string md_line = "| ";
    for (size_t c = 0; c < row.size(); ++c) md_line += (c ? " | " : "") + row[c];
    EXPECT_NE(md.find(md_line + " |"), std::string::npos) << md_line << "\n" << md;
    std::string html_cells;
    for (size_t c = 0; c < row.size(); ++c) {
      html_cells += (c < options.group_by.size() ? "<td class=\"l\">" : "<td>") +
                    HtmlEscape(row[c]) + "</td>";
    }
    EXPECT_NE(html.find(html_cells), std::string::npos) << html_cells;
  }
  // The row of model-b: no figure in any format.
  const size_t b = html.find("<td class=\"l\">model-b</td>");
  ASSERT_NE(b, std::string::npos);
  const std::string b_row = html.substr(b, html.find("</tr>", b) - b);
  EXPECT_NE(b_row.find("not evaluated"), std::string::npos) << b_row;
  EXPECT_EQ(b_row.find("0.0%"), std::string::npos) << b_row;
  EXPECT_EQ(b_row.find("1.000x"), std::string::npos) << b_row;
  EXPECT_NE(html.find("compiled; evaluation needs a GPU"), std::string::npos);
  auto doc = nlohmann::json::parse(RenderJson(board));
  EXPECT_TRUE(doc["rows"][1]["correct_rate"].is_null());
  EXPECT_EQ(doc["rows"][0]["correct_rate"], 1.0);
  // model-a's figures are the same number in every format.
  EXPECT_NE(html.find("<td>100.0%</td>"), std::string::npos);
  EXPECT_NE(md.find("100.0%"), std::string::npos);
  EXPECT_NE(RenderCsv(board).find("model-a,refine,real,1,1,1.0000"), std::string::npos)
      << RenderCsv(board);
}

}  // namespace
}  // namespace kforge::results
