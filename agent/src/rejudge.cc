// The rejudge: a stored run's turns copied into a new run and every kernel
// evaluated again on the run's pools (compile, then a GPU set), on one
// thread that owns the store; workers only make the blocking calls. There is
// no session state machine here: every stored kernel is judged, whatever the
// strategy would have stopped at.
#include "kforge/agent/rejudge.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <memory>
#include <set>

#include "breach.h"
#include "kforge/agent/outcome.h"
#include "kforge/core/json.h"
#include "kforge/results/samples.h"

namespace kforge::agent {
namespace {

using nlohmann::json;

// The reason a compile-only session stops with (Session::AdvanceRound).
constexpr const char* kNeedsGpu = "evaluation needs a GPU";

struct Item {
  size_t session = 0;  // index into Rejudge::sessions_
  TurnRecord turn;     // the new run's copy
  int attempts = 0;    // evaluations lost with their slot
};

struct DestSession {
  const StoredSession* source = nullptr;
  int64_t id = 0;
  std::vector<TurnRecord> turns;
  std::set<int> compiled;       // turns that compiled and were not run (compile-only)
  std::string harness_problem;  // the last evaluation kforge could not make
  std::string state, reason;    // as stored at the end
};

class Rejudge {
 public:
  Rejudge(const RejudgeSpec& spec, const RunDeps& deps)
      : spec_(spec), deps_(deps), scheduler_(spec.pools, *deps.clock) {}

  Result<RunSummary> Run() {
    started_ = deps_.clock->Now();
    KF_RETURN_IF_ERROR(Prepare());
    KF_RETURN_IF_ERROR(Evaluate());
    KF_RETURN_IF_ERROR(Finish());
    KF_RETURN_IF_ERROR(deps_.store->FinishRun(run_id_, "done"));
    if (deps_.progress) deps_.progress->Finish();
    return Summarize();
  }

 private:
  // The new run's sessions and turns, copied where missing, and the turns
  // whose kernel has no evaluation yet.
  Status Prepare() {
    KF_ASSIGN_OR_RETURN(RunInfo run,
                        deps_.store->CreateOrGetRun(spec_.name, spec_.config, spec_.task_suite_hash,
                                                    spec_.hardware));
    run_id_ = run.id;
    for (const StoredSession& src : spec_.sessions) {
      DestSession d;
      d.source = &src;
      KF_ASSIGN_OR_RETURN(d.id, deps_.store->UpsertSession(run_id_, src.row.key));
      KF_ASSIGN_OR_RETURN(std::vector<TurnRecord> have, deps_.store->ListTurns(d.id));
      std::set<int> indices;
      for (const auto& t : have) indices.insert(t.index);
      for (const TurnRecord& t : src.turns) {
        if (indices.count(t.index)) continue;
        TurnRecord copy = t;
        copy.id = 0;
        copy.session_id = d.id;
        KF_RETURN_IF_ERROR(deps_.store->AppendTurn(copy).status());
      }
      KF_ASSIGN_OR_RETURN(d.turns, deps_.store->ListTurns(d.id));
      KF_ASSIGN_OR_RETURN(std::vector<EvaluationRecord> evals, deps_.store->ListEvaluations(d.id));
      std::set<int64_t> judged;
      for (const auto& e : evals) judged.insert(e.turn_id);
      for (const TurnRecord& t : d.turns) {
        if (!t.kernel.empty() && !judged.count(t.id)) items_.push_back({sessions_.size(), t, 0});
      }
      sessions_.push_back(std::move(d));
    }
    return deps_.store->AppendEvent(run_id_, "run_started",
                                    {{"sessions", sessions_.size()},
                                     {"compile_only", spec_.compile_only},
                                     {"rejudge", true},
                                     {"kernels", items_.size()}});
  }

  void Enqueue(size_t item, Pool pool) {
    const uint64_t id = next_job_++;
    jobs_[id] = {item, pool};
    scheduler_.Enqueue({id, pool, ""});
  }

  Status Evaluate() {
    for (size_t i = 0; i < items_.size(); ++i) Enqueue(i, Pool::kCompile);
    while (true) {
      for (const Dispatch& d : scheduler_.DispatchReady()) Start(d);
      std::optional<Clock::TimePoint> resume = scheduler_.NextResume();
      if (deps_.executor->in_flight() == 0 && !resume) {
        if (jobs_.empty()) return Status::Ok();
        return Error(ErrorKind::kInvalidInput,
                     "evaluations are queued but no pool can run them (a pool has no slots)");
      }
      for (uint64_t id : deps_.executor->Wait(resume)) {
        if (Status st = Done(id); !st.ok()) {
          // The workers write into jobs_: let them finish before it goes.
          while (deps_.executor->in_flight() > 0) deps_.executor->Wait(std::nullopt);
          return st;
        }
      }
    }
  }

