#include "schema.h"

#include <nlohmann/json.hpp>
#include <string>

#include "kforge/core/eval_doc.h"
#include "kforge/core/json.h"

namespace kforge::results::internal {
namespace {

// Version 1: the first released layout. Kept verbatim: changing it would
// change what old stores are assumed to contain.
constexpr const char* kV1 = R"sql(
CREATE TABLE runs (
  id INTEGER PRIMARY KEY,
  name TEXT NOT NULL UNIQUE,
  config TEXT NOT NULL DEFAULT '{}',
  kforge_version TEXT NOT NULL DEFAULT '',
  task_suite_hash TEXT NOT NULL DEFAULT '',
  hardware TEXT NOT NULL DEFAULT '{}',
  started_at REAL NOT NULL DEFAULT 0,
  finished_at REAL NOT NULL DEFAULT 0,
  state TEXT NOT NULL DEFAULT 'running'
);
CREATE TABLE sessions (
  id INTEGER PRIMARY KEY,
  run_id INTEGER NOT NULL REFERENCES runs(id),
  model TEXT NOT NULL, task TEXT NOT NULL, strategy TEXT NOT NULL,
  sample INTEGER NOT NULL, world INTEGER NOT NULL, dtype TEXT NOT NULL,
  state TEXT NOT NULL DEFAULT 'pending',
  stop_reason TEXT NOT NULL DEFAULT '',
  turns_done INTEGER NOT NULL DEFAULT 0,
  best_evaluation_id INTEGER,
  UNIQUE (run_id, model, task, strategy, sample, world, dtype)
);
CREATE TABLE turns (
  id INTEGER PRIMARY KEY,
  session_id INTEGER NOT NULL REFERENCES sessions(id),
  idx INTEGER NOT NULL,
  prompt_sha TEXT NOT NULL, reply_sha TEXT NOT NULL, feedback_sha TEXT NOT NULL DEFAULT '',
  kernel_sha TEXT NOT NULL DEFAULT '',
  input_tokens INTEGER NOT NULL DEFAULT 0, cached_input_tokens INTEGER NOT NULL DEFAULT 0,
  output_tokens INTEGER NOT NULL DEFAULT 0, reasoning_tokens INTEGER NOT NULL DEFAULT 0,
  cost_usd REAL NOT NULL DEFAULT 0, latency_s REAL NOT NULL DEFAULT 0,
  request_id TEXT NOT NULL DEFAULT '', finish_reason TEXT NOT NULL DEFAULT '',
  created_at REAL NOT NULL DEFAULT 0,
  UNIQUE (session_id, idx)
);
CREATE TABLE evaluations (
  id INTEGER PRIMARY KEY,
  session_id INTEGER NOT NULL REFERENCES sessions(id),
  turn_id INTEGER NOT NULL DEFAULT 0,
  status TEXT NOT NULL,
  speedup REAL,
  emulated INTEGER NOT NULL DEFAULT 0,
  seconds REAL NOT NULL DEFAULT 0,
  doc_sha TEXT NOT NULL,
  created_at REAL NOT NULL DEFAULT 0
);
CREATE TABLE kernels (
  sha TEXT PRIMARY KEY,
  bytes INTEGER NOT NULL,
  created_at REAL NOT NULL DEFAULT 0
);
CREATE TABLE events (
  id INTEGER PRIMARY KEY,
  run_id INTEGER NOT NULL REFERENCES runs(id),
  kind TEXT NOT NULL,
  detail TEXT NOT NULL DEFAULT '{}',
  created_at REAL NOT NULL DEFAULT 0
);
)sql";

// Version 2: task category on sessions (per-category metrics), busbw, world
// and message on evaluations (leaderboards without reading every document),
// the origin host on runs (merged stores), and indexes for per-run queries.
constexpr const char* kV2 = R"sql(
ALTER TABLE sessions ADD COLUMN category TEXT NOT NULL DEFAULT '';
ALTER TABLE evaluations ADD COLUMN busbw_gbps REAL;
ALTER TABLE evaluations ADD COLUMN world INTEGER NOT NULL DEFAULT 0;
ALTER TABLE evaluations ADD COLUMN message TEXT NOT NULL DEFAULT '';
ALTER TABLE runs ADD COLUMN origin TEXT NOT NULL DEFAULT '';
CREATE INDEX evaluations_by_session ON evaluations(session_id);
CREATE INDEX turns_by_session ON turns(session_id, idx);
CREATE INDEX sessions_by_run ON sessions(run_id);
CREATE INDEX events_by_run ON events(run_id, id);
)sql";

