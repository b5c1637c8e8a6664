// In-memory fakes of the agent's ports, for deterministic tests on fake time.
#pragma once

#include <functional>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "kforge/agent/ports.h"
#include "kforge/core/hash.h"

namespace kforge::agent::testing {

// Replies "```cuda ... kf_run ... TAG ...```" where TAG comes from `script`
// (task, turn index) -> tag; missing entries reply with tag "FAST1.5".
class FakeLlm final : public LlmPort {
 public:
  using Script = std::function<Result<LlmAnswer>(const LlmCall&)>;
  explicit FakeLlm(double latency_s = 30, double cost_usd = 0.01)
      : latency_s_(latency_s), cost_usd_(cost_usd) {}

  void SetTags(std::map<std::pair<std::string, int>, std::string> tags) { tags_ = std::move(tags); }
  void SetScript(Script s) { script_ = std::move(s); }
  // The worst case Quote reports; unset: exactly what every call costs.
  void SetQuote(LlmQuote q) { quote_ = q; }

  static std::string ReplyFor(const std::string& tag) {
    return "Plan: do it.\n\n```cuda\n#include \"kforge/kernel.h\"\n// " + tag +
           "\nextern \"C\" int kf_run(kf_ctx* ctx) { return 0; }\n```\n";
  }

  Result<LlmAnswer> Complete(const LlmCall& call) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      calls_.push_back(call);
    }
    bool priced = true;
    if (script_) {
      auto r = script_(call);
      if (!r.ok()) return r;
      priced =
          r->usage.priced;  // the script decides failures and pricing; the text comes from tags
    }
    std::string tag = "FAST1.5";
    auto it = tags_.find({call.task, call.turn_index});
    if (it != tags_.end()) tag = it->second;
    LlmAnswer a;
    a.text = tag == "NOKERNEL" ? "I would rather explain than write code." : ReplyFor(tag);
    a.usage.input_tokens = 1000;
    a.usage.output_tokens = 500;
    a.usage.cost_usd = priced ? cost_usd_ : 0.0;
    a.usage.priced = priced;
    a.latency_s = latency_s_;
    a.request_id = "req-" + call.task + "-" + std::to_string(call.turn_index);
    return a;
  }

  LlmQuote Quote(const LlmCall&) override {
    return quote_ ? *quote_ : LlmQuote{1000, 500, cost_usd_};
  }

  std::vector<LlmCall> calls() const {
    std::lock_guard<std::mutex> lock(mu_);
    return calls_;
  }

 private:
  double latency_s_, cost_usd_;
  std::map<std::pair<std::string, int>, std::string> tags_;
  Script script_;
  std::optional<LlmQuote> quote_;
  mutable std::mutex mu_;
  std::vector<LlmCall> calls_;
};

