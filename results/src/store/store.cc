#include "kforge/results/store.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <system_error>

#include "kforge/core/clock.h"
#include "kforge/core/eval_doc.h"
#include "kforge/core/fs.h"
#include "kforge/core/hash.h"
#include "kforge/core/json.h"
#include "schema.h"
#include "sqlite_db.h"
#include "store_rows.h"

namespace kforge::results {

using internal::Db;
using internal::Stmt;
using internal::Transaction;
using namespace internal::rows;

namespace {

namespace fs = std::filesystem;

double Now() { return RealClock().UnixSeconds(); }

Status RequireOneChange(Db& db, const std::string& what) {
  if (db.Changes() == 0) return Error(ErrorKind::kNotFound, what);
  return Status::Ok();
}

}  // namespace

fs::path StorePath(const fs::path& run_dir) { return run_dir / "store.sqlite"; }

RunStore::RunStore(fs::path dir, bool read_only, std::unique_ptr<Db> db)
    : dir_(std::move(dir)), read_only_(read_only), db_(std::move(db)) {}
RunStore::~RunStore() = default;

Result<std::unique_ptr<RunStore>> RunStore::Open(const fs::path& run_dir, bool read_only) {
  std::error_code ec;
  if (read_only && !fs::exists(StorePath(run_dir), ec)) {
    return Error(ErrorKind::kNotFound, "no run store at " + StorePath(run_dir).string());
  }
  if (!read_only) {
    KF_RETURN_IF_ERROR(MakeDirs(run_dir / "blobs"));
  }
  KF_ASSIGN_OR_RETURN(auto db, Db::Open(StorePath(run_dir), read_only));
  std::unique_ptr<RunStore> store(new RunStore(run_dir, read_only, std::move(db)));
  // No other thread sees the store yet: the lock costs nothing and lets the
  // analysis check the database's use below.
  MutexLock lock(&store->mu_);
  if (!read_only) {
    // WAL: readers see the last committed state without blocking the writer.
    // synchronous=NORMAL keeps every commit across a process kill (only an
    // OS crash may drop the last ones).
    KF_RETURN_IF_ERROR(store->db_->Exec("PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;"));
    KF_RETURN_IF_ERROR(store->Migrate());
  }
  KF_ASSIGN_OR_RETURN(store->schema_version_, internal::SchemaVersion(*store->db_));
  if (store->schema_version_ > kSchemaVersion) {
    return Error(ErrorKind::kInvalidInput,
                 StorePath(run_dir).string() + " has schema version " +
                     std::to_string(store->schema_version_) + "; this kforge knows up to " +
                     std::to_string(kSchemaVersion) + " (upgrade kforge)");
  }
  if (read_only && store->schema_version_ == 0) {
    return Error(ErrorKind::kInvalidInput,
                 StorePath(run_dir).string() +
                     " holds no kforge run store (an empty or foreign SQLite file, or a run "
                     "whose creation was cut short)");
  }
  if (read_only && store->schema_version_ < kMinReadableSchemaVersion) {
    return Error(ErrorKind::kInvalidInput,
                 StorePath(run_dir).string() + " has the old schema version " +
                     std::to_string(store->schema_version_) + "; `kforge run --resume " +
                     run_dir.filename().string() +
                     "` (or any command that writes to it) migrates it");
  }
  return store;
}

Result<std::unique_ptr<RunStore>> RunStore::Create(const fs::path& run_dir) {
  KF_RETURN_IF_ERROR(MakeDirs(run_dir / "blobs"));
  const fs::path db = StorePath(run_dir);
  // SQLite's own default mode for a new database (SQLITE_DEFAULT_FILE_PERMISSIONS).
  const int fd = ::open(db.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) {
    if (errno == EEXIST) {
      return Error(ErrorKind::kInvalidInput, db.string() + " already holds a run store");
    }
    return Error(ErrorKind::kIo, db.string() + ": " + std::strerror(errno));
  }
  ::close(fd);
  // SQLite takes the empty file as a new database.
  return Open(run_dir, false);
}

Status RunStore::Migrate() {
  KF_ASSIGN_OR_RETURN(int version, internal::SchemaVersion(*db_));
  if (version > kSchemaVersion) return Status::Ok();  // reported by Open
  const fs::path dir = dir_;
  return internal::MigrateTo(*db_, kSchemaVersion,
                             [dir](const std::string& sha) { return ReadBlob(dir, sha); });
}

Result<RunInfo> RunStore::CreateOrGetRun(const std::string& name, const nlohmann::json& config,
                                         const std::string& kforge_version,
                                         const std::string& task_suite_hash,
                                         const nlohmann::json& hardware) {
  if (name.empty()) return Error(ErrorKind::kInvalidInput, "run name is empty");
  MutexLock lock(&mu_);
  Transaction tx(*db_);
  KF_RETURN_IF_ERROR(tx.Begin());
  KF_ASSIGN_OR_RETURN(Stmt ins,
                      db_->Prepare("INSERT OR IGNORE INTO runs (name, config, kforge_version, "
                                   "task_suite_hash, hardware, started_at, state) "
                                   "VALUES (?,?,?,?,?,?,'running')"));
  KF_RETURN_IF_ERROR(ins.Bind(1, name)
                         .Bind(2, config.dump())
                         .Bind(3, kforge_version)
                         .Bind(4, task_suite_hash)
                         .Bind(5, hardware.dump())
                         .Bind(6, Now())
                         .Run());
  KF_ASSIGN_OR_RETURN(Stmt up,
                      db_->Prepare("UPDATE runs SET state='running', finished_at=0 WHERE name=?"));
  KF_RETURN_IF_ERROR(up.Bind(1, name).Run());
  KF_ASSIGN_OR_RETURN(Stmt q,
                      db_->Prepare(std::string("SELECT ") + kRunCols + " FROM runs WHERE name=?"));
  q.Bind(1, name);
  KF_ASSIGN_OR_RETURN(bool row, q.Step());
  if (!row) return Error(ErrorKind::kInternal, "run " + name + " vanished");
  RunInfo info = ReadRun(q);
  KF_RETURN_IF_ERROR(tx.Commit());
  return info;
}

Status RunStore::FinishRun(int64_t run_id, const std::string& state) {
  MutexLock lock(&mu_);
  KF_ASSIGN_OR_RETURN(Stmt q, db_->Prepare("UPDATE runs SET state=?, finished_at=? WHERE id=?"));
  KF_RETURN_IF_ERROR(q.Bind(1, state).Bind(2, Now()).Bind(3, run_id).Run());
  return RequireOneChange(*db_, "no run with id " + std::to_string(run_id));
}

Status RunStore::SetRunConfig(int64_t run_id, const nlohmann::json& config) {
  MutexLock lock(&mu_);
  KF_ASSIGN_OR_RETURN(Stmt q, db_->Prepare("UPDATE runs SET config=? WHERE id=?"));
  KF_RETURN_IF_ERROR(q.Bind(1, config.dump()).Bind(2, run_id).Run());
  return RequireOneChange(*db_, "no run with id " + std::to_string(run_id));
}

Status RunStore::SetRunOrigin(int64_t run_id, const std::string& origin) {
  MutexLock lock(&mu_);
  KF_ASSIGN_OR_RETURN(Stmt q, db_->Prepare("UPDATE runs SET origin=? WHERE id=?"));
  KF_RETURN_IF_ERROR(q.Bind(1, origin).Bind(2, run_id).Run());
  return RequireOneChange(*db_, "no run with id " + std::to_string(run_id));
}

Result<int64_t> RunStore::UpsertSession(int64_t run_id, const SessionKey& key) {
  MutexLock lock(&mu_);
  Transaction tx(*db_);
  KF_RETURN_IF_ERROR(tx.Begin());
  KF_ASSIGN_OR_RETURN(Stmt ins,
                      db_->Prepare("INSERT OR IGNORE INTO sessions (run_id, model, task, strategy, "
                                   "sample, world, dtype, category) VALUES (?,?,?,?,?,?,?,?)"));
  KF_RETURN_IF_ERROR(ins.Bind(1, run_id)
                         .Bind(2, key.model)
                         .Bind(3, key.task)
                         .Bind(4, key.strategy)
                         .Bind(5, key.sample)
                         .Bind(6, key.world)
                         .Bind(7, key.dtype)
                         .Bind(8, key.category)
                         .Run());
  KF_ASSIGN_OR_RETURN(
      Stmt q, db_->Prepare("SELECT id FROM sessions WHERE run_id=? AND model=? AND task=? AND "
                           "strategy=? AND sample=? AND world=? AND dtype=?"));
  q.Bind(1, run_id)
      .Bind(2, key.model)
      .Bind(3, key.task)
      .Bind(4, key.strategy)
      .Bind(5, key.sample)
      .Bind(6, key.world)
      .Bind(7, key.dtype);
  KF_ASSIGN_OR_RETURN(bool row, q.Step());
  if (!row) return Error(ErrorKind::kInternal, "session insert failed");
  const int64_t id = q.Int(0);
  KF_RETURN_IF_ERROR(tx.Commit());
  return id;
}

Status RunStore::SetSessionState(int64_t session_id, const std::string& state,
                                 const std::string& stop_reason) {
  MutexLock lock(&mu_);
  KF_ASSIGN_OR_RETURN(Stmt q,
                      db_->Prepare("UPDATE sessions SET state=?, stop_reason=? WHERE id=?"));
  KF_RETURN_IF_ERROR(q.Bind(1, state).Bind(2, stop_reason).Bind(3, session_id).Run());
  return RequireOneChange(*db_, "no session with id " + std::to_string(session_id));
}

Result<std::string> RunStore::PutBlob(std::string_view text) {
  MutexLock lock(&mu_);
  return PutBlobLocked(text);
}

Result<std::string> RunStore::PutBlobLocked(std::string_view text) {
  if (read_only_)
    return Error(ErrorKind::kInvalidInput, "store opened read-only: " + dir_.string());
  std::string sha = Sha256Hex(text);
  const fs::path path = BlobPath(dir_, sha);
  std::error_code ec;
  if (fs::exists(path, ec) && fs::file_size(path, ec) == text.size()) return sha;
  KF_RETURN_IF_ERROR(WriteFileAtomic(path, text));
  return sha;
}

Result<std::string> RunStore::GetBlob(const std::string& sha) const { return ReadBlob(dir_, sha); }

Result<int64_t> RunStore::AppendTurn(const TurnRecord& t) {
  MutexLock lock(&mu_);
  // Blobs first: a row is committed only once every blob it names is on disk.
  KF_ASSIGN_OR_RETURN(std::string prompt_sha, PutBlobLocked(t.prompt));
  KF_ASSIGN_OR_RETURN(std::string reply_sha, PutBlobLocked(t.reply));
  std::string feedback_sha, kernel_sha;
  if (!t.feedback.empty()) {
    KF_ASSIGN_OR_RETURN(feedback_sha, PutBlobLocked(t.feedback));
  }
  if (!t.kernel.empty()) {
    KF_ASSIGN_OR_RETURN(kernel_sha, PutBlobLocked(t.kernel));
  }
  Transaction tx(*db_);
  KF_RETURN_IF_ERROR(tx.Begin());
  KF_ASSIGN_OR_RETURN(Stmt exists,
                      db_->Prepare("SELECT 1 FROM turns WHERE session_id=? AND idx=?"));
  exists.Bind(1, t.session_id).Bind(2, t.index);
  KF_ASSIGN_OR_RETURN(bool dup, exists.Step());
  if (dup) {
    return Error(ErrorKind::kInvalidInput, "session " + std::to_string(t.session_id) +
                                               " already has turn " + std::to_string(t.index));
  }
  KF_ASSIGN_OR_RETURN(Stmt ins,
                      db_->Prepare("INSERT INTO turns (session_id, idx, prompt_sha, reply_sha, "
                                   "feedback_sha, kernel_sha, input_tokens, "
                                   "cached_input_tokens, output_tokens, reasoning_tokens, "
                                   "cost_usd, latency_s, request_id, finish_reason, "
                                   "created_at) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)"));
  KF_RETURN_IF_ERROR(ins.Bind(1, t.session_id)
                         .Bind(2, t.index)
                         .Bind(3, prompt_sha)
                         .Bind(4, reply_sha)
                         .Bind(5, feedback_sha)
                         .Bind(6, kernel_sha)
                         .Bind(7, t.usage.input_tokens)
                         .Bind(8, t.usage.cached_input_tokens)
                         .Bind(9, t.usage.output_tokens)
                         .Bind(10, t.usage.reasoning_tokens)
                         .Bind(11, t.usage.cost_usd)
                         .Bind(12, t.latency_s)
                         .Bind(13, t.request_id)
                         .Bind(14, t.finish_reason)
                         .Bind(15, t.created_at > 0 ? t.created_at : Now())
                         .Run());
  const int64_t id = db_->LastInsertId();
  if (!kernel_sha.empty()) {
    KF_ASSIGN_OR_RETURN(
        Stmt k,
        db_->Prepare("INSERT OR IGNORE INTO kernels (sha, bytes, created_at) VALUES (?,?,?)"));
    KF_RETURN_IF_ERROR(
        k.Bind(1, kernel_sha).Bind(2, static_cast<int64_t>(t.kernel.size())).Bind(3, Now()).Run());
  }
  KF_ASSIGN_OR_RETURN(Stmt s,
                      db_->Prepare("UPDATE sessions SET turns_done=turns_done+1 WHERE id=?"));
  KF_RETURN_IF_ERROR(s.Bind(1, t.session_id).Run());
  KF_RETURN_IF_ERROR(RequireOneChange(*db_, "no session with id " + std::to_string(t.session_id)));
  KF_RETURN_IF_ERROR(tx.Commit());
  return id;
}

Status RunStore::SetTurnFeedback(int64_t turn_id, std::string_view feedback) {
  MutexLock lock(&mu_);
  KF_ASSIGN_OR_RETURN(std::string sha, PutBlobLocked(feedback));
  KF_ASSIGN_OR_RETURN(Stmt q, db_->Prepare("UPDATE turns SET feedback_sha=? WHERE id=?"));
  KF_RETURN_IF_ERROR(q.Bind(1, sha).Bind(2, turn_id).Run());
  return RequireOneChange(*db_, "no turn with id " + std::to_string(turn_id));
}

Result<int64_t> RunStore::RecordEvaluation(int64_t session_id, int64_t turn_id,
                                           const nlohmann::json& eval_doc) {
  KF_ASSIGN_OR_RETURN(EvalSummary c, ReadEvalSummary(eval_doc));
  MutexLock lock(&mu_);
  KF_ASSIGN_OR_RETURN(std::string doc_sha, PutBlobLocked(eval_doc.dump(2)));
  KF_ASSIGN_OR_RETURN(Stmt q,
                      db_->Prepare("INSERT INTO evaluations (session_id, turn_id, status, speedup, "
                                   "busbw_gbps, emulated, seconds, world, "
                                   "message, doc_sha, created_at, expert_speedup) "
                                   "SELECT ?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11,?12 "
                                   "WHERE EXISTS (SELECT 1 FROM sessions WHERE id=?1)"));
  KF_RETURN_IF_ERROR(q.Bind(1, session_id)
                         .Bind(2, turn_id)
                         .Bind(3, std::string(VerdictName(c.verdict)))
                         .Bind(4, c.speedup)
                         .Bind(5, c.busbw_gbps)
                         .Bind(6, c.emulated ? 1 : 0)
                         .Bind(7, c.seconds)
                         .Bind(8, c.world)
                         .Bind(9, c.message)
                         .Bind(10, doc_sha)
                         .Bind(11, Now())
                         .Bind(12, c.expert_speedup)
                         .Run());
  KF_RETURN_IF_ERROR(RequireOneChange(*db_, "no session with id " + std::to_string(session_id)));
  return db_->LastInsertId();
}

Status RunStore::SetBestEvaluation(int64_t session_id, int64_t evaluation_id) {
  MutexLock lock(&mu_);
  KF_ASSIGN_OR_RETURN(
      Stmt q, db_->Prepare("UPDATE sessions SET best_evaluation_id=?2 WHERE id=?1 AND EXISTS "
                           "(SELECT 1 FROM evaluations WHERE id=?2 AND session_id=?1)"));
  KF_RETURN_IF_ERROR(q.Bind(1, session_id).Bind(2, evaluation_id).Run());
  return RequireOneChange(*db_, "evaluation " + std::to_string(evaluation_id) +
                                    " does not belong to session " + std::to_string(session_id));
}

Status RunStore::AppendEvent(int64_t run_id, const std::string& kind,
                             const nlohmann::json& detail) {
  MutexLock lock(&mu_);
  KF_ASSIGN_OR_RETURN(
      Stmt q,
      db_->Prepare("INSERT INTO events (run_id, kind, detail, created_at) VALUES (?,?,?,?)"));
  return q.Bind(1, run_id).Bind(2, kind).Bind(3, detail.dump()).Bind(4, Now()).Run();
}

}  // namespace kforge::results