// Version 3: views for people who query a store with sqlite3 (recipes in
// docs/results.md). They follow the same rules as results/src/samples.cc: a
// session is "solved" when an evaluation passed, "unsolved" when something
// judged its work (a GPU verdict, a compile or policy error, a reply with no
// kernel), and "not_evaluated" when nothing did (never reached, evaluator
// failure, or compiled where no GPU was); unfinished sessions with no
// evaluation are "pending". The statuses are the verdicts' names (core
// eval_doc.h): a GPU verdict is CameFromAGpu's, a judgement JudgesTheKernel's.
// Version 4 counts integrity_violation among the GPU verdicts (version 3 left
// a kernel rejected for breaking the sandbox out of every denominator).
constexpr const char* kSessionOutcomes = R"sql(
CREATE VIEW session_outcomes AS
SELECT
  s.id AS session_id, r.name AS run, s.model, s.task, s.category, s.strategy, s.sample,
  s.world, s.dtype, s.state, s.stop_reason,
  (SELECT COUNT(*) FROM turns t WHERE t.session_id = s.id) AS turns,
  (SELECT COALESCE(SUM(t.input_tokens + t.output_tokens), 0) FROM turns t
    WHERE t.session_id = s.id) AS tokens,
  (SELECT COALESCE(SUM(t.cost_usd), 0) FROM turns t WHERE t.session_id = s.id) AS cost_usd,
  CASE
    WHEN EXISTS (SELECT 1 FROM evaluations e WHERE e.session_id = s.id AND e.status = 'passed')
      THEN 'solved'
    WHEN EXISTS (SELECT 1 FROM evaluations e WHERE e.session_id = s.id
                 AND e.status IN ('mismatch', 'runtime_error', 'timeout', 'integrity_violation'))
      THEN 'unsolved'
    WHEN s.state NOT IN ('done', 'stopped')
         AND NOT EXISTS (SELECT 1 FROM evaluations e WHERE e.session_id = s.id)
      THEN 'pending'
    WHEN EXISTS (SELECT 1 FROM events v WHERE v.run_id = s.run_id AND v.kind = 'compiled'
                 AND json_extract(v.detail, '$.session') = s.id)
      THEN 'not_evaluated'
    WHEN EXISTS (SELECT 1 FROM evaluations e WHERE e.session_id = s.id
                 AND e.status IN ('compile_error', 'policy_violation'))
         OR EXISTS (SELECT 1 FROM turns t WHERE t.session_id = s.id AND t.kernel_sha = '')
      THEN 'unsolved'
    ELSE 'not_evaluated'
  END AS outcome
FROM sessions s JOIN runs r ON r.id = s.run_id;
)sql";

constexpr const char* kV3 = R"sql(
CREATE VIEW best_evaluations AS
SELECT
  s.id AS session_id, e.id AS evaluation_id, e.turn_id, e.status, e.speedup, e.busbw_gbps,
  e.emulated, e.world, e.seconds, e.message, e.doc_sha
FROM sessions s JOIN evaluations e ON e.id = COALESCE(s.best_evaluation_id, (
  SELECT e2.id FROM evaluations e2 WHERE e2.session_id = s.id
  ORDER BY e2.status = 'passed' DESC,
           CASE WHEN e2.status = 'passed' THEN COALESCE(e2.speedup, 0) ELSE 0 END DESC,
           CASE WHEN e2.status = 'passed' THEN e2.id ELSE -e2.id END
  LIMIT 1));

CREATE VIEW task_costs AS
SELECT
  run, model, strategy, task, world, dtype,
  COUNT(*) AS sessions,
  SUM(outcome = 'solved') AS solved,
  SUM(outcome = 'not_evaluated') AS not_evaluated,
  SUM(cost_usd) AS cost_usd,
  CASE WHEN SUM(outcome = 'solved') > 0 THEN SUM(cost_usd) / SUM(outcome = 'solved') END
    AS usd_per_solved
