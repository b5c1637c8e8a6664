#include "kforge/core/status.h"

#include <gtest/gtest.h>

#include "kforge/core/clock.h"

namespace kforge {
namespace {

Result<int> Half(int x) {
  if (x % 2) return Error(ErrorKind::kInvalidInput, "odd");
  return x / 2;
}

Result<int> Quarter(int x) {
  KF_ASSIGN_OR_RETURN(int h, Half(x));
  KF_ASSIGN_OR_RETURN(int q, Half(h));
  return q;
}

TEST(StatusTest, OkAndErrorCarryKindAndMessage) {
  EXPECT_TRUE(Status::Ok().ok());
  Status s = Error(ErrorKind::kRateLimited, "slow down");
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.kind(), ErrorKind::kRateLimited);
  EXPECT_EQ(s.ToString(), "rate_limited: slow down");
  EXPECT_EQ(s.WithContext("openai").message(), "openai: slow down");
}

TEST(StatusTest, AssignOrReturnPropagatesTheFirstError) {
  EXPECT_EQ(*Quarter(8), 2);
  Result<int> r = Quarter(6);  // 6 -> 3 -> odd
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "odd");
}

// What a failed model call was billed for travels with its status through
// every layer that adds context; an OK status and nothing billed carry none.
TEST(StatusTest, BilledTravelsWithContext) {
  Status s = Error(ErrorKind::kTruncated, "cut").WithBilled(Billed{10, 20, 0.5});
  Status wrapped = s.WithContext("provider").WithRetryAfter(3);
  ASSERT_TRUE(wrapped.billed().has_value());
  EXPECT_EQ(wrapped.billed()->input_tokens, 10);
  EXPECT_EQ(wrapped.billed()->output_tokens, 20);
  EXPECT_DOUBLE_EQ(wrapped.billed()->usd, 0.5);
  EXPECT_FALSE(Status::Ok().WithBilled(Billed{1, 1, 1}).billed().has_value());
  EXPECT_FALSE(Error(ErrorKind::kTransport, "x").WithBilled(Billed{}).billed().has_value());
}

TEST(ClockTest, FakeClockMovesOnlyWhenTold) {
  FakeClock clock(100.0);
  auto t0 = clock.Now();
  clock.SleepFor(std::chrono::seconds(3));
  EXPECT_EQ(clock.Now() - t0, std::chrono::seconds(3));
  EXPECT_DOUBLE_EQ(clock.UnixSeconds(), 103.0);
}

}  // namespace
}  // namespace kforge
