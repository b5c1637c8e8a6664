// When to try a failed request again and how long to wait first.
#pragma once

#include <chrono>
#include <functional>

#include "errors.h"
#include "kforge/providers/client.h"

namespace kforge::providers {

struct RetryDecision {
  bool retry = false;
  std::chrono::milliseconds wait{0};
  Status final_status;  // when !retry: the status to return
};

// `attempt` is the 1-based attempt that just failed; `uniform` is in [0,1).
//  * Only retryable kinds are retried (rate limit, overload, 5xx, timeout,
//    transport); quota, auth, invalid input and context overflow stop at once.
//  * x-should-retry: false stops; true retries anything but quota and auth.
//  * A server-given delay is honoured exactly when it is within
//    max_retry_after; above it the failure is final (openai-python does the
//    same above 120 s) because waiting that long belongs to the scheduler.
//  * Otherwise: min(initial * 2^(attempt-1), max_backoff), jittered to
//    between half and all of it; overloads start from twice the initial delay.
RetryDecision DecideRetry(const ProviderError& error, int attempt, const RetryOptions& options,
                          double uniform);

}  // namespace kforge::providers
