// Lost evaluation slots (ErrorKind::kSlotLost: a remote eval-server that
// died, drained or was full): the evaluation is requeued on another slot and
// recorded, the slot rests, and a run that runs out of attempts stops the
// session as a harness failure with the kernel unevaluated. On fake time.
#include <gtest/gtest.h>

#include <chrono>

#include "fakes.h"
#include "kforge/agent/runner.h"
#include "test_util.h"

namespace kforge::agent {
namespace {

using testing::FakeEval;
using testing::FakeLlm;
using testing::FakeStore;
using testing::MakeStrategy;

// A slot that loses the first `lose` jobs it is given (all of them when
// negative), then evaluates like FakeEval. Records when it was asked.
class LosingEval final : public EvalPort {
 public:
  LosingEval(const Clock& clock, int lose, double seconds = 10)
      : clock_(clock), lose_(lose), inner_(seconds) {}
  Result<nlohmann::json> Evaluate(const EvalJob& job) override {
    asked_at.push_back(clock_.Now());
    if (lose_ < 0 || lost < lose_) {
      ++lost;
      Status st = Error(ErrorKind::kSlotLost, "evaluation server http://a:1: connection reset");
      if (retry_after_s) st = st.WithRetryAfter(*retry_after_s);
      return st;
    }
    return inner_.Evaluate(job);
  }
  int lost = 0;
  std::optional<double> retry_after_s;
  std::vector<Clock::TimePoint> asked_at;

 private:
  const Clock& clock_;
  int lose_;
  FakeEval inner_;
};

struct Rig {
  Rig() : strategy(MakeStrategy("turns = 2\n")), llm(30) {
    spec.name = "requeue";
    spec.models = {"fake:a"};
    spec.tasks.push_back({"001_task", "collective", {"SYS", "PROMPT"}});
    spec.strategy = &strategy;
    spec.pools.compile_slots = 1;
    spec.slot_cooldown_s = 15;
    compiler = std::make_unique<FakeEval>(2);
  }

  Result<RunSummary> Run() {
    auto executor = MakeSimExecutor(clock);
    RunDeps deps;
    deps.llm = &llm;
    deps.gpu_sets = gpus;
    spec.pools.gpu_sets = static_cast<int>(gpus.size());
    deps.compilers = compilers.empty() ? std::vector<EvalPort*>{compiler.get()} : compilers;
    spec.pools.compile_slots = static_cast<int>(deps.compilers.size());
    deps.gpu_set_names = names;
    deps.gpu_set_groups.clear();
    for (const auto& n : names) deps.gpu_set_groups.push_back(n.substr(0, n.find(' ')));
    deps.store = &store;
    deps.clock = &clock;
    deps.executor = executor.get();
    return ExecuteRun(spec, deps);
  }

  std::vector<const nlohmann::json*> Events(const std::string& kind) const {
    std::vector<const nlohmann::json*> out;
    for (const auto& [k, detail] : store.events) {
      if (k == kind) out.push_back(&detail);
    }
    return out;
  }

