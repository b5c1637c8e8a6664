// The agent's seams: the three things a run talks to (a model, an evaluator,
// the run store), each behind a narrow interface. The model and the store are
// adapted from kforge_providers and kforge_results (adapters.h); the evaluator
// is the evaluator's own service interface. Tests use in-memory fakes.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "kforge/core/status.h"
#include "kforge/core/usage.h"
#include "kforge/evaluator/service.h"
#include "kforge/results/records.h"

namespace kforge::agent {

// ---- the model ----

struct ChatTurn {
  std::string role;  // "user" | "assistant"
  std::string text;
};

struct LlmCall {
  std::string model;  // spec, e.g. "anthropic:claude-opus-4-7"
  std::string system;
  std::vector<ChatTurn> messages;
  std::optional<double> temperature;
  std::optional<int> max_output_tokens;
  std::optional<std::string> reasoning_effort;
  // Where this call sits in the run: lets a replay cassette match it.
  std::string task;
  int turn_index = 0;
  int repeat = 0;  // the session's sample number within the run (SessionSpec::sample)
};

struct LlmAnswer {
  std::string text;
  std::string finish_reason = "stop";  // stop | length | content_filter | error | other
  TokenUsage usage;                    // what the provider billed, retried attempts included
  double latency_s = 0;
  std::string request_id;
};

// The most a call may cost, known before it is made: what the run's budgets
// reserve for it while it is in flight (docs/agent.md, "Budgets").
struct LlmQuote {
  int64_t input_tokens = 0;   // estimated from the prompt
  int64_t output_tokens = 0;  // the most the model may write
  std::optional<double> usd;  // nullopt: no price for the model (dollar budgets reserve nothing)
  int64_t tokens() const { return input_tokens + output_tokens; }
};

// Thread-safe: a run calls it from several threads at once. Errors carry the
// providers' ErrorKind (kRateLimited, kQuota, kAuth, ...).
class LlmPort {
 public:
  virtual ~LlmPort() = default;
  virtual Result<LlmAnswer> Complete(const LlmCall& call) = 0;
  // The worst case of `call`; called on the run's thread before each call.
  virtual LlmQuote Quote(const LlmCall& call) = 0;
};

// ---- the evaluator ----

// The evaluator's own service interface (kforge/evaluator/service.h): a
// local one (eval::MakeLocalEvalService) or an eval-server's (kforge_remote).
using EvalJob = eval::EvalRequest;
using EvalPort = eval::EvalService;

// ---- the run store ----

// The store's own records (kforge/results/records.h), passed as they are.
using results::EvaluationRecord;
using results::RunInfo;
using results::SessionKey;
using results::SessionRecord;
using results::TurnRecord;

// Every mutating call is durable when it returns OK.
class StorePort {
 public:
  virtual ~StorePort() = default;
  // The run called `name`, created if absent (an existing one keeps its
  // stored config). `task_suite_hash` is eval::TaskSuiteHash of the tasks the
  // run uses: stored with a new run so that merges can refuse other suites.
  virtual Result<RunInfo> CreateOrGetRun(const std::string& name, const nlohmann::json& config,
                                         const std::string& task_suite_hash,
                                         const nlohmann::json& hardware) = 0;
  virtual Status FinishRun(int64_t run_id, const std::string& state) = 0;
  virtual Status SetRunConfig(int64_t run_id, const nlohmann::json& config) = 0;
  virtual Result<int64_t> UpsertSession(int64_t run_id, const SessionKey& key) = 0;
  virtual Result<std::vector<SessionRecord>> ListSessions(int64_t run_id) = 0;
  virtual Status SetSessionState(int64_t session_id, const std::string& state,
                                 const std::string& stop_reason) = 0;
  // Stores the whole turn, its kernel included, in one call.
  virtual Result<int64_t> AppendTurn(const TurnRecord& turn) = 0;
  virtual Status SetTurnFeedback(int64_t turn_id, const std::string& feedback) = 0;
  // Turns in index order, kernels and texts included.
  virtual Result<std::vector<TurnRecord>> ListTurns(int64_t session_id) = 0;
  virtual Result<int64_t> RecordEvaluation(int64_t session_id, int64_t turn_id,
                                           const nlohmann::json& doc) = 0;
  // Evaluations in id order, each with its whole document (`doc`).
  virtual Result<std::vector<EvaluationRecord>> ListEvaluations(int64_t session_id) = 0;
  virtual Status SetBestEvaluation(int64_t session_id, int64_t evaluation_id) = 0;
  virtual Status AppendEvent(int64_t run_id, const std::string& kind,
                             const nlohmann::json& detail) = 0;
};

}  // namespace kforge::agent
