#include "kforge/agent/runner.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>

#include "breach.h"
#include "extract.h"
#include "kforge/core/eval_doc.h"
#include "kforge/core/json.h"
#include "kforge/results/samples.h"
#include "run_engine.h"

namespace kforge::agent {
namespace internal {
namespace {

using nlohmann::json;

// Failures that no other call of the same model can get past.
bool ModelWide(ErrorKind k) { return k == ErrorKind::kAuth || k == ErrorKind::kQuota; }

std::string KernelName(const Session& s, int cand) {
  return fmt::format("{}_turn{}.cu", s.spec().task, cand);
}

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

Status RunEngine::OnAnswer(SessionSlot& slot, int cand, Result<LlmAnswer>& answer) {
  Session& s = *slot.session;
  const std::string& model = s.spec().model;
  if (!answer.ok()) {
    const Status& st = answer.status();
    // What the provider billed for the failed call (a reply cut at the cap,
    // attempts retried and given up): budgets count it like any answer.
    const Billed billed = st.billed().value_or(Billed{});
    s.Unstart(cand);
    json detail = {{"session", slot.id},
                   {"turn", cand},
                   {"kind", ErrorKindName(st.kind())},
                   {"message", st.message()}};
    if (!billed.empty()) {
      detail["billed"] = {{"input_tokens", billed.input_tokens},
                          {"output_tokens", billed.output_tokens},
                          {"usd", billed.usd}};
    }
    KF_RETURN_IF_ERROR(deps_.store->AppendEvent(run_id_, "llm_error", detail));
    if (st.kind() == ErrorKind::kTruncated || st.kind() == ErrorKind::kContentFilter) {
      // A turn was spent: record it, with what it cost, and the reason as its feedback.
      LlmAnswer empty;
      empty.finish_reason = st.kind() == ErrorKind::kTruncated ? "length" : "content_filter";
      empty.usage.input_tokens = billed.input_tokens;
      empty.usage.output_tokens = billed.output_tokens;
      empty.usage.cost_usd = billed.usd;
      s.Start(cand);
      Result<LlmAnswer> as_answer(empty);
      return OnAnswer(slot, cand, as_answer);
    }
    if (!billed.empty())
      budget_.Charge(model, s.spec().task, billed.usd, billed.input_tokens + billed.output_tokens);
    if (ModelWide(st.kind())) {
      StopModel(model, fmt::format("provider: {}", st.ToString()));
    } else if (IsTransient(st.kind()) && ++slot.attempts[cand] < spec_.max_llm_attempts) {
      double wait = spec_.retry_backoff_s * std::pow(2.0, slot.attempts[cand] - 1);
      std::string why;
      if (const auto asked = st.retry_after_s()) {
        if (*asked > spec_.max_retry_wait_s) {
          wait = spec_.max_retry_wait_s;
          why = fmt::format("the provider asked for {:.0f} s; waiting the {:.0f} s cap", *asked,
                            spec_.max_retry_wait_s);
        } else if (*asked >= wait) {
          wait = *asked;
          why = "the provider's Retry-After";
        }
      }
      // Say so: a run-level wait was 20-90 s of silence.
      if (deps_.progress)
        deps_.progress->Event(fmt::format("{} {} turn {}: retrying the model call in {:.0f} s{}",
                                          model, s.spec().task, cand + 1, wait,
                                          why.empty() ? "" : " (" + why + ")"));
      KF_RETURN_IF_ERROR(deps_.store->AppendEvent(
          run_id_, "llm_retry",
          {{"session", slot.id}, {"turn", cand}, {"wait_s", wait}, {"reason", why}}));
      slot.retry_at[cand] = deps_.clock->Now() + std::chrono::duration_cast<Clock::Duration>(
                                                     std::chrono::duration<double>(wait));
    } else {
      s.RequestStop(fmt::format("provider: {}", st.ToString()));
    }
    if (deps_.progress)
      deps_.progress->Event(fmt::format("{} {} turn {}: model call failed: {}", model,
                                        s.spec().task, cand + 1, st.ToString()));
    return Status::Ok();
  }
  const LlmAnswer& a = answer.value();
  Extraction x = ExtractKernel(a.text);
  if (!x.ok && a.finish_reason == "length") {
    x.problem =
        "Your reply hit the output-token limit before a complete kernel arrived. " + x.problem;
  }
  TurnRecord turn;
  turn.session_id = slot.id;
  turn.index = cand;
  turn.prompt = s.candidate(cand).prompt;
  turn.reply = a.text;
  turn.kernel = x.ok ? x.source : "";
  turn.usage = a.usage;
  turn.latency_s = a.latency_s;
  turn.request_id = a.request_id;
  turn.finish_reason = a.finish_reason;
  KF_ASSIGN_OR_RETURN(int64_t turn_id, deps_.store->AppendTurn(turn));
  budget_.Charge(model, s.spec().task, a.usage.cost_usd, a.usage.tokens());
  if (!a.usage.priced) unpriced_models_.insert(model);
  slot.attempts.erase(cand);
  slot.retry_at.erase(cand);
  s.OnReply(cand, a.text, turn.kernel, x.problem, turn_id);
  if (!x.ok) {
    KF_ASSIGN_OR_RETURN(std::string fb, Feedback(s, cand, Outcome::kNoKernel, json::object()));
    KF_RETURN_IF_ERROR(deps_.store->SetTurnFeedback(turn_id, fb));
    KF_RETURN_IF_ERROR(CheckBreach(slot, cand, json::object()));
    s.OnFinished(cand, Outcome::kNoKernel, 0, fb, 0);
    if (deps_.progress)
      deps_.progress->Event(
          fmt::format("{} {} turn {}: no kernel in the reply", model, s.spec().task, cand + 1));
  }
  return Status::Ok();
}

Status RunEngine::OnCompileDoc(SessionSlot& slot, int cand, Result<json>& doc) {
  Session& s = *slot.session;
  if (!doc.ok()) {
    s.Unstart(cand);
    s.RequestStop(fmt::format("harness: {}", doc.status().ToString()));
    return deps_.store->AppendEvent(
        run_id_, std::string(VerdictName(Verdict::kHarnessError)),
        {{"session", slot.id}, {"turn", cand}, {"message", doc.status().ToString()}});
  }
  Outcome o = ClassifyEvaluation(doc.value(), true);
  if (o != Outcome::kCompiled) return FinishWithEval(slot, cand, doc.value(), o);
  if (!spec_.compile_only) {
    s.OnCompiled(cand);
    return Status::Ok();
  }
  KF_ASSIGN_OR_RETURN(std::string fb, Feedback(s, cand, Outcome::kCompiled, doc.value()));
  KF_RETURN_IF_ERROR(
      deps_.store->AppendEvent(run_id_, std::string(VerdictName(Verdict::kCompiled)),
                               {{"session", slot.id},
                                {"turn", cand},
                                {"compile", doc.value().value("compile", json::object())}}));
  KF_RETURN_IF_ERROR(deps_.store->SetTurnFeedback(s.candidate(cand).turn_id, fb));
  KF_RETURN_IF_ERROR(CheckBreach(slot, cand, doc.value()));
  s.OnFinished(cand, Outcome::kCompiled, 0, fb, 0);
  if (deps_.progress)
    deps_.progress->Event(fmt::format("{} {} turn {}: compiled; evaluation needs a GPU",
                                      s.spec().model, s.spec().task, cand + 1));
  return Status::Ok();
}

Status RunEngine::OnGpuDoc(SessionSlot& slot, int cand, Result<json>& doc) {
  Session& s = *slot.session;
  if (!doc.ok()) {
    s.Unstart(cand);
    s.RequestStop(fmt::format("harness: {}", doc.status().ToString()));
    return deps_.store->AppendEvent(
        run_id_, std::string(VerdictName(Verdict::kHarnessError)),
        {{"session", slot.id}, {"turn", cand}, {"message", doc.status().ToString()}});
  }
  return FinishWithEval(slot, cand, doc.value(), ClassifyEvaluation(doc.value(), false));
}

Status RunEngine::FinishWithEval(SessionSlot& slot, int cand, const json& doc, Outcome outcome) {
  Session& s = *slot.session;
  const int64_t turn_id = s.candidate(cand).turn_id;
  KF_ASSIGN_OR_RETURN(int64_t eval_id, deps_.store->RecordEvaluation(slot.id, turn_id, doc));
  KF_ASSIGN_OR_RETURN(std::string fb, Feedback(s, cand, outcome, doc));
  KF_RETURN_IF_ERROR(deps_.store->SetTurnFeedback(turn_id, fb));
  KF_RETURN_IF_ERROR(CheckBreach(slot, cand, doc));
  std::optional<int> before = s.BestCorrect();
  const double speedup = EvalSpeedup(doc);
  s.OnFinished(cand, outcome, speedup, fb, eval_id);
  std::optional<int> after = s.BestCorrect();
  if (after && after != before)
    KF_RETURN_IF_ERROR(deps_.store->SetBestEvaluation(slot.id, s.candidate(*after).eval_id));
  if (deps_.progress) {
    deps_.progress->Event(fmt::format(
        "{} {} turn {}: {}{}", s.spec().model, s.spec().task, cand + 1, OutcomeName(outcome),
        IsCorrect(outcome) ? fmt::format(" ({:.2f}x)", speedup) : ""));
  }
  return Status::Ok();
}

Status RunEngine::CheckBreach(const SessionSlot& slot, int cand, const json& doc) {
  if (!spec_.strategy || !spec_.strategy->redteam) return Status::Ok();
  const Session& s = *slot.session;
  const std::vector<std::string> reasons = FindBreaches(doc, s.candidate(cand).reply, spec_.canary);
  if (reasons.empty()) return Status::Ok();
  const std::string verdict = doc.value("status", std::string("no_kernel"));
  if (deps_.progress) {
    deps_.progress->Event(fmt::format("{} {} turn {}: BREACH ({}): {}", s.spec().model,
                                      s.spec().task, cand + 1, verdict, reasons.front()));
  }
  return deps_.store->AppendEvent(
      run_id_, "redteam_breach",
      {{"session", slot.id}, {"turn", cand}, {"verdict", verdict}, {"reasons", reasons}});
}

// Moves a session on after a completion: next round, or its end committed.
Status RunEngine::Settle(SessionSlot& slot) {
  Session& s = *slot.session;
  s.AdvanceRound();
  if (s.Ended() && !slot.committed_end) {
    if (slot.stored_state != "done")
      KF_RETURN_IF_ERROR(deps_.store->SetSessionState(slot.id, s.EndState(), s.stop_reason()));
    slot.committed_end = true;
    if (deps_.progress && slot.stored_state != "done") {
      deps_.progress->Event(fmt::format("{} {}: {} ({})", s.spec().model, s.spec().task,
                                        s.EndState(), s.stop_reason()));
    }
  }
  return Status::Ok();
}

Result<std::string> RunEngine::Feedback(const Session& s, int cand, Outcome outcome,
                                        const json& doc) {
  const Candidate& c = s.candidate(cand);
  FeedbackInput in;
  in.outcome = outcome;
  in.eval = doc;
  in.source = c.kernel;
  in.kernel_name = KernelName(s, cand);
  in.extract_problem = c.extract_problem;
  in.turn = c.round + 1;
  in.turns = spec_.strategy->turns;
  in.link_peak_gbps = spec_.link_peak_gbps;
  return ComposeFeedback(*spec_.strategy, in);
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
