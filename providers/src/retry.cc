#include "retry.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace kforge::providers {

using std::chrono::milliseconds;

RetryDecision DecideRetry(const ProviderError& error, int attempt, const RetryOptions& options,
                          double uniform) {
  RetryDecision d;
  const ErrorKind kind = error.status.kind();
  bool retryable = IsTransient(kind);
  if (error.should_retry.has_value()) {
    retryable = *error.should_retry && kind != ErrorKind::kQuota && kind != ErrorKind::kAuth;
  }
  if (!retryable) {
    d.final_status = error.status;
    return d;
  }
  // A final status keeps the server's delay, so the run's scheduler, which
  // may wait much longer than one call does, can honour it.
  const Status hinted = error.retry_after
                            ? error.status.WithRetryAfter(error.retry_after->count() / 1000.0)
                            : error.status;
  if (attempt >= options.max_attempts) {
    d.final_status = hinted.WithContext(fmt::format("gave up after {} attempts", attempt));
    return d;
  }
  if (error.retry_after) {
    if (*error.retry_after > options.max_retry_after) {
      d.final_status = hinted.WithContext(fmt::format(
          "the server asked to wait {:.1f} s, more than the {:.0f} s cap",
          error.retry_after->count() / 1000.0, options.max_retry_after.count() / 1000.0));
      return d;
    }
    d.retry = true;
    d.wait = *error.retry_after;
    return d;
  }
  double base = static_cast<double>(options.initial_backoff.count());
  if (kind == ErrorKind::kOverloaded) base *= 2;
  double full =
      std::min(base * std::pow(2.0, attempt - 1), static_cast<double>(options.max_backoff.count()));
  d.retry = true;
  d.wait = milliseconds(static_cast<int64_t>(full * (0.5 + 0.5 * std::clamp(uniform, 0.0, 1.0))));
  return d;
}

}  // namespace kforge::providers
