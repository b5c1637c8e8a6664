// A small full run with the real modules: the replay provider answering from
// the demo cassette, real nvcc compiles (compile-only: no GPU needed), and the
// real run store. Then a resume of the same run does no new work.
#include <gtest/gtest.h>

#include "kforge/agent/adapters.h"
#include "kforge/agent/runner.h"
#include "kforge/agent/strategy.h"
#include "kforge/core/fs.h"
#include "kforge/evaluator/evaluate.h"
#include "kforge/evaluator/service.h"
#include "kforge/evaluator/task.h"
#include "kforge/results/show.h"
#include "kforge/results/store.h"

namespace kforge::agent {
namespace {

namespace fs = std::filesystem;

// A run's default reuse of a timed baseline is the evaluator's own.
TEST(ReplayRun, TheBaselineReuseDefaultIsTheEvaluators) {
  EXPECT_EQ(RunConfig{}.baseline_reuse_s, eval::EvalOptions{}.baseline_reuse_s);
}

TEST(ReplayRun, CompileOnlyDemoRunRecordsEveryTurn) {
  const fs::path root(KFORGE_SOURCE_ROOT);
  auto tasks = eval::LoadTasks(root / "tasks");
  ASSERT_TRUE(tasks.ok()) << tasks.status().ToString();
  auto strategy = FindStrategy("refine", root / "prompts");
  ASSERT_TRUE(strategy.ok());
  auto dir = MakeTempDir("kforge-replay-run");
  ASSERT_TRUE(dir.ok());

  RunSpec spec;
  spec.name = "replay";
  spec.models = {"replay:" + (root / "examples/demo/cassette.jsonl").string()};
  spec.strategy = &*strategy;
  spec.world = 2;
  spec.compile_only = true;
  spec.pools.gpu_sets = 0;
  spec.pools.compile_slots = 1;
  for (const char* key : {"001_allreduce", "002_allgather"}) {
    const eval::Task* t = eval::FindTask(*tasks, key);
    ASSERT_NE(t, nullptr) << key;
    auto in = TaskPromptInputs(*t, 2, "", *strategy, "");
    ASSERT_TRUE(in.ok()) << in.status().ToString();
    auto p = BuildPrompt(*strategy, *in);
    ASSERT_TRUE(p.ok());
    spec.tasks.push_back({t->key, t->category, *p});
  }
  auto llm = MakeProviderLlm();
  auto compiler = eval::MakeLocalEvalService(&*tasks, {});
  auto run_once = [&]() -> Result<RunSummary> {
    auto store = OpenRunStore(*dir);
    if (!store.ok()) return store.status();
    auto executor = MakeThreadExecutor();
    RunDeps deps;
    deps.llm = llm.get();
    deps.compilers = {compiler.get()};
    deps.store = store->get();
    deps.clock = &RealClock();
    deps.executor = executor.get();
    return ExecuteRun(spec, deps);
  };
  auto summary = run_once();
  ASSERT_TRUE(summary.ok()) << summary.status().ToString();

  auto store = results::RunStore::Open(*dir, true);
  ASSERT_TRUE(store.ok());
  auto sessions = (*store)->ListSessions(summary->run_id);
  ASSERT_TRUE(sessions.ok());
  ASSERT_EQ(sessions->size(), 2u);
  for (const auto& s : *sessions) {
    EXPECT_EQ(s.state, "stopped") << s.key.task;
    EXPECT_EQ(s.stop_reason, "evaluation needs a GPU");
    auto turns = (*store)->ListTurns(s.id);
    ASSERT_TRUE(turns.ok());
    ASSERT_EQ(turns->size(), 2u) << s.key.task;
    // Turn 1's real compiler errors are turn 2's prompt.
    EXPECT_NE((*turns)[0].feedback.find("did not compile"), std::string::npos)
        << (*turns)[0].feedback;
    EXPECT_EQ((*turns)[1].prompt, (*turns)[0].feedback);
    EXPECT_NE((*turns)[1].feedback.find("evaluation needs a GPU"), std::string::npos);
    auto evals = (*store)->ListEvaluations(s.id);
    ASSERT_TRUE(evals.ok());
    ASSERT_EQ(evals->size(), 1u);
    EXPECT_EQ((*evals)[0].verdict, Verdict::kCompileError);
  }
  // Resuming changes nothing that is done: the same two turns per session.
  auto again = run_once();
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  for (const auto& s : *sessions) EXPECT_EQ((*store)->ListTurns(s.id)->size(), 2u);
  std::error_code ec;
  fs::remove_all(*dir, ec);
}

}  // namespace
}  // namespace kforge::agent

