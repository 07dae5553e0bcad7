// The one audited SQLite wrapper: RAII handles for connections, statements and
// transactions, typed binding that cannot silently truncate, and SQLite result
// codes turned into Status values that say what to do. No other code calls
// sqlite3_* directly.
//
// A Db is one connection: use it from one thread at a time, and never carry it
// across fork() (open a new one in the child).
#pragma once

#include <sqlite3.h>
#include <sys/types.h>

#include <concepts>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "base/status.h"

namespace edgecost::costdb {

class Db;

// A damaged database file, with what to do about it.
Status Damaged(const std::string& path, const std::string& detail);

// A prepared statement. Must not outlive (or see a move of) the Db that prepared it.
class Statement {
 public:
  Statement() = default;
  Statement(Statement&& other) noexcept
      : stmt_(std::exchange(other.stmt_, nullptr)), db_(other.db_), bind_rc_(other.bind_rc_) {}
  Statement& operator=(Statement&& other) noexcept;
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;
  ~Statement() { sqlite3_finalize(stmt_); }

  // Parameters are 1-based, as in SQLite. A failed bind (out of range, a
  // uint64 beyond int64) is remembered and reported by the next Step()/Run().
  template <std::integral T>
  Statement& Bind(int index, T value) {
    if constexpr (std::is_unsigned_v<T> && sizeof(T) >= sizeof(int64_t)) {
      if (value > static_cast<T>(std::numeric_limits<int64_t>::max())) {
        Check(SQLITE_TOOBIG);
        return *this;
      }
    }
    Check(sqlite3_bind_int64(stmt_, index, static_cast<int64_t>(value)));
    return *this;
  }
  Statement& Bind(int index, double value);
  Statement& Bind(int index, std::string_view text);
  Statement& Bind(int index, const char* text) { return Bind(index, std::string_view(text)); }
  Statement& Bind(int index, std::nullptr_t);
  template <typename T>
  Statement& Bind(int index, const std::optional<T>& value) {
    return value ? Bind(index, *value) : Bind(index, nullptr);
  }
  Statement& BindBlob(int index, std::string_view bytes);

  // True while a row is available; false when done.
  Result<bool> Step();
  // Runs a statement that returns no rows, then resets it for the next bindings.
  Status Run();

  // Columns are 0-based, as in SQLite.
  int64_t Int(int column) const { return sqlite3_column_int64(stmt_, column); }
  double Double(int column) const { return sqlite3_column_double(stmt_, column); }
  std::string Text(int column) const;
  std::string Blob(int column) const;
  bool IsNull(int column) const { return sqlite3_column_type(stmt_, column) == SQLITE_NULL; }
  std::optional<double> OptionalDouble(int column) const {
    return IsNull(column) ? std::nullopt : std::optional<double>(Double(column));
  }

 private:
  friend class Db;
  Statement(sqlite3_stmt* stmt, const Db* db) : stmt_(stmt), db_(db) {}
  void Check(int rc) {
    if (rc != SQLITE_OK && bind_rc_ == SQLITE_OK) bind_rc_ = rc;
  }

  sqlite3_stmt* stmt_ = nullptr;
  const Db* db_ = nullptr;
  int bind_rc_ = SQLITE_OK;
};

class Db {
 public:
  enum class Access {
    kReadOnly,
    kReadWrite,  // creates the file if missing
    kImmutable,  // read-only, and no other process may change the file (no locks, no -shm)
  };

  Db() = default;
  Db(Db&& other) noexcept { *this = std::move(other); }
  Db& operator=(Db&& other) noexcept;
  Db(const Db&) = delete;
  Db& operator=(const Db&) = delete;
  ~Db() { sqlite3_close_v2(db_); }

  static Result<Db> Open(const std::string& path, Access access, int busy_timeout_ms);

  Status Exec(std::string_view sql);
  Result<Statement> Prepare(std::string_view sql);
  // Runs a query that returns one integer (PRAGMA user_version, count(*), ...).
  Result<int64_t> QueryInt(std::string_view sql);
  int64_t LastInsertId() const { return sqlite3_last_insert_rowid(db_); }
  int Changes() const { return sqlite3_changes(db_); }
  bool InTransaction() const { return db_ && !sqlite3_get_autocommit(db_); }
  const std::string& path() const { return path_; }

  // The first `size` bytes of the database file, read through SQLite's own
  // file handle: opening and closing another descriptor on the file would drop
  // the POSIX locks that SQLite connections of this process hold on it.
  // Short files give fewer bytes; a file SQLite has not opened yet gives none.
  Result<std::string> ReadFileHeader(int size);

  // A Status for SQLite result `code` while doing `what`.
  Status Error(int code, std::string_view what) const;

 private:
  friend class Transaction;
  enum class TxKind { kNone, kRead, kWrite };

  sqlite3* db_ = nullptr;
  std::string path_;
  TxKind tx_ = TxKind::kNone;
};

// The process that holds a write lock on the SQLite database at `path`, if the
// kernel says (Linux /proc/locks; read, never opened as a lock file).
std::optional<pid_t> LockHolder(const std::string& path);

// RAII transaction. kWrite starts with BEGIN IMMEDIATE, so a busy database
// fails (after the busy timeout) before any work is done; kRead gives one
// consistent snapshot across several statements. The destructor rolls back
// unless Commit() succeeded.
//
// Begin() inside an open transaction joins it: Commit() and the destructor then
// leave the outer transaction in charge, so operations compose atomically.
// A write cannot join a read transaction (SQLite could not upgrade it safely).
class Transaction {
 public:
  enum class Kind { kRead, kWrite };

  static Result<Transaction> Begin(Db& db, Kind kind);
  Transaction(Transaction&& other) noexcept : db_(std::exchange(other.db_, nullptr)) {}
  Transaction(const Transaction&) = delete;
  Transaction& operator=(const Transaction&) = delete;
  ~Transaction();
  Status Commit();

 private:
  explicit Transaction(Db* db) : db_(db) {}
  Db* db_;  // null when joined, moved from or finished
};

}  // namespace edgecost::costdb
