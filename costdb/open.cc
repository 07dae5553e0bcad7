// Opening a cost database: where it lives, refusing what is not ours, read-only media, and what it holds.
#include <pwd.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>

#include "costdb/costdb.h"
#include "costdb/internal.h"
#include "costdb/postgres.h"
#include "costdb/sqlite.h"

namespace edgecost::costdb {
using namespace internal;

namespace {

constexpr std::string_view kSqliteMagic("SQLite format 3\0", 16);

std::string HomeDir() {
  if (const char* home = std::getenv("HOME"); home && *home) return home;
  if (const passwd* user = ::getpwuid(::getuid()); user && user->pw_dir) return user->pw_dir;
  return ".";
}

fs::path Folder(const std::string& path) {
  const fs::path parent = fs::path(path).parent_path();
  return parent.empty() ? fs::path(".") : parent;
}

// A read-write open needs a writable file and folder (WAL keeps files beside
// the database). Checked before SQLite touches anything, to say what to do.
Status PrepareWritableLocation(const std::string& path, bool exists) {
  const fs::path folder = Folder(path);
  std::error_code ec;
  if (!fs::exists(folder, ec)) {
    fs::create_directories(folder, ec);
    if (ec) {
      return PermissionDenied("cannot create " + folder.string() + " for the cost database (" + ec.message() +
                              "): pass --db with a writable location or set EDGECOST_DB");
    }
  }
  if (::access(folder.c_str(), W_OK) != 0) {
    return PermissionDenied(folder.string() + " is read-only (" + std::strerror(errno) +
                            "), and the cost database needs to write there: pass --db elsewhere or set EDGECOST_DB");
  }
  if (exists && ::access(path.c_str(), W_OK) != 0) {
    return PermissionDenied(path + " is read-only (" + std::strerror(errno) + "): make it writable (chmod u+w " + path +
                            ") or pass another --db");
  }
  return Status::Ok();
}

// SQLite maps "<db>-shm" into every process that uses a WAL database and keeps
// the log in "<db>-wal". One that is not a regular file fails every call with
// an I/O error; one this process may not write turns every write into a
// misleading "read-only database". Both are refused at open, naming the file.
// (A -shm truncated while mapped raises SIGBUS instead: `edgecost serve` turns
// that into an exit with the reason, daemon/fatal_signal.h.)
Status CheckWalFiles(const std::string& path, bool writable) {
  std::error_code ec;
  const fs::path resolved = fs::weakly_canonical(path, ec);  // SQLite names them after the file a symlink leads to
  const std::string base = ec ? path : resolved.string();
  for (const char* suffix : {"-shm", "-wal"}) {
    const std::string file = base + suffix;
    const fs::file_status status = fs::symlink_status(file, ec);
    if (ec || status.type() == fs::file_type::not_found) continue;
    if (status.type() != fs::file_type::regular) {
      return FailedPrecondition(file + " is not a regular file, yet SQLite keeps the database's " +
                                (suffix == std::string("-shm") ? "shared memory" : "write-ahead log") +
                                " there: remove it while nothing uses " + path);
    }
    if (::access(file.c_str(), writable ? R_OK | W_OK : R_OK) != 0) {
      return PermissionDenied(file + " is not " + (writable ? "readable and writable" : "readable") + " (" +
                              std::strerror(errno) + "), and every process using " + path +
                              " needs it: make it so (chmod u+rw, chown, chattr -i) or remove it while nothing "
                              "uses the database");
    }
  }
  return Status::Ok();
}

// A reader needs the -shm/-wal files of a WAL database; in a folder it may not
// write, with no -wal present (so no writer is active), it reads the file as
// immutable instead of failing.
Db::Access ReadAccess(const std::string& path) {
  std::error_code ec;
  const bool folder_writable = ::access(Folder(path).c_str(), W_OK) == 0;
  return folder_writable || fs::exists(path + "-wal", ec) ? Db::Access::kReadOnly : Db::Access::kImmutable;
}

// Refuses files that are not SQLite, SQLite files of other programs, and
// databases from a newer edgecost. Returns the schema version.
Result<int> CheckIsOurs(Db& db) {
  EC_ASSIGN_OR_RETURN(std::string header, db.ReadFileHeader(static_cast<int>(kSqliteMagic.size())));
  // SQLite itself treats a short file as empty and would overwrite it.
  if (!header.empty() && header != kSqliteMagic) {
    return InvalidArgument(db.path() +
                           " is not an edgecost database (not SQLite): pass another --db or move the "
                           "file away");
  }
  EC_ASSIGN_OR_RETURN(int64_t version, db.QueryInt("PRAGMA user_version"));
  if (version > kSchemaVersion) {
    return FailedPrecondition(db.path() + " was written by a newer edgecost (schema " + std::to_string(version) +
                              " > " + std::to_string(kSchemaVersion) + "): upgrade edgecost");
  }
  if (version == 0) {
    EC_ASSIGN_OR_RETURN(int64_t objects, db.QueryInt("SELECT count(*) FROM sqlite_master"));
    if (objects > 0) {
      return InvalidArgument(db.path() +
                             " is an SQLite database of another program, not an edgecost one: pass "
                             "another --db or move the file away");
    }
  }
  // Damage is found when the file is opened, before a command writes on top of
  // it. quick_check reads every page once, without cross-checking indexes:
  // 1.7 ms for a 1.4 MB database here (10 ms from a cold cache).
  EC_ASSIGN_OR_RETURN(Statement check, db.Prepare("PRAGMA quick_check(1)"));
  EC_ASSIGN_OR_RETURN(bool row, check.Step());
  if (row && check.Text(0) != "ok") return Damaged(db.path(), check.Text(0));
  return static_cast<int>(version);
}

// A PostgreSQL schema: empty (created on a read-write open), or edgecost's at a schema this
// build reads. Returns the schema version.
Result<int> CheckPostgresIsOurs(Db& db) {
  EC_ASSIGN_OR_RETURN(int64_t version, db.connection().SchemaVersion());
  if (version > kSchemaVersion) {
    return FailedPrecondition(db.path() + " was written by a newer edgecost (schema " + std::to_string(version) +
                              " > " + std::to_string(kSchemaVersion) + "): upgrade edgecost");
  }
  if (version == 0) {
    EC_ASSIGN_OR_RETURN(int64_t tables, db.QueryInt("SELECT count(*) FROM information_schema.tables "
                                                    "WHERE table_schema = current_schema()"));
    if (tables > 0) {
      return InvalidArgument(db.path() +
                             " holds tables of another program in its schema, not edgecost's: pass another "
                             "database, or a schema of its own (options=-csearch_path%3DNAME in the URL)");
    }
  }
  return static_cast<int>(version);
}

Result<Db> OpenPostgresStore(const std::string& url, OpenOptions options) {
  const bool read_only = options.mode == OpenMode::kReadOnly;
  EC_ASSIGN_OR_RETURN(Db db, OpenPostgres(url, read_only, options.busy_timeout_ms));
  if (options.checked) return db;
  EC_ASSIGN_OR_RETURN(int version, CheckPostgresIsOurs(db));
  if (read_only && version < kSchemaVersion) {
    return FailedPrecondition(
        db.path() + " has schema " + std::to_string(version) + " < " + std::to_string(kSchemaVersion) +
        ": store something there first (e.g. `edgecost --db URL costs MODEL --store`) to create or migrate its tables");
  }
  return db;
}

}  // namespace

std::string DefaultDbPath() {
  if (const char* env = std::getenv("EDGECOST_DB"); env && *env) return env;
  if (const char* xdg = std::getenv("XDG_DATA_HOME"); xdg && *xdg) return std::string(xdg) + "/edgecost/edgecost.db";
  return HomeDir() + "/.local/share/edgecost/edgecost.db";
}

Result<CostDb> CostDb::Open(const std::string& path, OpenOptions options) {
  if (path.empty()) return InvalidArgument("no cost database path: pass --db or set EDGECOST_DB");
  if (IsPostgresUrl(path)) {
    EC_ASSIGN_OR_RETURN(Db db, OpenPostgresStore(path, options));
    CostDb cost_db(std::move(db), options.mode);
    if (options.mode == OpenMode::kReadWrite && !options.checked) EC_RETURN_IF_ERROR(cost_db.Migrate());
    return cost_db;
  }
  std::error_code ec;
  const bool exists = fs::exists(path, ec);
  if (exists && !fs::is_regular_file(path, ec)) {
    return InvalidArgument(path + " is not a regular file, so not an edgecost database: pass another --db");
  }
  const int timeout_ms = options.busy_timeout_ms;

  if (options.mode == OpenMode::kReadOnly) {
    if (!exists) {
      return NotFound("no cost database at " + path +
                      ": store costs first (e.g. `edgecost costs MODEL --store`) "
                      "or pass another --db");
    }
    EC_RETURN_IF_ERROR(CheckWalFiles(path, /*writable=*/false));
    EC_ASSIGN_OR_RETURN(Db db, Db::Open(path, ReadAccess(path), timeout_ms));
    if (options.checked) return CostDb(std::move(db), options.mode);
    EC_ASSIGN_OR_RETURN(int version, CheckIsOurs(db));
    if (version < kSchemaVersion) {
      return FailedPrecondition(path + " has schema " + std::to_string(version) + " < " +
                                std::to_string(kSchemaVersion) +
                                ": run a command that writes to it (e.g. `edgecost costs MODEL --store`) to migrate");
    }
    return CostDb(std::move(db), options.mode);
  }

  EC_RETURN_IF_ERROR(PrepareWritableLocation(path, exists));
  EC_RETURN_IF_ERROR(CheckWalFiles(path, /*writable=*/true));
  if (exists && !options.checked) {
    // Inspect through a read-only handle first, so a refused file is never modified.
    EC_ASSIGN_OR_RETURN(Db probe, Db::Open(path, Db::Access::kReadOnly, timeout_ms));
    EC_RETURN_IF_ERROR(CheckIsOurs(probe).status());
  }
  EC_ASSIGN_OR_RETURN(Db db, Db::Open(path, Db::Access::kReadWrite, timeout_ms));
  if (!options.checked) EC_RETURN_IF_ERROR(CheckIsOurs(db).status());  // the file may have changed since the probe
  EC_RETURN_IF_ERROR(db.Exec("PRAGMA foreign_keys = ON"));
  // Measurements take minutes to make: make every commit survive a power cut.
  EC_RETURN_IF_ERROR(db.Exec("PRAGMA synchronous = FULL"));
  CostDb cost_db(std::move(db), options.mode);
  if (!options.checked) EC_RETURN_IF_ERROR(cost_db.Migrate());
  return cost_db;
}

Result<Transaction> CostDb::Read() { return Transaction::Begin(db_, Kind::kRead); }

Result<Transaction> CostDb::Write() {
  if (mode_ == OpenMode::kReadOnly) {
    return PermissionDenied(path() + " was opened read-only, so nothing can be stored; open it read-write to write");
  }
  return Transaction::Begin(db_, Kind::kWrite);
}

Result<DbInfo> CostDb::Info() {
  EC_ASSIGN_OR_RETURN(Transaction tx, Read());  // counts from one snapshot agree with each other
  DbInfo info;
  info.backend = BackendName(db_.backend());
  info.path = path();
  EC_ASSIGN_OR_RETURN(int64_t version, db_.connection().SchemaVersion());
  info.schema_version = static_cast<int>(version);
  if (db_.backend() == Backend::kPostgres) {
    // Every table of the schema with its indexes and TOAST: what the store takes on disk.
    EC_ASSIGN_OR_RETURN(info.file_size_bytes,
                        db_.QueryInt("SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0)::bigint FROM pg_class c "
                                     "JOIN pg_namespace n ON n.oid = c.relnamespace "
                                     "WHERE n.nspname = current_schema() AND c.relkind = 'r'"));
  } else {
    std::error_code ec;
    const auto size = fs::file_size(path(), ec);
    info.file_size_bytes = ec ? 0 : static_cast<int64_t>(size);
    EC_ASSIGN_OR_RETURN(Statement mode, db_.Prepare("PRAGMA journal_mode"));
    EC_ASSIGN_OR_RETURN(bool found, mode.Step());
    if (found) info.journal_mode = mode.Text(0);
  }
  for (const char* table : kTables) {
    EC_ASSIGN_OR_RETURN(info.row_counts[table], db_.QueryInt(std::string("SELECT count(*) FROM ") + table));
  }
  return info;
}

}  // namespace edgecost::costdb
