// A session: one model refining kernels for one task under one strategy. A
// pure state machine: it says what work is wanted (model replies, compiles,
// GPU evaluations) and is told what came back; the runner does the work and
// commits each step to the store. Restoring a session replays its stored
// steps through the same calls, so a resumed session decides exactly as the
// interrupted one would have.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "kforge/agent/outcome.h"
#include "kforge/agent/ports.h"
#include "kforge/agent/prompt.h"
#include "kforge/agent/strategy.h"

namespace kforge::agent {

enum class Phase {
  kWantReply,  // ready for a model call
  kReplying,
  kWantCompile,
  kCompiling,
  kWantGpu,
  kEvaluating,
  kFinished,
};

struct Candidate {
  int index = 0;  // the turn index in the session (round * samples + sample)
  int round = 0;
  int sample = 0;
  int parent = -1;  // the candidate this one refines; -1: a fresh start
  Phase phase = Phase::kWantReply;
  std::string prompt;  // the user message that asked for it
  std::string reply;
  std::string kernel;  // empty when extraction failed
  std::string extract_problem;
  std::string feedback;
  Outcome outcome = Outcome::kHarnessError;
  double speedup = 0;
  int64_t turn_id = 0;
  int64_t eval_id = 0;
};

struct SessionSpec {
  int64_t id = 0;  // the store's session id
  std::string model;
  std::string task;
  int sample = 0;  // the session's sample number within the run
  int world = 0;
  std::string dtype;
  const Strategy* strategy = nullptr;  // outlives the session
  Prompt prompt;                       // the first message of every lineage
  bool compile_only = false;
};

class Session {
 public:
  explicit Session(SessionSpec spec);

  const SessionSpec& spec() const { return spec_; }
  const std::vector<Candidate>& candidates() const { return candidates_; }
  const Candidate& candidate(int index) const { return candidates_.at(index); }
  int round() const { return round_; }

  // Candidates in `phase` (oldest first).
  std::vector<int> InPhase(Phase phase) const;
  // Moves a candidate to the in-flight phase that follows `phase`.
  void Start(int index);
  // Returns an in-flight candidate to the phase it was started from (the
  // work failed for a reason that is not the kernel's: retry later).
  void Unstart(int index);
  bool AnyInFlight() const;

  // The request for a candidate in kWantReply/kReplying: its lineage as a conversation.
  LlmCall BuildCall(int index) const;

  // The model answered. With a kernel the candidate wants compiling;
  // without one it is finished (outcome kNoKernel, feedback from the composer).
  void OnReply(int index, const std::string& reply, const std::string& kernel,
               const std::string& extract_problem, int64_t turn_id);
  // Compiled and passed policy: wants a GPU evaluation.
  void OnCompiled(int index);
  void OnFinished(int index, Outcome outcome, double speedup, const std::string& feedback,
                  int64_t eval_id);

  // When every candidate of the round is finished: applies the stop rules and
  // either plans the next round or ends the session. Returns true if it did
  // either (the caller commits the new state).
  bool AdvanceRound();

  // Asks the session to stop: no new work starts; it ends once nothing is in flight.
  void RequestStop(const std::string& reason, bool natural = false);
  bool stop_requested() const { return !stop_reason_.empty(); }
  // Ended: a stop reason is set and nothing is in flight.
  bool Ended() const { return stop_requested() && !AnyInFlight(); }
  const std::string& stop_reason() const { return stop_reason_; }
  // "done" for a natural end (stop rule, turn limit); "stopped" otherwise
  // (budget, no GPU, errors): resumable.
  const char* EndState() const { return natural_ ? "done" : "stopped"; }

  // The best correct candidate, if any (highest speedup, then latest).
  std::optional<int> BestCorrect() const;
  // The candidate ranked highest by ProgressScore (latest on ties).
  std::optional<int> BestAny() const;

 private:
  void PlanRound(int round);
  std::vector<int> Ranked() const;

  SessionSpec spec_;
  std::vector<Candidate> candidates_;
  int round_ = 0;
  double best_score_ = -1;
  int rounds_without_gain_ = 0;
  std::string stop_reason_;
  bool natural_ = false;
};

}  // namespace kforge::agent
