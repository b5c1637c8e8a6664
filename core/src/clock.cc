#include "kforge/core/clock.h"

#include <thread>

namespace kforge {
namespace {

class SteadyClock final : public Clock {
 public:
  TimePoint Now() const override {
    return std::chrono::time_point_cast<Duration>(std::chrono::steady_clock::now());
  }
  void SleepFor(Duration d) override { std::this_thread::sleep_for(d); }
  double UnixSeconds() const override {
    return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
        .count();
  }
};

}  // namespace

Clock& RealClock() {
  static SteadyClock clock;
  return clock;
}

Clock::TimePoint FakeClock::Now() const {
  MutexLock lock(&mu_);
  return TimePoint(now_);
}

double FakeClock::UnixSeconds() const {
  MutexLock lock(&mu_);
  return unix_start_ + std::chrono::duration<double>(now_).count();
}

void FakeClock::Advance(Duration d) {
  MutexLock lock(&mu_);
  now_ += d;
}

Clock::Duration FakeClock::Elapsed() const {
  MutexLock lock(&mu_);
  return now_;
}

}  // namespace kforge
