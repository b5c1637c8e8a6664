// Moving runs between stores: JSON Lines export/import and store-to-store
// merge (runs made on several machines gathered into one store).
//
// Export format "kforge.export/1", one JSON object per line:
//   {"schema":"kforge.export/1", "run":{name, config, kforge_version, task_suite_hash, hardware,
//   state, …},
//    "session":{model, task, strategy, sample, world, dtype, category, state, stop_reason,
//               events (first record of the session only): [{kind, detail, created_at}]},
//    "turn":{index, prompt, reply, feedback, kernel, input_tokens, …} | null,
//    "evaluation": <kforge.eval/1 document> | null, "best": true|false}
// Every evaluation gets a line; a turn without an evaluation gets one with
// "evaluation": null, so an import rebuilds the whole session.
//
// `session.events` are the run's events about that session (detail.session,
// which an import points at its own session id): the compile-only "compiled"
// events that make a session "not evaluated" travel with it, so a round trip
// keeps every leaderboard figure. Files without them still import.
//
// Import is idempotent: runs match by name, sessions by key, turns by index,
// evaluations by document hash, session events by kind and detail; what
// already exists is kept as is.
#pragma once

#include <functional>
#include <istream>
#include <nlohmann/json.hpp>
#include <ostream>
#include <string>

#include "kforge/core/status.h"
#include "kforge/results/store.h"

namespace kforge::results {

struct TransferStats {
  int records = 0;
  int runs_created = 0;
  int sessions = 0;
  int turns_added = 0;
  int evaluations_added = 0;
  int duplicates = 0;  // records already present
};

// Calls `sink` with every export record of every run in `store`.
Status ForEachExportRecord(const RunStore& store,
                           const std::function<Status(const nlohmann::json&)>& sink);
Result<TransferStats> ExportJsonl(const RunStore& store, std::ostream& out);

// `source` names the input in errors ("file.jsonl") and becomes the origin of
// runs it creates. A bad line stops the import with an error naming the line;
// the lines before it stay imported (each is committed on its own).
Result<TransferStats> ImportJsonl(RunStore& dest, std::istream& in, const std::string& source);
Result<TransferStats> MergeStore(RunStore& dest, const RunStore& src);

}  // namespace kforge::results
