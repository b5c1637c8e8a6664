// Status and Result<T>: errors as values across module boundaries.
//
// A Status is either OK or carries an ErrorKind (what callers branch on) and a
// message for people. Code that throws (JSON parsing, std::stoi, httplib) is
// wrapped at the module boundary and converted once into a Status.
#pragma once

#include <cassert>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace kforge {

enum class ErrorKind {
  kOk = 0,
  kInvalidInput,        // bad user input: a file, a flag, a field
  kNotFound,            // a named thing does not exist
  kIo,                  // filesystem or pipe failure
  kTransport,           // connection failed, reset, DNS
  kTimeout,             // a deadline passed (request, compile, phase)
  kRateLimited,         // 429-style: retry later
  kOverloaded,          // 529/503-style: retry later
  kServerError,         // 5xx
  kAuth,                // bad or missing credentials
  kQuota,               // quota or credit exhausted: retrying cannot help
  kContextOverflow,     // the prompt does not fit the model's context
  kTruncated,           // output stopped at the output-token limit
  kContentFilter,       // the provider refused the content
  kCompileError,        // nvcc rejected a kernel
  kPolicyViolation,     // a kernel uses something its task forbids
  kRuntimeError,        // a kernel crashed or a CUDA call failed
  kMismatch,            // a kernel's outputs are wrong
  kDeadlock,            // a kernel hung past its deadline
  kHarness,             // kforge itself failed (not the kernel's fault)
  kBudget,              // a run/model/task budget was exhausted
  kCancelled,           // the user or a deadline stopped the work
  kInternal,            // a bug in kforge
  kIntegrityViolation,  // a kernel's process broke the sandbox or the timing protocol
  // An evaluation slot could not take or finish the job for reasons that are
  // neither the kernel's nor the job's: a remote server died, was unreachable,
  // drained, or had a full queue. The same job may run elsewhere (the run
  // requeues it; retry_after_s() says when this slot may be asked again).
  kSlotLost,
};

// Stable lower_snake name ("rate_limited") used in JSON and logs.
std::string_view ErrorKindName(ErrorKind kind);

// A failure that may pass if the same call is made again later (rate limits,
// overload, 5xx, timeouts, transport): the one rule the providers' retry
// loop and the agent's scheduler share.
bool IsTransient(ErrorKind kind);

// What a failed model call was billed for before it failed: a reply cut at
// its output limit, a stream broken after its usage was reported, attempts
// retried before the last. A budget counts it although no answer came.
struct Billed {
  int64_t input_tokens = 0, output_tokens = 0;
  double usd = 0;
  bool empty() const { return input_tokens == 0 && output_tokens == 0 && usd == 0; }
};

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(ErrorKind kind, std::string message) : kind_(kind), message_(std::move(message)) {}

  static Status Ok() { return Status(); }

  bool ok() const { return kind_ == ErrorKind::kOk; }
  ErrorKind kind() const { return kind_; }
  const std::string& message() const { return message_; }

  // "kind: message", or "ok".
  std::string ToString() const;

  // Returns a copy whose message is prefixed with `context: `. Keeps the
  // retry-after hint.
  Status WithContext(std::string_view context) const;

  // How long the other side asked us to wait before trying again (a
  // provider's Retry-After), in seconds; unset when it said nothing. Travels
  // with the status so a caller that retries later (the run scheduler) can
  // honour a delay the layer below would not wait for itself.
  std::optional<double> retry_after_s() const { return retry_after_s_; }
  Status WithRetryAfter(double seconds) const;

  // What the failed call was billed for (see Billed); unset when nothing
  // was, or nothing is known. Kept by WithContext.
  const std::optional<Billed>& billed() const { return billed_; }
  Status WithBilled(const Billed& billed) const;

 private:
  ErrorKind kind_ = ErrorKind::kOk;
  std::string message_;
  std::optional<double> retry_after_s_;
  std::optional<Billed> billed_;
};

inline Status Error(ErrorKind kind, std::string message) {
  return Status(kind, std::move(message));
}

// Result<T>: a value or a non-OK Status.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}        // NOLINT(google-explicit-constructor)
  Result(Status status) : v_(std::move(status)) {  // NOLINT(google-explicit-constructor)
    assert(!std::get<Status>(v_).ok() && "Result built from an OK Status");
  }

  bool ok() const { return std::holds_alternative<T>(v_); }
  const Status& status() const {
    static const Status kOk;
    return ok() ? kOk : std::get<Status>(v_);
  }
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace kforge

// Propagates a non-OK Status from an expression returning Status.
#define KF_RETURN_IF_ERROR(expr)             \
  do {                                       \
    ::kforge::Status kf_status_ = (expr);    \
    if (!kf_status_.ok()) return kf_status_; \
  } while (0)

#define KF_CONCAT_INNER_(a, b) a##b
#define KF_CONCAT_(a, b) KF_CONCAT_INNER_(a, b)
// Declares `lhs` from a Result<T> expression, or returns its Status.
#define KF_ASSIGN_OR_RETURN(lhs, expr) \
  KF_ASSIGN_OR_RETURN_IMPL_(KF_CONCAT_(kf_result_, __LINE__), lhs, expr)
#define KF_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                              \
  if (!tmp.ok()) return tmp.status();             \
  lhs = std::move(tmp).value()
