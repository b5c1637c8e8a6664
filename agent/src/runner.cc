#include "kforge/agent/runner.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>

#include "kforge/core/json.h"
#include "kforge/results/samples.h"
#include "run_engine.h"

namespace kforge::agent {
namespace internal {
namespace {

using nlohmann::json;

}  // namespace

RunEngine::RunEngine(const RunSpec& spec, const RunDeps& deps)
    : spec_(spec),
      deps_(deps),
      scheduler_(spec.pools, *deps.clock),
      budget_(spec.budgets, spec.models) {}

// A resume may move the deadline and the budgets (the only parts of a stored
// config it may change): they are stored, so that the next resume keeps them,
// and the change is an event of the run.
Status RunEngine::StoreExtendedLimits(const RunInfo& run) {
  nlohmann::json stored = run.config.is_object() ? run.config : nlohmann::json::object();
  nlohmann::json changed = nlohmann::json::object();
  for (const char* key : {"deadline_unix", "budget"}) {
    const nlohmann::json asked = spec_.config.value(key, nlohmann::json());
    if (stored.value(key, nlohmann::json()) == asked) continue;
    changed[key] = {{"from", stored.value(key, nlohmann::json())}, {"to", asked}};
    if (asked.is_null()) {
      stored.erase(key);
    } else {
      stored[key] = asked;
    }
  }
  if (changed.empty()) return Status::Ok();
  KF_RETURN_IF_ERROR(deps_.store->SetRunConfig(run_id_, stored));
  return deps_.store->AppendEvent(run_id_, "limits_changed", changed);
}

Status RunEngine::Prepare() {
  KF_ASSIGN_OR_RETURN(
      RunInfo run,
      deps_.store->CreateOrGetRun(spec_.name, spec_.config, spec_.task_suite_hash, spec_.hardware));
  run_id_ = run.id;
  KF_RETURN_IF_ERROR(StoreExtendedLimits(run));
  started_unix_ = run.started_at > 0 ? run.started_at : NowUnix();
  started_ = deps_.clock->Now();
  KF_ASSIGN_OR_RETURN(std::vector<SessionRecord> stored, deps_.store->ListSessions(run_id_));
  for (const auto& model : spec_.models) {
    for (const auto& task : spec_.tasks) {
      const std::string& dtype = task.dtype.empty() ? spec_.dtype : task.dtype;
      for (int r = 0; r < spec_.repeats; ++r) {
        SessionKey key{model, task.key, spec_.strategy->name, r, spec_.world, dtype, task.category};
        // Stores written before dtypes were resolved keep "" for the
        // default: resume those sessions rather than starting new ones.
        for (const auto& row : stored) {
          if (row.key.dtype.empty() && row.key.model == key.model && row.key.task == key.task &&
              row.key.strategy == key.strategy && row.key.sample == key.sample &&
              row.key.world == key.world)
            key.dtype = "";
        }
        KF_ASSIGN_OR_RETURN(int64_t id, deps_.store->UpsertSession(run_id_, key));
        SessionSlot slot;
        slot.id = id;
        for (const auto& row : stored) {
          if (row.id == id) slot.stored_state = row.state;
        }
        SessionSpec ss{id,
                       model,
                       task.key,
                       r,
                       spec_.world,
                       key.dtype,
                       spec_.strategy,
                       task.prompt,
                       spec_.compile_only};
        slot.session = std::make_unique<Session>(std::move(ss));
        KF_RETURN_IF_ERROR(Restore(slot));
        sessions_.push_back(std::move(slot));
      }
    }
  }
  return deps_.store->AppendEvent(
      run_id_, "run_started",
      {{"sessions", sessions_.size()}, {"compile_only", spec_.compile_only}});
}

Status RunEngine::EnqueueWanted() {
  auto now = deps_.clock->Now();
  for (size_t i = 0; i < sessions_.size(); ++i) {
    SessionSlot& slot = sessions_[i];
    Session& s = *slot.session;
    for (int c : s.InPhase(Phase::kWantReply)) {
      auto retry = slot.retry_at.find(c);
      if (retry != slot.retry_at.end() && retry->second > now) continue;
      std::optional<std::string> why = budget_.Exhausted(s.spec().model, s.spec().task, NowUnix());
      if (!why && spec_.deadline_unix && NowUnix() >= *spec_.deadline_unix)
        why = std::string(results::kDeadlineStopReason);  // the results read it as a limit
      if (why) {
        s.RequestStop(*why);
        if (deps_.progress)
          deps_.progress->Event(
              fmt::format("{} {}: stopping: {}", s.spec().model, s.spec().task, *why));
        break;
      }
      if (!slot.marked_running) {
        KF_RETURN_IF_ERROR(deps_.store->SetSessionState(slot.id, "running", ""));
        slot.marked_running = true;
      }
      s.Start(c);
      auto job = std::make_unique<Job>();
      job->id = next_job_++;
      job->pool = Pool::kLlm;
      job->session = i;
      job->candidate = c;
      job->call = s.BuildCall(c);
      scheduler_.Enqueue({job->id, Pool::kLlm, s.spec().model});
      jobs_[job->id] = std::move(job);
    }
    for (Phase p : {Phase::kWantCompile, Phase::kWantGpu}) {
      for (int c : s.InPhase(p)) {
        s.Start(c);
        auto job = std::make_unique<Job>();
        job->id = next_job_++;
        job->pool = p == Phase::kWantCompile ? Pool::kCompile : Pool::kGpu;
        job->session = i;
        job->candidate = c;
        scheduler_.Enqueue({job->id, job->pool, ""});
        jobs_[job->id] = std::move(job);
      }
    }
  }
  return Status::Ok();
}

Status RunEngine::StartDispatched() {
  // A model call the budgets turn away frees its slot for the next one in
  // the queue: dispatch again until nothing more is turned away.
  for (bool refused = true; refused;) {
    refused = false;
    for (const Dispatch& d : scheduler_.DispatchReady()) {
      Job* job = jobs_.at(d.id).get();
      job->slot = d.slot;
      Session& s = *sessions_[job->session].session;
      const Candidate& cand = s.candidate(job->candidate);
      dispatched_.insert(d.id);
      if (d.pool == Pool::kLlm) {
        // The call's worst case must fit in what every budget has left after
        // what is spent and what the calls in flight hold: the overshoot of a
        // budget came from calls in flight that nobody had counted.
        const LlmQuote quote = deps_.llm->Quote(job->call);
        job->worst = CallCost{quote.usd.value_or(0), quote.tokens()};
        BudgetBook::Admission admit =
            budget_.Admit(s.spec().model, s.spec().task, job->worst, NowUnix());
        if (admit.kind != BudgetBook::Admission::kStart || s.stop_requested()) {
          // kWait: back to the queue; a call in flight ends and frees its part.
          scheduler_.Release(d.id);
          dispatched_.erase(d.id);
          s.Unstart(job->candidate);
          if (admit.kind == BudgetBook::Admission::kStop) {
            if (admit.worst_case) {
              admit.reason +=
                  fmt::format(" ({} input tokens as estimated + {} output tokens at most{})",
                              quote.input_tokens, quote.output_tokens,
                              job->call.max_output_tokens
                                  ? ""
                                  : "; the strategy's [model] max_output_tokens caps the output");
            }
            s.RequestStop(admit.reason);
            if (deps_.progress)
              deps_.progress->Event(
                  fmt::format("{} {}: stopping: {}", s.spec().model, s.spec().task, admit.reason));
          }
          jobs_.erase(d.id);
          refused = true;
          continue;
        }
        budget_.Reserve(s.spec().model, s.spec().task, job->worst);
        budget_.Touch(s.spec().model, s.spec().task, NowUnix());
        LlmPort* llm = deps_.llm;
        deps_.executor->Start(d.id, d.pool, [llm, job] {
          job->answer = llm->Complete(job->call);
          return job->answer->ok() ? job->answer->value().latency_s : 0.0;
        });
        continue;
      }
      EvalJob ej{s.spec().task,  cand.kernel,    KernelName(s, job->candidate),
                 s.spec().world, s.spec().dtype, d.pool == Pool::kCompile};
      // Only a GPU evaluation has calls to profile; the run's --profile
      // asks for it whatever the strategy says.
      ej.profile = !ej.compile_only && (spec_.profile || s.spec().strategy->profile);
      // A red-team run's canary, planted inside the evaluation too.
      ej.canary = spec_.canary;
      ej.timing_cap_s = spec_.timing_cap_s;
      EvalPort* port = d.pool == Pool::kCompile
                           ? deps_.compilers.at(d.slot % deps_.compilers.size())
                           : deps_.gpu_sets.at(d.slot);
      deps_.executor->Start(d.id, d.pool, [port, job, ej] {
        job->doc = port->Evaluate(ej);
        if (!job->doc->ok()) return 0.0;
        return JsonNumber(job->doc->value(), "seconds");
      });
    }
  }
  return Status::Ok();
}

Status RunEngine::HandleDone(uint64_t id) {
  scheduler_.Release(id);
  dispatched_.erase(id);
  std::unique_ptr<Job> job = std::move(jobs_.at(id));
  jobs_.erase(id);
  SessionSlot& slot = sessions_[job->session];
  if (job->pool == Pool::kLlm) {
    // OnAnswer charges what the call cost, once its turn is stored.
    const SessionSpec& ss = slot.session->spec();
    budget_.Release(ss.model, ss.task, job->worst);
  }
  if (job->pool != Pool::kLlm) {
    if (!job->doc->ok() && job->doc->status().kind() == ErrorKind::kSlotLost) {
      KF_RETURN_IF_ERROR(OnSlotLost(slot, *job, job->doc->status()));
      return Settle(slot);
    }
    OnSlotWorked(job->pool, job->slot);
    if (job->doc->ok()) slot.eval_attempts.erase(job->candidate);
  }
  switch (job->pool) {
    case Pool::kLlm:
      KF_RETURN_IF_ERROR(OnAnswer(slot, job->candidate, *job->answer));
      break;
    case Pool::kCompile:
      KF_RETURN_IF_ERROR(OnCompileDoc(slot, job->candidate, *job->doc));
      break;
    case Pool::kGpu:
      KF_RETURN_IF_ERROR(OnGpuDoc(slot, job->candidate, *job->doc));
      break;
  }
  return Settle(slot);
}

void RunEngine::NoteEndedModels() {
  std::map<std::string, bool> ended;
  for (const auto& slot : sessions_) {
    auto it = ended.emplace(slot.session->spec().model, true).first;
    it->second = it->second && slot.session->Ended();
  }
  for (const auto& [model, all] : ended) {
    if (all) budget_.ModelEnded(model);
  }
}

void RunEngine::StopModel(const std::string& model, const std::string& reason) {
  stopped_models_.insert(model);
  for (auto& slot : sessions_) {
    if (slot.session->spec().model == model) slot.session->RequestStop(reason);
  }
}

std::optional<Clock::TimePoint> RunEngine::NextRetry() const {
  std::optional<Clock::TimePoint> next;
  for (const auto& slot : sessions_) {
    if (slot.session->stop_requested()) continue;
    for (const auto& [c, t] : slot.retry_at) {
      if (slot.session->candidate(c).phase == Phase::kWantReply && (!next || t < *next)) next = t;
    }
  }
  return next;
}

Result<RunSummary> RunEngine::Run() {
  KF_RETURN_IF_ERROR(Prepare());
  for (auto& slot : sessions_) KF_RETURN_IF_ERROR(Settle(slot));
  while (true) {
    KF_RETURN_IF_ERROR(EnqueueWanted());
    NoteEndedModels();
    KF_RETURN_IF_ERROR(StartDispatched());
    for (auto& slot : sessions_) KF_RETURN_IF_ERROR(Settle(slot));
    if (deps_.progress) deps_.progress->Update(Stats());
    std::optional<Clock::TimePoint> retry = NextRetry();
    if (std::optional<Clock::TimePoint> resume = scheduler_.NextResume();
        resume && (!retry || *resume < *retry))
      retry = resume;
    if (deps_.executor->in_flight() == 0 && !retry) {
      if (jobs_.empty()) break;
      // Queued jobs with no dispatch possible: cannot happen with non-zero pools.
      return Error(ErrorKind::kInvalidInput,
                   "jobs are queued but no pool can run them (a pool has no slots)");
    }
    for (uint64_t id : deps_.executor->Wait(retry)) KF_RETURN_IF_ERROR(HandleDone(id));
  }
  KF_RETURN_IF_ERROR(deps_.store->FinishRun(run_id_, "done"));
  if (deps_.progress) {
    deps_.progress->Update(Stats(), true);
    deps_.progress->Finish();
  }
  return Summarize();
}

}  // namespace internal

Result<RunSummary> ExecuteRun(const RunSpec& spec, const RunDeps& deps) {
  if (!spec.strategy || !deps.llm || !deps.store || !deps.clock || !deps.executor) {
    return Error(ErrorKind::kInvalidInput,
                 "ExecuteRun: strategy, llm, store, clock and executor are required");
  }
  if (!spec.compile_only && static_cast<int>(deps.gpu_sets.size()) != spec.pools.gpu_sets) {
    return Error(ErrorKind::kInvalidInput, "ExecuteRun: one evaluator per GPU set is required");
  }
  if (deps.compilers.empty())
    return Error(ErrorKind::kInvalidInput, "ExecuteRun: at least one compiler is required");
  internal::RunEngine engine(spec, deps);
  return engine.Run();
}

}  // namespace kforge::agent
