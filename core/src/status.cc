#include "kforge/core/status.h"

namespace kforge {

std::string_view ErrorKindName(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::kOk:
      return "ok";
    case ErrorKind::kInvalidInput:
      return "invalid_input";
    case ErrorKind::kNotFound:
      return "not_found";
    case ErrorKind::kIo:
      return "io";
    case ErrorKind::kTransport:
      return "transport";
    case ErrorKind::kTimeout:
      return "timeout";
    case ErrorKind::kRateLimited:
      return "rate_limited";
    case ErrorKind::kOverloaded:
      return "overloaded";
    case ErrorKind::kServerError:
      return "server_error";
    case ErrorKind::kAuth:
      return "auth";
    case ErrorKind::kQuota:
      return "quota";
    case ErrorKind::kContextOverflow:
      return "context_overflow";
    case ErrorKind::kTruncated:
      return "truncated";
    case ErrorKind::kContentFilter:
      return "content_filter";
    case ErrorKind::kCompileError:
      return "compile_error";
    case ErrorKind::kPolicyViolation:
      return "policy_violation";
    case ErrorKind::kRuntimeError:
      return "runtime_error";
    case ErrorKind::kMismatch:
      return "mismatch";
    case ErrorKind::kDeadlock:
      return "deadlock";
    case ErrorKind::kHarness:
      return "harness";
    case ErrorKind::kBudget:
      return "budget";
    case ErrorKind::kCancelled:
      return "cancelled";
    case ErrorKind::kIntegrityViolation:
      return "integrity_violation";
    case ErrorKind::kInternal:
      return "internal";
    case ErrorKind::kSlotLost:
      return "slot_lost";
  }
  return "unknown";
}

std::string Status::ToString() const {
  if (ok()) return "ok";
  return std::string(ErrorKindName(kind_)) + ": " + message_;
}

Status Status::WithContext(std::string_view context) const {
  if (ok()) return *this;
  Status s(kind_, std::string(context) + ": " + message_);
  s.retry_after_s_ = retry_after_s_;
  s.billed_ = billed_;
  return s;
}

Status Status::WithRetryAfter(double seconds) const {
  Status s = *this;
  if (!ok()) s.retry_after_s_ = seconds;
  return s;
}

Status Status::WithBilled(const Billed& billed) const {
  Status s = *this;
  if (!ok() && !billed.empty()) s.billed_ = billed;
  return s;
}

bool IsTransient(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::kRateLimited:
    case ErrorKind::kOverloaded:
    case ErrorKind::kServerError:
    case ErrorKind::kTimeout:
    case ErrorKind::kTransport:
      return true;
    default:
      return false;
  }
}

}  // namespace kforge