FROM session_outcomes
GROUP BY run, model, strategy, task, world, dtype;
)sql";

// Version 5: each evaluation's speed over its task's expert kernel (null where
// none was timed: every evaluation stored before version 5).
constexpr const char* kV5 = R"sql(
ALTER TABLE evaluations ADD COLUMN expert_speedup REAL;
DROP VIEW best_evaluations;
CREATE VIEW best_evaluations AS
SELECT
  s.id AS session_id, e.id AS evaluation_id, e.turn_id, e.status, e.speedup, e.expert_speedup,
  e.busbw_gbps, e.emulated, e.world, e.seconds, e.message, e.doc_sha
FROM sessions s JOIN evaluations e ON e.id = COALESCE(s.best_evaluation_id, (
  SELECT e2.id FROM evaluations e2 WHERE e2.session_id = s.id
  ORDER BY e2.status = 'passed' DESC,
           CASE WHEN e2.status = 'passed' THEN COALESCE(e2.speedup, 0) ELSE 0 END DESC,
           CASE WHEN e2.status = 'passed' THEN e2.id ELSE -e2.id END
  LIMIT 1));
)sql";

// Fills v2's new evaluation columns from the stored documents.
Status BackfillV2(Db& db, const BlobReader& blobs) {
  std::vector<std::pair<int64_t, std::string>> rows;
  {
    KF_ASSIGN_OR_RETURN(Stmt q, db.Prepare("SELECT id, doc_sha FROM evaluations"));
    while (true) {
      KF_ASSIGN_OR_RETURN(bool row, q.Step());
      if (!row) break;
      rows.emplace_back(q.Int(0), q.Text(1));
    }
  }
  for (const auto& [id, sha] : rows) {
    auto text = blobs(sha);
    if (!text.ok()) continue;  // a missing document leaves the defaults; the row itself is kept
    auto doc = ParseEvalSummary(*text);
    if (!doc.ok()) continue;
    KF_ASSIGN_OR_RETURN(
        Stmt u, db.Prepare("UPDATE evaluations SET busbw_gbps=?, world=?, message=? WHERE id=?"));
    KF_RETURN_IF_ERROR(
        u.Bind(1, doc->busbw_gbps).Bind(2, doc->world).Bind(3, doc->message).Bind(4, id).Run());
  }
  return Status::Ok();
}

}  // namespace

Result<int> SchemaVersion(Db& db) {
  KF_ASSIGN_OR_RETURN(Stmt q, db.Prepare("PRAGMA user_version"));
  KF_ASSIGN_OR_RETURN(bool row, q.Step());
  return row ? static_cast<int>(q.Int(0)) : 0;
}

Status MigrateTo(Db& db, int target, const BlobReader& blobs) {
  KF_ASSIGN_OR_RETURN(int version, SchemaVersion(db));
  while (version < target) {
    const int next = version + 1;
    Transaction tx(db);
    KF_RETURN_IF_ERROR(tx.Begin());
    // Re-read inside the write lock: another process may have migrated already.
    KF_ASSIGN_OR_RETURN(version, SchemaVersion(db));
    if (version >= next) continue;
    switch (next) {
      case 1:
        KF_RETURN_IF_ERROR(db.Exec(kV1));
        break;
      case 2:
        KF_RETURN_IF_ERROR(db.Exec(kV2));
        KF_RETURN_IF_ERROR(BackfillV2(db, blobs));
        break;
      case 3:
        KF_RETURN_IF_ERROR(db.Exec(std::string(kSessionOutcomes) + kV3));
        break;
      case 4:
        KF_RETURN_IF_ERROR(
            db.Exec(std::string("DROP VIEW session_outcomes;\n") + kSessionOutcomes));
        break;
      case 5:
        KF_RETURN_IF_ERROR(db.Exec(kV5));
        break;
      default:
        return Error(ErrorKind::kInternal,
                     "no migration to schema version " + std::to_string(next));
    }
    KF_RETURN_IF_ERROR(db.Exec("PRAGMA user_version = " + std::to_string(next)));
    KF_RETURN_IF_ERROR(tx.Commit());
    version = next;
  }
  return Status::Ok();
}

}  // namespace kforge::results::internal
