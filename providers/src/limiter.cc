#include "kforge/providers/limiter.h"

#include <algorithm>
#include <map>

#include "kforge/core/mutex.h"

namespace kforge::providers {

Limiter::Limiter(const LimiterOptions& options, Clock& clock) : options_(options), clock_(clock) {
  auto init = [&](Bucket& b, double per_minute) {
    b.capacity = per_minute;
    b.level = per_minute;
    b.per_second = per_minute / 60.0;
    b.last = clock_.Now();
  };
  init(requests_, options.requests_per_minute);
  init(tokens_, options.tokens_per_minute);
}

void Limiter::Refill(Bucket& b, Clock::TimePoint now) {
  if (b.capacity <= 0) return;
  double secs = std::chrono::duration<double>(now - b.last).count();
  if (secs > 0) b.level = std::min(b.capacity, b.level + secs * b.per_second);
  b.last = now;
}

Limiter::Lease Limiter::Acquire(double tokens, Clock::Duration* waited) {
  Clock::Duration total_wait{0};
  MutexLock lock(&mu_);
  if (options_.max_in_flight > 0) {
    cv_.Wait(lock, [&]() REQUIRES(mu_) { return in_flight_ < options_.max_in_flight; });
  }
  ++in_flight_;
  // A request bigger than a whole minute's allowance could never start; let
  // it through once the bucket is full rather than waiting forever.
  double need_tokens = tokens_.capacity > 0 ? std::min(tokens, tokens_.capacity) : 0;
  for (;;) {
    Clock::TimePoint now = clock_.Now();
    Refill(requests_, now);
    Refill(tokens_, now);
    double wait_s = 0;
    if (requests_.capacity > 0 && requests_.level < 1)
      wait_s = std::max(wait_s, (1 - requests_.level) / requests_.per_second);
    if (tokens_.capacity > 0 && tokens_.level < need_tokens) {
      wait_s = std::max(wait_s, (need_tokens - tokens_.level) / tokens_.per_second);
    }
    if (wait_s <= 0) break;
    auto d = std::chrono::duration_cast<Clock::Duration>(std::chrono::duration<double>(wait_s)) +
             Clock::Duration(1);
    lock.Unlock();
    clock_.SleepFor(d);
    total_wait += d;
    lock.Lock();
  }
  if (requests_.capacity > 0) requests_.level -= 1;
  if (tokens_.capacity > 0) tokens_.level -= need_tokens;
  if (waited) *waited = total_wait;
  Lease lease;
  lease.limiter_ = this;
  lease.tokens_ = need_tokens;
  return lease;
}

void Limiter::Release() {
  {
    MutexLock lock(&mu_);
    --in_flight_;
  }
  cv_.NotifyOne();
}

void Limiter::Adjust(double delta_tokens) {
  MutexLock lock(&mu_);
  if (tokens_.capacity <= 0) return;
  tokens_.level = std::min(tokens_.capacity, tokens_.level - delta_tokens);
}

int Limiter::in_flight() const {
  MutexLock lock(&mu_);
  return in_flight_;
}

Limiter::Lease& Limiter::Lease::operator=(Lease&& other) noexcept {
  if (this != &other) {
    if (limiter_) limiter_->Release();
    limiter_ = other.limiter_;
    tokens_ = other.tokens_;
    other.limiter_ = nullptr;
  }
  return *this;
}

Limiter::Lease::~Lease() {
  if (limiter_) limiter_->Release();
}

void Limiter::Lease::Settle(double actual_tokens) {
  if (!limiter_) return;
  limiter_->Adjust(actual_tokens - tokens_);
  tokens_ = actual_tokens;
}

std::shared_ptr<Limiter> SharedLimiter(const std::string& key, const LimiterOptions& options,
                                       Clock& clock) {
  struct Limiters {
    Mutex mu;
    std::map<std::string, std::shared_ptr<Limiter>> by_key GUARDED_BY(mu);
  };
  static Limiters limiters;
  MutexLock lock(&limiters.mu);
  auto& slot = limiters.by_key[key];
  if (!slot) slot = std::make_shared<Limiter>(options, clock);
  return slot;
}

}  // namespace kforge::providers
