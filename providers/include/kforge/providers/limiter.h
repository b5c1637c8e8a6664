// A per-provider limiter: requests in flight, requests per minute and tokens
// per minute. One Limiter per provider is shared by every session of a run so
// that eight sessions against one API key respect one set of limits.
//
// The per-minute limits are token buckets holding at most one minute's worth,
// refilled continuously. Waiting for a bucket sleeps on the Clock (FakeClock in
// tests); waiting for a slot in flight blocks until another request finishes.
// Thread-safe.
#pragma once

#include <memory>
#include <string>

#include "kforge/core/clock.h"
#include "kforge/core/mutex.h"
#include "kforge/providers/client.h"

namespace kforge::providers {

class Limiter {
 public:
  Limiter(const LimiterOptions& options, Clock& clock);

  // Holds one request slot and its reserved tokens until destroyed.
  class Lease {
   public:
    Lease() = default;
    Lease(Lease&& other) noexcept : limiter_(other.limiter_), tokens_(other.tokens_) {
      other.limiter_ = nullptr;
    }
    Lease& operator=(Lease&& other) noexcept;
    ~Lease();
    // Corrects the reservation once the real usage is known: the difference
    // is returned to (or taken from) the tokens-per-minute bucket.
    void Settle(double actual_tokens);

   private:
    friend class Limiter;
    Limiter* limiter_ = nullptr;
    double tokens_ = 0;
  };

  // Waits until a request estimated at `tokens` may start. Returns the time
  // spent waiting on the buckets through the Clock.
  Lease Acquire(double tokens, Clock::Duration* waited = nullptr);

  int in_flight() const;
  const LimiterOptions& options() const { return options_; }

 private:
  struct Bucket {
    double capacity = 0, level = 0, per_second = 0;
    Clock::TimePoint last{};
  };
  void Refill(Bucket& b, Clock::TimePoint now);
  void Release() EXCLUDES(mu_);
  void Adjust(double delta_tokens) EXCLUDES(mu_);

  LimiterOptions options_;
  Clock& clock_;
  mutable Mutex mu_;
  CondVar cv_;
  int in_flight_ GUARDED_BY(mu_) = 0;
  Bucket requests_ GUARDED_BY(mu_);
  Bucket tokens_ GUARDED_BY(mu_);
};

// The process-wide limiter for `key` (a provider name, or a compat base URL),
// created with `options` on first use.
std::shared_ptr<Limiter> SharedLimiter(const std::string& key, const LimiterOptions& options,
                                       Clock& clock);

}  // namespace kforge::providers
