// The run engine's completions: a model's answer, a compile's or a GPU
// evaluation's document, each moving its session on (run_engine.h).
#include <fmt/format.h>

#include "breach.h"
#include "extract.h"
#include "kforge/core/eval_doc.h"
#include "run_engine.h"

namespace kforge::agent::internal {
namespace {

using nlohmann::json;

// Failures that no other call of the same model can get past.
bool ModelWide(ErrorKind k) { return k == ErrorKind::kAuth || k == ErrorKind::kQuota; }

}  // namespace

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
  const BreachRecord breach = MakeBreachRecord(slot.id, cand, doc, reasons);
  if (deps_.progress) {
    deps_.progress->Event(fmt::format("{} {} turn {}: BREACH ({}): {}", s.spec().model,
                                      s.spec().task, cand + 1, breach.verdict, reasons.front()));
  }
  return deps_.store->AppendEvent(run_id_, kBreachEvent, breach.detail);
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

}  // namespace kforge::agent::internal
