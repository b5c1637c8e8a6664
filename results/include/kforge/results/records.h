// The run store's records: one type per stored thing (a run, a session, a
// turn, an evaluation). The agent's store port (kforge/agent/ports.h) passes
// these same types, so a new column is a new field here, written where the
// store binds and reads it, and nowhere in between.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "kforge/core/eval_doc.h"
#include "kforge/core/usage.h"

namespace kforge::results {

struct RunInfo {
  int64_t id = 0;
  std::string name;
  nlohmann::json config = nlohmann::json::object();
  std::string kforge_version;
  std::string task_suite_hash;
  nlohmann::json hardware = nlohmann::json::object();  // the hardware card
  std::string origin;                                  // host the run came from ("" = here)
  double started_at = 0;
  double finished_at = 0;  // 0 while running
  std::string state;       // running | done | stopped | failed
};

// What makes a session unique within a run.
struct SessionKey {
  std::string model, task, strategy;
  int sample = 0;
  int world = 0;
  std::string dtype;
  // The task's category (task.toml). Not part of the identity; stored so
  // metrics can be grouped per category.
  std::string category;
};

struct SessionRecord {
  int64_t id = 0;
  int64_t run_id = 0;
  SessionKey key;
  std::string state;  // pending | running | done | stopped
  std::string stop_reason;
  int turns_done = 0;
  std::optional<int64_t> best_evaluation_id;
};

// One prompt and the model's reply. Written whole by AppendTurn (texts and
// kernel as blobs, the row, in one call) and read back whole by ListTurns.
struct TurnRecord {
  int64_t id = 0;  // set by the store
  int64_t session_id = 0;
  int index = 0;  // 0-based within the session; unique per session
  std::string prompt, reply, feedback;
  std::string kernel;      // the extracted kernel source; "" when the reply held none
  std::string kernel_sha;  // sha256 of `kernel` ("" when none); set by the store
  TokenUsage usage;        // usage.priced is not stored
  double latency_s = 0;
  std::string request_id;
  std::string finish_reason;  // stop | length | content_filter | error | other
  double created_at = 0;      // 0 = now

  bool operator==(const TurnRecord&) const = default;
};

// One stored evaluation: the columns extracted from its kforge.eval/1 doc.
struct EvaluationRecord {
  int64_t id = 0;
  int64_t session_id = 0;
  int64_t turn_id = 0;                       // 0 when not tied to a turn
  Verdict verdict = Verdict::kHarnessError;  // the document's "status"
  std::optional<double> speedup;
  std::optional<double> expert_speedup;  // over the task's expert kernel, where it was timed
  std::optional<double> busbw_gbps;      // of the largest bench size
  bool emulated = false;
  double seconds = 0;
  int world = 0;
  std::string message;
  std::string doc_sha;  // blob with the whole document (per-rank details, timings)
  double created_at = 0;
  std::string kernel_sha;  // the evaluated turn's kernel ("" when none); read-only
  // The whole document: null unless read with it (RunStore::GetEvaluationDoc;
  // the agent's StorePort::ListEvaluations reads every one).
  nlohmann::json doc;
};

}  // namespace kforge::results