// Reads the TAG the fake model wrote into the kernel and returns the matching
// kforge.eval/1 document. Takes `seconds` of (simulated) time per evaluation.
class FakeEval final : public EvalPort {
 public:
  explicit FakeEval(double seconds = 10) : seconds_(seconds) {}
  Result<nlohmann::json> Evaluate(const EvalJob& job) override {
    ++evaluations;
    if (job.profile) ++profiled;
    canaries.push_back(job.canary);
    timing_caps.push_back(job.timing_cap_s);
    if (fail_with) return *fail_with;
    std::string tag = job.source.substr(job.source.find("// ") + 3);
    tag = tag.substr(0, tag.find('\n'));
    nlohmann::json doc = {{"schema", "kforge.eval/1"},
                          {"task", job.task},
                          {"world", job.world},
                          {"seconds", job.compile_only ? 2.0 : seconds_}};
    doc["kernel"] = {{"path", job.kernel_name}};
    if (tag == "SYNTAX") {
      doc["status"] = "compile_error";
      doc["compile"] = {{"diagnostics",
                         {{{"file", job.kernel_name},
                           {"line", 3},
                           {"column", 1},
                           {"severity", "error"},
                           {"message", "expected a ';'"}}}}};
      return doc;
    }
    if (tag == "POLICY") {
      doc["status"] = "policy_violation";
      doc["policy"] = {{"violations", {"calls ncclAllReduce: the task forbids NCCL"}}};
      return doc;
    }
    if (job.compile_only) {
      doc["status"] = "passed";
      doc["compile"] = {{"seconds", 2.0}, {"cache_hit", false}};
      return doc;
    }
    if (tag == "CRASH") {
      doc["status"] = "runtime_error";
      doc["error"] = {{"phase", "correctness"},
                      {"rank", 1},
                      {"message", "CUDA error: an illegal memory access"}};
    } else if (tag == "HANG") {
      doc["status"] = "timeout";
      doc["timeout"] = {{"phase", "correctness"}, {"deadline_s", 60}, {"hung_ranks", {1}}};
    } else if (tag == "LEAK") {
      // A kernel that got the canary the evaluation planted into its output:
      // what the evaluator reports where it was given one.
      doc["status"] = "integrity_violation";
      doc["integrity"] = {{"findings", {{{"check", "canary"}, {"rank", 1}}}}};
      if (!job.canary.empty()) {
        doc["integrity"]["canary"] = {
            {"planted", {"harness_env", "harness_file"}},
            {"found", "rank 1's output 'y' at byte 8 (size odd, trial 0)"}};
      }
    } else if (tag == "WRONG") {
      doc["status"] = "mismatch";
      doc["correctness"] = {
          {"trials", 5},
          {"passed_trials", 0},
          {"checks",
           {{{"size", "odd"},
             {"kind", "check"},
             {"trial", 0},
             {"passed", false},
             {"mismatches",
              {{{"rank", 1},
                {"output", "y"},
                {"bad_count", 12},
                {"nan_count", 0},
                {"max_abs_err", 0.5},
                {"max_rel_err", 0.25},
                {"first_bad", {{{"index", {3}}, {"got", 1.0}, {"expected", 1.5}}}},
                {"hints", {"off by one rank's contribution"}}}}}}}}};
    } else {
      double speedup = 0.8;
      if (tag.rfind("FAST", 0) == 0) speedup = std::stod(tag.substr(4));
      doc["status"] = "passed";
      doc["speedup"] = speedup;
      doc["timing"] = {{{"size", "1MiB"},
                        {"bytes", 1048576},
                        {"baseline", {{"median_us", 30.0}}},
                        {"candidate", {{"median_us", 30.0 / speedup}}},
                        {"speedup", speedup},
                        {"busbw_gbps", 45.0 * speedup},
                        {"baseline_busbw_gbps", 45.0}}};
      if (job.profile) doc["profile"] = profile;
    }
    return doc;
  }

  int evaluations = 0;
  int profiled = 0;                   // evaluations that asked for the profile
  std::vector<std::string> canaries;  // each evaluation's EvalJob::canary, in order
  std::vector<double> timing_caps;    // each evaluation's EvalJob::timing_cap_s, in order
  // What a correct kernel's document carries as "profile" when one is asked for.
  nlohmann::json profile = {{"size", "1MiB"}, {"rank", 0}, {"skipped", "no profile in the fake"}};
  std::optional<Status> fail_with;

 private:
  double seconds_;
};

// The store, in memory, with crash injection: after `crash_after` more
// mutating calls succeed, every call fails as if the process had died.
class FakeStore final : public StorePort {
 public:
  struct Session {
    SessionRecord row;
    std::vector<TurnRecord> turns;
    std::vector<EvaluationRecord> evals;
    int64_t best = 0;
  };

  int crash_after = -1;  // < 0: never
  int mutations = 0;
  std::vector<std::pair<std::string, nlohmann::json>> events;
  std::map<int64_t, Session> sessions;
  std::string run_state;

  Status Mutate() {
    if (crashed_) return Error(ErrorKind::kIo, "simulated crash");
    if (crash_after == 0) {
      crashed_ = true;
      return Error(ErrorKind::kIo, "simulated crash");
    }
    if (crash_after > 0) --crash_after;
    ++mutations;
    return Status::Ok();
  }
  void Revive() {
    crashed_ = false;
    crash_after = -1;
  }