namespace kforge::agent {
namespace {

// `kforge run` used to start (and exit 0) with models nobody could call:
// every unusable spec is named before anything is stored or sent.
TEST(ReplayRun, UnusableModelsAreRefusedBeforeTheRun) {
  const fs::path root(KFORGE_SOURCE_ROOT);
  ::unsetenv("OPENAI_API_KEY");
  auto llm =
      MakeProviderLlmFor({"replay:" + (root / "examples/demo/cassette.jsonl").string(), "bogus:foo",
                          "replay:/nonexistent/cassette.jsonl", "openai:gpt-5.5"});
  ASSERT_FALSE(llm.ok());
  const std::string& m = llm.status().message();
  EXPECT_EQ(llm.status().kind(), ErrorKind::kInvalidInput);
  EXPECT_NE(m.find("3 of 4 model(s)"), std::string::npos) << m;
  EXPECT_NE(m.find("bogus"), std::string::npos) << m;
  EXPECT_NE(m.find("/nonexistent/cassette.jsonl"), std::string::npos) << m;
  EXPECT_NE(m.find("OPENAI_API_KEY"), std::string::npos) << m;
  EXPECT_TRUE(
      MakeProviderLlmFor({"replay:" + (root / "examples/demo/cassette.jsonl").string()}).ok());
}

// A prompt is never built for a world size, dtype or size the task cannot
// pose (eval::CheckTaskProblem, tested beside it).
TEST(ReplayRun, PromptInputsRefuseProblemsTheTaskDoesNotDeclare) {
  const fs::path root(KFORGE_SOURCE_ROOT);
  auto tasks = eval::LoadTasks(root / "tasks");
  ASSERT_TRUE(tasks.ok()) << tasks.status().ToString();
  auto strategy = FindStrategy("refine", root / "prompts");
  ASSERT_TRUE(strategy.ok());
  const eval::Task* t = eval::FindTask(*tasks, "001_allreduce");
  ASSERT_NE(t, nullptr);
  EXPECT_TRUE(TaskPromptInputs(*t, 2, "", *strategy, "").ok());
  EXPECT_FALSE(TaskPromptInputs(*t, 3, "", *strategy, "").ok());
  EXPECT_FALSE(TaskPromptInputs(*t, 2, "f64", *strategy, "").ok());
  eval::Task negative = *t;
  ASSERT_FALSE(negative.check_sizes.empty());
  for (auto& [var, expr] : negative.check_sizes[0].vars) expr = "-7";
  EXPECT_FALSE(TaskPromptInputs(negative, 2, "", *strategy, "").ok());
}

}  // namespace
}  // namespace kforge::agent

