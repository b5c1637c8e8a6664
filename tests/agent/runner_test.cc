#include "kforge/agent/runner.h"

#include <gtest/gtest.h>

#include "fakes.h"
#include "kforge/core/fs.h"
#include "test_util.h"

namespace kforge::agent {
namespace {

using testing::FakeEval;
using testing::FakeLlm;
using testing::FakeStore;
using testing::MakeStrategy;

// A run on fake time: fake model, fake evaluators, fake store, simulated executor.
struct Rig {
  explicit Rig(const std::string& strategy_toml, int tasks = 2, int gpu_sets = 1,
               double llm_latency = 30)
      : strategy(MakeStrategy(strategy_toml)), llm(llm_latency) {
    spec.name = "test";
    spec.models = {"fake:a", "fake:b"};
    for (int i = 0; i < tasks; ++i) {
      spec.tasks.push_back({"00" + std::to_string(i + 1) + "_task",
                            "collective",
                            {"SYS", "PROMPT " + std::to_string(i)}});
    }
    spec.strategy = &strategy;
    spec.pools.gpu_sets = gpu_sets;
    spec.pools.compile_slots = 2;
    for (int i = 0; i < gpu_sets; ++i) gpus.push_back(std::make_unique<FakeEval>(10));
    compiler = std::make_unique<FakeEval>(2);
  }

  Result<RunSummary> Run() {
    auto executor = MakeSimExecutor(clock);
    RunDeps deps;
    deps.llm = &llm;
    for (auto& g : gpus) deps.gpu_sets.push_back(g.get());
    deps.compilers = {compiler.get()};
    deps.store = &store;
    deps.clock = &clock;
    deps.executor = executor.get();
    return ExecuteRun(spec, deps);
  }

