// `kforge run --rejudge`: a recorded run's kernels judged again, into a new
// run that mirrors the original, without a model call.
#include "kforge/agent/rejudge.h"

#include <gtest/gtest.h>

#include "fakes.h"
#include "test_util.h"

namespace kforge::agent {
namespace {

using testing::FakeEval;
using testing::FakeLlm;
using testing::FakeStore;
using testing::MakeStrategy;

// The original: a compile-only run of one model on two tasks (what a laptop
// without a GPU records), each session two turns.
using Tags = std::map<std::pair<std::string, int>, std::string>;

struct Original {
  explicit Original(Tags tags = {{{"001_task", 0}, "SYNTAX"},
                                 {{"001_task", 1}, "FAST1.5"},
                                 {{"002_task", 0}, "NOKERNEL"},
                                 {{"002_task", 1}, "WRONG"}})
      : strategy(MakeStrategy("turns = 4\n")) {
    spec.name = "orig";
    spec.models = {"fake:a"};
    spec.tasks = {{"001_task", "collective", {"SYS", "PROMPT 1"}},
                  {"002_task", "collective", {"SYS", "PROMPT 2"}}};
    spec.strategy = &strategy;
    spec.compile_only = true;
    spec.pools.gpu_sets = 0;
    spec.pools.compile_slots = 1;
    llm.SetTags(std::move(tags));
    auto executor = MakeSimExecutor(clock);
    RunDeps deps;
    deps.llm = &llm;
    deps.compilers = {&compiler};
    deps.store = &store;
    deps.clock = &clock;
    deps.executor = executor.get();
    auto r = ExecuteRun(spec, deps);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
  }

  std::vector<StoredSession> Stored() const {
    std::vector<StoredSession> out;
    for (const auto& [id, s] : store.sessions) out.push_back({s.row, s.turns});
    return out;
  }

