// The one storage interface of costdb/: a connection, prepared statements and
// transactions, with SQLite (sqlite.h, the embedded default) and PostgreSQL
// (postgres.h, a fleet's store) behind it. The SQL the costdb/ files write is
// one dialect (`?` placeholders, ON CONFLICT upserts, standard types); what
// differs between the two databases stays inside the backend.
//
// A Db is one connection: use it from one thread at a time, and never carry it
// across fork() (open a new one in the child).
#pragma once

#include <concepts>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "base/status.h"

namespace edgecost::costdb {

enum class Backend { kSqlite, kPostgres };
const char* BackendName(Backend backend);  // "sqlite", "postgresql"

// One backend's prepared statement. Parameters are 1-based, columns 0-based.
class StatementImpl {
 public:
  virtual ~StatementImpl() = default;
  virtual void BindInt(int index, int64_t value) = 0;
  virtual void BindDouble(int index, double value) = 0;
  virtual void BindText(int index, std::string_view text) = 0;
  virtual void BindBlob(int index, std::string_view bytes) = 0;
  virtual void BindNull(int index) = 0;
  virtual Result<bool> Step() = 0;  // true while a row is available
  virtual void Reset() = 0;         // back to the start, bindings cleared
  virtual int64_t Int(int column) const = 0;
  virtual double Double(int column) const = 0;
  virtual std::string Text(int column) const = 0;
  virtual std::string Blob(int column) const = 0;
  virtual bool IsNull(int column) const = 0;
  virtual std::string Sql() const = 0;  // for error messages
};

// One backend's connection.
class Connection {
 public:
  virtual ~Connection() = default;
  virtual Backend backend() const = 0;
  // The file path, or the URL without its password: safe to print.
  virtual const std::string& name() const = 0;
  virtual Status Exec(std::string_view sql) = 0;
  virtual Result<std::unique_ptr<StatementImpl>> Prepare(std::string_view sql) = 0;
  virtual Result<int64_t> LastInsertId() = 0;
  virtual int Changes() const = 0;  // rows the last statement changed
  virtual bool InTransaction() const = 0;
  // kWrite transactions exclude each other (SQLite: BEGIN IMMEDIATE; PostgreSQL: a
  // transaction-scoped advisory lock), so read-then-write logic sees what it writes over.
  virtual Status Begin(bool write) = 0;
  virtual Status Commit() = 0;
  virtual void Rollback() = 0;  // harmless when the backend already rolled back
  // The schema version (SQLite: PRAGMA user_version; PostgreSQL: a one-row table).
  virtual Result<int64_t> SchemaVersion() = 0;
  virtual Status SetSchemaVersion(int64_t version) = 0;
};

// A prepared statement. Must not outlive the Db that prepared it.
class Statement {
 public:
  Statement() = default;
  explicit Statement(std::unique_ptr<StatementImpl> impl) : impl_(std::move(impl)) {}

  // A failed bind (a uint64 beyond int64) is remembered and reported by the next Step()/Run().
  template <std::integral T>
  Statement& Bind(int index, T value) {
    if constexpr (std::is_unsigned_v<T> && sizeof(T) >= sizeof(int64_t)) {
      if (value > static_cast<T>(std::numeric_limits<int64_t>::max())) {
        if (bind_error_.empty()) bind_error_ = std::to_string(value) + " does not fit a 64-bit signed integer";
        return *this;
      }
    }
    impl_->BindInt(index, static_cast<int64_t>(value));
    return *this;
  }
  Statement& Bind(int index, double value) {
    impl_->BindDouble(index, value);
    return *this;
  }
  Statement& Bind(int index, std::string_view text) {
    impl_->BindText(index, text);
    return *this;
  }
  Statement& Bind(int index, const char* text) { return Bind(index, std::string_view(text)); }
  Statement& Bind(int index, std::nullptr_t) {
    impl_->BindNull(index);
    return *this;
  }
  template <typename T>
  Statement& Bind(int index, const std::optional<T>& value) {
    return value ? Bind(index, *value) : Bind(index, nullptr);
  }
  Statement& BindBlob(int index, std::string_view bytes) {
    impl_->BindBlob(index, bytes);
    return *this;
  }

  // True while a row is available; false when done.
  Result<bool> Step();
  // Runs a statement that returns no rows, then resets it for the next bindings.
  Status Run();

  int64_t Int(int column) const { return impl_->Int(column); }
  double Double(int column) const { return impl_->Double(column); }
  std::string Text(int column) const { return impl_->Text(column); }
  std::string Blob(int column) const { return impl_->Blob(column); }
  bool IsNull(int column) const { return impl_->IsNull(column); }
  std::optional<double> OptionalDouble(int column) const {
    return IsNull(column) ? std::nullopt : std::optional<double>(Double(column));
  }

 private:
  std::unique_ptr<StatementImpl> impl_;
  std::string bind_error_;
};

class Db {
 public:
  enum class Access {  // of an SQLite file
    kReadOnly,
    kReadWrite,  // creates the file if missing
    kImmutable,  // read-only, and no other process may change the file (no locks, no -shm)
  };

  Db() = default;
  explicit Db(std::unique_ptr<Connection> connection) : connection_(std::move(connection)) {}
  Db(Db&&) noexcept = default;
  Db& operator=(Db&&) noexcept = default;

  // An SQLite file (sqlite.cc); PostgreSQL is opened by OpenPostgres (postgres.h).
  static Result<Db> Open(const std::string& path, Access access, int busy_timeout_ms);

  Status Exec(std::string_view sql) { return connection_->Exec(sql); }
  Result<Statement> Prepare(std::string_view sql);
  // Runs a query that returns one integer (count(*), ...).
  Result<int64_t> QueryInt(std::string_view sql);
  // The id the last INSERT of this connection gave its row.
  Result<int64_t> LastInsertId() { return connection_->LastInsertId(); }
  int Changes() const { return connection_->Changes(); }
  bool InTransaction() const { return connection_ && connection_->InTransaction(); }
  const std::string& path() const { return connection_->name(); }
  Backend backend() const { return connection_->backend(); }
  Connection& connection() { return *connection_; }

  // SQLite only: the first `size` bytes of the database file, read through SQLite's own
  // file handle (opening another descriptor would drop the POSIX locks this process holds).
  Result<std::string> ReadFileHeader(int size);

 private:
  friend class Transaction;
  enum class TxKind { kNone, kRead, kWrite };

  std::unique_ptr<Connection> connection_;
  TxKind tx_ = TxKind::kNone;
};

// RAII transaction. kWrite excludes other writers from the start, so a busy
// database fails (after the busy timeout) before any work is done; kRead gives
// one consistent snapshot across several statements. The destructor rolls back
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