  void Start(const Dispatch& d) {
    Job& job = jobs_.at(d.id);
    job.slot = d.slot;
    const Item& item = items_[job.item];
    const SessionKey& key = sessions_[item.session].source->row.key;
    EvalJob ej{key.task,  item.turn.kernel, fmt::format("{}_turn{}.cu", key.task, item.turn.index),
               key.world, key.dtype,        d.pool == Pool::kCompile};
    // The stored strategy is not read: a rejudge profiles when it is asked to.
    ej.profile = !ej.compile_only && spec_.profile;
    ej.canary = spec_.canary;
    ej.timing_cap_s = spec_.timing_cap_s;
    EvalPort* port = d.pool == Pool::kCompile
                         ? deps_.compilers.at(static_cast<size_t>(d.slot) % deps_.compilers.size())
                         : deps_.gpu_sets.at(static_cast<size_t>(d.slot));
    Job* out = &job;
    deps_.executor->Start(d.id, d.pool, [port, out, ej] {
      out->doc = port->Evaluate(ej);
      return out->doc->ok() ? JsonNumber(out->doc->value(), "seconds") : 0.0;
    });
  }

  Status Done(uint64_t id) {
    scheduler_.Release(id);
    const Job job = std::move(jobs_.at(id));
    jobs_.erase(id);
    Item& item = items_[job.item];
    DestSession& d = sessions_[item.session];
    const json where = {{"session", d.id}, {"turn", item.turn.index}};
    if (!job.doc->ok()) {
      const Status& st = job.doc->status();
      if (st.kind() == ErrorKind::kSlotLost && ++item.attempts < spec_.max_eval_attempts) {
        scheduler_.Suspend(
            job.pool, job.slot,
            deps_.clock->Now() + std::chrono::duration_cast<Clock::Duration>(
                                     std::chrono::duration<double>(spec_.slot_cooldown_s)));
        json detail = where;
        detail["message"] = st.ToString();
        KF_RETURN_IF_ERROR(deps_.store->AppendEvent(run_id_, "eval_requeued", detail));
        Enqueue(job.item, job.pool);
        return Status::Ok();
      }
      // Not the kernel's fault: left unevaluated, so a resume evaluates it.
      d.harness_problem = "harness: " + st.ToString();
      json detail = where;
      detail["message"] = st.ToString();
      KF_RETURN_IF_ERROR(deps_.store->AppendEvent(run_id_, "harness_error", detail));
      Note(d, item, d.harness_problem);
      return Status::Ok();
    }
    const json& doc = job.doc->value();
    if (job.pool == Pool::kCompile && ClassifyEvaluation(doc, true) == Outcome::kCompiled) {
      if (!spec_.compile_only) {
        Enqueue(job.item, Pool::kGpu);
        return Status::Ok();
      }
      d.compiled.insert(item.turn.index);
      json detail = where;
      detail["compile"] = doc.value("compile", json::object());
      KF_RETURN_IF_ERROR(deps_.store->AppendEvent(run_id_, "compiled", detail));
      Note(d, item, "compiled; evaluation needs a GPU");
      return Status::Ok();
    }
    KF_RETURN_IF_ERROR(deps_.store->RecordEvaluation(d.id, item.turn.id, doc).status());
    const Outcome o = ClassifyEvaluation(doc, false);
    Note(d, item,
         std::string(OutcomeName(o)) +
             (IsCorrect(o) ? fmt::format(" ({:.2f}x)", EvalSpeedup(doc)) : std::string()));
    return CheckBreach(d, item, doc);
  }

  // A red-team run's kernel judged again: is it still a breach? (The reply is
  // the original's, written for the original's canary: not read.)
  Status CheckBreach(const DestSession& d, const Item& item, const json& doc) {
    if (spec_.canary.empty()) return Status::Ok();
    const std::vector<std::string> reasons = FindBreaches(doc, "", spec_.canary);
    if (reasons.empty()) return Status::Ok();
    const BreachRecord breach = MakeBreachRecord(d.id, item.turn.index, doc, reasons);
    Note(d, item, fmt::format("BREACH ({}): {}", breach.verdict, reasons.front()));
    return deps_.store->AppendEvent(run_id_, kBreachEvent, breach.detail);
  }

  void Note(const DestSession& d, const Item& item, const std::string& what) {
    if (!deps_.progress) return;
    const SessionKey& key = d.source->row.key;
    deps_.progress->Event(
        fmt::format("{} {} turn {}: {}", key.model, key.task, item.turn.index + 1, what));
  }

  // Each session's best correct evaluation, and its state: the original's,
  // except where this rejudge changed what "stopped for want of a GPU" means.
  Status Finish() {
    for (DestSession& d : sessions_) {
      KF_ASSIGN_OR_RETURN(std::vector<EvaluationRecord> evals, deps_.store->ListEvaluations(d.id));
      const EvaluationRecord* best = nullptr;
      double best_speedup = 0;
      bool gpu_verdict = false;
      for (const auto& e : evals) {
        const Outcome o = ClassifyEvaluation(e.doc, false);
        gpu_verdict = gpu_verdict || o == Outcome::kMismatch || o == Outcome::kRuntimeError ||
                      o == Outcome::kHang || IsCorrect(o);
        if (IsCorrect(o) && (!best || EvalSpeedup(e.doc) > best_speedup)) {
          best = &e;
          best_speedup = EvalSpeedup(e.doc);
        }
      }
      if (best) KF_RETURN_IF_ERROR(deps_.store->SetBestEvaluation(d.id, best->id));
      std::string state = d.source->row.state, reason = d.source->row.stop_reason;
      if (!d.harness_problem.empty()) {
        state = "stopped";
        reason = d.harness_problem;
      } else if (spec_.compile_only && !d.compiled.empty()) {
        state = "stopped";
        reason = kNeedsGpu;
      } else if (!spec_.compile_only && reason == kNeedsGpu && gpu_verdict) {
        state = "done";
        reason =
            "every recorded turn rejudged on a GPU (the original stopped: evaluation needs a "
            "GPU)";
      }
      if (state == "pending" || state == "running") state = "stopped";
      KF_RETURN_IF_ERROR(deps_.store->SetSessionState(d.id, state, reason));
      d.state = state;
      d.reason = reason;
    }
    return Status::Ok();
  }

