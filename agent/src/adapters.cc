// The agent's ports over the real modules. Each adapter only converts types;
// the behaviour (retries, limits, compile caching, durability) is the
// module's own.
#include "kforge/agent/adapters.h"

#include <fmt/format.h>

#include <map>

#include "kforge/core/fs.h"
#include "kforge/core/mutex.h"
#include "kforge/core/version.h"
#include "kforge/evaluator/compile.h"
#include "kforge/evaluator/hardware.h"
#include "kforge/evaluator/task.h"
#include "kforge/evaluator/task_card.h"
#include "kforge/evaluator/task_select.h"
#include "kforge/providers/client.h"
#include "kforge/results/store.h"

namespace kforge::agent {
namespace {

namespace fs = std::filesystem;

class ProviderLlm final : public LlmPort {
 public:
  Result<LlmAnswer> Complete(const LlmCall& call) override {
    KF_ASSIGN_OR_RETURN(providers::Client * client, ClientFor(call.model));
    KF_ASSIGN_OR_RETURN(providers::ChatResponse r, client->Complete(ToRequest(call)));
    LlmAnswer a;
    a.text = std::move(r.text);
    a.finish_reason = std::string(providers::FinishReasonName(r.finish));
    // A turn's usage is what the provider billed for it: attempts it billed
    // and the client retried included.
    a.usage = r.Billed();
    a.latency_s = r.latency_s;
    a.request_id = r.request_id;
    return a;
  }

  LlmQuote Quote(const LlmCall& call) override {
    const providers::ChatRequest req = ToRequest(call);
    Result<providers::Client*> client = ClientFor(call.model);
    // No client: Complete fails the same way, so the call costs nothing.
    if (!client.ok()) return LlmQuote{};
    const providers::CostBound b = client.value()->WorstCase(req);
    return LlmQuote{b.input_tokens, b.output_tokens, b.usd};
  }

  // Makes the model's client now: an unknown provider, a missing key or a
  // missing cassette shows before the run starts.
  Status Prepare(const std::string& model) { return ClientFor(model).status(); }
  providers::ClientOptions& options() { return options_; }

 private:
  static providers::ChatRequest ToRequest(const LlmCall& call) {
    providers::ChatRequest req;
    req.model = call.model;
    req.system = call.system;
    for (const auto& m : call.messages) req.messages.push_back({m.role, m.text});
    req.temperature = call.temperature;
    req.max_output_tokens = call.max_output_tokens;
    req.reasoning_effort = call.reasoning_effort;
    // Samples and repeats are meant to be independent draws: each is its own
    // cache entry, while a resumed session finds the answers it already paid for.
    req.draw = fmt::format("repeat {}, turn {}", call.repeat, call.turn_index);
    if (!call.task.empty()) {
      // Named as `kforge show` names them: the session's sample, turns from 1.
      req.context =
          fmt::format("task {}, sample {}, turn {}", call.task, call.repeat, call.turn_index + 1);
    }
    return req;
  }

  Result<providers::Client*> ClientFor(const std::string& model) {
    MutexLock lock(&mu_);
    auto it = clients_.find(model);
    if (it != clients_.end()) return it->second.get();
    KF_ASSIGN_OR_RETURN(auto client, providers::MakeClient(model, options_));
    providers::Client* raw = client.get();
    clients_[model] = std::move(client);
    return raw;
  }

  providers::ClientOptions options_;
  Mutex mu_;
  std::map<std::string, std::unique_ptr<providers::Client>> clients_ GUARDED_BY(mu_);
};

class RunStoreAdapter final : public StorePort {
 public:
  explicit RunStoreAdapter(std::unique_ptr<results::RunStore> store) : store_(std::move(store)) {}

  Result<RunInfo> CreateOrGetRun(const std::string& name, const nlohmann::json& config,
                                 const std::string& task_suite_hash,
                                 const nlohmann::json& hardware) override {
    return store_->CreateOrGetRun(name, config, VersionString(), task_suite_hash, hardware);
  }
  Status FinishRun(int64_t run_id, const std::string& state) override {
    return store_->FinishRun(run_id, state);
  }
  Status SetRunConfig(int64_t run_id, const nlohmann::json& config) override {
    return store_->SetRunConfig(run_id, config);
  }
  Result<int64_t> UpsertSession(int64_t run_id, const SessionKey& key) override {
    return store_->UpsertSession(run_id, key);
  }
  Result<std::vector<SessionRecord>> ListSessions(int64_t run_id) override {
    return store_->ListSessions(run_id);
  }
  Status SetSessionState(int64_t id, const std::string& state, const std::string& reason) override {
    return store_->SetSessionState(id, state, reason);
  }
  Result<int64_t> AppendTurn(const TurnRecord& turn) override { return store_->AppendTurn(turn); }
  Status SetTurnFeedback(int64_t turn_id, const std::string& feedback) override {
    return store_->SetTurnFeedback(turn_id, feedback);
  }
  Result<std::vector<TurnRecord>> ListTurns(int64_t session_id) override {
    return store_->ListTurns(session_id);
  }
  Result<int64_t> RecordEvaluation(int64_t session_id, int64_t turn_id,
                                   const nlohmann::json& doc) override {
    return store_->RecordEvaluation(session_id, turn_id, doc);
  }
  Result<std::vector<EvaluationRecord>> ListEvaluations(int64_t session_id) override {
    KF_ASSIGN_OR_RETURN(std::vector<EvaluationRecord> rows, store_->ListEvaluations(session_id));
    for (auto& r : rows) {
      KF_ASSIGN_OR_RETURN(r.doc, store_->GetEvaluationDoc(r));
    }
    return rows;
  }
  Status SetBestEvaluation(int64_t session_id, int64_t eval_id) override {
    return store_->SetBestEvaluation(session_id, eval_id);
  }
  Status AppendEvent(int64_t run_id, const std::string& kind,
                     const nlohmann::json& detail) override {
    return store_->AppendEvent(run_id, kind, detail);
  }

