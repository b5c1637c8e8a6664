#include "kforge/agent/runner.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>

#include "kforge/agent/extract.h"
#include "run_engine.h"

namespace kforge::agent {
namespace internal {
namespace {

using nlohmann::json;

bool Transient(ErrorKind k) {
  return k == ErrorKind::kRateLimited || k == ErrorKind::kOverloaded ||
         k == ErrorKind::kServerError || k == ErrorKind::kTimeout || k == ErrorKind::kTransport;
}

// Failures that no other call of the same model can get past.
bool ModelWide(ErrorKind k) { return k == ErrorKind::kAuth || k == ErrorKind::kQuota; }

// Mirrors results::NotEvaluated over the session's finished candidates.
bool SessionNotEvaluated(const Session& s) {
  bool verdict = false, compiled = false, gpu = false;
  for (const auto& c : s.candidates()) {
    if (c.phase != Phase::kFinished) continue;
    if (IsCorrect(c.outcome)) return false;
    switch (c.outcome) {
      case Outcome::kCompiled:
        compiled = true;
        break;
      case Outcome::kHarnessError:
        break;
      case Outcome::kRuntimeError:
      case Outcome::kHang:
      case Outcome::kMismatch:
        gpu = true;
        verdict = true;
        break;
      default:
        verdict = true;
    }
  }
  return !verdict || (compiled && !gpu);
}

bool StoppedByError(const std::string& reason) {
  return reason.rfind("provider: ", 0) == 0 || reason.rfind("harness: ", 0) == 0;
}

std::string KernelName(const Session& s, int cand) {
  return fmt::format("{}_turn{}.cu", s.spec().task, cand);
}

}  // namespace

RunEngine::RunEngine(const RunSpec& spec, const RunDeps& deps)
    : spec_(spec), deps_(deps), scheduler_(spec.pools, *deps.clock), budget_(spec.budgets) {}

Status RunEngine::Prepare() {
  KF_ASSIGN_OR_RETURN(RunRow run,
                      deps_.store->CreateOrGetRun(spec_.name, spec_.config, spec_.hardware));
  run_id_ = run.id;
  started_unix_ = run.started_at > 0 ? run.started_at : NowUnix();
  started_ = deps_.clock->Now();
  KF_ASSIGN_OR_RETURN(std::vector<SessionRow> stored, deps_.store->ListSessions(run_id_));
  for (const auto& model : spec_.models) {
    for (const auto& task : spec_.tasks) {
      const std::string& dtype = task.dtype.empty() ? spec_.dtype : task.dtype;
      for (int r = 0; r < spec_.repeats; ++r) {
        SessionKeyRow key{model,       task.key, spec_.strategy->name, r,
                          spec_.world, dtype,    task.category};
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
        why = "deadline reached";
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
  for (const Dispatch& d : scheduler_.DispatchReady()) {
    Job* job = jobs_.at(d.id).get();
    job->slot = d.slot;
    Session& s = *sessions_[job->session].session;
    const Candidate& cand = s.candidate(job->candidate);
    dispatched_.insert(d.id);
    if (d.pool == Pool::kLlm) {
      // Spending may have crossed a limit while this call waited in the queue.
      std::optional<std::string> why = budget_.Exhausted(s.spec().model, s.spec().task, NowUnix());
      if (why || s.stop_requested()) {
        scheduler_.Release(d.id);
        dispatched_.erase(d.id);
        s.Unstart(job->candidate);
        if (why) s.RequestStop(*why);
        jobs_.erase(d.id);
        continue;
      }
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
    EvalPort* port = d.pool == Pool::kCompile ? deps_.compilers.at(d.slot % deps_.compilers.size())
                                              : deps_.gpu_sets.at(d.slot);
    deps_.executor->Start(d.id, d.pool, [port, job, ej] {
      job->doc = port->Evaluate(ej);
      if (!job->doc->ok()) return 0.0;
      const json& doc = job->doc->value();
      auto it = doc.find("seconds");
      return (it != doc.end() && it->is_number()) ? it->get<double>() : 0.0;
    });
  }
  return Status::Ok();
}

Status RunEngine::HandleDone(uint64_t id) {
  scheduler_.Release(id);
  dispatched_.erase(id);
  std::unique_ptr<Job> job = std::move(jobs_.at(id));
  jobs_.erase(id);
  SessionSlot& slot = sessions_[job->session];
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
    s.Unstart(cand);
    KF_RETURN_IF_ERROR(deps_.store->AppendEvent(run_id_, "llm_error",
                                                {{"session", slot.id},
                                                 {"turn", cand},
                                                 {"kind", ErrorKindName(st.kind())},
                                                 {"message", st.message()}}));
    if (st.kind() == ErrorKind::kTruncated || st.kind() == ErrorKind::kContentFilter) {
      // A turn was spent: record it with the reason as its feedback.
      LlmAnswer empty;
      empty.finish_reason = st.kind() == ErrorKind::kTruncated ? "length" : "content_filter";
      s.Start(cand);
      Result<LlmAnswer> as_answer(empty);
      return OnAnswer(slot, cand, as_answer);
    }
    if (ModelWide(st.kind())) {
      StopModel(model, fmt::format("provider: {}", st.ToString()));
    } else if (Transient(st.kind()) && ++slot.attempts[cand] < spec_.max_llm_attempts) {
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
  TurnRow turn;
  turn.session_id = slot.id;
  turn.index = cand;
  turn.prompt = s.candidate(cand).prompt;
  turn.reply = a.text;
  turn.kernel = x.ok ? x.source : "";
  turn.input_tokens = a.input_tokens;
  turn.cached_input_tokens = a.cached_input_tokens;
  turn.output_tokens = a.output_tokens;
  turn.reasoning_tokens = a.reasoning_tokens;
  turn.cost_usd = a.cost_usd;
  turn.latency_s = a.latency_s;
  turn.request_id = a.request_id;
  turn.finish_reason = a.finish_reason;
  KF_ASSIGN_OR_RETURN(int64_t turn_id, deps_.store->AppendTurn(turn));
  budget_.Charge(model, s.spec().task, a.cost_usd, a.input_tokens + a.output_tokens);
  if (!a.priced) unpriced_models_.insert(model);
  slot.attempts.erase(cand);
  slot.retry_at.erase(cand);
  s.OnReply(cand, a.text, turn.kernel, x.problem, turn_id);
  if (!x.ok) {
    KF_ASSIGN_OR_RETURN(std::string fb, Feedback(s, cand, Outcome::kNoKernel, json::object()));
    KF_RETURN_IF_ERROR(deps_.store->SetTurnFeedback(turn_id, fb));
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
        run_id_, "harness_error",
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
      deps_.store->AppendEvent(run_id_, "compiled",
                               {{"session", slot.id},
                                {"turn", cand},
                                {"compile", doc.value().value("compile", json::object())}}));
  KF_RETURN_IF_ERROR(deps_.store->SetTurnFeedback(s.candidate(cand).turn_id, fb));
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
        run_id_, "harness_error",
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
  std::optional<int> before = s.BestCorrect();
  double speedup =
      doc.contains("speedup") && doc["speedup"].is_number() ? doc["speedup"].get<double>() : 0.0;
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

RunStats RunEngine::Stats() const {
  RunStats st;
  st.compile_only = spec_.compile_only;
  for (const auto& model : spec_.models) st.models[model];
  for (const auto& slot : sessions_) {
    const Session& s = *slot.session;
    ModelStats& m = st.models[s.spec().model];
    ++m.sessions;
    m.ended += s.Ended();
    if (auto b = s.BestCorrect()) {
      ++m.correct;
      m.faster += s.candidate(*b).speedup > 1.0;
    }
    bool compiled = false;
    for (const auto& c : s.candidates()) {
      compiled = compiled || (c.phase == Phase::kFinished && c.outcome == Outcome::kCompiled);
      m.turns += c.turn_id != 0;
    }
    m.compiled += compiled;
    m.not_evaluated += s.Ended() && SessionNotEvaluated(s);
  }
  for (auto& [model, m] : st.models) {
    BudgetBook::Spend sp = budget_.model(model);
    m.usd = sp.usd;
    m.tokens = sp.tokens;
    m.unpriced = unpriced_models_.count(model) > 0;
  }
  for (const auto& [id, job] : jobs_) {
    if (!dispatched_.count(id)) continue;
    const Session& s = *sessions_[job->session].session;
    const char* what = job->pool == Pool::kLlm       ? "model  "
                       : job->pool == Pool::kCompile ? "compile"
                                                     : "GPU    ";
    st.running.push_back(
        fmt::format("{} {} {} turn {}", what, s.spec().model, s.spec().task, job->candidate + 1));
  }
  st.queued_llm = static_cast<int>(scheduler_.queued(Pool::kLlm));
  st.queued_compile = static_cast<int>(scheduler_.queued(Pool::kCompile));
  st.queued_gpu = static_cast<int>(scheduler_.queued(Pool::kGpu));
  st.elapsed_s = std::chrono::duration<double>(deps_.clock->Now() - started_).count();
  st.gpu_busy_s = scheduler_.GpuBusySeconds();
  return st;
}

RunSummary RunEngine::Summarize() const {
  RunSummary sum;
  sum.run_id = run_id_;
  sum.name = spec_.name;
  sum.stats = Stats();
  sum.compile_only = spec_.compile_only;
  sum.wall_s = sum.stats.elapsed_s;
  double busy = 0;
  for (double b : sum.stats.gpu_busy_s) busy += b;
  if (sum.wall_s > 0 && !sum.stats.gpu_busy_s.empty()) {
    sum.gpu_busy_fraction = busy / (sum.wall_s * static_cast<double>(sum.stats.gpu_busy_s.size()));
  }
  for (const auto& slot : sessions_) {
    const Session& s = *slot.session;
    SessionSummary row{s.spec().model, s.spec().task, s.spec().sample,
                       slot.stored_state == "done" ? "done" : s.EndState(), s.stop_reason()};
    if (auto b = s.BestAny()) {
      row.best_outcome = std::string(OutcomeName(s.candidate(*b).outcome));
      row.best_speedup = s.candidate(*b).speedup;
    }
    for (const auto& c : s.candidates()) row.turns += c.turn_id != 0;
    row.not_evaluated = SessionNotEvaluated(s);
    row.failed = row.state == "stopped" && row.not_evaluated && StoppedByError(row.stop_reason);
    sum.sessions.push_back(row);
  }
  return sum;
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

bool RunSummary::AllFailed() const {
  if (sessions.empty()) return false;
  for (const auto& r : sessions) {
    if (!r.failed) return false;
  }
  return true;
}

std::string RenderRunSummary(const RunSummary& s) {
  std::string out = "\n" + RenderStatsTable(s.stats) + "\n";
  out += fmt::format("{:<40} {:<16} {:<8} {:<14} {:>8} {:>6}  {}\n", "model", "task", "state",
                     "best", "speedup", "turns", "stop reason");
  int not_evaluated = 0;
  for (const auto& r : s.sessions) {
    not_evaluated += r.not_evaluated;
    out += fmt::format("{:<40} {:<16} {:<8} {:<14} {:>8} {:>6}  {}\n", r.model, r.task, r.state,
                       r.not_evaluated          ? "not evaluated"
                       : r.best_outcome.empty() ? "-"
                                                : r.best_outcome,
                       r.best_speedup > 0 ? fmt::format("{:.2f}x", r.best_speedup) : "-", r.turns,
                       r.stop_reason);
  }
  out += fmt::format("\nwall {:.1f} s", s.wall_s);
  if (!s.compile_only && !s.stats.gpu_busy_s.empty())
    out += fmt::format(", GPU busy {:.0f}% of wall time", 100 * s.gpu_busy_fraction);
  out += "\n";
  if (not_evaluated > 0) {
    out += fmt::format(
        "{} of {} session(s) NOT EVALUATED (left out of correctness and speed figures):\n",
        not_evaluated, s.sessions.size());
    for (const auto& r : s.sessions) {
      if (r.not_evaluated)
        out += fmt::format("  {} {} (sample {}): {}\n", r.model, r.task, r.sample,
                           r.stop_reason.empty() ? "nothing judged" : r.stop_reason);
    }
  }
  if (s.compile_only) {
    out += fmt::format(
        "NOTE: no GPU was used. Kernels were compiled and policy-checked only; correctness and "
        "speed were NOT measured. Evaluation needs a GPU: resume this run on a GPU machine "
        "(kforge run --resume {}).\n",
        s.name.empty() ? "NAME" : s.name);
  }
  if (s.AllFailed()) out += "FAILED: every session stopped on an error; nothing was measured.\n";
  return out;
}

nlohmann::json RunSummaryJson(const RunSummary& s) {
  nlohmann::json models = nlohmann::json::object();
  for (const auto& [model, m] : s.stats.models) {
    models[model] = {{"sessions", m.sessions},
                     {"ended", m.ended},
                     {"not_evaluated", m.not_evaluated},
                     {"correct", m.correct},
                     {"faster", m.faster},
                     {"compiled", m.compiled},
                     {"turns", m.turns},
                     {"tokens", m.tokens},
                     // null: some call had no price, so the spend is unknown
                     {"usd", m.unpriced ? nlohmann::json(nullptr) : nlohmann::json(m.usd)}};
  }
  nlohmann::json sessions = nlohmann::json::array();
  for (const auto& r : s.sessions) {
    sessions.push_back({{"model", r.model},
                        {"task", r.task},
                        {"sample", r.sample},
                        {"state", r.state},
                        {"stop_reason", r.stop_reason},
                        {"best_outcome", r.best_outcome.empty() ? nlohmann::json(nullptr)
                                                                : nlohmann::json(r.best_outcome)},
                        {"best_speedup", r.best_speedup > 0 ? nlohmann::json(r.best_speedup)
                                                            : nlohmann::json(nullptr)},
                        {"turns", r.turns},
                        {"not_evaluated", r.not_evaluated},
                        {"failed", r.failed}});
  }
  return {{"schema", "kforge.run_summary/1"},
          {"name", s.name},
          {"run_id", s.run_id},
          {"wall_s", s.wall_s},
          {"gpu_busy_fraction",
           s.compile_only ? nlohmann::json(nullptr) : nlohmann::json(s.gpu_busy_fraction)},
          {"compile_only", s.compile_only},
          {"aborted", s.aborted},
          {"all_failed", s.AllFailed()},
          {"models", models},
          {"sessions", sessions}};
}

}  // namespace kforge::agent
