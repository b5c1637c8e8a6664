// The one interface the agent uses to talk to a model.
//
// MakeClient("anthropic:claude-opus-4-7", options) returns a Client that
// speaks that provider's wire format over HTTP, retries what can succeed
// later, waits on a per-provider limiter, answers repeated requests from a
// content-addressed cache and prices every response from the model registry.
// "replay:PATH" returns a Client that answers from a recorded cassette.
//
// Thread safety: a Client may be used by several threads at once.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kforge/core/clock.h"
#include "kforge/core/status.h"
#include "kforge/core/usage.h"

namespace kforge::providers {

class HttpTransport;
class Limiter;

struct Message {
  std::string role;  // "user" | "assistant"
  std::string text;
};

struct ChatRequest {
  std::string model;  // spec, e.g. "anthropic:claude-opus-4-7"
  std::string system;
  std::vector<Message> messages;
  std::optional<double> temperature, top_p;
  std::optional<int> max_output_tokens;  // includes reasoning tokens on every provider
  std::optional<std::string>
      reasoning_effort;  // "low" | "medium" | "high" (also "minimal", "xhigh", "max")
  std::optional<int> thinking_budget_tokens;
  std::optional<int64_t> seed;
  std::vector<std::string> stop;
  bool stream = true;
  // Which deliberate draw of the same request this is (a sample, a repeat):
  // part of the response cache key, so draws meant to differ are never
  // answered with one cached reply. Never sent; no part of a recording's hash.
  std::string draw;
  // Where the request sits, for log lines only ("task 001_allreduce, sample 0, turn 2"):
  // never sent, and no part of a cache key or a recording.
  std::string context;
};

// Token counts normalised across providers (docs/providers.md, "Usage"):
// input_tokens includes cached and cache-written input; output_tokens includes
// reasoning tokens. cached_input_tokens and reasoning_tokens are parts of those.
struct Usage {
  int64_t input_tokens = 0, cached_input_tokens = 0, output_tokens = 0, reasoning_tokens = 0;
  int64_t cache_write_input_tokens = 0;  // Anthropic cache creation; part of input_tokens
};

enum class FinishReason { kStop, kLength, kContentFilter, kError, kOther };

// "stop", "length", "content_filter", "error", "other".
std::string_view FinishReasonName(FinishReason reason);

struct ChatResponse {
  std::string text, reasoning;
  FinishReason finish = FinishReason::kStop;
  Usage usage;
  // Usage of attempts that failed after the provider reported it (billed)
  // and were retried; not part of `usage`, part of `cost_usd`.
  Usage retried_usage;
  double cost_usd =
      0;  // what this call paid, retried attempts included: 0 on a cache hit or a replay
  bool cost_known = true;  // false when the registry has no price for the model
  std::string request_id;  // provider's id (x-request-id, request-id, responseId or body id)
  std::string model;       // the model that answered, as the provider names it
  double latency_s = 0;
  int attempts = 1;
  bool from_cache = false;