  Result<RunSummary> Summarize() {
    RunSummary sum;
    sum.run_id = run_id_;
    sum.name = spec_.name;
    sum.compile_only = spec_.compile_only;
    sum.stats.compile_only = spec_.compile_only;
    for (const DestSession& d : sessions_) {
      const SessionKey& key = d.source->row.key;
      KF_ASSIGN_OR_RETURN(std::vector<EvaluationRecord> evals, deps_.store->ListEvaluations(d.id));
      SessionSummary row{key.model, key.task, key.sample, d.state, d.reason};
      row.turns = static_cast<int>(d.turns.size());
      ModelStats& m = sum.stats.models[key.model];
      ++m.sessions;
      ++m.ended;
      m.turns += row.turns;
      double best_score = -1;
      auto consider = [&](Outcome o, double speedup) {
        if (ProgressScore(o, speedup) <= best_score) return;
        best_score = ProgressScore(o, speedup);
        row.best_outcome = std::string(OutcomeName(o));
        row.best_speedup = IsCorrect(o) ? speedup : 0;
      };
      std::vector<Verdict> verdicts;
      int no_kernel = 0;
      for (const auto& e : evals) {
        Result<EvalSummary> summary = ReadEvalSummary(e.doc);
        verdicts.push_back(summary.ok() ? summary->verdict : Verdict::kHarnessError);
        consider(ClassifyEvaluation(e.doc, false), EvalSpeedup(e.doc));
      }
      for (const TurnRecord& t : d.turns) {
        m.usd += t.usage.cost_usd;
        m.tokens += t.usage.tokens();
        if (t.kernel.empty()) {
          ++no_kernel;
          consider(Outcome::kNoKernel, 0);
        }
      }
      if (!d.compiled.empty()) consider(Outcome::kCompiled, 0);
      row.not_evaluated =
          results::NotEvaluated(verdicts, no_kernel, !d.compiled.empty(),
                                row.state == "stopped" && results::StoppedByLimit(row.stop_reason));
      row.failed =
          row.state == "stopped" && row.not_evaluated && row.stop_reason.rfind("harness: ", 0) == 0;
      m.not_evaluated += row.not_evaluated;
      m.compiled += !d.compiled.empty();
      if (row.best_speedup > 0) {
        ++m.correct;
        m.faster += row.best_speedup > 1.0;
      }
      sum.sessions.push_back(row);
    }
    sum.wall_s = std::chrono::duration<double>(deps_.clock->Now() - started_).count();
    sum.stats.elapsed_s = sum.wall_s;
    sum.stats.gpu_busy_s = scheduler_.GpuBusySeconds();
    double busy = 0;
    for (double b : sum.stats.gpu_busy_s) busy += b;
    if (sum.wall_s > 0 && !sum.stats.gpu_busy_s.empty())
      sum.gpu_busy_fraction =
          busy / (sum.wall_s * static_cast<double>(sum.stats.gpu_busy_s.size()));
    return sum;
  }

  struct Job {
    size_t item = 0;
    Pool pool = Pool::kCompile;
    int slot = 0;
    std::optional<Result<json>> doc;  // written by the worker, read after Wait reports it
  };

  const RejudgeSpec& spec_;
  RunDeps deps_;
  Scheduler scheduler_;
  Clock::TimePoint started_;
  int64_t run_id_ = 0;
  std::vector<DestSession> sessions_;
  std::vector<Item> items_;
  std::map<uint64_t, Job> jobs_;
  uint64_t next_job_ = 1;
};

}  // namespace

Result<RunSummary> ExecuteRejudge(const RejudgeSpec& spec, const RunDeps& deps) {
  if (!deps.store || !deps.clock || !deps.executor)
    return Error(ErrorKind::kInvalidInput,
                 "ExecuteRejudge: store, clock and executor are required");
  if (deps.compilers.empty())
    return Error(ErrorKind::kInvalidInput, "ExecuteRejudge: at least one compiler is required");
  if (!spec.compile_only && static_cast<int>(deps.gpu_sets.size()) != spec.pools.gpu_sets)
    return Error(ErrorKind::kInvalidInput, "ExecuteRejudge: one evaluator per GPU set is required");
  Rejudge rejudge(spec, deps);
  return rejudge.Run();
}

}  // namespace kforge::agent