  Strategy strategy;
  FakeLlm llm;
  FakeEval compiler{2};
  FakeStore store;
  FakeClock clock;
  RunSpec spec;
};

struct Rejudged {
  FakeEval compiler{2}, gpu{10};
  FakeStore store;
  FakeClock clock;
  bool profile = false;  // kforge run --rejudge RUN --profile
  std::string canary;    // the rejudge of a red-team run
  Result<RunSummary> Run(const std::vector<StoredSession>& sessions, LlmPort* llm) {
    RejudgeSpec spec;
    spec.name = "orig-rejudge-1";
    spec.sessions = sessions;
    spec.profile = profile;
    spec.canary = canary;
    spec.pools.compile_slots = 1;
    spec.pools.gpu_sets = 1;
    auto executor = MakeSimExecutor(clock);
    RunDeps deps;
    deps.llm = llm;  // there to show it is never called
    deps.compilers = {&compiler};
    deps.gpu_sets = {&gpu};
    deps.store = &store;
    deps.clock = &clock;
    deps.executor = executor.get();
    return ExecuteRejudge(spec, deps);
  }
};

const FakeStore::Session& SessionOf(const FakeStore& store, const std::string& task) {
  for (const auto& [id, s] : store.sessions) {
    if (s.row.key.task == task) return s;
  }
  throw std::runtime_error("no session of " + task);
}

TEST(Rejudge, EvaluatesEveryRecordedKernelOnAGpuWithoutCallingTheModel) {
  Original orig;
  const size_t calls = orig.llm.calls().size();
  ASSERT_EQ(calls, 4u);
  const nlohmann::json before = orig.store.Dump();

  Rejudged re;
  auto r = re.Run(orig.Stored(), &orig.llm);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(orig.llm.calls().size(), calls) << "a rejudge calls no model";
  // Three kernels (one reply had none): each compiled; the two that compile
  // are run on the GPU.
  EXPECT_EQ(re.compiler.evaluations, 3);
  EXPECT_EQ(re.gpu.evaluations, 2);
  EXPECT_EQ(re.gpu.profiled, 0);  // not asked to
  EXPECT_EQ(orig.store.Dump(), before) << "the original is only read";

  // The same sessions and turns, texts, kernels, usage and cost as recorded.
  ASSERT_EQ(re.store.sessions.size(), 2u);
  for (const char* task : {"001_task", "002_task"}) {
    const auto& a = SessionOf(orig.store, task);
    const auto& b = SessionOf(re.store, task);
    EXPECT_EQ(b.row.key.model, a.row.key.model);
    EXPECT_EQ(b.row.key.strategy, a.row.key.strategy);
    EXPECT_EQ(b.row.key.sample, a.row.key.sample);
    ASSERT_EQ(b.turns.size(), a.turns.size()) << task;
    for (size_t i = 0; i < a.turns.size(); ++i) {
      EXPECT_EQ(b.turns[i].index, a.turns[i].index);
      EXPECT_EQ(b.turns[i].prompt, a.turns[i].prompt);
      EXPECT_EQ(b.turns[i].reply, a.turns[i].reply);
      EXPECT_EQ(b.turns[i].kernel, a.turns[i].kernel);
      EXPECT_EQ(b.turns[i].feedback, a.turns[i].feedback) << "what the model read";
      EXPECT_EQ(b.turns[i].usage.input_tokens, a.turns[i].usage.input_tokens);
      EXPECT_EQ(b.turns[i].usage.output_tokens, a.turns[i].usage.output_tokens);
      EXPECT_DOUBLE_EQ(b.turns[i].usage.cost_usd, a.turns[i].usage.cost_usd);
    }
  }
  // The verdicts are new: a GPU judged what the original only compiled.
  const auto& fast = SessionOf(re.store, "001_task");
  ASSERT_EQ(fast.evals.size(), 2u);
  EXPECT_EQ(fast.evals[0].doc.value("status", ""), "compile_error");
  EXPECT_EQ(fast.evals[1].doc.value("status", ""), "passed");
  EXPECT_EQ(fast.best, fast.evals[1].id);
  EXPECT_EQ(fast.row.state, "done");
  const auto& wrong = SessionOf(re.store, "002_task");
  ASSERT_EQ(wrong.evals.size(), 1u);
  EXPECT_EQ(wrong.evals[0].doc.value("status", ""), "mismatch");
  EXPECT_EQ(wrong.best, 0);
  EXPECT_EQ(re.store.run_state, "done");

  ASSERT_EQ(r->sessions.size(), 2u);
  for (const auto& s : r->sessions) {
    EXPECT_FALSE(s.not_evaluated) << s.task;
    if (s.task == "001_task") {
      EXPECT_DOUBLE_EQ(s.best_speedup, 1.5);
    } else {
      EXPECT_EQ(s.best_outcome, "mismatch");
    }
  }
  EXPECT_EQ(r->stats.models["fake:a"].correct, 1);
  EXPECT_EQ(r->stats.models["fake:a"].turns, 4);
}

// `kforge run --rejudge RUN --profile`: every GPU evaluation asks for the
// profile (the original's strategy never did), no compile does, and the
// stored document of the correct kernel carries it (the fake profiles only
// those, as the evaluator profiles only after timed calls).
TEST(Rejudge, WithProfileEveryGpuEvaluationIsProfiled) {
  Original orig;
  Rejudged re;
  re.profile = true;
  auto r = re.Run(orig.Stored(), &orig.llm);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(re.gpu.evaluations, 2);
  EXPECT_EQ(re.gpu.profiled, 2);
  EXPECT_EQ(re.compiler.evaluations, 3);
  EXPECT_EQ(re.compiler.profiled, 0);
  const auto& fast = SessionOf(re.store, "001_task");
  ASSERT_EQ(fast.evals.size(), 2u);
  EXPECT_EQ(fast.evals[1].doc.value("status", ""), "passed");
  EXPECT_EQ(fast.evals[1].doc["profile"], re.gpu.profile);
}

// The rejudge of a red-team run: every GPU evaluation is given the
// rejudge's canary, and a document that is still a breach (the evaluator
// found the canary; a speedup far above any known kernel) is recorded as one,
// with the turn `kforge show --export-breach` numbers; one that no longer is,
// is not. Without a canary nothing is checked.
TEST(Rejudge, ARedTeamRunsKernelsAreCheckedForBreachesAgain) {
  Original orig({{{"001_task", 0}, "LEAK"}, {{"002_task", 0}, "FAST40"}});
  const std::string canary = "kforge-canary-00112233445566778899aabbccddeeff";
  Rejudged re;
  re.canary = canary;
  ASSERT_TRUE(re.Run(orig.Stored(), &orig.llm).ok());
  // The compile-only original stopped each session at its first kernel that
  // compiled (its turn 0 here): two kernels to judge on the GPU.
  ASSERT_EQ(re.gpu.canaries.size(), 2u);
  for (const std::string& c : re.gpu.canaries) EXPECT_EQ(c, canary);
  std::map<std::pair<int64_t, int>, nlohmann::json> breaches;
  for (const auto& [kind, detail] : re.store.events) {
    if (kind == "redteam_breach") breaches[{detail["session"], detail["turn"]}] = detail;
  }
  ASSERT_EQ(breaches.size(), 2u) << re.store.Dump();
  const nlohmann::json found = breaches.at({SessionOf(re.store, "001_task").row.id, 0});
  EXPECT_EQ(found["verdict"], "integrity_violation");
  EXPECT_NE(
      found["reasons"][0].get<std::string>().find("found the run's canary in rank 1's output"),
      std::string::npos)
      << found.dump();
  const nlohmann::json fast = breaches.at({SessionOf(re.store, "002_task").row.id, 0});
  EXPECT_EQ(fast["verdict"], "passed");
  EXPECT_NE(fast["reasons"][0].get<std::string>().find("40"), std::string::npos) << fast.dump();

  Rejudged plain;  // not a red-team run
  ASSERT_TRUE(plain.Run(orig.Stored(), &orig.llm).ok());
  for (const std::string& c : plain.gpu.canaries) EXPECT_TRUE(c.empty());
  for (const auto& [kind, detail] : plain.store.events) EXPECT_NE(kind, "redteam_breach");
}

TEST(Rejudge, CompileOnlyLeavesCompiledKernelsNotEvaluated) {
  Original orig;
  RejudgeSpec spec;
  spec.name = "again";
  spec.sessions = orig.Stored();
  spec.compile_only = true;
  spec.pools.compile_slots = 2;
  spec.pools.gpu_sets = 0;
  FakeEval compiler(2);
  FakeStore store;
  FakeClock clock;
  auto executor = MakeSimExecutor(clock);
  RunDeps deps;
  deps.compilers = {&compiler};
  deps.store = &store;
  deps.clock = &clock;
  deps.executor = executor.get();
  auto r = ExecuteRejudge(spec, deps);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(compiler.evaluations, 3);
  int compiled = 0;
  for (const auto& [kind, detail] : store.events) compiled += kind == "compiled";
  EXPECT_EQ(compiled, 2) << "the results read these as not evaluated";
  for (const auto& s : r->sessions) {
    EXPECT_TRUE(s.not_evaluated) << s.task;
    EXPECT_EQ(s.stop_reason, "evaluation needs a GPU");
  }
}

// A rejudge killed at any store write continues where it stopped when run
// again, and ends with the record of one never interrupted.
TEST(Rejudge, AnInterruptedRejudgeContinuesToTheSameRecord) {
  Original orig;
  Rejudged whole;
  ASSERT_TRUE(whole.Run(orig.Stored(), nullptr).ok());
  const nlohmann::json expected = whole.store.Dump();
  for (int crash = 0; crash < whole.store.mutations; ++crash) {
    Rejudged re;
    re.store.crash_after = crash;
    EXPECT_FALSE(re.Run(orig.Stored(), nullptr).ok()) << crash;
    re.store.Revive();
    auto again = re.Run(orig.Stored(), nullptr);
    ASSERT_TRUE(again.ok()) << crash << ": " << again.status().ToString();
    EXPECT_EQ(re.store.Dump(), expected) << "crash after " << crash << " writes";
  }
}

}  // namespace
}  // namespace kforge::agent
