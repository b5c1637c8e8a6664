#include "kforge/providers/limiter.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

namespace kforge::providers {
namespace {

using std::chrono::duration;
using std::chrono::seconds;

double Secs(Clock::Duration d) { return duration<double>(d).count(); }

TEST(LimiterTest, RequestsPerMinuteRefillContinuously) {
  FakeClock clock;
  Limiter limiter({.requests_per_minute = 60}, clock);
  // A full bucket lets a minute's worth through at once, then one a second.
  for (int i = 0; i < 60; ++i) limiter.Acquire(0);
  EXPECT_NEAR(Secs(clock.Elapsed()), 0.0, 1e-9);
  Clock::Duration waited{};
  limiter.Acquire(0, &waited);
  EXPECT_NEAR(Secs(waited), 1.0, 1e-3);
  EXPECT_NEAR(Secs(clock.Elapsed()), 1.0, 1e-3);
}

TEST(LimiterTest, TokensPerMinuteAndSettle) {
  FakeClock clock;
  Limiter limiter({.tokens_per_minute = 6000}, clock);
  { auto lease = limiter.Acquire(6000); }
  Clock::Duration waited{};
  {
    auto lease = limiter.Acquire(3000, &waited);  // half a minute of refill
    EXPECT_NEAR(Secs(waited), 30.0, 1e-3);
    lease.Settle(1000);  // used less than reserved: 2000 tokens go back
  }
  limiter.Acquire(2000, &waited);
  EXPECT_NEAR(Secs(waited), 0.0, 1e-3);
  // A request bigger than a minute's allowance waits for a full bucket, not forever.
  limiter.Acquire(1e9, &waited);
  EXPECT_NEAR(Secs(waited), 60.0, 1e-2);
}

TEST(LimiterTest, MaxInFlightBlocksUntilALeaseEnds) {
  FakeClock clock;
  Limiter limiter({.max_in_flight = 1}, clock);
  auto first = std::make_unique<Limiter::Lease>(limiter.Acquire(0));
  std::atomic<bool> second_started{false};
  std::thread t([&] {
    auto lease = limiter.Acquire(0);
    second_started = true;
  });
  // The waiting thread cannot have started while the first lease is held.
  for (int i = 0; i < 1000 && limiter.in_flight() != 1; ++i) std::this_thread::yield();
  EXPECT_FALSE(second_started.load());
  first.reset();
  t.join();
  EXPECT_TRUE(second_started.load());
  EXPECT_EQ(limiter.in_flight(), 0);
}

TEST(LimiterTest, SharedLimiterIsOnePerKey) {
  FakeClock clock;
  auto a = SharedLimiter("limiter-test|a", {.max_in_flight = 2}, clock);
  auto b = SharedLimiter("limiter-test|a", {.max_in_flight = 9}, clock);
  auto c = SharedLimiter("limiter-test|c", {}, clock);
  EXPECT_EQ(a.get(), b.get());
  EXPECT_NE(a.get(), c.get());
  EXPECT_EQ(b->options().max_in_flight, 2);
}

}  // namespace
}  // namespace kforge::providers
