// The run store's rows and blobs as both halves of RunStore read them:
// store.cc (writes) and store_queries.cc (reads). Internal to the module.
#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kforge/core/fs.h"
#include "kforge/core/hash.h"
#include "kforge/results/store.h"
#include "sqlite_db.h"

namespace kforge::results::internal::rows {

namespace fs = std::filesystem;

inline bool IsSha(const std::string& s) {
  if (s.size() != 64) return false;
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

inline fs::path BlobPath(const fs::path& dir, const std::string& sha) {
  return dir / "blobs" / sha.substr(0, 2) / sha;
}

inline Result<std::string> ReadBlob(const fs::path& dir, const std::string& sha) {
  if (sha.empty()) return std::string();
  if (!IsSha(sha)) return Error(ErrorKind::kInvalidInput, "not a sha256: \"" + sha + "\"");
  auto text = ReadFile(BlobPath(dir, sha));
  if (!text.ok())
    return Error(ErrorKind::kNotFound, "blob " + sha + " missing in " + (dir / "blobs").string());
  if (Sha256Hex(*text) != sha) {
    return Error(ErrorKind::kIo,
                 "blob " + BlobPath(dir, sha).string() + " is corrupt (hash mismatch)");
  }
  return text;
}

inline nlohmann::json JsonOr(const std::string& text, nlohmann::json fallback) {
  auto j = nlohmann::json::parse(text, nullptr, false);
  return j.is_discarded() ? fallback : j;
}

inline constexpr const char* kRunCols =
    "id, name, config, kforge_version, task_suite_hash, hardware, origin, started_at, finished_at, "
    "state";
inline RunInfo ReadRun(const Stmt& q) {
  RunInfo r;
  r.id = q.Int(0);
  r.name = q.Text(1);
  r.config = JsonOr(q.Text(2), nlohmann::json::object());
  r.kforge_version = q.Text(3);
  r.task_suite_hash = q.Text(4);
  r.hardware = JsonOr(q.Text(5), nlohmann::json::object());
  r.origin = q.Text(6);
  r.started_at = q.Double(7);
  r.finished_at = q.Double(8);
  r.state = q.Text(9);
  return r;
}

inline constexpr const char* kSessionCols =
    "id, run_id, model, task, strategy, sample, world, dtype, category, state, stop_reason, "
    "turns_done, "
    "best_evaluation_id";
inline SessionRecord ReadSession(const Stmt& q) {
  SessionRecord s;
  s.id = q.Int(0);
  s.run_id = q.Int(1);
  s.key.model = q.Text(2);
  s.key.task = q.Text(3);
  s.key.strategy = q.Text(4);
  s.key.sample = static_cast<int>(q.Int(5));
  s.key.world = static_cast<int>(q.Int(6));
  s.key.dtype = q.Text(7);
  s.key.category = q.Text(8);
  s.state = q.Text(9);
  s.stop_reason = q.Text(10);
  s.turns_done = static_cast<int>(q.Int(11));
  s.best_evaluation_id = q.OptInt(12);
  return s;
}

// Stores older than version 5 (read as they are) have no expert column.
inline std::string EvalSelect(int schema_version) {
  return std::string(
             "SELECT e.id, e.session_id, e.turn_id, e.status, e.speedup, e.busbw_gbps, "
             "e.emulated, e.seconds, e.world, e.message, e.doc_sha, e.created_at, t.kernel_sha, ") +
         (schema_version >= 5 ? "e.expert_speedup" : "NULL") +
         " FROM evaluations e LEFT JOIN turns t ON t.id=e.turn_id ";
}
inline EvaluationRecord ReadEvaluation(const Stmt& q) {
  EvaluationRecord e;
  e.id = q.Int(0);
  e.session_id = q.Int(1);
  e.turn_id = q.Int(2);
  // Every stored status went through ReadEvalSummary; one that is no
  // verdict (a hand-edited store) is kforge's, never the kernel's.
  e.verdict = ParseVerdict(q.Text(3)).value_or(Verdict::kHarnessError);
  e.speedup = q.OptDouble(4);
  e.busbw_gbps = q.OptDouble(5);
  e.emulated = q.Int(6) != 0;
  e.seconds = q.Double(7);
  e.world = static_cast<int>(q.Int(8));
  e.message = q.Text(9);
  e.doc_sha = q.Text(10);
  e.created_at = q.Double(11);
  e.kernel_sha = q.Text(12);
  e.expert_speedup = q.OptDouble(13);
  return e;
}

template <typename T, typename F>
Result<std::vector<T>> Collect(Stmt& q, F read) {
  std::vector<T> out;
  while (true) {
    KF_ASSIGN_OR_RETURN(bool row, q.Step());
    if (!row) break;
    out.push_back(read(q));
  }
  return out;
}

}  // namespace kforge::results::internal::rows