 private:
  std::unique_ptr<results::RunStore> store_;
};

}  // namespace

std::unique_ptr<LlmPort> MakeProviderLlm() { return std::make_unique<ProviderLlm>(); }

Result<std::unique_ptr<LlmPort>> MakeProviderLlmFor(const std::vector<std::string>& models,
                                                    const std::vector<std::string>& registries,
                                                    const fs::path& record, bool use_cache) {
  auto llm = std::make_unique<ProviderLlm>();
  for (const auto& r : registries) llm->options().registry_paths.emplace_back(r);
  llm->options().record_path = record;
  llm->options().cache_enabled = use_cache;
  std::vector<std::string> problems;
  for (const auto& model : models) {
    Status st = llm->Prepare(model);
    if (!st.ok()) problems.push_back(st.ToString());
  }
  if (!problems.empty()) {
    return Error(ErrorKind::kInvalidInput,
                 fmt::format("{} of {} model(s) cannot be used: {}", problems.size(), models.size(),
                             fmt::join(problems, "; ")));
  }
  return std::unique_ptr<LlmPort>(std::move(llm));
}

Result<std::unique_ptr<StorePort>> OpenRunStore(const fs::path& run_dir) {
  KF_ASSIGN_OR_RETURN(auto store, results::RunStore::Open(run_dir, false));
  return std::unique_ptr<StorePort>(std::make_unique<RunStoreAdapter>(std::move(store)));
}

Result<std::unique_ptr<StorePort>> CreateRunStore(const fs::path& run_dir) {
  KF_ASSIGN_OR_RETURN(auto store, results::RunStore::Create(run_dir));
  return std::unique_ptr<StorePort>(std::make_unique<RunStoreAdapter>(std::move(store)));
}

Result<PromptInputs> TaskPromptInputs(const eval::Task& task, int world, const std::string& dtype,
                                      const Strategy& strategy, const std::string& hardware_card) {
  KF_RETURN_IF_ERROR(eval::CheckTaskProblem(task, world, dtype));
  PromptInputs in;
  in.task_key = task.key;
  in.task_title = task.title;
  in.world = world;
  eval::Dtype dt = task.dtypes.empty() ? eval::Dtype::kF32 : task.dtypes.front();
  if (!dtype.empty()) {
    KF_ASSIGN_OR_RETURN(dt, eval::ParseDtype(dtype));
  }
  in.dtype = std::string(eval::DtypeName(dt));
  in.task_card = eval::RenderTaskCard(task, world, dt);
  in.hardware_card = hardware_card;
  fs::path abi = eval::AbiIncludeDir() / "kforge" / "kernel.h";
  if (const char* env = std::getenv("KFORGE_ABI_HEADER"); env && *env) abi = env;
  KF_ASSIGN_OR_RETURN(in.abi_header, ReadFile(abi));
  KF_ASSIGN_OR_RETURN(in.reference_source, ReadFile(task.reference));
  if (strategy.example) {
    // Never the task's expert kernel: a model shown it would reach human
    // parity by copying it. A task whose only solution is its expert has no example.
    const fs::path expert = task.expert ? task.expert->kernel : fs::path();
    for (const fs::path& sol : task.solutions) {
      if (sol == expert) continue;
      in.example_name = sol.filename().string();
      KF_ASSIGN_OR_RETURN(in.example_source, ReadFile(sol));
      break;
    }
  }
  if (strategy.redteam) {
    const fs::path docs = DocsDir();
    KF_ASSIGN_OR_RETURN(in.integrity_doc, ReadFile(docs / "integrity.md"));
    KF_ASSIGN_OR_RETURN(in.methodology_doc, ReadFile(docs / "methodology.md"));
  }
  return in;
}

}  // namespace kforge::agent
