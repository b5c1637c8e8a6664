// Rebuilding a session from the store: its stored turns and evaluations are
// fed through the same Session calls the live loop makes, in turn order,
// round by round, so that parents, feedback and stop decisions come out as
// they did before the interruption. Steps that were cut short (a turn without
// feedback, an evaluation without its best marker) are completed here.
#include <map>

#include "extract.h"
#include "run_engine.h"

namespace kforge::agent::internal {

Status RunEngine::Restore(SessionSlot& slot) {
  Session& s = *slot.session;
  KF_ASSIGN_OR_RETURN(std::vector<TurnRecord> turns, deps_.store->ListTurns(slot.id));
  if (turns.empty() && slot.stored_state.empty()) return Status::Ok();
  KF_ASSIGN_OR_RETURN(std::vector<EvaluationRecord> evals, deps_.store->ListEvaluations(slot.id));
  std::map<int, const TurnRecord*> by_index;
  for (const auto& t : turns) by_index[t.index] = &t;
  std::map<int64_t, const EvaluationRecord*> by_turn;
  for (const auto& e : evals) by_turn[e.turn_id] = &e;  // the latest evaluation of a turn wins

  bool progressed = true;
  while (progressed) {
    progressed = false;
    for (int c : s.InPhase(Phase::kWantReply)) {
      auto it = by_index.find(c);
      if (it == by_index.end()) continue;
      const TurnRecord& t = *it->second;
      budget_.Charge(s.spec().model, s.spec().task, t.usage.cost_usd, t.usage.tokens());
      std::string problem;
      if (t.kernel.empty()) {
        Extraction x = ExtractKernel(t.reply);
        problem = x.problem;
        if (t.finish_reason == "length") {
          problem =
              "Your reply hit the output-token limit before a complete kernel arrived. " + problem;
        }
      }
      s.OnReply(c, t.reply, t.kernel, problem, t.id);
      progressed = true;
      auto ev = by_turn.find(t.id);
      if (t.kernel.empty()) {
        std::string fb = t.feedback;
        if (fb.empty()) {
          KF_ASSIGN_OR_RETURN(fb, Feedback(s, c, Outcome::kNoKernel, nlohmann::json::object()));
          KF_RETURN_IF_ERROR(deps_.store->SetTurnFeedback(t.id, fb));
        }
        s.OnFinished(c, Outcome::kNoKernel, 0, fb, 0);
      } else if (ev != by_turn.end()) {
        const nlohmann::json& doc = ev->second->doc;
        Outcome o = ClassifyEvaluation(doc, false);
        std::string fb = t.feedback;
        if (fb.empty()) {
          KF_ASSIGN_OR_RETURN(fb, Feedback(s, c, o, doc));
          KF_RETURN_IF_ERROR(deps_.store->SetTurnFeedback(t.id, fb));
        }
        s.OnFinished(c, o, EvalSpeedup(doc), fb, ev->second->id);
      }
      // Otherwise the kernel still needs compiling and evaluating: it stays
      // in kWantCompile and the loop picks it up.
    }
    if (s.AdvanceRound()) progressed = true;
  }
  if (auto best = s.BestCorrect()) {
    KF_RETURN_IF_ERROR(deps_.store->SetBestEvaluation(slot.id, s.candidate(*best).eval_id));
  }
  if (slot.stored_state == "done") s.RequestStop("done before this resume", true);
  return Status::Ok();
}

}  // namespace kforge::agent::internal
