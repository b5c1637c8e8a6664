// A thin RAII layer over the sqlite3 C API, private to results/. Every call
// returns Status so the store never throws and never aborts on bad input.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "kforge/core/status.h"

struct sqlite3;
struct sqlite3_stmt;

namespace kforge::results::internal {

class Stmt;

class Db {
 public:
  // Opens (or with read_only=false creates) the database file. Sets a busy
  // timeout so a reader that meets a checkpoint waits briefly instead of
  // failing at once.
  static Result<std::unique_ptr<Db>> Open(const std::filesystem::path& path, bool read_only);
  ~Db();
  Db(const Db&) = delete;
  Db& operator=(const Db&) = delete;

  // Runs one or more statements without results.
  Status Exec(std::string_view sql);
  Result<Stmt> Prepare(std::string_view sql);
  int64_t LastInsertId() const;
  int Changes() const;
  const std::filesystem::path& path() const { return path_; }
  sqlite3* raw() { return db_; }

 private:
  Db(sqlite3* db, std::filesystem::path path) : db_(db), path_(std::move(path)) {}
  sqlite3* db_;
  std::filesystem::path path_;
};

// A prepared statement. Bind indices start at 1, column indices at 0.
class Stmt {
 public:
  Stmt(sqlite3_stmt* stmt, sqlite3* db) : stmt_(stmt), db_(db) {}
  Stmt(Stmt&& other) noexcept;
  Stmt& operator=(Stmt&&) = delete;
  ~Stmt();

  Stmt& Bind(int index, int64_t value);
  Stmt& Bind(int index, int value) { return Bind(index, static_cast<int64_t>(value)); }
  Stmt& Bind(int index, double value);
  Stmt& Bind(int index, std::string_view value);
  Stmt& Bind(int index, const char* value) { return Bind(index, std::string_view(value)); }
  Stmt& Bind(int index, const std::string& value) { return Bind(index, std::string_view(value)); }
  Stmt& BindNull(int index);
  Stmt& Bind(int index, std::optional<double> value) {
    return value ? Bind(index, *value) : BindNull(index);
  }
  Stmt& Bind(int index, std::optional<int64_t> value) {
    return value ? Bind(index, *value) : BindNull(index);
  }

  // Advances: true when a row is ready, false when done.
  Result<bool> Step();
  // Steps a statement that returns no rows.
  Status Run();

  bool IsNull(int col) const;
  int64_t Int(int col) const;
  double Double(int col) const;
  std::string Text(int col) const;
  std::optional<double> OptDouble(int col) const;
  std::optional<int64_t> OptInt(int col) const;

 private:
  sqlite3_stmt* stmt_;
  sqlite3* db_;
  Status bind_error_;
};

// BEGIN IMMEDIATE … COMMIT; rolls back in the destructor unless committed.
// IMMEDIATE takes the write lock up front so two writers never deadlock on
// upgrading a read lock.
class Transaction {
 public:
  explicit Transaction(Db& db) : db_(db) {}
  ~Transaction();
  Status Begin();
  Status Commit();

 private:
  Db& db_;
  bool open_ = false;
};

}  // namespace kforge::results::internal
