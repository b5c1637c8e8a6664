#include "kforge/agent/budget.h"

#include <gtest/gtest.h>

namespace kforge::agent {
namespace {

TEST(Budget, RunDollarsStopEveryone) {
  Budgets b;
  b.run.usd = 1.0;
  BudgetBook book(b);
  book.Charge("m1", "t1", 0.6, 10);
  EXPECT_FALSE(book.Exhausted("m2", "t2", 0));
  book.Charge("m2", "t2", 0.4, 10);
  auto why = book.Exhausted("m1", "t9", 0);
  ASSERT_TRUE(why);
  EXPECT_EQ(*why, "budget: run spent $1.0000 of $1.0000");
}

TEST(Budget, ModelTokensStopOnlyThatModel) {
  Budgets b;
  b.per_model.tokens = 100;
  BudgetBook book(b);
  book.Charge("m1", "t1", 0, 100);
  EXPECT_TRUE(book.Exhausted("m1", "t2", 0));
  EXPECT_FALSE(book.Exhausted("m2", "t1", 0));
}

TEST(Budget, TaskBudgetIsPerModelAndTask) {
  Budgets b;
  b.per_task.usd = 0.5;
  BudgetBook book(b);
  book.Charge("m1", "t1", 0.5, 0);
  auto why = book.Exhausted("m1", "t1", 0);
  ASSERT_TRUE(why);
  EXPECT_NE(why->find("task m1 / t1"), std::string::npos);
  EXPECT_FALSE(book.Exhausted("m2", "t1", 0));
  EXPECT_FALSE(book.Exhausted("m1", "t2", 0));
}

TEST(Budget, WallClockCountsFromTheFirstCall) {
  Budgets b;
  b.per_model.wall_s = 3600;
  BudgetBook book(b);
  EXPECT_FALSE(book.Exhausted("m1", "t1", 1000));  // not started yet
  book.Touch("m1", "t1", 1000);
  book.Touch("m1", "t1", 2000);  // does not restart the clock
  EXPECT_FALSE(book.Exhausted("m1", "t1", 4599));
  EXPECT_TRUE(book.Exhausted("m1", "t1", 4600));
}

// The overshoot of issue 27 came from calls in flight: each one is held
// against the budget at its worst case until it ends.
TEST(Budget, CallsInFlightHoldTheirWorstCase) {
  Budgets b;
  b.run.tokens = 3000;
  BudgetBook book(b);
  const CallCost worst{0, 1500};
  using A = BudgetBook::Admission;
  ASSERT_EQ(book.Admit("m1", "t1", worst, 0).kind, A::kStart);
  book.Reserve("m1", "t1", worst);
  ASSERT_EQ(book.Admit("m1", "t2", worst, 0).kind, A::kStart);
  book.Reserve("m1", "t2", worst);
  // Nothing is spent yet, but a third call could pass the budget: it waits.
  EXPECT_EQ(book.Admit("m1", "t3", worst, 0).kind, A::kWait);
  EXPECT_FALSE(book.Exhausted("m1", "t3", 0));
  book.Release("m1", "t1", worst);
  book.Charge("m1", "t1", 0, 1000);
  EXPECT_EQ(book.Admit("m1", "t3", worst, 0).kind, A::kWait);
  book.Release("m1", "t2", worst);
  book.Charge("m1", "t2", 0, 1000);
  // 1000 tokens left: a call that may use 1500 can never fit.
  A a = book.Admit("m1", "t3", worst, 0);
  EXPECT_EQ(a.kind, A::kStop);
  EXPECT_TRUE(a.worst_case);
  EXPECT_EQ(a.reason,
            "budget: run has 1000 of 3000 tokens left, less than the next call's worst case, 1500 "
            "tokens");
  EXPECT_EQ(book.Admit("m1", "t3", CallCost{0, 1000}, 0).kind, A::kStart);
}

TEST(Budget, DollarReservationsCountEveryScope) {
  Budgets b;
  b.per_task.usd = 0.05;
  BudgetBook book(b);
  const CallCost worst{0.03, 0};
  using A = BudgetBook::Admission;
  book.Reserve("m1", "t1", worst);
  EXPECT_EQ(book.Admit("m1", "t1", worst, 0).kind, A::kWait);
  EXPECT_EQ(book.Admit("m1", "t2", worst, 0).kind, A::kStart);  // another task's own budget
  book.Release("m1", "t1", worst);
  book.Charge("m1", "t1", 0.01, 0);
  EXPECT_EQ(book.Admit("m1", "t1", worst, 0).kind, A::kStart);
  book.Charge("m1", "t1", 0.01, 0);
  EXPECT_EQ(book.Admit("m1", "t1", worst, 0).kind, A::kStart);  // $0.02 + $0.03 = $0.05 fits
  book.Charge("m1", "t1", 0.01, 0);
  EXPECT_EQ(book.Admit("m1", "t1", worst, 0).kind, A::kStop);
}

// N14: a run-wide budget went to whichever model was scheduled first.
TEST(Budget, ARunBudgetIsSplitEvenlyAcrossModels) {
  Budgets b;
  b.run.usd = 1.0;
  b.run.tokens = 1000;
  BudgetBook book(b, {"m1", "m2"});
  EXPECT_DOUBLE_EQ(*book.RunShare("m1").usd, 0.5);
  EXPECT_EQ(*book.RunShare("m1").tokens, 500);
  book.Charge("m1", "t1", 0.5, 100);
  auto why = book.Exhausted("m1", "t2", 0);
  ASSERT_TRUE(why);
  EXPECT_EQ(*why, "budget: model m1's share of the run budget spent $0.5000 of $0.5000");
  EXPECT_FALSE(book.Exhausted("m2", "t1", 0));
  // m2 ends having spent $0.10: the rest of the run budget is m1's.
  book.Charge("m2", "t1", 0.1, 100);
  book.ModelEnded("m2");
  EXPECT_DOUBLE_EQ(*book.RunShare("m1").usd, 0.9);
  EXPECT_EQ(*book.RunShare("m1").tokens, 900);
  EXPECT_FALSE(book.Exhausted("m1", "t2", 0));
  EXPECT_EQ(book.Admit("m1", "t2", CallCost{0.4, 10}, 0).kind, BudgetBook::Admission::kStart);
  EXPECT_EQ(book.Admit("m1", "t2", CallCost{0.41, 10}, 0).kind, BudgetBook::Admission::kStop);
}

TEST(Budget, OneModelHasTheWholeRunBudget) {
  Budgets b;
  b.run.usd = 1.0;
  BudgetBook book(b, {"m1"});
  EXPECT_FALSE(book.RunShare("m1").usd);
  book.Charge("m1", "t1", 0.9, 0);
  EXPECT_FALSE(book.Exhausted("m1", "t1", 0));
}

}  // namespace
}  // namespace kforge::agent
