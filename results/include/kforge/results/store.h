// RunStore: the durable record of one run directory.
//
// A run directory holds `store.sqlite` (SQLite in WAL mode) and `blobs/`
// (content-addressed texts: prompts, replies, feedback, kernel sources and
// evaluation documents, each stored once under its sha256). The database keeps
// the structure and small columns; every large text lives in a blob and is
// referenced by its hash.
//
// Durability: every mutating call is one transaction. Once it returns OK the
// row survives the writing process being killed (kill -9); blobs are written
// (atomically, by rename) before the row that references them is committed.
// Readers in other processes (the web UI, `kforge leaderboard` while a run
// goes) never block the writer and always see a committed state.
//
// Thread safety: one RunStore may be shared by threads; calls are serialised.
// Several processes may open the same store; writes from several processes
// are serialised by SQLite (a busy writer waits up to 10 s).
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kforge/core/eval_doc.h"
#include "kforge/core/mutex.h"
#include "kforge/core/status.h"
#include "kforge/results/records.h"

namespace kforge::results {

namespace internal {
class Db;
}

// The schema version this code writes. Older stores are migrated on Open.
inline constexpr int kSchemaVersion = 5;
// The oldest layout read-only openers read as is: versions 3 and 4 only add
// or change SQL views (for sqlite3 users), which kforge's own readers do not
// use.
inline constexpr int kMinReadableSchemaVersion = 2;

// Token, cost and time totals of one session's turns (one aggregate query).
struct SessionUsage {
  int64_t session_id = 0;
  int turns = 0;
  int64_t input_tokens = 0, output_tokens = 0;  // output includes reasoning tokens
  double cost_usd = 0;
  double latency_s = 0;
  int no_kernel_turns = 0;  // turns whose reply held no kernel
};

struct EventRecord {
  int64_t id = 0;
  int64_t run_id = 0;
  std::string kind;
  nlohmann::json detail;
  double created_at = 0;
};

class RunStore {
 public:
  // Opens `run_dir`/store.sqlite. Unless read_only, creates the directory and
  // the database when absent and migrates an older schema in place. A
  // read-only open of a missing store is kNotFound; of a newer schema than
  // this code knows, kInvalidInput.
  static Result<std::unique_ptr<RunStore>> Open(const std::filesystem::path& run_dir,
                                                bool read_only = false);
  // Creates a new store in `run_dir` (the directory may exist; a store in it
  // may not). The database file is created with O_EXCL, so of several
  // processes creating the same run directory at once exactly one gets the
  // store; the others, and every call where a store is already there, get
  // kInvalidInput naming the file.
  static Result<std::unique_ptr<RunStore>> Create(const std::filesystem::path& run_dir);
  ~RunStore();

  const std::filesystem::path& dir() const { return dir_; }
  bool read_only() const { return read_only_; }
  // The schema version found on disk (== kSchemaVersion unless read-only on an old store).
  int schema_version() const { return schema_version_; }

  // ---- writing (the agent) ----

  // Returns the run called `name`, creating it (state "running") if absent.
  // An existing run keeps its stored config; it is reopened as "running".
  Result<RunInfo> CreateOrGetRun(const std::string& name, const nlohmann::json& config,
                                 const std::string& kforge_version,
                                 const std::string& task_suite_hash,
                                 const nlohmann::json& hardware);
  Status FinishRun(int64_t run_id, const std::string& state);
  // Replaces a run's stored config (a resume that extends its deadline or
  // budgets stores them, so that the next resume keeps them).
  Status SetRunConfig(int64_t run_id, const nlohmann::json& config);
  // Records where an imported run came from (a host or file name).
  Status SetRunOrigin(int64_t run_id, const std::string& origin);

  // Idempotent: the same key returns the same id (state starts "pending").
  Result<int64_t> UpsertSession(int64_t run_id, const SessionKey& key);
  Status SetSessionState(int64_t session_id, const std::string& state,
                         const std::string& stop_reason = "");

  // Stores `text` under its sha256 (idempotent) and returns the hash.
  Result<std::string> PutBlob(std::string_view text);
  Result<std::string> GetBlob(const std::string& sha) const;

  // Stores a whole turn: prompt, reply, feedback and kernel as blobs, then
  // the turn row (and the kernel's row) in one transaction; bumps the
  // session's turns_done. `turn.id` and `turn.kernel_sha` are ignored (the
  // store sets them). A repeated (session, index) is kInvalidInput.
  Result<int64_t> AppendTurn(const TurnRecord& turn);
  // Stores a turn's feedback once it is known (after the evaluation).
  Status SetTurnFeedback(int64_t turn_id, std::string_view feedback);

  // Stores a kforge.eval/1 document and extracts status, speedup, busbw,
  // emulated, world, seconds and message into columns. A document without a
  // string "status" is kInvalidInput.
  Result<int64_t> RecordEvaluation(int64_t session_id, int64_t turn_id,
                                   const nlohmann::json& eval_doc);
  Status SetBestEvaluation(int64_t session_id, int64_t evaluation_id);
  Status AppendEvent(int64_t run_id, const std::string& kind, const nlohmann::json& detail);

  // ---- reading ----

  Result<std::vector<RunInfo>> ListRuns() const;
  Result<RunInfo> GetRun(int64_t run_id) const;
  Result<std::vector<SessionRecord>> ListSessions(int64_t run_id) const;
  Result<SessionRecord> GetSession(int64_t session_id) const;
  // Turns in index order, whole: prompt, reply, feedback and kernel read back from blobs.
  Result<std::vector<TurnRecord>> ListTurns(int64_t session_id) const;
  Result<std::vector<EvaluationRecord>> ListEvaluations(int64_t session_id) const;
  // Every evaluation of a run (one query; for metrics and export).
  Result<std::vector<EvaluationRecord>> ListRunEvaluations(int64_t run_id) const;
  Result<std::vector<SessionUsage>> ListSessionUsage(int64_t run_id) const;
  Result<nlohmann::json> GetEvaluationDoc(const EvaluationRecord& evaluation) const;
  // Events with id > after_id, oldest first.
  Result<std::vector<EventRecord>> ListEvents(int64_t run_id, int64_t after_id = 0) const;

  // PRAGMA integrity_check: OK when the database is sound.
  Status CheckIntegrity() const;

 private:
  RunStore(std::filesystem::path dir, bool read_only, std::unique_ptr<internal::Db> db);
  Status Migrate() REQUIRES(mu_);
  Result<std::string> PutBlobLocked(std::string_view text) REQUIRES(mu_);

  // Set by Open, before the store is shared; read without the lock.
  std::filesystem::path dir_;
  bool read_only_;
  int schema_version_ = 0;
  mutable Mutex mu_;
  std::unique_ptr<internal::Db> db_ PT_GUARDED_BY(mu_);
};

// Where a run's database lives inside its directory.
std::filesystem::path StorePath(const std::filesystem::path& run_dir);

}  // namespace kforge::results