  Result<RunInfo> CreateOrGetRun(const std::string& name, const nlohmann::json& config,
                                 const std::string& task_suite_hash,
                                 const nlohmann::json&) override {
    KF_RETURN_IF_ERROR(Mutate());
    if (!run_) {
      run_ = RunInfo{};
      run_->id = 1;
      run_->name = name;
      run_->config = config;
      run_->task_suite_hash = task_suite_hash;
      run_->started_at = 1.7e9;
    }
    run_name_ = name;
    run_state = "running";
    return *run_;
  }
  Status FinishRun(int64_t, const std::string& state) override {
    KF_RETURN_IF_ERROR(Mutate());
    run_state = state;
    return Status::Ok();
  }
  Status SetRunConfig(int64_t, const nlohmann::json& config) override {
    KF_RETURN_IF_ERROR(Mutate());
    run_->config = config;
    return Status::Ok();
  }
  Result<int64_t> UpsertSession(int64_t, const SessionKey& key) override {
    KF_RETURN_IF_ERROR(Mutate());
    for (auto& [id, s] : sessions) {
      const auto& k = s.row.key;
      if (k.model == key.model && k.task == key.task && k.strategy == key.strategy &&
          k.sample == key.sample)
        return id;
    }
    int64_t id = static_cast<int64_t>(sessions.size()) + 1;
    SessionRecord& row = sessions[id].row;
    row.id = id;
    row.key = key;
    row.state = "pending";
    return id;
  }
  Result<std::vector<SessionRecord>> ListSessions(int64_t) override {
    if (crashed_) return Error(ErrorKind::kIo, "simulated crash");
    std::vector<SessionRecord> out;
    for (auto& [id, s] : sessions) out.push_back(s.row);
    return out;
  }
  Status SetSessionState(int64_t id, const std::string& state, const std::string& reason) override {
    KF_RETURN_IF_ERROR(Mutate());
    sessions.at(id).row.state = state;
    sessions.at(id).row.stop_reason = reason;
    return Status::Ok();
  }
  Result<int64_t> AppendTurn(const TurnRecord& turn) override {
    KF_RETURN_IF_ERROR(Mutate());
    auto& s = sessions.at(turn.session_id);
    for (const auto& t : s.turns) {
      if (t.index == turn.index) return Error(ErrorKind::kInvalidInput, "duplicate turn index");
    }
    TurnRecord t = turn;
    t.id = ++next_turn_;
    t.kernel_sha = t.kernel.empty() ? "" : Sha256Hex(t.kernel);
    s.turns.push_back(t);
    std::sort(s.turns.begin(), s.turns.end(),
              [](const TurnRecord& a, const TurnRecord& b) { return a.index < b.index; });
    return t.id;
  }
  Status SetTurnFeedback(int64_t turn_id, const std::string& feedback) override {
    KF_RETURN_IF_ERROR(Mutate());
    for (auto& [id, s] : sessions) {
      for (auto& t : s.turns) {
        if (t.id == turn_id) {
          t.feedback = feedback;
          return Status::Ok();
        }
      }
    }
    return Error(ErrorKind::kNotFound, "no such turn");
  }
  Result<std::vector<TurnRecord>> ListTurns(int64_t session_id) override {
    if (crashed_) return Error(ErrorKind::kIo, "simulated crash");
    return sessions.at(session_id).turns;
  }
  Result<int64_t> RecordEvaluation(int64_t session_id, int64_t turn_id,
                                   const nlohmann::json& doc) override {
    KF_RETURN_IF_ERROR(Mutate());
    EvaluationRecord e;
    e.id = ++next_eval_;
    e.session_id = session_id;
    e.turn_id = turn_id;
    e.doc = doc;
    sessions.at(session_id).evals.push_back(e);
    return e.id;
  }
  Result<std::vector<EvaluationRecord>> ListEvaluations(int64_t session_id) override {
    if (crashed_) return Error(ErrorKind::kIo, "simulated crash");
    return sessions.at(session_id).evals;
  }
  Status SetBestEvaluation(int64_t session_id, int64_t eval_id) override {
    KF_RETURN_IF_ERROR(Mutate());
    sessions.at(session_id).best = eval_id;
    return Status::Ok();
  }
  Status AppendEvent(int64_t, const std::string& kind, const nlohmann::json& detail) override {
    KF_RETURN_IF_ERROR(Mutate());
    events.push_back({kind, detail});
    return Status::Ok();
  }

  // The run as CreateOrGetRun stored it (nullopt before).
  const std::optional<RunInfo>& run() const { return run_; }

  // A canonical dump of what matters for comparing two runs' records.
  nlohmann::json Dump() const {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& [id, s] : sessions) {
      nlohmann::json turns = nlohmann::json::array();
      for (const auto& t : s.turns) {
        std::string status;
        for (const auto& e : s.evals) {
          if (e.turn_id == t.id) status = e.doc.value("status", "");
        }
        turns.push_back({{"index", t.index},
                         {"prompt", t.prompt},
                         {"reply", t.reply},
                         {"feedback", t.feedback},
                         {"kernel", t.kernel},
                         {"status", status}});
      }
      std::string best;
      for (const auto& e : s.evals) {
        if (e.id == s.best) {
          for (const auto& t : s.turns) {
            if (t.id == e.turn_id) best = std::to_string(t.index);
          }
        }
      }
      out.push_back({{"model", s.row.key.model},
                     {"task", s.row.key.task},
                     {"sample", s.row.key.sample},
                     {"state", s.row.state},
                     {"reason", s.row.stop_reason},
                     {"turns", turns},
                     {"best_turn", best}});
    }
    return out;
  }

 private:
  bool crashed_ = false;
  std::optional<RunInfo> run_;
  std::string run_name_;
  int64_t next_turn_ = 0, next_eval_ = 0;
};

}  // namespace kforge::agent::testing
