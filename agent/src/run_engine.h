// Internal: the state of one executing run, shared by runner.cc (the loop and
// the completion handlers) and resume.cc (rebuilding sessions from the store).
#pragma once

#include <fmt/format.h>

#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "feedback.h"
#include "kforge/agent/runner.h"
#include "session.h"

namespace kforge::agent::internal {

struct Job {
  uint64_t id = 0;
  Pool pool = Pool::kLlm;
  size_t session = 0;  // index into RunEngine::sessions_
  int candidate = 0;
  int slot = 0;
  LlmCall call;
  CallCost worst;  // reserved against the budgets while the call is in flight
  // Written by the worker thread; read after the executor reports the job done.
  std::optional<Result<LlmAnswer>> answer;
  std::optional<Result<nlohmann::json>> doc;
};

struct SessionSlot {
  std::unique_ptr<Session> session;
  int64_t id = 0;
  std::string stored_state;
  bool committed_end = false;
  bool marked_running = false;
  std::map<int, int> attempts;               // candidate -> failed model calls
  std::map<int, Clock::TimePoint> retry_at;  // candidate -> not before
  std::map<int, int> eval_attempts;          // candidate -> evaluations lost with their slot
};

class RunEngine {
 public:
  RunEngine(const RunSpec& spec, const RunDeps& deps);
  Result<RunSummary> Run();

 private:
  // runner.cc
  Status Prepare();
  Status StoreExtendedLimits(const RunInfo& run);
  Status EnqueueWanted();
  Status StartDispatched();
  Status HandleDone(uint64_t id);
  Status OnAnswer(SessionSlot& slot, int cand, Result<LlmAnswer>& answer);
  Status OnCompileDoc(SessionSlot& slot, int cand, Result<nlohmann::json>& doc);
  Status OnGpuDoc(SessionSlot& slot, int cand, Result<nlohmann::json>& doc);
  // A compile or GPU job came back kSlotLost: suspend the slot, requeue the
  // job or, out of attempts, stop the session (requeue.cc).
  Status OnSlotLost(SessionSlot& slot, const Job& job, const Status& lost);
  void OnSlotWorked(Pool pool, int slot);
  std::string SlotName(Pool pool, int slot) const;
  std::string SlotGroup(Pool pool, int slot) const;
  Status FinishWithEval(SessionSlot& slot, int cand, const nlohmann::json& doc, Outcome outcome);
  // A red-team run's breach check of one candidate (breach.h): each breach
  // becomes a `redteam_breach` event {session, turn, verdict, reasons}.
  Status CheckBreach(const SessionSlot& slot, int cand, const nlohmann::json& doc);
  Status Settle(SessionSlot& slot);
  Result<std::string> Feedback(const Session& s, int cand, Outcome outcome,
                               const nlohmann::json& doc);
  void StopModel(const std::string& model, const std::string& reason);
  // Tells the budgets which models have every session ended (their rest of
  // the run budget goes to the others).
  void NoteEndedModels();
  RunStats Stats() const;
  RunSummary Summarize() const;
  std::optional<Clock::TimePoint> NextRetry() const;
  double NowUnix() const { return deps_.clock->UnixSeconds(); }

  // resume.cc
  Status Restore(SessionSlot& slot);

  const RunSpec& spec_;
  RunDeps deps_;
  int64_t run_id_ = 0;
  double started_unix_ = 0;
  Clock::TimePoint started_;
  Scheduler scheduler_;
  BudgetBook budget_;
  std::vector<SessionSlot> sessions_;
  std::map<uint64_t, std::unique_ptr<Job>> jobs_;  // queued or running
  std::set<uint64_t> dispatched_;
  uint64_t next_job_ = 1;
  std::set<std::string> stopped_models_;
  std::set<std::string> unpriced_models_;   // models with a call the registry could not price
  std::map<std::string, int> slot_losses_;  // losses in a row, per slot group
};

// The file name a candidate's kernel is compiled and reported under.
inline std::string KernelName(const Session& s, int cand) {
  return fmt::format("{}_turn{}.cu", s.spec().task, cand);
}

}  // namespace kforge::agent::internal
