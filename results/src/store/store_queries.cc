// RunStore's reads: runs, sessions, turns, evaluations, usage, events and the
// integrity check (the writes are in store.cc).
#include <nlohmann/json.hpp>

#include "kforge/core/json.h"
#include "kforge/results/store.h"
#include "schema.h"
#include "sqlite_db.h"
#include "store_rows.h"

namespace kforge::results {

using internal::Stmt;
using namespace internal::rows;

Result<std::vector<RunInfo>> RunStore::ListRuns() const {
  MutexLock lock(&mu_);
  KF_ASSIGN_OR_RETURN(Stmt q,
                      db_->Prepare(std::string("SELECT ") + kRunCols + " FROM runs ORDER BY id"));
  return Collect<RunInfo>(q, ReadRun);
}

Result<RunInfo> RunStore::GetRun(int64_t run_id) const {
  MutexLock lock(&mu_);
  KF_ASSIGN_OR_RETURN(Stmt q,
                      db_->Prepare(std::string("SELECT ") + kRunCols + " FROM runs WHERE id=?"));
  q.Bind(1, run_id);
  KF_ASSIGN_OR_RETURN(bool row, q.Step());
  if (!row) return Error(ErrorKind::kNotFound, "no run with id " + std::to_string(run_id));
  return ReadRun(q);
}

Result<std::vector<SessionRecord>> RunStore::ListSessions(int64_t run_id) const {
  MutexLock lock(&mu_);
  KF_ASSIGN_OR_RETURN(Stmt q, db_->Prepare(std::string("SELECT ") + kSessionCols +
                                           " FROM sessions WHERE run_id=? ORDER BY id"));
  q.Bind(1, run_id);
  return Collect<SessionRecord>(q, ReadSession);
}

Result<SessionRecord> RunStore::GetSession(int64_t session_id) const {
  MutexLock lock(&mu_);
  KF_ASSIGN_OR_RETURN(
      Stmt q, db_->Prepare(std::string("SELECT ") + kSessionCols + " FROM sessions WHERE id=?"));
  q.Bind(1, session_id);
  KF_ASSIGN_OR_RETURN(bool row, q.Step());
  if (!row) return Error(ErrorKind::kNotFound, "no session with id " + std::to_string(session_id));
  return ReadSession(q);
}

Result<std::vector<TurnRecord>> RunStore::ListTurns(int64_t session_id) const {
  std::vector<TurnRecord> turns;
  std::vector<std::array<std::string, 3>> shas;  // prompt, reply, feedback
  {
    MutexLock lock(&mu_);
    KF_ASSIGN_OR_RETURN(Stmt q,
                        db_->Prepare("SELECT id, session_id, idx, prompt_sha, reply_sha, "
                                     "feedback_sha, kernel_sha, input_tokens, "
                                     "cached_input_tokens, output_tokens, reasoning_tokens, "
                                     "cost_usd, latency_s, request_id, finish_reason, "
                                     "created_at FROM turns WHERE session_id=? ORDER BY idx"));
    q.Bind(1, session_id);
    while (true) {
      KF_ASSIGN_OR_RETURN(bool row, q.Step());
      if (!row) break;
      TurnRecord t;
      t.id = q.Int(0);
      t.session_id = q.Int(1);
      t.index = static_cast<int>(q.Int(2));
      shas.push_back({q.Text(3), q.Text(4), q.Text(5)});
      t.kernel_sha = q.Text(6);
      t.usage.input_tokens = q.Int(7);
      t.usage.cached_input_tokens = q.Int(8);
      t.usage.output_tokens = q.Int(9);
      t.usage.reasoning_tokens = q.Int(10);
      t.usage.cost_usd = q.Double(11);
      t.latency_s = q.Double(12);
      t.request_id = q.Text(13);
      t.finish_reason = q.Text(14);
      t.created_at = q.Double(15);
      turns.push_back(std::move(t));
    }
  }
  for (size_t i = 0; i < turns.size(); ++i) {
    KF_ASSIGN_OR_RETURN(turns[i].prompt, ReadBlob(dir_, shas[i][0]));
    KF_ASSIGN_OR_RETURN(turns[i].reply, ReadBlob(dir_, shas[i][1]));
    KF_ASSIGN_OR_RETURN(turns[i].feedback, ReadBlob(dir_, shas[i][2]));
    KF_ASSIGN_OR_RETURN(turns[i].kernel, ReadBlob(dir_, turns[i].kernel_sha));
  }
  return turns;
}

Result<std::vector<EvaluationRecord>> RunStore::ListEvaluations(int64_t session_id) const {
  MutexLock lock(&mu_);
  KF_ASSIGN_OR_RETURN(
      Stmt q, db_->Prepare(EvalSelect(schema_version_) + "WHERE e.session_id=? ORDER BY e.id"));
  q.Bind(1, session_id);
  return Collect<EvaluationRecord>(q, ReadEvaluation);
}

Result<std::vector<EvaluationRecord>> RunStore::ListRunEvaluations(int64_t run_id) const {
  MutexLock lock(&mu_);
  KF_ASSIGN_OR_RETURN(
      Stmt q, db_->Prepare(EvalSelect(schema_version_) +
                           "JOIN sessions s ON s.id=e.session_id WHERE s.run_id=? ORDER BY e.id"));
  q.Bind(1, run_id);
  return Collect<EvaluationRecord>(q, ReadEvaluation);
}

Result<std::vector<SessionUsage>> RunStore::ListSessionUsage(int64_t run_id) const {
  MutexLock lock(&mu_);
  KF_ASSIGN_OR_RETURN(Stmt q,
                      db_->Prepare("SELECT t.session_id, count(*), sum(t.input_tokens), "
                                   "sum(t.output_tokens), sum(t.cost_usd), "
                                   "sum(t.latency_s), sum(t.kernel_sha = '') "
                                   "FROM turns t JOIN sessions s ON "
                                   "s.id=t.session_id WHERE s.run_id=? GROUP BY t.session_id"));
  q.Bind(1, run_id);
  return Collect<SessionUsage>(q, [](const Stmt& r) {
    return SessionUsage{r.Int(0),    static_cast<int>(r.Int(1)), r.Int(2), r.Int(3), r.Double(4),
                        r.Double(5), static_cast<int>(r.Int(6))};
  });
}

Result<nlohmann::json> RunStore::GetEvaluationDoc(const EvaluationRecord& evaluation) const {
  KF_ASSIGN_OR_RETURN(std::string text, ReadBlob(dir_, evaluation.doc_sha));
  return ParseJson(text, "evaluation document " + evaluation.doc_sha);
}

Result<std::vector<EventRecord>> RunStore::ListEvents(int64_t run_id, int64_t after_id) const {
  MutexLock lock(&mu_);
  KF_ASSIGN_OR_RETURN(Stmt q,
                      db_->Prepare("SELECT id, run_id, kind, detail, created_at FROM events "
                                   "WHERE run_id=? AND id>? ORDER BY id"));
  q.Bind(1, run_id).Bind(2, after_id);
  return Collect<EventRecord>(q, [](const Stmt& r) {
    return EventRecord{r.Int(0), r.Int(1), r.Text(2), JsonOr(r.Text(3), nlohmann::json::object()),
                       r.Double(4)};
  });
}

Status RunStore::CheckIntegrity() const {
  MutexLock lock(&mu_);
  KF_ASSIGN_OR_RETURN(Stmt q, db_->Prepare("PRAGMA integrity_check"));
  KF_ASSIGN_OR_RETURN(bool row, q.Step());
  const std::string verdict = row ? q.Text(0) : "no answer";
  if (verdict != "ok")
    return Error(ErrorKind::kIo, StorePath(dir_).string() + ": integrity_check: " + verdict);
  return Status::Ok();
}

}  // namespace kforge::results