  Strategy strategy;
  FakeLlm llm;
  FakeClock clock;
  FakeStore store;
  RunSpec spec;
  std::unique_ptr<FakeEval> compiler;
  std::vector<EvalPort*> gpus, compilers;
  std::vector<std::string> names;
};

TEST(Requeue, LostGpuSlotRequeuesOnAnotherSlotAndRecordsIt) {
  Rig rig;
  LosingEval dead(rig.clock, -1);
  FakeEval good(10);
  rig.gpus = {&dead, &good};
  rig.names = {"http://a:1 (gpu slot 0)", "http://b:2 (gpu slot 0)"};
  auto r = rig.Run();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const auto& s = rig.store.sessions.begin()->second;
  EXPECT_EQ(s.row.state, "done") << s.row.stop_reason;
  ASSERT_EQ(s.turns.size(), 2u);
  // Every turn evaluated exactly once, on the slot that works.
  ASSERT_EQ(s.evals.size(), 2u);
  EXPECT_NE(s.evals[0].turn_id, s.evals[1].turn_id);
  EXPECT_EQ(good.evaluations, 2);
  // The dead slot took each turn's job first (its rest of 15 s was over by
  // turn 2) and lost it; each job was lost once and then ran on the other.
  EXPECT_EQ(dead.lost, 2);
  auto requeued = rig.Events("eval_requeued");
  ASSERT_EQ(requeued.size(), 2u);
  EXPECT_EQ((*requeued[1])["attempt"], 1);
  EXPECT_DOUBLE_EQ((*requeued[1])["slot_cooldown_s"].get<double>(),
                   30);  // the second loss in a row
  EXPECT_EQ((*requeued[0])["slot"], 0);
  EXPECT_EQ((*requeued[0])["pool"], "gpu");
  EXPECT_EQ((*requeued[0])["attempt"], 1);
  EXPECT_EQ((*requeued[0])["kind"], "slot_lost");
  EXPECT_EQ((*requeued[0])["evaluator"], "http://a:1 (gpu slot 0)");
  EXPECT_NE((*requeued[0])["message"].get<std::string>().find("connection reset"),
            std::string::npos);
  EXPECT_TRUE(rig.Events("eval_abandoned").empty());
  EXPECT_FALSE(r->AllFailed());
}

// A server with two slots dies: losing one job there rests both, so the
// job's next attempt goes to another server instead of the dead one's
// second slot.
TEST(Requeue, SlotsOfOneServerRestTogether) {
  Rig rig;
  rig.spec.models = {"fake:a"};
  LosingEval dead0(rig.clock, -1), dead1(rig.clock, -1);
  FakeEval good(10);
  rig.gpus = {&dead0, &dead1, &good};
  rig.names = {"http://a:1 (gpu slot 0)", "http://a:1 (gpu slot 1)", "http://b:2 (gpu slot 0)"};
  auto r = rig.Run();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(dead0.lost + dead1.lost, 2);  // one per turn: the group rested after each loss
  EXPECT_EQ(good.evaluations, 2);
  for (const auto* e : rig.Events("eval_requeued")) EXPECT_EQ((*e)["attempt"], 1);

  // The same slots without groups: each dead slot costs the job an attempt.
  Rig alone;
  LosingEval a0(alone.clock, -1), a1(alone.clock, -1);
  FakeEval g(10);
  alone.gpus = {&a0, &a1, &g};
  ASSERT_TRUE(alone.Run().ok());
  EXPECT_EQ(alone.Events("eval_requeued").size(), 2u + 2u);
}

TEST(Requeue, OutOfAttemptsStopsAsAHarnessFailureNotTheKernels) {
  Rig rig;
  rig.spec.max_eval_attempts = 3;
  LosingEval dead(rig.clock, -1);
  rig.gpus = {&dead};
  auto r = rig.Run();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const auto& s = rig.store.sessions.begin()->second;
  EXPECT_EQ(s.row.state, "stopped");
  EXPECT_EQ(s.row.stop_reason.rfind("harness: the evaluation was lost 3 times", 0), 0u)
      << s.row.stop_reason;
  // Nothing judged the kernel: no evaluation, no feedback as if it were wrong.
  ASSERT_EQ(s.turns.size(), 1u);
  EXPECT_TRUE(s.evals.empty());
  EXPECT_TRUE(s.turns[0].feedback.empty());
  EXPECT_EQ(dead.lost, 3);
  EXPECT_EQ(rig.Events("eval_requeued").size(), 2u);
  ASSERT_EQ(rig.Events("eval_abandoned").size(), 1u);
  EXPECT_EQ((*rig.Events("eval_abandoned")[0])["attempt"], 3);
  ASSERT_EQ(r->sessions.size(), 1u);
  EXPECT_TRUE(r->sessions[0].failed);
  EXPECT_TRUE(r->sessions[0].not_evaluated);
  EXPECT_TRUE(r->AllFailed());
  // The slot rested between attempts, longer each time: 15 s, then 30 s.
  ASSERT_EQ(dead.asked_at.size(), 3u);
  EXPECT_GE(dead.asked_at[1] - dead.asked_at[0], std::chrono::seconds(15));
  EXPECT_GE(dead.asked_at[2] - dead.asked_at[1], std::chrono::seconds(30));

  // Resumed with a working slot, the stored kernel is evaluated without a
  // new model call for it.
  FakeEval good(10);
  rig.gpus = {&good};
  const size_t calls = rig.llm.calls().size();
  auto again = rig.Run();
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(s.row.state, "done");
  EXPECT_EQ(s.evals.size(), 2u);
  EXPECT_EQ(rig.llm.calls().size(), calls + 1);  // turn 2 only
}

TEST(Requeue, RetryAfterIsTheLeastRestOfTheSlot) {
  Rig rig;
  LosingEval busy(rig.clock, 1);
  busy.retry_after_s = 120;
  rig.gpus = {&busy};
  auto r = rig.Run();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_GE(busy.asked_at.size(), 2u);
  EXPECT_GE(busy.asked_at[1] - busy.asked_at[0], std::chrono::seconds(120));
  auto requeued = rig.Events("eval_requeued");
  ASSERT_EQ(requeued.size(), 1u);
  EXPECT_DOUBLE_EQ((*requeued[0])["slot_cooldown_s"].get<double>(), 120);
  EXPECT_EQ(rig.store.sessions.begin()->second.evals.size(), 2u);
}

TEST(Requeue, LostCompileSlotRequeuesToo) {
  Rig rig;
  rig.spec.compile_only = true;
  LosingEval dead(rig.clock, -1, 2);
  FakeEval good(2);
  rig.compilers = {&dead, &good};
  auto r = rig.Run();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const auto& s = rig.store.sessions.begin()->second;
  EXPECT_EQ(s.row.stop_reason, "evaluation needs a GPU");
  EXPECT_EQ(dead.lost, 1);
  EXPECT_EQ(good.evaluations, 1);
  auto requeued = rig.Events("eval_requeued");
  ASSERT_EQ(requeued.size(), 1u);
  EXPECT_EQ((*requeued[0])["pool"], "compile");
  EXPECT_EQ((*requeued[0])["evaluator"], "compile slot 0");
}

// Errors that are not the slot's keep their meaning: the session stops at
// once, nothing is requeued.
TEST(Requeue, OtherEvaluatorErrorsAreNotRequeued) {
  Rig rig;
  FakeEval broken(10);
  broken.fail_with = Error(ErrorKind::kInvalidInput, "task suite mismatch");
  FakeEval good(10);
  rig.gpus = {&broken, &good};
  auto r = rig.Run();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const auto& s = rig.store.sessions.begin()->second;
  EXPECT_EQ(s.row.state, "stopped");
  EXPECT_NE(s.row.stop_reason.find("task suite mismatch"), std::string::npos);
  EXPECT_TRUE(rig.Events("eval_requeued").empty());
  EXPECT_EQ(good.evaluations, 0);
}

}  // namespace
}  // namespace kforge::agent
