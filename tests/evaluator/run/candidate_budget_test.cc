// The candidate's budget of call time (EvalOptions::candidate_budget_s): a
// kernel that answers every call just inside its per-call deadline still
// runs out of budget, and its timeout says so. Fake workers, no GPU.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>

#include "run/session.h"
#include "run/worker_group.h"

namespace kforge::eval {
namespace {

Result<std::unique_ptr<WorkerGroup>> FakeGroup(int world) {
  GroupOptions o;
  o.worker_path = KFORGE_FAKE_WORKER;
  o.world = world;
  o.devices.assign(world, 0);
  o.emulated = true;
  o.start_deadline_s = 10;
  return WorkerGroup::Start(o);
}

TEST(CandidateBudget, ADeadlineIsWhatIsLeftOfTheBudgetAndTrustedGroupsKeepTheirs) {
  EvalOptions o;
  o.candidate_budget_s = 10;
  EvalSession s;
  s.options = &o;
  s.candidate_spent_s = 7;
  {
    CandidateTime trusted(s, false);
    EXPECT_DOUBLE_EQ(trusted.Deadline(60), 60);
    EXPECT_FALSE(s.budget_cut_deadline);
  }
  EXPECT_DOUBLE_EQ(s.candidate_spent_s, 7);  // a trusted group's time is not the candidate's
  {
    CandidateTime clock(s, true);
    EXPECT_DOUBLE_EQ(clock.Deadline(2), 2);  // the phase's own deadline is nearer
    EXPECT_FALSE(s.budget_cut_deadline);
    EXPECT_DOUBLE_EQ(clock.Deadline(60), 3);  // the budget's is
    EXPECT_TRUE(s.budget_cut_deadline);
  }
  EXPECT_FALSE(s.budget_cut_deadline);
  EXPECT_GE(s.candidate_spent_s, 7);
  s.candidate_spent_s = 11;
  CandidateTime spent(s, true);
  EXPECT_GT(spent.Deadline(60), 0);  // a spent budget still ends the exchange as a timeout
  EXPECT_LT(spent.Deadline(60), 0.1);
}

TEST(CandidateBudget, AKernelThatStallsUnderEveryDeadlineRunsOutOfItsBudget) {
  setenv("KFORGE_WORKER_FAKE_0", "slow", 1);  // every answer takes 0.2 s
  setenv("KFORGE_WORKER_FAKE_1", "slow", 1);
  auto g = FakeGroup(2);
  unsetenv("KFORGE_WORKER_FAKE_0");
  unsetenv("KFORGE_WORKER_FAKE_1");
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  EvalOptions o;
  o.candidate_budget_s = 0.5;
  EvalSession s;
  s.options = &o;
  const auto t0 = std::chrono::steady_clock::now();
  Status failed = Status::Ok();
  int answered = 0;
  for (int call = 0; call < 20 && failed.ok(); ++call) {
    CandidateTime clock(s, true);
    auto r = Exchange(s, **g, {{"op", "run"}}, clock.Deadline(60), "correctness");
    if (r.ok()) ++answered;
    failed = r.status();
  }
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(answered, 2);  // 0.4 s of the 0.5 s budget; the third call gets 0.1 s
  EXPECT_EQ(failed.kind(), ErrorKind::kDeadlock) << failed.ToString();
  EXPECT_NE(failed.message().find("used up their budget"), std::string::npos) << failed.message();
  EXPECT_EQ(s.failure.value("candidate_budget_s", 0.0), 0.5) << s.failure.dump();
  EXPECT_LT(took, 3.0);  // not 20 calls' worth of 60 s deadlines
}

}  // namespace
}  // namespace kforge::eval