  // What the call billed, as the agent and the run store keep it: `usage`
  // and `retried_usage` summed, with cost_usd, priced unless the registry has
  // no price for the model (a cached answer cost nothing, knowingly).
  TokenUsage Billed() const;
};

// Receives visible text as it streams. When an attempt fails after some text
// was delivered and the request is retried, the next attempt streams again
// from its beginning; ClientOptions::on_retry tells the caller when that happens.
using TextCallback = std::function<void(std::string_view delta)>;

// The most one request may cost, known before it is sent: what a budget
// reserves for it (docs/agent.md, "Budgets").
struct CostBound {
  int64_t input_tokens = 0;   // estimated from the request's text (EstimateInputTokens)
  int64_t output_tokens = 0;  // the most the model may write in answer
  std::optional<double> usd;  // nullopt: the registry has no price for the model
};

// A third of the request's characters (system and messages), rounded up. Code
// and English run three to four characters a token, so this overstates most
// prompts: a reservation may be too large, rarely too small.
int64_t EstimateInputTokens(const ChatRequest& request);

// The output reserved for a request that sets no max_output_tokens, to a model
// whose registry entry gives no output limit.
inline constexpr int64_t kUnknownOutputTokens = 32000;

class Client {
 public:
  virtual ~Client() = default;
  // Success: a response whose finish is kStop, kLength (with some text) or
  // kOther. Failure: a Status whose kind is one of kRateLimited, kOverloaded,
  // kServerError, kTimeout, kTransport (retries exhausted), kAuth, kQuota,
  // kContextOverflow, kInvalidInput, kTruncated (output limit hit with no
  // visible text), kContentFilter, kNotFound (replay: no recording), with the
  // provider's own message; API keys are redacted from it.
  virtual Result<ChatResponse> Complete(const ChatRequest& request,
                                        const TextCallback& on_text = {}) = 0;
  // The worst case of `request`: its input as estimated, the request's
  // max_output_tokens (capped at the model's limit) or else the model's
  // output limit, priced by the registry. This default knows no model:
  // max_output_tokens or kUnknownOutputTokens, and no price.
  virtual CostBound WorstCase(const ChatRequest& request) const;
};

struct RetryOptions {
  int max_attempts = 5;                             // including the first
  std::chrono::milliseconds initial_backoff{1000};  // doubled per retry, jittered
  std::chrono::milliseconds max_backoff{30000};
  // A server-requested delay above this makes the failure final: waiting
  // longer than this is better done by the scheduler than inside one call.
  std::chrono::milliseconds max_retry_after{120000};
};

// Per-provider limits; 0 means unlimited. One limiter per provider key is
// shared by every Client in the process (all sessions of a run).
struct LimiterOptions {
  int max_in_flight = 0;
  double requests_per_minute = 0;
  double tokens_per_minute = 0;
};

struct ClientOptions {
  // Registry files read after the built-in providers/models.toml; later files
  // override earlier entries with the same spec.
  std::vector<std::filesystem::path> registry_paths;
  bool use_builtin_registry = true;
  std::string base_url;  // overrides every other base URL source when set
  std::string api_key;   // overrides the environment when set

  bool cache_enabled = true;
  std::filesystem::path cache_dir;  // empty: DefaultCacheDir()/responses

  // Appends every exchange that reached the provider to this cassette (JSON Lines).
  std::filesystem::path record_path;
  // replay: when false, a request without a recording goes to replay_fallback_model.
  bool replay_strict = true;
  std::string replay_fallback_model;

  Clock* clock = nullptr;                // null: RealClock()
  HttpTransport* transport = nullptr;    // null: the libcurl transport
  std::shared_ptr<Limiter> limiter;      // null: the process-wide limiter for the provider
  std::optional<LimiterOptions> limits;  // null: the registry's provider limits
  RetryOptions retry;
  std::function<double()> random;  // uniform [0,1) for jitter; null: a seeded PRNG

  std::chrono::milliseconds connect_timeout{10000};
  std::chrono::milliseconds total_timeout{std::chrono::minutes(30)};
  std::chrono::milliseconds idle_timeout{120000};  // longest silence while streaming

  // Called before each retry with the attempt that failed (1-based) and why.
  std::function<void(int attempt, const Status& why, std::chrono::milliseconds wait)> on_retry;
  // Called for every exchange the provider billed, including attempts whose
  // answer was discarded (a truncated empty answer, an error after usage).
  std::function<void(const Usage& usage, double cost_usd)> on_spend;
};

Result<std::unique_ptr<Client>> MakeClient(const std::string& model_spec,
                                           const ClientOptions& options);

// The status a response's finish reason stands for: OK for kStop, kTruncated
// for kLength, kContentFilter for kContentFilter. For callers that want to
// treat a cut-off answer as a failure.
Status FinishStatus(const ChatResponse& response);

}  // namespace kforge::providers
