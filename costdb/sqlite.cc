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

Statement& Statement::operator=(Statement&& other) noexcept {
  std::swap(stmt_, other.stmt_);
  std::swap(db_, other.db_);
  std::swap(bind_rc_, other.bind_rc_);
  return *this;
}

Statement& Statement::Bind(int index, double value) {
  Check(sqlite3_bind_double(stmt_, index, value));
  return *this;
}

Statement& Statement::Bind(int index, std::string_view text) {
  Check(sqlite3_bind_text64(stmt_, index, text.data(), text.size(), SQLITE_TRANSIENT, SQLITE_UTF8));
  return *this;
}

Statement& Statement::Bind(int index, std::nullptr_t) {
  Check(sqlite3_bind_null(stmt_, index));
  return *this;
}

Statement& Statement::BindBlob(int index, std::string_view bytes) {
  Check(sqlite3_bind_blob64(stmt_, index, bytes.data(), bytes.size(), SQLITE_TRANSIENT));
  return *this;
}

Result<bool> Statement::Step() {
  if (bind_rc_ != SQLITE_OK) {
    const char* sql = sqlite3_sql(stmt_);
    return Internal(db_->path() + ": binding a parameter of " + std::string(sql ? sql : "").substr(0, 80) + ": " +
                    sqlite3_errstr(bind_rc_));
  }
  const int rc = sqlite3_step(stmt_);
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  const char* sql = sqlite3_sql(stmt_);
  return db_->Error(rc, std::string(sql ? sql : "").substr(0, 80));
}

Status Statement::Run() {
  Result<bool> row = Step();
  sqlite3_reset(stmt_);
  sqlite3_clear_bindings(stmt_);
  bind_rc_ = SQLITE_OK;
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

Db& Db::operator=(Db&& other) noexcept {
  std::swap(db_, other.db_);
  std::swap(path_, other.path_);
  std::swap(tx_, other.tx_);
  return *this;
}

Result<Db> Db::Open(const std::string& path, Access access, int busy_timeout_ms) {
  Db db;
  db.path_ = path;
  std::string name = path;
  int flags = SQLITE_OPEN_NOMUTEX;  // one connection per thread; see the header
  switch (access) {
    case Access::kReadOnly:
      flags |= SQLITE_OPEN_READONLY;
      break;
    case Access::kReadWrite:
      flags |= SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE;
      break;
    case Access::kImmutable:
      flags |= SQLITE_OPEN_READONLY | SQLITE_OPEN_URI;
      name = "file:" + UriPath(path) + "?immutable=1";
      break;
  }
  const int rc = sqlite3_open_v2(name.c_str(), &db.db_, flags, nullptr);
  if (rc != SQLITE_OK) return db.Error(rc, "opening");
  sqlite3_busy_timeout(db.db_, busy_timeout_ms);
  return db;
}

Status Db::Exec(std::string_view sql) {
  char* message = nullptr;
  const int rc = sqlite3_exec(db_, std::string(sql).c_str(), nullptr, nullptr, &message);
  sqlite3_free(message);  // Error() reads the same text from sqlite3_errmsg
  if (rc == SQLITE_OK) return Status::Ok();
  return Error(rc, std::string(sql.substr(0, 80)));
}

Result<Statement> Db::Prepare(std::string_view sql) {
  sqlite3_stmt* stmt = nullptr;
  const int rc = sqlite3_prepare_v2(db_, sql.data(), static_cast<int>(sql.size()), &stmt, nullptr);
  if (rc != SQLITE_OK) return Error(rc, "preparing " + std::string(sql.substr(0, 80)));
  return Statement(stmt, this);
}

Result<int64_t> Db::QueryInt(std::string_view sql) {
  EC_ASSIGN_OR_RETURN(Statement stmt, Prepare(sql));
  EC_ASSIGN_OR_RETURN(bool row, stmt.Step());
  if (!row) return Internal(path_ + ": no result from " + std::string(sql));
  return stmt.Int(0);
}

Result<std::string> Db::ReadFileHeader(int size) {
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

Status Damaged(const std::string& path, const std::string& detail) {
  std::string line = detail;  // quick_check's report spans lines and opens with a banner
  if (const std::string banner = "*** in database main ***"; line.starts_with(banner)) line.erase(0, banner.size());
  std::replace(line.begin(), line.end(), '\n', ' ');
  line.erase(0, line.find_first_not_of(' '));
  return DataLoss(path + " is damaged (" + line + "): restore it from a backup, or move it away and profile again");
}

Status Db::Error(int code, std::string_view what) const {
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

Result<Transaction> Transaction::Begin(Db& db, Kind kind) {
  if (db.tx_ != Db::TxKind::kNone || db.InTransaction()) {
    if (kind == Kind::kWrite && db.tx_ == Db::TxKind::kRead) {
      return Internal("bug: a write inside a read transaction on " + db.path());
    }
    return Transaction(nullptr);  // joined: the outer transaction decides
  }
  EC_RETURN_IF_ERROR(db.Exec(kind == Kind::kWrite ? "BEGIN IMMEDIATE" : "BEGIN DEFERRED"));
  db.tx_ = kind == Kind::kWrite ? Db::TxKind::kWrite : Db::TxKind::kRead;
  return Transaction(&db);
}

Transaction::~Transaction() {
  if (!db_) return;
  // Fails harmlessly when SQLite already rolled back (after an I/O error, say).
  (void)db_->Exec("ROLLBACK");
  db_->tx_ = Db::TxKind::kNone;
}

Status Transaction::Commit() {
  if (!db_) return Status::Ok();
  EC_RETURN_IF_ERROR(db_->Exec("COMMIT"));  // on failure the destructor rolls back
  db_->tx_ = Db::TxKind::kNone;
  db_ = nullptr;
  return Status::Ok();
}

}  // namespace edgecost::costdb
