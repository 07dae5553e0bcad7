// The one audited SQLite wrapper: RAII handles, typed binding, and SQLite
// result codes turned into Status values that say what to do.
#pragma once

#include <sqlite3.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

#include "base/status.h"

namespace edgecost::costdb {

class Statement {
 public:
  Statement() = default;
  Statement(sqlite3_stmt* stmt, std::string_view db_path) : stmt_(stmt), db_path_(db_path) {}
  Statement(Statement&& other) noexcept { *this = std::move(other); }
  Statement& operator=(Statement&& other) noexcept {
    std::swap(stmt_, other.stmt_);
    std::swap(db_path_, other.db_path_);
    return *this;
  }
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;
  ~Statement() { sqlite3_finalize(stmt_); }

  // Parameters are 1-based, as in SQLite.
  Statement& Bind(int index, int64_t value);
  Statement& Bind(int index, double value);
  Statement& Bind(int index, std::string_view text);
  Statement& BindBlob(int index, std::string_view bytes);
  Statement& BindNull(int index);

  // True while a row is available; false when done.
  Result<bool> Step();
  // Runs a statement that returns no rows, then resets it for the next bindings.
  Status Run();

  int64_t Int(int column) const { return sqlite3_column_int64(stmt_, column); }
  double Double(int column) const { return sqlite3_column_double(stmt_, column); }
  std::string Text(int column) const;
  std::string Blob(int column) const;
  bool IsNull(int column) const { return sqlite3_column_type(stmt_, column) == SQLITE_NULL; }

 private:
  sqlite3_stmt* stmt_ = nullptr;
  std::string db_path_;
};

class Db {
 public:
  Db() = default;
  Db(Db&& other) noexcept { *this = std::move(other); }
  Db& operator=(Db&& other) noexcept {
    std::swap(db_, other.db_);
    std::swap(path_, other.path_);
    return *this;
  }
  Db(const Db&) = delete;
  Db& operator=(const Db&) = delete;
  ~Db() { sqlite3_close(db_); }

  static Result<Db> Open(const std::string& path, bool read_only, int busy_timeout_ms);

  Status Exec(std::string_view sql);
  Result<Statement> Prepare(std::string_view sql);
  int64_t LastInsertId() const { return sqlite3_last_insert_rowid(db_); }
  const std::string& path() const { return path_; }

  // A Status for SQLite result `code` while doing `what`.
  Status Error(int code, std::string_view what) const;

 private:
  sqlite3* db_ = nullptr;
  std::string path_;
};

// BEGIN IMMEDIATE on construction (so a busy database fails fast, before any
// work); rolls back on destruction unless committed.
class Transaction {
 public:
  static Result<Transaction> Begin(Db& db);
  Transaction(Transaction&& other) noexcept : db_(std::exchange(other.db_, nullptr)) {}
  Transaction(const Transaction&) = delete;
  Transaction& operator=(const Transaction&) = delete;
  ~Transaction();
  Status Commit();

 private:
  explicit Transaction(Db* db) : db_(db) {}
  Db* db_;
};

}  // namespace edgecost::costdb
