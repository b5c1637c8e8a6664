// Clock: the seam for time. Retry, rate limiting, scheduling and deadlines take a
// Clock& so tests drive them with FakeClock and never sleep for real.
#pragma once

#include <chrono>

#include "kforge/core/mutex.h"

namespace kforge {

class Clock {
 public:
  using Duration = std::chrono::nanoseconds;
  using TimePoint = std::chrono::time_point<std::chrono::steady_clock, Duration>;

  virtual ~Clock() = default;
  virtual TimePoint Now() const = 0;
  virtual void SleepFor(Duration d) = 0;
  // Wall-clock seconds since the Unix epoch (for records, not for deadlines).
  virtual double UnixSeconds() const = 0;
};

// The process's steady clock. Thread-safe.
Clock& RealClock();

// Time that moves only when told to. SleepFor advances it at once. Thread-safe.
class FakeClock final : public Clock {
 public:
  explicit FakeClock(double unix_start = 1.7e9) : unix_start_(unix_start) {}
  TimePoint Now() const override;
  void SleepFor(Duration d) override { Advance(d); }
  double UnixSeconds() const override;
  void Advance(Duration d);
  // Total time slept or advanced so far.
  Duration Elapsed() const;

 private:
  mutable Mutex mu_;
  Duration now_ GUARDED_BY(mu_) = Duration{0};
  double unix_start_;
};

}  // namespace kforge
