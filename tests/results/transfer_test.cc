// Export/import/merge of run stores, and `kforge show` rendering.
#include "kforge/results/transfer.h"

#include <gtest/gtest.h>

#include <sstream>

#include "kforge/results/fixture.h"
#include "kforge/results/leaderboard.h"
#include "kforge/results/show.h"
#include "test_util.h"

namespace kforge::results {
namespace {

FixtureSpec Small(const std::string& name, std::vector<std::string> models) {
  FixtureSpec spec;
  spec.run_name = name;
  spec.models = std::move(models);
  spec.strategies = {"refine"};
  spec.tasks = 3;
  spec.samples = 1;
  return spec;
}

std::string LeaderboardJson(const std::filesystem::path& dir) {
  auto samples = LoadRunDirs({dir});
  EXPECT_TRUE(samples.ok()) << samples.status().ToString();
  return RenderJson(BuildLeaderboard(samples.ok() ? *samples : std::vector<SampleOutcome>{}, {}));
}

TEST(TransferTest, ExportImportRoundTripKeepsTheLeaderboard) {
  testing::TempDir tmp;
  ASSERT_STATUS_OK(WriteFixtureRun(tmp.path() / "src", Small("night", {"model-a", "model-b"})));
  auto src = RunStore::Open(tmp.path() / "src", true);
  ASSERT_OK(src);
  std::stringstream jsonl;
  auto exported = ExportJsonl(**src, jsonl);
  ASSERT_OK(exported);
  // 2 models × 3 tasks × 2 turns, one evaluation per turn.
  EXPECT_EQ(exported->records, 12);

  auto dest = RunStore::Open(tmp.path() / "dest");
  ASSERT_OK(dest);
  auto imported = ImportJsonl(**dest, jsonl, "night.jsonl");
  ASSERT_OK(imported);
  EXPECT_EQ(imported->runs_created, 1);
  EXPECT_EQ(imported->turns_added, 12);
  EXPECT_EQ(imported->evaluations_added, 12);
  EXPECT_EQ(LeaderboardJson(tmp.path() / "dest"), LeaderboardJson(tmp.path() / "src"));
  auto runs = (*dest)->ListRuns();
  ASSERT_OK(runs);
  EXPECT_EQ((*runs)[0].origin, "night.jsonl");
  EXPECT_EQ((*runs)[0].state, "done");

  // Importing again adds nothing.
  std::stringstream again(jsonl.str());
  again.clear();
  again.seekg(0);
  auto second = ImportJsonl(**dest, again, "night.jsonl");
  ASSERT_OK(second);
  EXPECT_EQ(second->turns_added, 0);
  EXPECT_EQ(second->evaluations_added, 0);
  EXPECT_EQ(second->duplicates, 12);
}

// N20: a compile-only session ("compiled" events, no GPU verdict) stays "not
// evaluated" through export/import and merge; it must not turn into a wrong
// answer. Every leaderboard figure survives both, and a second import adds
// no event twice.
TEST(TransferTest, CompileOnlySessionsStayNotEvaluatedThroughExportImportAndMerge) {
  testing::TempDir tmp;
  const auto src_dir = tmp.path() / "src";
  ASSERT_STATUS_OK(WriteFixtureRun(src_dir, Small("night", {"model-a"})));
  {
    auto store = RunStore::Open(src_dir);
    ASSERT_OK(store);
    auto runs = (*store)->ListRuns();
    ASSERT_OK(runs);
    const int64_t run_id = (*runs)[0].id;
    auto sid = (*store)->UpsertSession(
        run_id, {"model-c", "001_allreduce", "refine", 0, 2, "bf16", "collective"});
    ASSERT_OK(sid);
    // Turn 0 failed to compile (a verdict); turn 1 compiled and never ran.
    // Without its "compiled" event the session reads as a wrong answer.
    TurnRecord t;
    t.session_id = *sid;
    t.prompt = "p";
    t.reply = "r";
    t.kernel = "__global__ void k() {}";
    auto t0 = (*store)->AppendTurn(t);
    ASSERT_OK(t0);
    ASSERT_OK((*store)->RecordEvaluation(*sid, *t0, {{"status", "compile_error"}}));
    t.index = 1;
    ASSERT_OK((*store)->AppendTurn(t));
    ASSERT_STATUS_OK((*store)->AppendEvent(
        run_id, "compiled", {{"session", *sid}, {"turn", 1}, {"compile", {{"ok", true}}}}));
    ASSERT_STATUS_OK(
        (*store)->SetSessionState(*sid, "stopped", "compiled; evaluation needs a GPU"));
  }
  const std::string original = LeaderboardJson(src_dir);
  ASSERT_NE(original.find("compiled; evaluation needs a GPU"), std::string::npos) << original;

  auto src = RunStore::Open(src_dir, true);
  ASSERT_OK(src);
  std::stringstream jsonl;
  ASSERT_OK(ExportJsonl(**src, jsonl));
  auto imported = RunStore::Open(tmp.path() / "imported");
  ASSERT_OK(imported);
  ASSERT_OK(ImportJsonl(**imported, jsonl, "night.jsonl"));
  EXPECT_EQ(LeaderboardJson(tmp.path() / "imported"), original);

  auto merged = RunStore::Open(tmp.path() / "merged");
  ASSERT_OK(merged);
  ASSERT_OK(MergeStore(**merged, **src));
  EXPECT_EQ(LeaderboardJson(tmp.path() / "merged"), original);

  // Merging the same runs again adds no event.
  auto runs = (*merged)->ListRuns();
  ASSERT_OK(runs);
  auto before = (*merged)->ListEvents((*runs)[0].id);
  ASSERT_OK(before);
  ASSERT_OK(MergeStore(**merged, **src));
  auto after = (*merged)->ListEvents((*runs)[0].id);
  ASSERT_OK(after);
  EXPECT_EQ(after->size(), before->size());
  EXPECT_EQ(LeaderboardJson(tmp.path() / "merged"), original);
}

TEST(TransferTest, MergesRunsFromTwoMachines) {
  testing::TempDir tmp;
  ASSERT_STATUS_OK(WriteFixtureRun(tmp.path() / "host1", Small("night", {"model-a"})));
  ASSERT_STATUS_OK(WriteFixtureRun(tmp.path() / "host2", Small("night", {"model-b"})));
  auto dest = RunStore::Open(tmp.path() / "all");
  ASSERT_OK(dest);
  for (const char* host : {"host1", "host2"}) {
    auto src = RunStore::Open(tmp.path() / host, true);
    ASSERT_OK(src);
    auto st = MergeStore(**dest, **src);
    ASSERT_OK(st);
    EXPECT_EQ(st->turns_added, 6);
  }
  auto runs = (*dest)->ListRuns();
  ASSERT_OK(runs);
  ASSERT_EQ(runs->size(), 1u) << "same run name: one run";
  auto sessions = (*dest)->ListSessions((*runs)[0].id);
  ASSERT_OK(sessions);
  EXPECT_EQ(sessions->size(), 6u);
  auto samples = LoadRunDirs({tmp.path() / "all"});
  ASSERT_OK(samples);
  MetricsOptions o;
  o.group_by = {"model"};
  EXPECT_EQ(ComputeMetrics(*samples, o).size(), 2u);
  // Best evaluations survive the merge.
  for (const auto& s : *sessions) EXPECT_TRUE(s.best_evaluation_id.has_value());
}

TEST(TransferTest, BadLineStopsWithItsNumberAndKeepsEarlierLines) {
  testing::TempDir tmp;
  ASSERT_STATUS_OK(WriteFixtureRun(tmp.path() / "src", Small("night", {"model-a"})));
  auto src = RunStore::Open(tmp.path() / "src", true);
  ASSERT_OK(src);
  std::stringstream jsonl;
  ASSERT_OK(ExportJsonl(**src, jsonl));
  std::string text = jsonl.str();
  const size_t second_line = text.find('\n') + 1;
  text.insert(second_line, "{not json\n");
  std::stringstream in(text);
  auto dest = RunStore::Open(tmp.path() / "dest");
  ASSERT_OK(dest);
  auto st = ImportJsonl(**dest, in, "x.jsonl");
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.status().message().find("x.jsonl:2"), std::string::npos) << st.status().message();
  auto runs = (*dest)->ListRuns();
  ASSERT_OK(runs);
  ASSERT_EQ(runs->size(), 1u);
  auto evals = (*dest)->ListRunEvaluations((*runs)[0].id);
  ASSERT_OK(evals);
  EXPECT_EQ(evals->size(), 1u) << "line 1 stays imported";
}

TEST(TransferTest, RefusesToMergeRunsOfDifferentTaskSuites) {
  testing::TempDir tmp;
  auto dest = RunStore::Open(tmp.path() / "dest");
  ASSERT_OK(dest);
  ASSERT_OK((*dest)->CreateOrGetRun("night", {}, "0.1.0", "suite-A", {}));
  std::stringstream in(
      R"({"schema":"kforge.export/1","run":{"name":"night","task_suite_hash":"suite-B"},)"
      R"("session":{"model":"m","task":"t"},"turn":null,"evaluation":null})");
  auto st = ImportJsonl(**dest, in, "in.jsonl");
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.status().message().find("task-suite hash"), std::string::npos)
      << st.status().message();
}

