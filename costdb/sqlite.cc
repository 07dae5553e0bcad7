#include "costdb/sqlite.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <sstream>

namespace edgecost::costdb {
namespace {

// SQLite's lock bytes (see its os_unix.c): in WAL mode a writer holds byte 120
// of the -shm file (121 checkpoint, 122 recovery); in rollback-journal mode
// the RESERVED and PENDING bytes at 1 GiB of the database file itself.
constexpr int64_t kWalWriteLockByte = 120;
constexpr int64_t kWalRecoverLockByte = 122;
constexpr int64_t kPendingByte = 0x40000000;
constexpr int64_t kReservedByte = kPendingByte + 1;

// Who holds a WRITE lock overlapping [first, last] of the file with inode `inode`.
std::optional<pid_t> WriteLockHolder(ino_t inode, int64_t first, int64_t last) {
  std::ifstream locks("/proc/locks");
  std::optional<pid_t> own;
  for (std::string line; std::getline(locks, line);) {
    std::istringstream in(line);
    std::string id, kind, advisory, mode, dev_inode, start, end;
    long pid = 0;
    in >> id >> kind;
    if (kind == "->") continue;  // a waiter, not a holder
    in >> advisory >> mode >> pid >> dev_inode >> start >> end;
    if (!in || mode != "WRITE" || pid <= 0) continue;
    const size_t colon = dev_inode.rfind(':');
    if (colon == std::string::npos || dev_inode.substr(colon + 1) != std::to_string(inode)) continue;
    const int64_t lock_first = std::stoll(start);
    const int64_t lock_last = end == "EOF" ? std::numeric_limits<int64_t>::max() : std::stoll(end);
    if (lock_last < first || lock_first > last) continue;
    if (pid != ::getpid()) return static_cast<pid_t>(pid);
    own = static_cast<pid_t>(pid);  // prefer another process, the likelier culprit
  }
  return own;
}

std::optional<pid_t> HolderOf(const std::string& file, int64_t first, int64_t last) {
  struct stat st {};
  if (::stat(file.c_str(), &st) != 0) return std::nullopt;
  return WriteLockHolder(st.st_ino, first, last);
}

// Percent-escapes the characters that end or escape a path in an SQLite URI.
std::string UriPath(const std::string& path) {
  std::string out;
  for (const char c : path) {
    if (c == '%' || c == '?' || c == '#') {
      static constexpr char kHex[] = "0123456789ABCDEF";
      out += '%';
      out += kHex[(c >> 4) & 0xF];
      out += kHex[c & 0xF];
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace

std::optional<pid_t> LockHolder(const std::string& path) {
  if (auto pid = HolderOf(path + "-shm", kWalWriteLockByte, kWalRecoverLockByte)) return pid;
  return HolderOf(path, kPendingByte, kReservedByte);
}


namespace {

class SqliteConnection;

class SqliteStatement final : public StatementImpl {
 public:
  SqliteStatement(sqlite3_stmt* stmt, SqliteConnection* connection) : stmt_(stmt), connection_(connection) {}
  ~SqliteStatement() override { sqlite3_finalize(stmt_); }

  void BindInt(int index, int64_t value) override { Check(sqlite3_bind_int64(stmt_, index, value)); }
  void BindDouble(int index, double value) override { Check(sqlite3_bind_double(stmt_, index, value)); }
  void BindText(int index, std::string_view text) override {
    Check(sqlite3_bind_text64(stmt_, index, text.data(), text.size(), SQLITE_TRANSIENT, SQLITE_UTF8));
  }
  void BindBlob(int index, std::string_view bytes) override {
    Check(sqlite3_bind_blob64(stmt_, index, bytes.data(), bytes.size(), SQLITE_TRANSIENT));
  }
  void BindNull(int index) override { Check(sqlite3_bind_null(stmt_, index)); }
  Result<bool> Step() override;
  void Reset() override {
    sqlite3_reset(stmt_);
    sqlite3_clear_bindings(stmt_);
    bind_rc_ = SQLITE_OK;
  }
  int64_t Int(int column) const override { return sqlite3_column_int64(stmt_, column); }
  double Double(int column) const override { return sqlite3_column_double(stmt_, column); }
  std::string Text(int column) const override {
    const auto* text = reinterpret_cast<const char*>(sqlite3_column_text(stmt_, column));
    return text ? std::string(text, static_cast<size_t>(sqlite3_column_bytes(stmt_, column))) : std::string();
  }
  std::string Blob(int column) const override {
    const auto* bytes = static_cast<const char*>(sqlite3_column_blob(stmt_, column));
    return bytes ? std::string(bytes, static_cast<size_t>(sqlite3_column_bytes(stmt_, column))) : std::string();
  }
  bool IsNull(int column) const override { return sqlite3_column_type(stmt_, column) == SQLITE_NULL; }
  std::string Sql() const override {
    const char* sql = sqlite3_sql(stmt_);
    return sql ? sql : "";
  }

 private:
  void Check(int rc) {
    if (rc != SQLITE_OK && bind_rc_ == SQLITE_OK) bind_rc_ = rc;
  }

  sqlite3_stmt* stmt_ = nullptr;
  SqliteConnection* connection_ = nullptr;
  int bind_rc_ = SQLITE_OK;
};

class SqliteConnection final : public Connection {
 public:
  explicit SqliteConnection(std::string path) : path_(std::move(path)) {}
  ~SqliteConnection() override { sqlite3_close_v2(db_); }

  Backend backend() const override { return Backend::kSqlite; }
  const std::string& name() const override { return path_; }
  Status Exec(std::string_view sql) override {
    char* message = nullptr;
    const int rc = sqlite3_exec(db_, std::string(sql).c_str(), nullptr, nullptr, &message);
    sqlite3_free(message);  // Error() reads the same text from sqlite3_errmsg
    if (rc == SQLITE_OK) return Status::Ok();
    return Error(rc, std::string(sql.substr(0, 80)));
  }
  Result<std::unique_ptr<StatementImpl>> Prepare(std::string_view sql) override {
    sqlite3_stmt* stmt = nullptr;
    const int rc = sqlite3_prepare_v2(db_, sql.data(), static_cast<int>(sql.size()), &stmt, nullptr);
    if (rc != SQLITE_OK) return Error(rc, "preparing " + std::string(sql.substr(0, 80)));
    return std::unique_ptr<StatementImpl>(std::make_unique<SqliteStatement>(stmt, this));
  }
  Result<int64_t> LastInsertId() override { return sqlite3_last_insert_rowid(db_); }
  int Changes() const override { return sqlite3_changes(db_); }
  bool InTransaction() const override { return db_ && !sqlite3_get_autocommit(db_); }
  Status Begin(bool write) override { return Exec(write ? "BEGIN IMMEDIATE" : "BEGIN DEFERRED"); }
  Status Commit() override { return Exec("COMMIT"); }
  // Fails harmlessly when SQLite already rolled back (after an I/O error, say).
  void Rollback() override { (void)Exec("ROLLBACK"); }
  Result<int64_t> SchemaVersion() override {
    sqlite3_stmt* stmt = nullptr;
    if (const int rc = sqlite3_prepare_v2(db_, "PRAGMA user_version", -1, &stmt, nullptr); rc != SQLITE_OK) {
      return Error(rc, "reading the schema version");
    }
    const int rc = sqlite3_step(stmt);
    const int64_t version = rc == SQLITE_ROW ? sqlite3_column_int64(stmt, 0) : 0;
    sqlite3_finalize(stmt);
    if (rc != SQLITE_ROW) return Error(rc, "reading the schema version");
    return version;
  }
  Status SetSchemaVersion(int64_t version) override {
    return Exec("PRAGMA user_version = " + std::to_string(version));
  }

  Status Open(Db::Access access, int busy_timeout_ms);
  Result<std::string> ReadFileHeader(int size);
  // A Status for SQLite result `code` while doing `what`.
  Status Error(int code, std::string_view what) const;

 private:
  sqlite3* db_ = nullptr;
  std::string path_;
};

Result<bool> SqliteStatement::Step() {
  if (bind_rc_ != SQLITE_OK) {
    return Internal(connection_->name() + ": binding a parameter of " + Sql().substr(0, 80) + ": " +
                    sqlite3_errstr(bind_rc_));
  }
  const int rc = sqlite3_step(stmt_);
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  return connection_->Error(rc, Sql().substr(0, 80));
}

Status SqliteConnection::Open(Db::Access access, int busy_timeout_ms) {
  std::string uri = path_;
  int flags = SQLITE_OPEN_NOMUTEX;  // one connection per thread; see sql.h
  switch (access) {
    case Db::Access::kReadOnly:
      flags |= SQLITE_OPEN_READONLY;
      break;
    case Db::Access::kReadWrite:
      flags |= SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE;
      break;
    case Db::Access::kImmutable:
      flags |= SQLITE_OPEN_READONLY | SQLITE_OPEN_URI;
      uri = "file:" + UriPath(path_) + "?immutable=1";
      break;
  }
  const int rc = sqlite3_open_v2(uri.c_str(), &db_, flags, nullptr);
  if (rc != SQLITE_OK) return Error(rc, "opening");
  sqlite3_busy_timeout(db_, busy_timeout_ms);
  return Status::Ok();
}

Result<std::string> SqliteConnection::ReadFileHeader(int size) {
  sqlite3_file* file = nullptr;
  if (sqlite3_file_control(db_, "main", SQLITE_FCNTL_FILE_POINTER, &file) != SQLITE_OK || !file || !file->pMethods) {
    return std::string();
  }
  // stat(), not xFileSize: SQLite reports a 1-byte file as empty (an old OS X workaround).
  struct stat st {};
  if (::stat(path_.c_str(), &st) != 0) return std::string();
  const sqlite3_int64 file_bytes = st.st_size;
  std::string header(static_cast<size_t>(std::min<sqlite3_int64>(file_bytes, size)), '\0');
  if (header.empty()) return header;
  if (const int rc = file->pMethods->xRead(file, header.data(), static_cast<int>(header.size()), 0); rc != SQLITE_OK) {
    return Error(rc, "reading the file header");
  }
  return header;
}

}  // namespace

Result<Db> Db::Open(const std::string& path, Access access, int busy_timeout_ms) {
  auto connection = std::make_unique<SqliteConnection>(path);
  EC_RETURN_IF_ERROR(connection->Open(access, busy_timeout_ms));
  return Db(std::move(connection));
}

Result<std::string> Db::ReadFileHeader(int size) {
  auto* sqlite = dynamic_cast<SqliteConnection*>(connection_.get());
  if (!sqlite) return Internal("bug: reading the file header of " + path() + ", which is not an SQLite file");
  return sqlite->ReadFileHeader(size);
}

Status Damaged(const std::string& path, const std::string& detail) {
  std::string line = detail;  // quick_check's report spans lines and opens with a banner
  if (const std::string banner = "*** in database main ***"; line.starts_with(banner)) line.erase(0, banner.size());
  std::replace(line.begin(), line.end(), '\n', ' ');
  line.erase(0, line.find_first_not_of(' '));
  return DataLoss(path + " is damaged (" + line + "): restore it from a backup, or move it away and profile again");
}

Status SqliteConnection::Error(int code, std::string_view what) const {
  const std::string detail = std::string(what) + ": " + (db_ ? sqlite3_errmsg(db_) : sqlite3_errstr(code));
  switch (code & 0xFF) {  // the primary code of an extended one
    case SQLITE_BUSY:
    case SQLITE_LOCKED: {
      const std::optional<pid_t> holder = LockHolder(path_);
      std::string who = "another process";
      if (holder && *holder == ::getpid()) {
        who = "another connection of this process (pid " + std::to_string(*holder) + ")";
      } else if (holder) {
        who = "another process (pid " + std::to_string(*holder) + ")";
      }
      return Unavailable(path_ + " is locked by " + who + "; retry when it finishes");
    }
    case SQLITE_READONLY:
      return PermissionDenied(path_ + " is read-only: fix its permissions or pass another --db");
    case SQLITE_CANTOPEN:
    case SQLITE_PERM:
      return PermissionDenied("cannot open " + path_ + " (" + detail +
                              "): check that it exists and that you may write its folder, or pass another --db");
    case SQLITE_NOTADB:
      return InvalidArgument(path_ +
                             " is not an edgecost database (not SQLite): pass another --db or move the "
                             "file away");
    case SQLITE_CORRUPT:
      return Damaged(path_, detail);
    case SQLITE_FULL:
      return Status(ErrorCode::kResourceExhausted, "the disk holding " + path_ + " is full: free some space and retry");
    case SQLITE_CONSTRAINT:
      return InvalidArgument(path_ + ": " + detail);
    default:
      return Internal(path_ + ": " + detail);
  }
}

}  // namespace edgecost::costdb
