#include "session.h"

#include <fmt/format.h>

#include <algorithm>
#include <cassert>

namespace kforge::agent {

Session::Session(SessionSpec spec) : spec_(std::move(spec)) {
  assert(spec_.strategy != nullptr);
  PlanRound(0);
}

void Session::PlanRound(int round) {
  const Strategy& s = *spec_.strategy;
  round_ = round;
  std::vector<int> parents;
  if (round > 0) {
    switch (s.refine) {
      case RefineFrom::kLast:
        for (int j = 0; j < s.samples; ++j) parents.push_back((round - 1) * s.samples + j);
        break;
      case RefineFrom::kBest:
        parents.push_back(*BestAny());
        break;
      case RefineFrom::kBeam: {
        std::vector<int> ranked = Ranked();
        ranked.resize(std::min<size_t>(ranked.size(), s.beam));
        parents = ranked;
        break;
      }
    }
  }
  for (int j = 0; j < s.samples; ++j) {
    Candidate c;
    c.index = round * s.samples + j;
    c.round = round;
    c.sample = j;
    c.parent = parents.empty() ? -1 : parents[j % parents.size()];
    c.prompt = c.parent < 0 ? spec_.prompt.user : candidates_[c.parent].feedback;
    candidates_.push_back(std::move(c));
  }
}

std::vector<int> Session::InPhase(Phase phase) const {
  std::vector<int> out;
  if (stop_requested() &&
      (phase == Phase::kWantReply || phase == Phase::kWantCompile || phase == Phase::kWantGpu)) {
    return out;
  }
  for (const auto& c : candidates_) {
    if (c.phase == phase) out.push_back(c.index);
  }
  return out;
}

void Session::Start(int index) {
  Candidate& c = candidates_.at(index);
  switch (c.phase) {
    case Phase::kWantReply:
      c.phase = Phase::kReplying;
      break;
    case Phase::kWantCompile:
      c.phase = Phase::kCompiling;
      break;
    case Phase::kWantGpu:
      c.phase = Phase::kEvaluating;
      break;
    default:
      assert(false && "Start on a candidate that wants nothing");
  }
}

void Session::Unstart(int index) {
  Candidate& c = candidates_.at(index);
  switch (c.phase) {
    case Phase::kReplying:
      c.phase = Phase::kWantReply;
      break;
    case Phase::kCompiling:
      c.phase = Phase::kWantCompile;
      break;
    case Phase::kEvaluating:
      c.phase = Phase::kWantGpu;
      break;
    default:
      break;
  }
}

bool Session::AnyInFlight() const {
  return std::any_of(candidates_.begin(), candidates_.end(), [](const Candidate& c) {
    return c.phase == Phase::kReplying || c.phase == Phase::kCompiling ||
           c.phase == Phase::kEvaluating;
  });
}

LlmCall Session::BuildCall(int index) const {
  const Strategy& s = *spec_.strategy;
  const Candidate& c = candidates_.at(index);
  std::vector<int> chain;
  for (int p = c.parent; p >= 0; p = candidates_[p].parent) chain.push_back(p);
  std::reverse(chain.begin(), chain.end());
  if (s.history > 0 && static_cast<int>(chain.size()) > s.history) {
    chain.erase(chain.begin(), chain.end() - s.history);
  }
  LlmCall call;
  call.model = spec_.model;
  call.system = spec_.prompt.system;
  call.temperature = s.temperature;
  call.max_output_tokens = s.max_output_tokens;
  call.reasoning_effort = s.reasoning_effort;
  call.task = spec_.task;
  call.turn_index = c.index;
  call.repeat = spec_.sample;
  call.messages.push_back({"user", spec_.prompt.user});
  for (size_t i = 0; i < chain.size(); ++i) {
    const Candidate& a = candidates_[chain[i]];
    call.messages.push_back({"assistant", a.reply});
    call.messages.push_back({"user", a.feedback});
  }
  return call;
}

void Session::OnReply(int index, const std::string& reply, const std::string& kernel,
                      const std::string& extract_problem, int64_t turn_id) {
  Candidate& c = candidates_.at(index);
  c.reply = reply;
  c.kernel = kernel;
  c.extract_problem = extract_problem;
  c.turn_id = turn_id;
  c.phase = kernel.empty() ? Phase::kFinished : Phase::kWantCompile;
  if (kernel.empty()) c.outcome = Outcome::kNoKernel;
}

void Session::OnCompiled(int index) { candidates_.at(index).phase = Phase::kWantGpu; }

void Session::OnFinished(int index, Outcome outcome, double speedup, const std::string& feedback,
                         int64_t eval_id) {
  Candidate& c = candidates_.at(index);
  c.phase = Phase::kFinished;
  c.outcome = outcome;
  c.speedup = IsCorrect(outcome) ? speedup : 0;
  c.feedback = feedback;
  c.eval_id = eval_id;
}

bool Session::AdvanceRound() {
  if (stop_requested()) return false;
  const Strategy& s = *spec_.strategy;
  for (const auto& c : candidates_) {
    if (c.round == round_ && c.phase != Phase::kFinished) return false;
  }
  // Gain tracking for patience: did this round beat every earlier one?
  double round_best = -1;
  bool compiled_only = false;
  for (const auto& c : candidates_) {
    if (c.round != round_) continue;
    round_best = std::max(round_best, ProgressScore(c.outcome, c.speedup));
    compiled_only = compiled_only || c.outcome == Outcome::kCompiled;
  }
  if (round_best > best_score_) {
    best_score_ = round_best;
    rounds_without_gain_ = 0;
  } else {
    ++rounds_without_gain_;
  }
  std::optional<int> best = BestCorrect();
  if (compiled_only) {
    RequestStop("evaluation needs a GPU");
  } else if (best && s.stop.speedup > 0 && candidates_[*best].speedup >= s.stop.speedup) {
    RequestStop(fmt::format("reached the target speedup ({:.2f}x >= {:.2f}x)",
                            candidates_[*best].speedup, s.stop.speedup),
                true);
  } else if (best && s.stop.on_correct) {
    RequestStop("correct kernel found", true);
  } else if (s.stop.patience > 0 && rounds_without_gain_ >= s.stop.patience) {
    RequestStop(fmt::format("no improvement in {} round(s)", rounds_without_gain_), true);
  } else if (round_ + 1 >= s.turns) {
    RequestStop(fmt::format("turn limit reached ({} round(s))", s.turns), true);
  } else {
    PlanRound(round_ + 1);
  }
  return true;
}

void Session::RequestStop(const std::string& reason, bool natural) {
  if (stop_requested()) return;
  stop_reason_ = reason;
  natural_ = natural;
}

std::vector<int> Session::Ranked() const {
  std::vector<int> finished;
  for (const auto& c : candidates_) {
    if (c.phase == Phase::kFinished) finished.push_back(c.index);
  }
  std::stable_sort(finished.begin(), finished.end(), [this](int a, int b) {
    double sa = ProgressScore(candidates_[a].outcome, candidates_[a].speedup);
    double sb = ProgressScore(candidates_[b].outcome, candidates_[b].speedup);
    if (sa != sb) return sa > sb;
    return a > b;  // later first on ties
  });
  return finished;
}

std::optional<int> Session::BestAny() const {
  std::vector<int> r = Ranked();
  if (r.empty()) return std::nullopt;
  return r.front();
}

std::optional<int> Session::BestCorrect() const {
  std::optional<int> b = BestAny();
  if (b && IsCorrect(candidates_[*b].outcome)) return b;
  return std::nullopt;
}

}  // namespace kforge::agent
