#include "costdb/sqlite.h"

namespace edgecost::costdb {

Statement& Statement::Bind(int index, int64_t value) {
  sqlite3_bind_int64(stmt_, index, value);
  return *this;
}

Statement& Statement::Bind(int index, double value) {
  sqlite3_bind_double(stmt_, index, value);
  return *this;
}

Statement& Statement::Bind(int index, std::string_view text) {
  sqlite3_bind_text(stmt_, index, text.data(), static_cast<int>(text.size()), SQLITE_TRANSIENT);
  return *this;
}

Statement& Statement::BindBlob(int index, std::string_view bytes) {
  sqlite3_bind_blob(stmt_, index, bytes.data(), static_cast<int>(bytes.size()), SQLITE_TRANSIENT);
  return *this;
}

Statement& Statement::BindNull(int index) {
  sqlite3_bind_null(stmt_, index);
  return *this;
}

Result<bool> Statement::Step() {
  const int rc = sqlite3_step(stmt_);
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  sqlite3* db = sqlite3_db_handle(stmt_);
  const std::string sql = sqlite3_sql(stmt_) ? sqlite3_sql(stmt_) : "";
  if (rc == SQLITE_BUSY || rc == SQLITE_LOCKED) {
    return Unavailable(db_path_ + " is locked by another process; retry when it finishes");
  }
  if (rc == SQLITE_READONLY) {
    return PermissionDenied(db_path_ + " is read-only: fix its permissions or pass another --db");
  }
  return Internal(db_path_ + ": " + sqlite3_errmsg(db) + " (in: " + sql.substr(0, 80) + ")");
}

Status Statement::Run() {
  Result<bool> row = Step();
  sqlite3_reset(stmt_);
  sqlite3_clear_bindings(stmt_);
  return row.status();
}

std::string Statement::Text(int column) const {
  const auto* text = reinterpret_cast<const char*>(sqlite3_column_text(stmt_, column));
  return text ? std::string(text, static_cast<size_t>(sqlite3_column_bytes(stmt_, column))) : std::string();
}

std::string Statement::Blob(int column) const {
  const auto* bytes = static_cast<const char*>(sqlite3_column_blob(stmt_, column));
  return bytes ? std::string(bytes, static_cast<size_t>(sqlite3_column_bytes(stmt_, column))) : std::string();
}

Result<Db> Db::Open(const std::string& path, bool read_only, int busy_timeout_ms) {
  Db db;
  db.path_ = path;
  const int flags = read_only ? SQLITE_OPEN_READONLY : (SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE);
  const int rc = sqlite3_open_v2(path.c_str(), &db.db_, flags | SQLITE_OPEN_NOMUTEX, nullptr);
  if (rc != SQLITE_OK) return db.Error(rc, "opening");
  sqlite3_busy_timeout(db.db_, busy_timeout_ms);
  sqlite3_extended_result_codes(db.db_, 0);
  return db;
}

Status Db::Exec(std::string_view sql) {
  char* message = nullptr;
  const int rc = sqlite3_exec(db_, std::string(sql).c_str(), nullptr, nullptr, &message);
  std::string text = message ? message : "";
  sqlite3_free(message);
  if (rc == SQLITE_OK) return Status::Ok();
  return Error(rc, text.empty() ? std::string(sql.substr(0, 60)) : text);
}

Result<Statement> Db::Prepare(std::string_view sql) {
  sqlite3_stmt* stmt = nullptr;
  const int rc = sqlite3_prepare_v2(db_, sql.data(), static_cast<int>(sql.size()), &stmt, nullptr);
  if (rc != SQLITE_OK) return Error(rc, "preparing " + std::string(sql.substr(0, 60)));
  return Statement(stmt, path_);
}

Status Db::Error(int code, std::string_view what) const {
  switch (code) {
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
      return Unavailable(path_ + " is locked by another process; retry when it finishes");
    case SQLITE_READONLY:
      return PermissionDenied(path_ + " is read-only: fix its permissions or pass another --db");
    case SQLITE_CANTOPEN:
    case SQLITE_PERM:
      return PermissionDenied("cannot open " + path_ + ": check that it exists and that you may write its folder, " +
                              "or pass another --db");
    case SQLITE_NOTADB:
    case SQLITE_CORRUPT:
      return InvalidArgument(path_ + " is not an edgecost database (not SQLite or damaged): pass another --db " +
                             "or move the file away");
    default:
      return Internal(path_ + ": " + std::string(what) + ": " + (db_ ? sqlite3_errmsg(db_) : sqlite3_errstr(code)));
  }
}

Result<Transaction> Transaction::Begin(Db& db) {
  EC_RETURN_IF_ERROR(db.Exec("BEGIN IMMEDIATE"));
  return Transaction(&db);
}

Transaction::~Transaction() {
  if (db_) (void)db_->Exec("ROLLBACK");
}

Status Transaction::Commit() {
  Status status = db_->Exec("COMMIT");
  if (status.ok()) db_ = nullptr;  // otherwise the destructor rolls back
  return status;
}

}  // namespace edgecost::costdb
