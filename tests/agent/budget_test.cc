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

}  // namespace
}  // namespace kforge::agent