  Strategy strategy;
  FakeLlm llm;
  std::vector<std::unique_ptr<FakeEval>> gpus;
  std::unique_ptr<FakeEval> compiler;
  FakeStore store;
  FakeClock clock;
  RunSpec spec;
};

const FakeStore::Session& SessionFor(const FakeStore& store, const std::string& model,
                                     const std::string& task) {
  for (const auto& [id, s] : store.sessions) {
    if (s.row.key.model == model && s.row.key.task == task) return s;
  }
  throw std::runtime_error("no session");
}

// The suite hash reaches the store as its own argument: nothing reads it
// back out of the stored config.
TEST(Runner, StoresTheTaskSuiteHashGivenAsAnArgument) {
  Rig rig("turns = 1\n");
  rig.spec.task_suite_hash = "suite-1";
  rig.spec.config = {{"task_suite_hash", "not-read"}};
  ASSERT_TRUE(rig.Run().ok());
  ASSERT_TRUE(rig.store.run().has_value());
  EXPECT_EQ(rig.store.run()->task_suite_hash, "suite-1");
}

TEST(Runner, RefinesThroughEveryOutcomeAndRecordsEachTurn) {
  Rig rig("turns = 6\n");
  rig.spec.models = {"fake:a"};
  rig.spec.tasks.resize(1);
  rig.llm.SetTags({{{"001_task", 0}, "NOKERNEL"},
                   {{"001_task", 1}, "SYNTAX"},
                   {{"001_task", 2}, "CRASH"},
                   {{"001_task", 3}, "WRONG"},
                   {{"001_task", 4}, "SLOW"},
                   {{"001_task", 5}, "FAST1.7"}});
  auto r = rig.Run();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const auto& s = SessionFor(rig.store, "fake:a", "001_task");
  ASSERT_EQ(s.turns.size(), 6u);
  EXPECT_NE(s.turns[0].feedback.find("no fenced code block"), std::string::npos)
      << s.turns[0].feedback;
  EXPECT_NE(s.turns[1].feedback.find("did not compile"), std::string::npos);
  EXPECT_NE(s.turns[1].feedback.find("expected a ';'"), std::string::npos);
  EXPECT_NE(s.turns[2].feedback.find("illegal memory access"), std::string::npos);
  EXPECT_NE(s.turns[3].feedback.find("rank 1"), std::string::npos);
  EXPECT_NE(s.turns[4].feedback.find("not faster"), std::string::npos);
  EXPECT_NE(s.turns[5].feedback.find("1.7x"), std::string::npos);
  // The prompt of each turn is the previous turn's feedback.
  for (size_t i = 1; i < s.turns.size(); ++i) EXPECT_EQ(s.turns[i].prompt, s.turns[i - 1].feedback);
  // Five evaluations (no evaluation for the reply without a kernel).
  EXPECT_EQ(s.evals.size(), 5u);
  ASSERT_NE(s.best, 0);
  EXPECT_EQ(s.evals.back().id, s.best);
  EXPECT_EQ(s.row.state, "done");
  EXPECT_EQ(rig.store.run_state, "done");
  ASSERT_EQ(r->sessions.size(), 1u);
  EXPECT_EQ(r->sessions[0].best_outcome, "fast");
  EXPECT_DOUBLE_EQ(r->sessions[0].best_speedup, 1.7);
  EXPECT_EQ(r->stats.models["fake:a"].faster, 1);
}

TEST(Runner, CompileOnlyStopsAfterCompileAndSaysWhy) {
  Rig rig("turns = 4\n");
  rig.spec.compile_only = true;
  rig.spec.pools.gpu_sets = 0;
  rig.gpus.clear();
  rig.llm.SetTags({{{"001_task", 0}, "SYNTAX"}, {{"002_task", 0}, "SYNTAX"}});
  auto r = rig.Run();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  for (const auto& [id, s] : rig.store.sessions) {
    EXPECT_EQ(s.row.state, "stopped");
    EXPECT_EQ(s.row.stop_reason, "evaluation needs a GPU");
    ASSERT_EQ(s.turns.size(), 2u);
    EXPECT_NE(s.turns[1].feedback.find("evaluation needs a GPU"), std::string::npos);
    ASSERT_EQ(s.evals.size(), 1u);  // only the compile error is a verdict
  }
  EXPECT_NE(RenderRunSummary(*r).find("Evaluation needs a GPU"), std::string::npos);
  // Compiled kernels never ran: not evaluated, named, and the resume hint is filled in.
  for (const auto& row : r->sessions) EXPECT_TRUE(row.not_evaluated) << row.task;
  EXPECT_EQ(r->stats.models["fake:a"].not_evaluated, 2);
  const std::string text = RenderRunSummary(*r);
  EXPECT_NE(text.find("4 of 4 session(s) NOT EVALUATED"), std::string::npos) << text;
  EXPECT_NE(text.find("kforge run --resume test)"), std::string::npos) << text;
  EXPECT_FALSE(r->AllFailed()) << "compile-only is not a failure";
}

// A model the registry cannot price showed "$0.0000": its spend is unknown.
TEST(Runner, UnpricedModelSpendReadsUnpricedNotZeroDollars) {
  Rig rig("turns = 1\n");
  rig.llm.SetScript([](const LlmCall& c) -> Result<LlmAnswer> {
    LlmAnswer a;
    a.usage.priced = c.model != "fake:b";
    return a;
  });
  auto r = rig.Run();
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->stats.models["fake:a"].unpriced);
  EXPECT_TRUE(r->stats.models["fake:b"].unpriced);
  const std::string table = RenderStatsTable(r->stats);
  EXPECT_NE(table.find("unpriced"), std::string::npos) << table;
}

TEST(Runner, UnreachableModelIsNotEvaluatedAndAllFailedWhenNoModelAnswers) {
  Rig rig("turns = 2\n");
  rig.llm.SetScript([](const LlmCall& c) -> Result<LlmAnswer> {
    if (c.model == "fake:b") return Error(ErrorKind::kAuth, "no API key; set B_API_KEY");
    return LlmAnswer{};
  });
  auto r = rig.Run();
  ASSERT_TRUE(r.ok());
  for (const auto& row : r->sessions) {
    EXPECT_EQ(row.not_evaluated, row.model == "fake:b") << row.model;
    EXPECT_EQ(row.failed, row.model == "fake:b") << row.model;
  }
  EXPECT_FALSE(r->AllFailed());
  const std::string text = RenderRunSummary(*r);
  EXPECT_NE(text.find("2 of 4 session(s) NOT EVALUATED"), std::string::npos) << text;
  EXPECT_NE(text.find("fake:b 001_task (sample 0): provider: auth"), std::string::npos) << text;

  Rig dead("turns = 2\n");
  dead.llm.SetScript([](const LlmCall&) -> Result<LlmAnswer> {
    return Error(ErrorKind::kAuth, "401 invalid key");
  });
  auto d = dead.Run();
  ASSERT_TRUE(d.ok());
  EXPECT_TRUE(d->AllFailed());
  EXPECT_NE(RenderRunSummary(*d).find("FAILED: every session"), std::string::npos);
}

std::map<std::pair<std::string, int>, std::string> AllSlow(int tasks, int turns) {
  std::map<std::pair<std::string, int>, std::string> m;
  for (int t = 0; t < tasks; ++t) {
    for (int i = 0; i < turns; ++i) m[{"00" + std::to_string(t + 1) + "_task", i}] = "SLOW";
  }
  return m;
}

double Spent(const FakeStore& store, const std::string& model = "") {
  double usd = 0;
  for (const auto& [id, s] : store.sessions) {
    if (!model.empty() && s.row.key.model != model) continue;
    for (const auto& t : s.turns) usd += t.usage.cost_usd;
  }
  return usd;
}

// The shipped strategies' output cap reaches every request (and so the
// worst case the budgets reserve).
TEST(Runner, AShippedStrategysCallsCarryItsOutputCap) {
  auto text = ReadFile(testing::PromptsDir() / "strategies" / "refine.toml");
  ASSERT_TRUE(text.ok()) << text.status().ToString();
  Rig rig(*text, 1);
  rig.spec.models = {"fake:a"};
  rig.llm.SetTags({{{"001_task", 0}, "SYNTAX"}});
  ASSERT_TRUE(rig.Run().ok());
  const auto calls = rig.llm.calls();
  ASSERT_FALSE(calls.empty());
  for (const auto& c : calls) EXPECT_EQ(c.max_output_tokens, std::optional<int>(16384));
}

// A call the provider billed and kforge could not use (a reply cut at the
// output cap, a failed attempt) is charged to the budgets: before, a
// truncated turn was stored at $0 and a failed call cost nothing.
TEST(Runner, BilledFailuresAreChargedToTheBudgets) {
  for (ErrorKind kind : {ErrorKind::kTruncated, ErrorKind::kOverloaded}) {
    Rig rig("turns = 10\n", 1);
    rig.spec.models = {"fake:a"};
    rig.spec.budgets.run.usd = 0.03;  // calls cost $0.01; the failed one was billed $0.02
    rig.spec.retry_backoff_s = 1;
    int calls = 0;
    rig.llm.SetScript([&calls, kind](const LlmCall&) -> Result<LlmAnswer> {
      if (++calls == 1)
        return Error(kind, "billed and failed").WithBilled(Billed{4000, 2000, 0.02});
      return LlmAnswer{};
    });
    auto r = rig.Run();
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    const auto& s = SessionFor(rig.store, "fake:a", "001_task");
    EXPECT_EQ(calls, 2) << ErrorKindName(kind) << ": $0.02 billed + one $0.01 call spend $0.03";
    EXPECT_EQ(s.row.stop_reason.rfind("budget: ", 0), 0u) << s.row.stop_reason;
    if (kind == ErrorKind::kTruncated) {
      // The spent turn is stored with what it cost, so a resume recharges it.
      ASSERT_EQ(s.turns.size(), 2u);
      EXPECT_EQ(s.turns[0].finish_reason, "length");
      EXPECT_DOUBLE_EQ(s.turns[0].usage.cost_usd, 0.02);
      EXPECT_EQ(s.turns[0].usage.tokens(), 6000);
    } else {
      ASSERT_EQ(s.turns.size(), 1u);
      bool billed_event = false;
      for (const auto& [k, detail] : rig.store.events)
        billed_event = billed_event || (k == "llm_error" && detail.contains("billed"));
      EXPECT_TRUE(billed_event);
    }
  }
}

TEST(Runner, RunBudgetStopsEveryoneWithTheReason) {
  Rig rig("turns = 10\n");
  rig.spec.budgets.run.usd = 0.05;  // $0.025 a model; calls cost $0.01
  rig.llm.SetTags(AllSlow(2, 10));  // nobody stops by a rule
  auto r = rig.Run();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  size_t turns = 0;
  for (const auto& [id, s] : rig.store.sessions) {
    turns += s.turns.size();
    EXPECT_EQ(s.row.state, "stopped");
    EXPECT_EQ(s.row.stop_reason.rfind("budget: ", 0), 0u) << s.row.stop_reason;
  }
  // fake:a stops first, after two calls (a third could pass its half); what
  // it left goes to fake:b, which makes three.
  EXPECT_NEAR(Spent(rig.store, "fake:a"), 0.02, 1e-9);
  EXPECT_NEAR(Spent(rig.store, "fake:b"), 0.03, 1e-9);
  EXPECT_EQ(turns, 5u);
  EXPECT_EQ(SessionFor(rig.store, "fake:b", "001_task").row.stop_reason,
            "budget: run spent $0.0500 of $0.0500");
}

// Issue 27: with calls in flight unreserved, --budget-usd 0.01 spent $0.036
// and --budget-tokens 100000 spent 159,300. Eight calls at once now start
// only while their worst cases fit, so the spend stays within one call's
// worst case of the budget (here, where the worst case is a true bound,
// within the budget itself).
TEST(Runner, ConcurrentCallsNeverPassABudgetByMoreThanOneCall) {
  for (bool tokens : {false, true}) {
    SCOPED_TRACE(tokens ? "tokens" : "dollars");
    Rig rig("turns = 10\n", /*tasks=*/8);
    rig.spec.models = {"fake:a"};
    rig.spec.pools.llm_per_model = 8;
    rig.llm.SetTags(AllSlow(8, 10));
    rig.llm.SetQuote({1000, 1000, 0.02});  // each call costs $0.01 and 1500 tokens
    if (tokens) {
      rig.spec.budgets.run.tokens = 9000;
    } else {
      rig.spec.budgets.run.usd = 0.05;
    }
    auto r = rig.Run();
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    int64_t used = 0;
    size_t turns = 0;
    for (const auto& [id, s] : rig.store.sessions) {
      for (const auto& t : s.turns) used += t.usage.tokens();
      turns += s.turns.size();
      EXPECT_EQ(s.row.stop_reason.rfind("budget: run ", 0), 0u) << s.row.stop_reason;
    }
    if (tokens) {
      EXPECT_LE(used, 9000 + 2000);
      EXPECT_LE(used, 9000);
      EXPECT_EQ(turns, 5u);  // 7500 spent: a sixth call may need 2000 of the 1500 left
    } else {
      EXPECT_LE(Spent(rig.store), 0.05 + 0.02 + 1e-9);
      EXPECT_LE(Spent(rig.store), 0.05 + 1e-9);
      EXPECT_EQ(turns, 4u);  // $0.04 spent: a fifth call may cost $0.02 of the $0.01 left
    }
  }
}

// N14: a run-wide budget stopped only the model scheduled last. Model b's
// first calls are overloaded and retried (20 s, 40 s, 80 s); before it is
// back, model a has spent its half, not the whole budget.
TEST(Runner, TwoModelsShareARunBudgetAndTheLaterOneGetsCalls) {
  Rig rig("turns = 10\n");
  rig.spec.budgets.run.usd = 0.04;
  rig.llm.SetTags(AllSlow(2, 10));
  std::map<std::string, int> failures;
  rig.llm.SetScript([&failures](const LlmCall& c) -> Result<LlmAnswer> {
    if (c.model == "fake:b" && failures[c.task]++ < 3)
      return Error(ErrorKind::kOverloaded, "529 overloaded");
    return LlmAnswer{};
  });
  auto r = rig.Run();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  size_t b_turns = 0;
  for (const auto& [id, s] : rig.store.sessions) {
    if (s.row.key.model == "fake:b") b_turns += s.turns.size();
    EXPECT_EQ(s.row.state, "stopped");
    EXPECT_EQ(s.row.stop_reason.rfind("budget: ", 0), 0u) << s.row.stop_reason;
  }
  EXPECT_EQ(b_turns, 2u);
  EXPECT_NEAR(Spent(rig.store, "fake:a"), 0.02, 1e-9);
  EXPECT_NEAR(Spent(rig.store, "fake:b"), 0.02, 1e-9);
}

// N14: a reply without a kernel, then a budget stop: the session was cut
// short, not judged wrong; the summary names it "not evaluated" with the
// budget as the reason, like the leaderboard does (results::NotEvaluated).
TEST(Runner, SessionsABudgetStoppedBeforeAnEvaluationAreNotEvaluated) {
  Rig rig("turns = 3\n");
  rig.spec.budgets.run.usd = 0.02;  // one $0.01 call a model
  rig.llm.SetTags({{{"001_task", 0}, "NOKERNEL"}, {{"002_task", 0}, "NOKERNEL"}});
  auto r = rig.Run();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  size_t with_turns = 0;
  for (const auto& row : r->sessions) {
    EXPECT_EQ(row.state, "stopped");
    EXPECT_EQ(row.stop_reason.rfind("budget: ", 0), 0u) << row.stop_reason;
    EXPECT_TRUE(row.not_evaluated) << row.model << " " << row.task << " " << row.turns;
    EXPECT_FALSE(row.failed);
    with_turns += row.turns > 0;
  }
  EXPECT_EQ(with_turns, 2u);
  EXPECT_NE(RenderRunSummary(*r).find("NOT EVALUATED"), std::string::npos);
}

TEST(Runner, PerModelBudgetStopsOnlyThatModel) {
  Rig rig("turns = 3\n");
  rig.spec.budgets.per_model.tokens = 1500;  // each call uses 1500 tokens
  auto r = rig.Run();
  ASSERT_TRUE(r.ok());
  for (const auto& [id, s] : rig.store.sessions) {
    EXPECT_NE(s.row.stop_reason.find("budget: model " + s.row.key.model), std::string::npos)
        << s.row.stop_reason;
  }
}

TEST(Runner, TransientFailuresRetryWithBackoffOnFakeTime) {
  Rig rig("turns = 1\n");
  rig.spec.models = {"fake:a"};
  rig.spec.tasks.resize(1);
  int failures = 2;
  rig.llm.SetScript([&failures](const LlmCall&) -> Result<LlmAnswer> {
    if (failures-- > 0) return Error(ErrorKind::kOverloaded, "529 overloaded");
    return LlmAnswer{};
  });
  auto r = rig.Run();
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(rig.llm.calls().size(), 3u);
  // 20 s + 40 s of backoff, 30 s of model latency, then compile and evaluation.
  EXPECT_GE(rig.clock.Elapsed(), std::chrono::seconds(90));
  const auto& s = SessionFor(rig.store, "fake:a", "001_task");
  EXPECT_EQ(s.row.state, "done");
  EXPECT_EQ(s.turns.size(), 1u);
}

// A provider that says "Retry-After: 300" is asked again after 300 s, not
// after the 20 s backoff; one asking for hours is held to the cap, and the
// event says why.
TEST(Runner, RunLevelRetryHonoursTheProvidersRetryAfterOnFakeTime) {
  for (const double asked : {300.0, 7200.0}) {
    Rig rig("turns = 1\n");
    rig.spec.models = {"fake:a"};
    rig.spec.tasks.resize(1);
    std::vector<Clock::TimePoint> at;
    rig.llm.SetScript([&](const LlmCall&) -> Result<LlmAnswer> {
      at.push_back(rig.clock.Now());
      if (at.size() == 1)
        return Error(ErrorKind::kRateLimited, "429: slow down").WithRetryAfter(asked);
      return LlmAnswer{};
    });
    auto r = rig.Run();
    ASSERT_TRUE(r.ok());
    ASSERT_EQ(at.size(), 2u);
    const double waited = std::chrono::duration<double>(at[1] - at[0]).count();
    const double expected = std::min(asked, rig.spec.max_retry_wait_s);
    // The first call's own latency (30 s) comes before its failure is seen.
    EXPECT_GE(waited, expected) << asked;
    EXPECT_LE(waited, expected + 31) << asked;
    const nlohmann::json* retry = nullptr;
    for (const auto& [kind, detail] : rig.store.events) {
      if (kind == "llm_retry") retry = &detail;
    }
    ASSERT_NE(retry, nullptr);
    EXPECT_DOUBLE_EQ((*retry)["wait_s"].get<double>(), expected);
    const std::string reason = (*retry)["reason"];
    EXPECT_NE(reason.find(asked > 1800 ? "7200 s; waiting the 1800 s cap" : "Retry-After"),
              std::string::npos)
        << reason;
  }
}

TEST(Runner, AuthFailureStopsOnlyThatModel) {
  Rig rig("turns = 2\n");
  rig.llm.SetScript([](const LlmCall& c) -> Result<LlmAnswer> {
    if (c.model == "fake:b") return Error(ErrorKind::kAuth, "401 invalid key");
    return LlmAnswer{};
  });
  auto r = rig.Run();
  ASSERT_TRUE(r.ok());
  for (const auto& [id, s] : rig.store.sessions) {
    if (s.row.key.model == "fake:b") {
      EXPECT_EQ(s.row.state, "stopped");
      EXPECT_NE(s.row.stop_reason.find("auth"), std::string::npos);
      EXPECT_TRUE(s.turns.empty());
    } else {
      EXPECT_EQ(s.row.state, "done");
    }
  }
}

TEST(Runner, HarnessFailureStopsTheSessionResumably) {
  Rig rig("turns = 2\n");
  rig.spec.models = {"fake:a"};
  rig.spec.tasks.resize(1);
  rig.gpus[0]->fail_with = Error(ErrorKind::kHarness, "worker failed to start");
  auto r = rig.Run();
  ASSERT_TRUE(r.ok());
  auto& s = rig.store.sessions.begin()->second;
  EXPECT_EQ(s.row.state, "stopped");
  EXPECT_NE(s.row.stop_reason.find("worker failed"), std::string::npos);
  // Resume with a working evaluator: the stored kernel is evaluated, no new model call for it.
  rig.gpus[0]->fail_with.reset();
  size_t calls = rig.llm.calls().size();
  auto r2 = rig.Run();
  ASSERT_TRUE(r2.ok());
  EXPECT_EQ(s.row.state, "done");
  EXPECT_EQ(rig.llm.calls().size(), calls + 1);  // only turn 2 is new
  EXPECT_EQ(s.turns.size(), 2u);
}

// Kill the run at every store write in turn, resume, and require the same
// record as a run that was never interrupted.
TEST(Runner, ResumeAfterACrashAtEveryStepGivesTheSameRecord) {
  const std::string strategy = "turns = 3\nsamples = 2\nrefine = \"beam\"\nbeam = 2\n";
  auto tags = [] {
    std::map<std::pair<std::string, int>, std::string> m = {
        {{"001_task", 0}, "SYNTAX"}, {{"001_task", 1}, "WRONG"},   {{"001_task", 2}, "NOKERNEL"},
        {{"001_task", 3}, "SLOW"},   {{"001_task", 4}, "FAST1.3"}, {{"002_task", 0}, "CRASH"},
        {{"002_task", 1}, "HANG"},   {{"002_task", 2}, "FAST2.0"}};
    return m;
  };
  Rig clean(strategy);
  clean.llm.SetTags(tags());
  ASSERT_TRUE(clean.Run().ok());
  const nlohmann::json expected = clean.store.Dump();
  const int total = clean.store.mutations;
  ASSERT_GT(total, 40);
  for (int crash_at = 0; crash_at < total; ++crash_at) {
    Rig rig(strategy);
    rig.llm.SetTags(tags());
    rig.store.crash_after = crash_at;
    auto first = rig.Run();
    ASSERT_FALSE(first.ok()) << "crash_at " << crash_at;
    rig.store.Revive();
    auto second = rig.Run();
    ASSERT_TRUE(second.ok()) << "crash_at " << crash_at << ": " << second.status().ToString();
    ASSERT_EQ(rig.store.Dump(), expected) << "crash_at " << crash_at;
    EXPECT_EQ(rig.store.run_state, "done");
  }
}

TEST(Runner, DoneSessionsAreSkippedOnResume) {
  Rig rig("turns = 2\n");
  ASSERT_TRUE(rig.Run().ok());
  size_t calls = rig.llm.calls().size();
  int evals = rig.gpus[0]->evaluations;
  auto again = rig.Run();
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(rig.llm.calls().size(), calls);
  EXPECT_EQ(rig.gpus[0]->evaluations, evals);
  for (const auto& s : again->sessions) EXPECT_EQ(s.state, "done");
}

TEST(Runner, KeepsEveryGpuBusyUnderLoad) {
  // 20 tasks x 2 models on 4 GPU sets; each model call takes 60 s, each
  // evaluation 10 s, and many model calls run at once: GPU-bound after the
  // first replies arrive.
  Rig rig("turns = 6\n", 20, 4, 60);
  rig.spec.pools.llm_total = 64;
  rig.spec.pools.llm_per_model = 32;
  rig.spec.pools.compile_slots = 8;
  auto r = rig.Run();
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->sessions.size(), 40u);
  double busy = 0;
  for (double b : r->stats.gpu_busy_s) busy += b;
  EXPECT_DOUBLE_EQ(busy, 40 * 6 * 10.0);
  // The only idle GPU time is before the first replies arrive (60 s model
  // call + 2 s compile) and the last round's tail.
  EXPECT_GE(r->gpu_busy_fraction, 0.9) << "wall " << r->wall_s;
}

}  // namespace
}  // namespace kforge::agent
