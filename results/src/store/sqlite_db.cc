#include "sqlite_db.h"

#include <sqlite3.h>

#include <memory>

namespace kforge::results::internal {
namespace {

Status SqlError(sqlite3* db, std::string_view what) {
  const int code = sqlite3_extended_errcode(db);
  ErrorKind kind = ErrorKind::kIo;
  if ((code & 0xff) == SQLITE_BUSY || (code & 0xff) == SQLITE_LOCKED) kind = ErrorKind::kTimeout;
  if ((code & 0xff) == SQLITE_CONSTRAINT) kind = ErrorKind::kInvalidInput;
  const bool damaged = (code & 0xff) == SQLITE_CORRUPT || (code & 0xff) == SQLITE_NOTADB;
  if (damaged) kind = ErrorKind::kInvalidInput;
  return Error(kind, std::string(what) + ": " + sqlite3_errmsg(db) +
                         (damaged ? " (the store file is damaged: truncated or overwritten)" : ""));
}

// The database file, so that an error from any query names the store.
std::string FileOf(sqlite3* db) {
  const char* name = sqlite3_db_filename(db, "main");
  return name && *name ? name : "run store";
}

}  // namespace

Result<std::unique_ptr<Db>> Db::Open(const std::filesystem::path& path, bool read_only) {
  sqlite3* raw = nullptr;
  const int flags =
      (read_only ? SQLITE_OPEN_READONLY : (SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE)) |
      SQLITE_OPEN_NOMUTEX;
  const int rc = sqlite3_open_v2(path.c_str(), &raw, flags, nullptr);
  if (rc != SQLITE_OK) {
    std::string msg = raw ? sqlite3_errmsg(raw) : sqlite3_errstr(rc);
    sqlite3_close(raw);
    return Error(rc == SQLITE_CANTOPEN ? ErrorKind::kNotFound : ErrorKind::kIo,
                 "cannot open " + path.string() + ": " + msg);
  }
  sqlite3_extended_result_codes(raw, 1);
  sqlite3_busy_timeout(raw, 10000);
  // SQLite leaves the declared REFERENCES unenforced unless asked, per
  // connection: a session of a run that does not exist is refused.
  if (sqlite3_exec(raw, "PRAGMA foreign_keys=ON", nullptr, nullptr, nullptr) != SQLITE_OK) {
    std::string msg = sqlite3_errmsg(raw);
    sqlite3_close(raw);
    return Error(ErrorKind::kIo, "cannot open " + path.string() + ": " + msg);
  }
  return std::unique_ptr<Db>(new Db(raw, path));
}

Db::~Db() { sqlite3_close_v2(db_); }

Status Db::Exec(std::string_view sql) {
  char* err = nullptr;
  const std::string text(sql);
  if (sqlite3_exec(db_, text.c_str(), nullptr, nullptr, &err) != SQLITE_OK) {
    std::string msg = err ? err : "unknown error";
    sqlite3_free(err);
    Status s = SqlError(db_, path_.string());
    return Error(s.kind(), path_.string() + ": " + msg);
  }
  return Status::Ok();
}

Result<Stmt> Db::Prepare(std::string_view sql) {
  sqlite3_stmt* stmt = nullptr;
  if (sqlite3_prepare_v2(db_, sql.data(), static_cast<int>(sql.size()), &stmt, nullptr) !=
      SQLITE_OK) {
    return SqlError(db_, path_.string() + ": prepare `" + std::string(sql.substr(0, 60)) + "`");
  }
  return Stmt(stmt, db_);
}

int64_t Db::LastInsertId() const { return sqlite3_last_insert_rowid(db_); }
int Db::Changes() const { return sqlite3_changes(db_); }

Stmt::Stmt(Stmt&& other) noexcept
    : stmt_(other.stmt_), db_(other.db_), bind_error_(std::move(other.bind_error_)) {
  other.stmt_ = nullptr;
}

Stmt::~Stmt() { sqlite3_finalize(stmt_); }

Stmt& Stmt::Bind(int index, int64_t value) {
  if (sqlite3_bind_int64(stmt_, index, value) != SQLITE_OK && bind_error_.ok())
    bind_error_ = SqlError(db_, FileOf(db_) + ": bind");
  return *this;
}
Stmt& Stmt::Bind(int index, double value) {
  if (sqlite3_bind_double(stmt_, index, value) != SQLITE_OK && bind_error_.ok())
    bind_error_ = SqlError(db_, FileOf(db_) + ": bind");
  return *this;
}
Stmt& Stmt::Bind(int index, std::string_view value) {
  if (sqlite3_bind_text64(stmt_, index, value.data(), value.size(), SQLITE_TRANSIENT,
                          SQLITE_UTF8) != SQLITE_OK &&
      bind_error_.ok()) {
    bind_error_ = SqlError(db_, FileOf(db_) + ": bind");
  }
  return *this;
}
Stmt& Stmt::BindNull(int index) {
  if (sqlite3_bind_null(stmt_, index) != SQLITE_OK && bind_error_.ok())
    bind_error_ = SqlError(db_, FileOf(db_) + ": bind");
  return *this;
}

Result<bool> Stmt::Step() {
  if (!bind_error_.ok()) return bind_error_;
  const int rc = sqlite3_step(stmt_);
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  return SqlError(db_, FileOf(db_));
}

Status Stmt::Run() {
  KF_ASSIGN_OR_RETURN(bool row, Step());
  (void)row;
  return Status::Ok();
}

bool Stmt::IsNull(int col) const { return sqlite3_column_type(stmt_, col) == SQLITE_NULL; }
int64_t Stmt::Int(int col) const { return sqlite3_column_int64(stmt_, col); }
double Stmt::Double(int col) const { return sqlite3_column_double(stmt_, col); }
std::string Stmt::Text(int col) const {
  const auto* p = reinterpret_cast<const char*>(sqlite3_column_text(stmt_, col));
  return p ? std::string(p, static_cast<size_t>(sqlite3_column_bytes(stmt_, col))) : std::string();
}
std::optional<double> Stmt::OptDouble(int col) const {
  if (IsNull(col)) return std::nullopt;
  return Double(col);
}
std::optional<int64_t> Stmt::OptInt(int col) const {
  if (IsNull(col)) return std::nullopt;
  return Int(col);
}

Transaction::~Transaction() {
  if (open_) (void)db_.Exec("ROLLBACK");
}

Status Transaction::Begin() {
  KF_RETURN_IF_ERROR(db_.Exec("BEGIN IMMEDIATE"));
  open_ = true;
  return Status::Ok();
}

Status Transaction::Commit() {
  KF_RETURN_IF_ERROR(db_.Exec("COMMIT"));
  open_ = false;
  return Status::Ok();
}

}  // namespace kforge::results::internal