TEST(ShowTest, PrintsTurnsEvaluationsFeedbackAndKernelDiffs) {
  testing::TempDir tmp;
  ASSERT_STATUS_OK(WriteFixtureRun(tmp.path() / "r", Small("night", {"model-a"})));
  auto store = RunStore::Open(tmp.path() / "r", true);
  ASSERT_OK(store);
  ShowOptions o;
  o.task = "002_t2";
  auto text = RenderShowText(**store, o);
  ASSERT_OK(text);
  EXPECT_NE(text->find("=== run night"), std::string::npos);
  EXPECT_NE(text->find("002_t2"), std::string::npos);
  EXPECT_EQ(text->find("001_t1"), std::string::npos);
  // Turns count from 1 in show, as in the feedback ("Turn 1 of 4").
  EXPECT_EQ(text->find("--- turn 0"), std::string::npos);
  EXPECT_NE(text->find("--- turn 1"), std::string::npos);
  EXPECT_NE(text->find("--- turn 2"), std::string::npos);
  EXPECT_NE(text->find("prompt:\n    Write a multi-GPU kernel for task 002_t2"), std::string::npos);
  EXPECT_NE(text->find("(diff to the previous kernel)"), std::string::npos);
  EXPECT_NE(text->find("- // 002_t2 candidate, turn 0"), std::string::npos) << *text;
  EXPECT_NE(text->find("+ // 002_t2 candidate, turn 1"), std::string::npos);
  EXPECT_NE(text->find("evaluation "), std::string::npos);
  EXPECT_NE(text->find("feedback:\n    Evaluation: mismatch"), std::string::npos);
  o.task = "999_none";
  EXPECT_EQ(RenderShowText(**store, o).status().kind(), ErrorKind::kNotFound);
}

}  // namespace
}  // namespace kforge::results