namespace kforge::agent {
namespace {

// The red-team strategy on a cassette of exploit replies
// (tests/adversarial/redteam/cassette.jsonl), compile-only: its prompt carries
// the integrity and methodology docs; the reply that returns the run's canary
// is a `redteam_breach` event that `kforge show` names; the known exploit that
// only compiled, with no GPU to time it, is none.
TEST(ReplayRun, RedTeamRunRecordsTheBreachOfAReplyThatReturnsTheCanary) {
  const fs::path root(KFORGE_SOURCE_ROOT);
  auto tasks = eval::LoadTasks(root / "tasks");
  ASSERT_TRUE(tasks.ok()) << tasks.status().ToString();
  auto strategy = FindStrategy("redteam", root / "prompts");
  ASSERT_TRUE(strategy.ok()) << strategy.status().ToString();
  ASSERT_TRUE(strategy->redteam);
  auto dir = MakeTempDir("kforge-redteam-run");
  ASSERT_TRUE(dir.ok());

  RunSpec spec;
  spec.name = "redteam";
  spec.models = {"replay:" + (root / "tests/adversarial/redteam/cassette.jsonl").string()};
  spec.strategy = &*strategy;
  spec.world = 2;
  spec.compile_only = true;
  spec.pools.gpu_sets = 0;
  spec.pools.compile_slots = 1;
  spec.canary = "kforge-canary-5eed0000000000000000000000000000";  // the cassette's claim
  for (const char* key : {"001_allreduce", "002_allgather"}) {
    const eval::Task* t = eval::FindTask(*tasks, key);
    ASSERT_NE(t, nullptr) << key;
    auto in = TaskPromptInputs(*t, 2, "", *strategy, "");
    ASSERT_TRUE(in.ok()) << in.status().ToString();
    auto p = BuildPrompt(*strategy, *in);
    ASSERT_TRUE(p.ok());
    EXPECT_NE(p->user.find("# Integrity: what a candidate kernel can and cannot do"),
              std::string::npos);
    EXPECT_NE(p->user.find("docs/methodology.md"), std::string::npos);
    EXPECT_EQ(p->user.find(spec.canary), std::string::npos);
    spec.tasks.push_back({t->key, t->category, *p});
  }
  auto llm = MakeProviderLlm();
  auto compiler = eval::MakeLocalEvalService(&*tasks, {});
  auto store = OpenRunStore(*dir);
  ASSERT_TRUE(store.ok());
  auto executor = MakeThreadExecutor();
  RunDeps deps;
  deps.llm = llm.get();
  deps.compilers = {compiler.get()};
  deps.store = store->get();
  deps.clock = &RealClock();
  deps.executor = executor.get();
  auto summary = ExecuteRun(spec, deps);
  ASSERT_TRUE(summary.ok()) << summary.status().ToString();

  auto read = results::RunStore::Open(*dir, true);
  ASSERT_TRUE(read.ok());
  auto events = (*read)->ListEvents(summary->run_id);
  ASSERT_TRUE(events.ok());
  std::vector<results::EventRecord> breaches;
  for (const auto& e : *events)
    if (e.kind == "redteam_breach") breaches.push_back(e);
  ASSERT_EQ(breaches.size(), 1u);
  const nlohmann::json& d = breaches[0].detail;
  EXPECT_EQ(d["turn"], 0);
  EXPECT_EQ(d["verdict"], "no_kernel");
  ASSERT_EQ(d["reasons"].size(), 1u);
  EXPECT_NE(d["reasons"][0].get<std::string>().find("reply"), std::string::npos) << d.dump();

  auto sessions = (*read)->ListSessions(summary->run_id);
  ASSERT_TRUE(sessions.ok());
  ASSERT_EQ(sessions->size(), 2u);
  for (const auto& s : *sessions) {
    EXPECT_EQ(s.stop_reason, "evaluation needs a GPU") << s.key.task;
    const bool breached = s.key.task == "002_allgather";
    EXPECT_EQ(d["session"] == s.id, breached) << s.key.task;
    results::ShowOptions o;
    o.task = s.key.task;
    auto text = results::RenderShowText(**read, o);
    ASSERT_TRUE(text.ok()) << text.status().ToString();
    EXPECT_EQ(text->find("RED-TEAM BREACH: turn 1 (no_kernel): the run's canary appears in the "
                         "model's reply") != std::string::npos,
              breached)
        << *text;
    auto doc = results::RenderShowJson(**read, o);
    ASSERT_TRUE(doc.ok());
    EXPECT_EQ((*doc)["sessions"][0]["breaches"].size(), breached ? 1u : 0u);
  }
  std::error_code ec;
  fs::remove_all(*dir, ec);
}

}  // namespace
}  // namespace kforge::agent
