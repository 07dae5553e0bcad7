#include "costdb/costdb.h"

#include <pwd.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <iterator>

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>

namespace edgecost::costdb {
namespace {

namespace fs = std::filesystem;
using Kind = Transaction::Kind;

// Forward migrations: kMigrations[i] takes PRAGMA user_version i to i + 1, each
// in its own transaction. Never edit a released step; append a new one.
// Times are UTC ISO 8601 text; protos are stored whole (deterministic encoding)
// beside the columns that queries filter or sort on.
constexpr const char* kMigrations[] = {
    R"sql(
CREATE TABLE devices (
  id INTEGER PRIMARY KEY,
  name TEXT NOT NULL UNIQUE CHECK (name <> ''),
  kind TEXT NOT NULL CHECK (kind IN ('preset', 'measured')),
  created_at TEXT NOT NULL
);
CREATE TABLE fingerprints (
  id INTEGER PRIMARY KEY,
  device_id INTEGER NOT NULL REFERENCES devices(id),
  hash TEXT NOT NULL UNIQUE CHECK (hash <> ''),
  fingerprint BLOB NOT NULL,          -- edgecost.v1.Fingerprint
  first_seen_at TEXT NOT NULL,
  superseded_at TEXT                  -- set when the device showed another fingerprint
);
-- A device has at most one current fingerprint.
CREATE UNIQUE INDEX fingerprints_current ON fingerprints(device_id) WHERE superseded_at IS NULL;
CREATE INDEX fingerprints_by_device ON fingerprints(device_id);
CREATE TABLE cost_sources (
  id INTEGER PRIMARY KEY,
  name TEXT NOT NULL UNIQUE CHECK (name <> '')   -- "poet-flops", "measured", "imported:<tool>"
);
CREATE TABLE runs (
  id INTEGER PRIMARY KEY,
  fingerprint_id INTEGER NOT NULL REFERENCES fingerprints(id),
  cost_source_id INTEGER NOT NULL REFERENCES cost_sources(id),
  started_at TEXT NOT NULL,
  finished_at TEXT,
  status TEXT NOT NULL CHECK (status IN ('running', 'complete', 'failed', 'cancelled')),
  idle_power_w REAL                   -- NULL when no sensor measured it
);
CREATE INDEX runs_by_fingerprint ON runs(fingerprint_id);
CREATE TABLE op_costs (
  id INTEGER PRIMARY KEY,
  fingerprint_id INTEGER NOT NULL REFERENCES fingerprints(id),
  op_key TEXT NOT NULL CHECK (op_key <> ''),
  run_id INTEGER REFERENCES runs(id), -- provenance; NULL for imported costs
  runtime_median_s REAL NOT NULL,
  runtime_stddev_s REAL NOT NULL,
  runtime_ci95_low_s REAL NOT NULL,
  runtime_ci95_high_s REAL NOT NULL,
  runtime_n INTEGER NOT NULL,
  energy_j REAL NOT NULL,
  dynamic_energy_j REAL NOT NULL,
  idle_power_w REAL NOT NULL,
  energy_source TEXT NOT NULL CHECK (energy_source IN ('unspecified', 'counter', 'integrated', 'estimated')),
  energy_probe TEXT NOT NULL,
  output_bytes INTEGER NOT NULL,
  workspace_bytes INTEGER NOT NULL,
  rss_growth_bytes INTEGER NOT NULL,
  op_cost BLOB NOT NULL,              -- edgecost.v1.OpCost, with the full signature
  measured_at TEXT NOT NULL,
  UNIQUE (fingerprint_id, op_key)
);
CREATE INDEX op_costs_by_run ON op_costs(run_id);
CREATE TABLE paging_costs (
  id INTEGER PRIMARY KEY,
  fingerprint_id INTEGER NOT NULL REFERENCES fingerprints(id),
  storage_path TEXT NOT NULL CHECK (storage_path <> ''),
  page_out_latency_s REAL NOT NULL,
  page_out_throughput_bytes_per_s REAL NOT NULL,
  page_in_latency_s REAL NOT NULL,
  page_in_throughput_bytes_per_s REAL NOT NULL,
  page_out_power_w REAL NOT NULL,
  page_in_power_w REAL NOT NULL,
  energy_source TEXT NOT NULL CHECK (energy_source IN ('unspecified', 'counter', 'integrated', 'estimated')),
  paging_cost BLOB NOT NULL,          -- edgecost.v1.PagingCost
  measured_at TEXT NOT NULL,
  UNIQUE (fingerprint_id, storage_path)
);
CREATE TABLE models (
  id INTEGER PRIMARY KEY,
  name TEXT NOT NULL CHECK (name <> ''),
  derivation TEXT NOT NULL,
  trainable TEXT NOT NULL,
  batch_size INTEGER NOT NULL,
  node_count INTEGER NOT NULL,
  param_bytes INTEGER NOT NULL,
  graph BLOB NOT NULL,                -- edgecost.v1.TrainingGraph
  created_at TEXT NOT NULL,
  superseded_at TEXT                  -- set when a different graph was stored for the same key
);
CREATE UNIQUE INDEX models_current ON models(name, derivation, trainable, batch_size)
  WHERE superseded_at IS NULL;
CREATE TABLE cost_tables (
  id INTEGER PRIMARY KEY,
  model_id INTEGER NOT NULL REFERENCES models(id),
  fingerprint_id INTEGER NOT NULL REFERENCES fingerprints(id),
  cost_source_id INTEGER NOT NULL REFERENCES cost_sources(id),
  note TEXT NOT NULL,
  paging BLOB,                        -- edgecost.v1.PagingCost behind page_in_j/page_out_j
  created_at TEXT NOT NULL,
  superseded_at TEXT                  -- set when a newer table for the same key was stored
);
CREATE INDEX cost_tables_by_key ON cost_tables(model_id, fingerprint_id, cost_source_id);
CREATE UNIQUE INDEX cost_tables_current ON cost_tables(model_id, fingerprint_id, cost_source_id)
  WHERE superseded_at IS NULL;
CREATE TABLE node_costs (
  cost_table_id INTEGER NOT NULL REFERENCES cost_tables(id) ON DELETE CASCADE,
  node INTEGER NOT NULL CHECK (node >= 0),
  runtime_s REAL NOT NULL,
  compute_j REAL NOT NULL,
  ram_bytes INTEGER NOT NULL,
  page_in_j REAL NOT NULL,
  page_out_j REAL NOT NULL,
  op_key TEXT NOT NULL,               -- empty when the cost is analytic
  PRIMARY KEY (cost_table_id, node)
) WITHOUT ROWID;
CREATE TABLE schedule_requests (
  id INTEGER PRIMARY KEY,
  model TEXT NOT NULL,                -- zoo model name, or the graph file
  device TEXT NOT NULL,
  cost_source TEXT NOT NULL,
  request BLOB NOT NULL UNIQUE,       -- edgecost.v1.ScheduleRequest; equal requests, equal bytes
  created_at TEXT NOT NULL
);
CREATE INDEX schedule_requests_by_model ON schedule_requests(model, device);
CREATE INDEX schedule_requests_by_device ON schedule_requests(device);
CREATE TABLE schedules (
  id INTEGER PRIMARY KEY,
  request_id INTEGER NOT NULL REFERENCES schedule_requests(id),
  cost_table_id INTEGER REFERENCES cost_tables(id),
  status INTEGER NOT NULL,            -- edgecost.v1.Schedule.Status number
  energy_j REAL NOT NULL,
  schedule BLOB NOT NULL,             -- edgecost.v1.Schedule
  created_at TEXT NOT NULL,
  superseded_at TEXT                  -- set when the request was solved again
);
CREATE INDEX schedules_by_request ON schedules(request_id);
CREATE INDEX schedules_by_cost_table ON schedules(cost_table_id);
)sql",
    // 1 -> 2: the daemon's jobs, so that a restart keeps their history and resumes the unfinished.
    R"sql(
CREATE TABLE jobs (
  id INTEGER PRIMARY KEY,
  kind TEXT NOT NULL,                 -- "profile", "regenerate"
  state INTEGER NOT NULL,             -- edgecost.v1.Job.State number
  job BLOB NOT NULL,                  -- edgecost.v1.Job
  profile_request BLOB NOT NULL,      -- edgecost.v1.StartProfileRequest; empty for other kinds
  updated_at TEXT NOT NULL
);
)sql",
};
static_assert(std::size(kMigrations) == kSchemaVersion, "one migration step per schema version");

constexpr const char* kTables[] = {"devices",     "fingerprints", "cost_sources", "runs",
                                   "op_costs",    "paging_costs", "models",       "cost_tables",
                                   "node_costs",  "schedule_requests", "schedules",    "jobs"};

constexpr std::string_view kSqliteMagic("SQLite format 3\0", 16);

// "INSERT ... ON CONFLICT (key) DO UPDATE SET every other column", with one
// `?` per column in `columns` order, so that binding follows the same list.
std::string UpsertSql(std::string_view table, std::initializer_list<std::string_view> key,
                      std::initializer_list<std::string_view> columns) {
  const auto join = [](const std::vector<std::string>& parts) {
    std::string out;
    for (const std::string& part : parts) out += (out.empty() ? "" : ", ") + part;
    return out;
  };
  std::vector<std::string> names, values, updates;
  for (std::string_view column : columns) {
    names.emplace_back(column);
    values.emplace_back("?");
    if (std::find(key.begin(), key.end(), column) == key.end()) {
      updates.push_back(std::string(column) + " = excluded." + std::string(column));
    }
  }
  return "INSERT INTO " + std::string(table) + " (" + join(names) + ") VALUES (" + join(values) +
         ") ON CONFLICT (" + join({key.begin(), key.end()}) + ") DO UPDATE SET " + join(updates);
}

std::string NowUtc() {
  const auto now = std::chrono::system_clock::now();
  const std::time_t seconds = std::chrono::system_clock::to_time_t(now);
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
  std::tm utc{};
  gmtime_r(&seconds, &utc);
  char text[32];
  const size_t n = std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%S", &utc);
  std::snprintf(text + n, sizeof text - n, ".%03dZ", static_cast<int>(ms));
  return text;
}

std::string Serialize(const google::protobuf::MessageLite& message) {
  std::string bytes;
  {
    google::protobuf::io::StringOutputStream stream(&bytes);
    google::protobuf::io::CodedOutputStream coded(&stream);
    coded.SetSerializationDeterministic(true);  // equal messages must give equal blobs
    message.SerializeToCodedStream(&coded);
  }
  return bytes;
}

template <typename Message>
Result<Message> Parse(const std::string& bytes, const std::string& what, const std::string& path) {
  Message message;
  if (!message.ParseFromString(bytes)) {
    return Internal("a stored " + what + " in " + path + " does not decode: the file is damaged or was edited");
  }
  return message;
}

// Reads every row of `stmt` with `read_row`, which returns a Status.
template <typename ReadRow>
Status ForEachRow(Statement& stmt, ReadRow read_row) {
  for (;;) {
    EC_ASSIGN_OR_RETURN(bool row, stmt.Step());
    if (!row) return Status::Ok();
    EC_RETURN_IF_ERROR(read_row());
  }
}

std::string EnergySourceText(v1::EnergySource source) {
  std::string name = v1::EnergySource_Name(source);  // ENERGY_SOURCE_COUNTER -> counter
  name.erase(0, std::string_view("ENERGY_SOURCE_").size());
  std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::tolower(c); });
  return name;
}

constexpr std::pair<RunStatus, const char*> kRunStatusText[] = {
    {RunStatus::kRunning, "running"},
    {RunStatus::kComplete, "complete"},
    {RunStatus::kFailed, "failed"},
    {RunStatus::kCancelled, "cancelled"},
};

const char* RunStatusText(RunStatus status) {
  for (const auto& [value, text] : kRunStatusText) {
    if (value == status) return text;
  }
  return "running";
}

RunStatus RunStatusFromText(const std::string& text) {
  for (const auto& [value, name] : kRunStatusText) {
    if (text == name) return value;
  }
  return RunStatus::kRunning;
}

Result<std::string> DeviceKindText(const v1::Device& device) {
  switch (device.kind()) {
    case v1::Device::KIND_PRESET:
      return std::string("preset");
    case v1::Device::KIND_MEASURED:
      return std::string("measured");
    default:
      return InvalidArgument("device '" + device.name() + "' has no kind: set it to preset or measured");
  }
}

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
    return PermissionDenied(path + " is read-only (" + std::strerror(errno) + "): make it writable (chmod u+w " +
                            path + ") or pass another --db");
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
    return InvalidArgument(db.path() + " is not an edgecost database (not SQLite): pass another --db or move the "
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
      return InvalidArgument(db.path() + " is an SQLite database of another program, not an edgecost one: pass "
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

}  // namespace

std::string DefaultDbPath() {
  if (const char* env = std::getenv("EDGECOST_DB"); env && *env) return env;
  if (const char* xdg = std::getenv("XDG_DATA_HOME"); xdg && *xdg) return std::string(xdg) + "/edgecost/edgecost.db";
  return HomeDir() + "/.local/share/edgecost/edgecost.db";
}

Result<CostDb> CostDb::Open(const std::string& path, OpenOptions options) {
  if (path.empty()) return InvalidArgument("no cost database path: pass --db or set EDGECOST_DB");
  std::error_code ec;
  const bool exists = fs::exists(path, ec);
  if (exists && !fs::is_regular_file(path, ec)) {
    return InvalidArgument(path + " is not a regular file, so not an edgecost database: pass another --db");
  }
  const int timeout_ms = options.busy_timeout_ms;

  if (options.mode == OpenMode::kReadOnly) {
    if (!exists) {
      return NotFound("no cost database at " + path + ": store costs first (e.g. `edgecost costs MODEL --store`) "
                      "or pass another --db");
    }
    EC_ASSIGN_OR_RETURN(Db db, Db::Open(path, ReadAccess(path), timeout_ms));
    EC_ASSIGN_OR_RETURN(int version, CheckIsOurs(db));
    if (version < kSchemaVersion) {
      return FailedPrecondition(path + " has schema " + std::to_string(version) + " < " +
                                std::to_string(kSchemaVersion) +
                                ": run a command that writes to it (e.g. `edgecost costs MODEL --store`) to migrate");
    }
    return CostDb(std::move(db), options.mode);
  }

  EC_RETURN_IF_ERROR(PrepareWritableLocation(path, exists));
  if (exists) {
    // Inspect through a read-only handle first, so a refused file is never modified.
    EC_ASSIGN_OR_RETURN(Db probe, Db::Open(path, Db::Access::kReadOnly, timeout_ms));
    EC_RETURN_IF_ERROR(CheckIsOurs(probe).status());
  }
  EC_ASSIGN_OR_RETURN(Db db, Db::Open(path, Db::Access::kReadWrite, timeout_ms));
  EC_RETURN_IF_ERROR(CheckIsOurs(db).status());  // the file may have changed since the probe
  EC_RETURN_IF_ERROR(db.Exec("PRAGMA foreign_keys = ON"));
  // Measurements take minutes to make: make every commit survive a power cut.
  EC_RETURN_IF_ERROR(db.Exec("PRAGMA synchronous = FULL"));
  CostDb cost_db(std::move(db), options.mode);
  EC_RETURN_IF_ERROR(cost_db.Migrate());
  return cost_db;
}

Status CostDb::Migrate() {
  EC_ASSIGN_OR_RETURN(int64_t version, db_.QueryInt("PRAGMA user_version"));
  if (version == kSchemaVersion) return Status::Ok();
  // WAL is a property of the file: readers go on while a profile writes.
  EC_RETURN_IF_ERROR(db_.Exec("PRAGMA journal_mode = WAL"));
  for (;;) {
    EC_ASSIGN_OR_RETURN(Transaction tx, Transaction::Begin(db_, Kind::kWrite));
    // Re-read under the write lock: another process may have migrated meanwhile.
    EC_ASSIGN_OR_RETURN(version, db_.QueryInt("PRAGMA user_version"));
    if (version >= kSchemaVersion) return Status::Ok();
    const std::string step = "migrating " + path() + " from schema " + std::to_string(version) + " to " +
                             std::to_string(version + 1);
    EC_RETURN_IF_ERROR(db_.Exec(kMigrations[version]).WithContext(step));
    EC_RETURN_IF_ERROR(db_.Exec("PRAGMA user_version = " + std::to_string(version + 1)));
    EC_RETURN_IF_ERROR(tx.Commit());
  }
}

Result<Transaction> CostDb::Read() { return Transaction::Begin(db_, Kind::kRead); }

Result<Transaction> CostDb::Write() {
  if (mode_ == OpenMode::kReadOnly) {
    return PermissionDenied(path() + " was opened read-only, so nothing can be stored; open it read-write to write");
  }
  return Transaction::Begin(db_, Kind::kWrite);
}

Result<int64_t> CostDb::CostSourceId(const std::string& name) {
  if (name.empty()) return InvalidArgument("a cost source name is required (e.g. poet-flops, measured)");
  EC_ASSIGN_OR_RETURN(Statement insert,
                      db_.Prepare("INSERT INTO cost_sources (name) VALUES (?) ON CONFLICT (name) DO NOTHING"));
  EC_RETURN_IF_ERROR(insert.Bind(1, name).Run());
  EC_ASSIGN_OR_RETURN(Statement select, db_.Prepare("SELECT id FROM cost_sources WHERE name = ?"));
  EC_ASSIGN_OR_RETURN(bool row, select.Bind(1, name).Step());
  if (!row) return Internal("cost source '" + name + "' vanished from " + path());
  return select.Int(0);
}

Result<CostDb::FingerprintRow> CostDb::FindFingerprint(const std::string& hash) {
  EC_ASSIGN_OR_RETURN(Statement stmt, db_.Prepare(
      "SELECT f.id, d.name FROM fingerprints f JOIN devices d ON d.id = f.device_id WHERE f.hash = ?"));
  EC_ASSIGN_OR_RETURN(bool row, stmt.Bind(1, hash).Step());
  if (!row) {
    return NotFound("no device with fingerprint " + hash + " in " + path() +
                    ": profile the device first (`edgecost profile`)");
  }
  return FingerprintRow{stmt.Int(0), stmt.Text(1)};
}

Result<int64_t> CostDb::UpsertDevice(const v1::Device& device) {
  if (device.name().empty()) return InvalidArgument("a device needs a name");
  EC_ASSIGN_OR_RETURN(std::string kind, DeviceKindText(device));
  const std::string& hash = device.fingerprint().hash();
  if (hash.empty()) return InvalidArgument("device '" + device.name() + "' has no fingerprint hash");
  const std::string now = NowUtc();

  EC_ASSIGN_OR_RETURN(Transaction tx, Write());
  EC_ASSIGN_OR_RETURN(Statement insert, db_.Prepare(
      "INSERT INTO devices (name, kind, created_at) VALUES (?, ?, ?) ON CONFLICT (name) DO NOTHING"));
  EC_RETURN_IF_ERROR(insert.Bind(1, device.name()).Bind(2, kind).Bind(3, now).Run());
  EC_ASSIGN_OR_RETURN(Statement select, db_.Prepare("SELECT id, kind FROM devices WHERE name = ?"));
  EC_ASSIGN_OR_RETURN(bool found, select.Bind(1, device.name()).Step());
  if (!found) return Internal("device '" + device.name() + "' vanished from " + path());
  const int64_t device_id = select.Int(0);
  if (select.Text(1) != kind) {
    return InvalidArgument("device '" + device.name() + "' is recorded as " + select.Text(1) + ", not " + kind +
                           ": give the " + kind + " device another name");
  }

  EC_ASSIGN_OR_RETURN(Statement existing, db_.Prepare(
      "SELECT f.device_id, d.name, f.superseded_at IS NOT NULL FROM fingerprints f "
      "JOIN devices d ON d.id = f.device_id WHERE f.hash = ?"));
  EC_ASSIGN_OR_RETURN(bool known, existing.Bind(1, hash).Step());
  if (known && existing.Int(0) != device_id) {
    return InvalidArgument("fingerprint " + hash + " is already recorded for device '" + existing.Text(1) +
                           "': use that name for this device");
  }
  if (!known || existing.Int(2) != 0) {
    // Supersede the current fingerprint before another becomes current (one current per device).
    EC_ASSIGN_OR_RETURN(Statement supersede, db_.Prepare(
        "UPDATE fingerprints SET superseded_at = ? WHERE device_id = ? AND superseded_at IS NULL"));
    EC_RETURN_IF_ERROR(supersede.Bind(1, now).Bind(2, device_id).Run());
    if (known) {  // the hardware went back to an earlier state; its costs apply again
      EC_ASSIGN_OR_RETURN(Statement revive,
                          db_.Prepare("UPDATE fingerprints SET superseded_at = NULL WHERE hash = ?"));
      EC_RETURN_IF_ERROR(revive.Bind(1, hash).Run());
    } else {
      EC_ASSIGN_OR_RETURN(Statement add, db_.Prepare(
          "INSERT INTO fingerprints (device_id, hash, fingerprint, first_seen_at) VALUES (?, ?, ?, ?)"));
      EC_RETURN_IF_ERROR(
          add.Bind(1, device_id).Bind(2, hash).BindBlob(3, Serialize(device.fingerprint())).Bind(4, now).Run());
    }
  }
  EC_RETURN_IF_ERROR(tx.Commit());
  return device_id;
}

Result<std::vector<v1::Device>> CostDb::ReadDevices(const std::optional<std::string>& name) {
  EC_ASSIGN_OR_RETURN(Statement stmt, db_.Prepare(
      "SELECT d.name, d.kind, f.fingerprint, f.superseded_at IS NOT NULL FROM devices d "
      "JOIN fingerprints f ON f.device_id = d.id WHERE ?1 IS NULL OR d.name = ?1 "
      "ORDER BY d.name, f.superseded_at IS NOT NULL, f.superseded_at DESC, f.id DESC"));
  stmt.Bind(1, name);
  std::vector<v1::Device> devices;
  EC_RETURN_IF_ERROR(ForEachRow(stmt, [&]() -> Status {
    if (devices.empty() || devices.back().name() != stmt.Text(0)) {
      devices.emplace_back().set_name(stmt.Text(0));
      devices.back().set_kind(stmt.Text(1) == "preset" ? v1::Device::KIND_PRESET : v1::Device::KIND_MEASURED);
    }
    v1::Device& device = devices.back();
    EC_ASSIGN_OR_RETURN(v1::Fingerprint fingerprint, Parse<v1::Fingerprint>(stmt.Blob(2), "fingerprint", path()));
    *(stmt.Int(3) == 0 ? device.mutable_fingerprint() : device.add_history()) = std::move(fingerprint);
    return Status::Ok();
  }));
  return devices;
}

Result<v1::Device> CostDb::GetDevice(const std::string& name) {
  EC_ASSIGN_OR_RETURN(std::vector<v1::Device> devices, ReadDevices(name));
  if (devices.empty()) return NotFound("no device '" + name + "' in " + path() + ": see `edgecost db info`");
  return std::move(devices.front());
}

Result<std::vector<v1::Device>> CostDb::ListDevices() { return ReadDevices(std::nullopt); }

Result<int64_t> CostDb::PutModelGraph(const v1::TrainingGraph& graph) {
  if (graph.model().empty()) return InvalidArgument("a training graph needs a model name");
  const std::string blob = Serialize(graph);
  const std::string now = NowUtc();
  EC_ASSIGN_OR_RETURN(Transaction tx, Write());
  EC_ASSIGN_OR_RETURN(Statement current, db_.Prepare(
      "SELECT id, graph FROM models WHERE name = ? AND derivation = ? AND trainable = ? AND batch_size = ? "
      "AND superseded_at IS NULL"));
  EC_ASSIGN_OR_RETURN(bool found, current.Bind(1, graph.model())
                                      .Bind(2, graph.derivation())
                                      .Bind(3, graph.trainable())
                                      .Bind(4, graph.batch_size())
                                      .Step());
  if (found && current.Blob(1) == blob) return current.Int(0);  // already stored; nothing to write
  if (found) {
    EC_ASSIGN_OR_RETURN(Statement supersede, db_.Prepare("UPDATE models SET superseded_at = ? WHERE id = ?"));
    EC_RETURN_IF_ERROR(supersede.Bind(1, now).Bind(2, current.Int(0)).Run());
  }
  EC_ASSIGN_OR_RETURN(Statement insert, db_.Prepare(
      "INSERT INTO models (name, derivation, trainable, batch_size, node_count, param_bytes, graph, created_at) "
      "VALUES (?, ?, ?, ?, ?, ?, ?, ?)"));
  EC_RETURN_IF_ERROR(insert.Bind(1, graph.model())
                         .Bind(2, graph.derivation())
                         .Bind(3, graph.trainable())
                         .Bind(4, graph.batch_size())
                         .Bind(5, graph.nodes_size())
                         .Bind(6, graph.param_bytes())
                         .BindBlob(7, blob)
                         .Bind(8, now)
                         .Run());
  const int64_t id = db_.LastInsertId();
  EC_RETURN_IF_ERROR(tx.Commit());
  return id;
}

Result<std::vector<v1::TrainingGraph>> CostDb::ListModelGraphs() {
  EC_ASSIGN_OR_RETURN(Statement stmt, db_.Prepare(
      "SELECT graph FROM models WHERE superseded_at IS NULL ORDER BY name, derivation, trainable, batch_size"));
  std::vector<v1::TrainingGraph> graphs;
  EC_RETURN_IF_ERROR(ForEachRow(stmt, [&]() -> Status {
    EC_ASSIGN_OR_RETURN(graphs.emplace_back(), Parse<v1::TrainingGraph>(stmt.Blob(0), "graph", path()));
    return Status::Ok();
  }));
  return graphs;
}

Result<int64_t> CostDb::PutCostTable(const v1::CostTable& table) {
  const int nodes = table.graph().nodes_size();
  if (table.costs_size() != nodes) {
    return InvalidArgument("cost table has " + std::to_string(table.costs_size()) + " costs for " +
                           std::to_string(nodes) + " nodes");
  }
  for (const v1::NodeCost& cost : table.costs()) {
    if (cost.node() >= static_cast<uint32_t>(nodes)) {
      return InvalidArgument("cost table names node " + std::to_string(cost.node()) + " of a graph with " +
                             std::to_string(nodes) + " nodes");
    }
  }
  // Analytic presets have no profiler to record them, so they are created on first use.
  const bool preset = table.fingerprint_hash().empty() || table.fingerprint_hash().starts_with("preset:");
  if (preset && table.device().empty()) return InvalidArgument("a preset cost table needs a device name");
  const std::string hash = table.fingerprint_hash().empty() ? "preset:" + table.device() : table.fingerprint_hash();
  const std::string now = NowUtc();

  EC_ASSIGN_OR_RETURN(Transaction tx, Write());
  Result<FingerprintRow> fingerprint = FindFingerprint(hash);
  if (!fingerprint.ok() && preset && fingerprint.status().code() == ErrorCode::kNotFound) {
    v1::Device device;
    device.set_name(table.device());
    device.set_kind(v1::Device::KIND_PRESET);
    device.mutable_fingerprint()->set_board_preset(table.device());
    device.mutable_fingerprint()->set_hash(hash);
    EC_RETURN_IF_ERROR(UpsertDevice(device).status());
    fingerprint = FindFingerprint(hash);
  }
  if (!fingerprint.ok()) return fingerprint.status();
  if (!table.device().empty() && fingerprint->device != table.device()) {
    return InvalidArgument("fingerprint " + hash + " belongs to device '" + fingerprint->device + "', not '" +
                           table.device() + "'");
  }
  EC_ASSIGN_OR_RETURN(int64_t model_id, PutModelGraph(table.graph()));
  EC_ASSIGN_OR_RETURN(int64_t source_id, CostSourceId(table.cost_source()));

  EC_ASSIGN_OR_RETURN(Statement supersede, db_.Prepare(
      "UPDATE cost_tables SET superseded_at = ? WHERE model_id = ? AND fingerprint_id = ? AND cost_source_id = ? "
      "AND superseded_at IS NULL"));
  EC_RETURN_IF_ERROR(supersede.Bind(1, now).Bind(2, model_id).Bind(3, fingerprint->id).Bind(4, source_id).Run());
  EC_ASSIGN_OR_RETURN(Statement insert, db_.Prepare(
      "INSERT INTO cost_tables (model_id, fingerprint_id, cost_source_id, note, paging, created_at) "
      "VALUES (?, ?, ?, ?, ?, ?)"));
  insert.Bind(1, model_id).Bind(2, fingerprint->id).Bind(3, source_id).Bind(4, table.note()).Bind(6, now);
  if (table.has_paging()) {
    insert.BindBlob(5, Serialize(table.paging()));
  } else {
    insert.Bind(5, nullptr);
  }
  EC_RETURN_IF_ERROR(insert.Run());
  const int64_t table_id = db_.LastInsertId();
  EC_ASSIGN_OR_RETURN(Statement node, db_.Prepare(
      "INSERT INTO node_costs (cost_table_id, node, runtime_s, compute_j, ram_bytes, page_in_j, page_out_j, op_key) "
      "VALUES (?, ?, ?, ?, ?, ?, ?, ?)"));
  for (const v1::NodeCost& cost : table.costs()) {
    EC_RETURN_IF_ERROR(node.Bind(1, table_id)
                           .Bind(2, cost.node())
                           .Bind(3, cost.runtime_s())
                           .Bind(4, cost.compute_j())
                           .Bind(5, cost.ram_bytes())
                           .Bind(6, cost.page_in_j())
                           .Bind(7, cost.page_out_j())
                           .Bind(8, cost.op_key())
                           .Run()
                           .WithContext("storing the cost of node " + std::to_string(cost.node())));
  }
  EC_RETURN_IF_ERROR(tx.Commit());
  return table_id;
}

Result<v1::CostTable> CostDb::GetCostTableById(int64_t id) {
  EC_ASSIGN_OR_RETURN(Transaction tx, Read());  // the header and the rows from one snapshot
  EC_ASSIGN_OR_RETURN(Statement head, db_.Prepare(
      "SELECT m.graph, d.name, f.hash, s.name, t.note, t.paging FROM cost_tables t "
      "JOIN models m ON m.id = t.model_id JOIN fingerprints f ON f.id = t.fingerprint_id "
      "JOIN devices d ON d.id = f.device_id JOIN cost_sources s ON s.id = t.cost_source_id WHERE t.id = ?"));
  EC_ASSIGN_OR_RETURN(bool found, head.Bind(1, id).Step());
  if (!found) return NotFound("no cost table #" + std::to_string(id) + " in " + path());
  v1::CostTable table;
  EC_ASSIGN_OR_RETURN(*table.mutable_graph(), Parse<v1::TrainingGraph>(head.Blob(0), "graph", path()));
  table.set_device(head.Text(1));
  table.set_fingerprint_hash(head.Text(2));
  table.set_cost_source(head.Text(3));
  table.set_note(head.Text(4));
  if (!head.IsNull(5)) {
    EC_ASSIGN_OR_RETURN(*table.mutable_paging(), Parse<v1::PagingCost>(head.Blob(5), "paging cost", path()));
  }
  EC_ASSIGN_OR_RETURN(Statement rows, db_.Prepare(
      "SELECT node, runtime_s, compute_j, ram_bytes, page_in_j, page_out_j, op_key FROM node_costs "
      "WHERE cost_table_id = ? ORDER BY node"));
  rows.Bind(1, id);
  EC_RETURN_IF_ERROR(ForEachRow(rows, [&]() -> Status {
    v1::NodeCost& cost = *table.add_costs();
    cost.set_node(static_cast<uint32_t>(rows.Int(0)));
    cost.set_runtime_s(rows.Double(1));
    cost.set_compute_j(rows.Double(2));
    cost.set_ram_bytes(static_cast<uint64_t>(rows.Int(3)));
    cost.set_page_in_j(rows.Double(4));
    cost.set_page_out_j(rows.Double(5));
    cost.set_op_key(rows.Text(6));
    return Status::Ok();
  }));
  return table;
}

Result<v1::CostTable> CostDb::GetCostTable(const CostTableKey& key) {
  EC_ASSIGN_OR_RETURN(Transaction tx, Read());
  EC_ASSIGN_OR_RETURN(Statement stmt, db_.Prepare(
      "SELECT t.id FROM cost_tables t JOIN models m ON m.id = t.model_id "
      "JOIN fingerprints f ON f.id = t.fingerprint_id JOIN devices d ON d.id = f.device_id "
      "JOIN cost_sources s ON s.id = t.cost_source_id "
      "WHERE m.name = ? AND d.name = ? AND s.name = ? AND m.batch_size = ? AND m.derivation = ? "
      "AND m.trainable = ? AND t.superseded_at IS NULL AND f.superseded_at IS NULL AND m.superseded_at IS NULL "
      "ORDER BY t.id DESC LIMIT 1"));
  EC_ASSIGN_OR_RETURN(bool found, stmt.Bind(1, key.model)
                                      .Bind(2, key.device)
                                      .Bind(3, key.cost_source)
                                      .Bind(4, key.batch_size)
                                      .Bind(5, key.derivation)
                                      .Bind(6, key.trainable)
                                      .Step());
  if (!found) {
    return NotFound("no current " + key.cost_source + " cost table for " + key.model + " on " + key.device +
                    " (batch size " + std::to_string(key.batch_size) + ", derivation " + key.derivation +
                    ", trainable " + key.trainable + ") in " + path() + ": compute one with `edgecost costs " +
                    key.model + " --platform " + key.device + " --store`, or profile the device");
  }
  return GetCostTableById(stmt.Int(0));
}

Result<int64_t> CostDb::BeginRun(const std::string& fingerprint_hash, const std::string& cost_source) {
  EC_ASSIGN_OR_RETURN(Transaction tx, Write());
  EC_ASSIGN_OR_RETURN(FingerprintRow fingerprint, FindFingerprint(fingerprint_hash));
  EC_ASSIGN_OR_RETURN(int64_t source_id, CostSourceId(cost_source));
  EC_ASSIGN_OR_RETURN(Statement stmt, db_.Prepare(
      "INSERT INTO runs (fingerprint_id, cost_source_id, started_at, status) VALUES (?, ?, ?, ?)"));
  EC_RETURN_IF_ERROR(stmt.Bind(1, fingerprint.id)
                         .Bind(2, source_id)
                         .Bind(3, NowUtc())
                         .Bind(4, RunStatusText(RunStatus::kRunning))
                         .Run());
  const int64_t id = db_.LastInsertId();
  EC_RETURN_IF_ERROR(tx.Commit());
  return id;
}

Status CostDb::FinishRun(int64_t run_id, RunStatus status, std::optional<double> idle_power_w) {
  if (status == RunStatus::kRunning) return InvalidArgument("a run finishes as complete, failed or cancelled");
  EC_ASSIGN_OR_RETURN(Transaction tx, Write());
  EC_ASSIGN_OR_RETURN(Statement stmt, db_.Prepare(
      "UPDATE runs SET status = ?, finished_at = ?, idle_power_w = coalesce(?, idle_power_w) WHERE id = ?"));
  EC_RETURN_IF_ERROR(
      stmt.Bind(1, RunStatusText(status)).Bind(2, NowUtc()).Bind(3, idle_power_w).Bind(4, run_id).Run());
  if (db_.Changes() == 0) return NotFound("no run #" + std::to_string(run_id) + " in " + path());
  return tx.Commit();
}

Result<StoredRun> CostDb::GetRun(int64_t run_id) {
  EC_ASSIGN_OR_RETURN(Statement stmt, db_.Prepare(
      "SELECT f.hash, s.name, r.status, r.started_at, r.finished_at, r.idle_power_w FROM runs r "
      "JOIN fingerprints f ON f.id = r.fingerprint_id JOIN cost_sources s ON s.id = r.cost_source_id "
      "WHERE r.id = ?"));
  EC_ASSIGN_OR_RETURN(bool found, stmt.Bind(1, run_id).Step());
  if (!found) return NotFound("no run #" + std::to_string(run_id) + " in " + path());
  return StoredRun{.id = run_id,
                   .fingerprint_hash = stmt.Text(0),
                   .cost_source = stmt.Text(1),
                   .status = RunStatusFromText(stmt.Text(2)),
                   .started_at = stmt.Text(3),
                   .finished_at = stmt.Text(4),
                   .idle_power_w = stmt.OptionalDouble(5)};
}

Status CostDb::PutOpCost(const std::string& fingerprint_hash, int64_t run_id, const v1::OpCost& cost) {
  if (cost.signature().key().empty()) return InvalidArgument("an op cost needs its signature key");
  EC_ASSIGN_OR_RETURN(Transaction tx, Write());
  EC_ASSIGN_OR_RETURN(FingerprintRow fingerprint, FindFingerprint(fingerprint_hash));
  if (run_id != 0) {
    EC_ASSIGN_OR_RETURN(Statement run, db_.Prepare("SELECT fingerprint_id FROM runs WHERE id = ?"));
    EC_ASSIGN_OR_RETURN(bool found, run.Bind(1, run_id).Step());
    if (!found) return NotFound("no run #" + std::to_string(run_id) + " in " + path() + ": start one with BeginRun");
    if (run.Int(0) != fingerprint.id) {
      return InvalidArgument("run #" + std::to_string(run_id) + " measured another fingerprint than " +
                             fingerprint_hash);
    }
  }
  static const std::string kSql = UpsertSql(
      "op_costs", {"fingerprint_id", "op_key"},
      {"fingerprint_id", "op_key", "run_id", "runtime_median_s", "runtime_stddev_s", "runtime_ci95_low_s",
       "runtime_ci95_high_s", "runtime_n", "energy_j", "dynamic_energy_j", "idle_power_w", "energy_source",
       "energy_probe", "output_bytes", "workspace_bytes", "rss_growth_bytes", "op_cost", "measured_at"});
  EC_ASSIGN_OR_RETURN(Statement stmt, db_.Prepare(kSql));
  const v1::RuntimeStats& runtime = cost.runtime();
  EC_RETURN_IF_ERROR(stmt.Bind(1, fingerprint.id)
                         .Bind(2, cost.signature().key())
                         .Bind(3, run_id != 0 ? std::optional<int64_t>(run_id) : std::nullopt)
                         .Bind(4, runtime.median_s())
                         .Bind(5, runtime.stddev_s())
                         .Bind(6, runtime.ci95_low_s())
                         .Bind(7, runtime.ci95_high_s())
                         .Bind(8, runtime.repetitions())
                         .Bind(9, cost.energy_j())
                         .Bind(10, cost.dynamic_energy_j())
                         .Bind(11, cost.idle_power_w())
                         .Bind(12, EnergySourceText(cost.energy_source()))
                         .Bind(13, cost.energy_probe())
                         .Bind(14, cost.output_bytes())
                         .Bind(15, cost.workspace_bytes())
                         .Bind(16, cost.rss_growth_bytes())
                         .BindBlob(17, Serialize(cost))
                         .Bind(18, NowUtc())
                         .Run());
  return tx.Commit();
}

Result<std::optional<v1::OpCost>> CostDb::GetOpCost(const std::string& fingerprint_hash, const std::string& op_key) {
  EC_ASSIGN_OR_RETURN(Statement stmt, db_.Prepare(
      "SELECT o.op_cost FROM op_costs o JOIN fingerprints f ON f.id = o.fingerprint_id "
      "WHERE f.hash = ? AND o.op_key = ?"));
  EC_ASSIGN_OR_RETURN(bool found, stmt.Bind(1, fingerprint_hash).Bind(2, op_key).Step());
  if (!found) return std::optional<v1::OpCost>();
  EC_ASSIGN_OR_RETURN(v1::OpCost cost, Parse<v1::OpCost>(stmt.Blob(0), "op cost", path()));
  return std::optional<v1::OpCost>(std::move(cost));
}

Result<std::vector<v1::OpCost>> CostDb::ListOpCosts(const std::string& fingerprint_hash) {
  EC_ASSIGN_OR_RETURN(Statement stmt, db_.Prepare(
      "SELECT o.op_cost FROM op_costs o JOIN fingerprints f ON f.id = o.fingerprint_id WHERE f.hash = ? "
      "ORDER BY o.op_key"));
  stmt.Bind(1, fingerprint_hash);
  std::vector<v1::OpCost> costs;
  EC_RETURN_IF_ERROR(ForEachRow(stmt, [&]() -> Status {
    EC_ASSIGN_OR_RETURN(costs.emplace_back(), Parse<v1::OpCost>(stmt.Blob(0), "op cost", path()));
    return Status::Ok();
  }));
  return costs;
}

Status CostDb::PutPagingCost(const std::string& fingerprint_hash, const v1::PagingCost& cost) {
  if (cost.storage_path().empty()) return InvalidArgument("a paging cost needs its storage path");
  EC_ASSIGN_OR_RETURN(Transaction tx, Write());
  EC_ASSIGN_OR_RETURN(FingerprintRow fingerprint, FindFingerprint(fingerprint_hash));
  static const std::string kSql = UpsertSql(
      "paging_costs", {"fingerprint_id", "storage_path"},
      {"fingerprint_id", "storage_path", "page_out_latency_s", "page_out_throughput_bytes_per_s",
       "page_in_latency_s", "page_in_throughput_bytes_per_s", "page_out_power_w", "page_in_power_w",
       "energy_source", "paging_cost", "measured_at"});
  EC_ASSIGN_OR_RETURN(Statement stmt, db_.Prepare(kSql));
  EC_RETURN_IF_ERROR(stmt.Bind(1, fingerprint.id)
                         .Bind(2, cost.storage_path())
                         .Bind(3, cost.page_out_latency_s())
                         .Bind(4, cost.page_out_throughput_bytes_per_s())
                         .Bind(5, cost.page_in_latency_s())
                         .Bind(6, cost.page_in_throughput_bytes_per_s())
                         .Bind(7, cost.page_out_power_w())
                         .Bind(8, cost.page_in_power_w())
                         .Bind(9, EnergySourceText(cost.energy_source()))
                         .BindBlob(10, Serialize(cost))
                         .Bind(11, NowUtc())
                         .Run());
  return tx.Commit();
}

Result<std::optional<v1::PagingCost>> CostDb::GetPagingCost(const std::string& fingerprint_hash) {
  EC_ASSIGN_OR_RETURN(Statement stmt, db_.Prepare(
      "SELECT p.paging_cost FROM paging_costs p JOIN fingerprints f ON f.id = p.fingerprint_id WHERE f.hash = ? "
      "ORDER BY p.measured_at DESC, p.id DESC LIMIT 1"));
  EC_ASSIGN_OR_RETURN(bool found, stmt.Bind(1, fingerprint_hash).Step());
  if (!found) return std::optional<v1::PagingCost>();
  EC_ASSIGN_OR_RETURN(v1::PagingCost cost, Parse<v1::PagingCost>(stmt.Blob(0), "paging cost", path()));
  return std::optional<v1::PagingCost>(std::move(cost));
}

Result<int64_t> CostDb::PutScheduleRequest(const v1::ScheduleRequest& request) {
  const std::string blob = Serialize(request);
  EC_ASSIGN_OR_RETURN(Transaction tx, Write());
  EC_ASSIGN_OR_RETURN(Statement insert, db_.Prepare(
      "INSERT INTO schedule_requests (model, device, cost_source, request, created_at) VALUES (?, ?, ?, ?, ?) "
      "ON CONFLICT (request) DO NOTHING"));
  EC_RETURN_IF_ERROR(insert.Bind(1, request.model().empty() ? request.graph_file() : request.model())
                         .Bind(2, request.device())
                         .Bind(3, request.cost_source())
                         .BindBlob(4, blob)
                         .Bind(5, NowUtc())
                         .Run());
  EC_ASSIGN_OR_RETURN(Statement select, db_.Prepare("SELECT id FROM schedule_requests WHERE request = ?"));
  EC_ASSIGN_OR_RETURN(bool found, select.BindBlob(1, blob).Step());
  if (!found) return Internal("a schedule request vanished from " + path());
  const int64_t id = select.Int(0);
  EC_RETURN_IF_ERROR(tx.Commit());
  return id;
}

Result<int64_t> CostDb::PutSchedule(int64_t request_id, int64_t cost_table_id, const v1::Schedule& schedule) {
  const std::string now = NowUtc();
  EC_ASSIGN_OR_RETURN(Transaction tx, Write());
  // Named checks rather than a bare FOREIGN KEY failure.
  EC_ASSIGN_OR_RETURN(int64_t requests,
                      db_.QueryInt("SELECT count(*) FROM schedule_requests WHERE id = " + std::to_string(request_id)));
  if (requests == 0) {
    return NotFound("no schedule request #" + std::to_string(request_id) + " in " + path() +
                    ": store the request first");
  }
  if (cost_table_id != 0) {
    EC_ASSIGN_OR_RETURN(int64_t tables,
                        db_.QueryInt("SELECT count(*) FROM cost_tables WHERE id = " + std::to_string(cost_table_id)));
    if (tables == 0) return NotFound("no cost table #" + std::to_string(cost_table_id) + " in " + path());
  }
  EC_ASSIGN_OR_RETURN(Statement supersede, db_.Prepare(
      "UPDATE schedules SET superseded_at = ? WHERE request_id = ? AND superseded_at IS NULL"));
  EC_RETURN_IF_ERROR(supersede.Bind(1, now).Bind(2, request_id).Run());
  EC_ASSIGN_OR_RETURN(Statement insert, db_.Prepare(
      "INSERT INTO schedules (request_id, cost_table_id, status, energy_j, schedule, created_at) "
      "VALUES (?, ?, ?, ?, ?, ?)"));
  EC_RETURN_IF_ERROR(insert.Bind(1, request_id)
                         .Bind(2, cost_table_id != 0 ? std::optional<int64_t>(cost_table_id) : std::nullopt)
                         .Bind(3, static_cast<int>(schedule.status()))
                         .Bind(4, schedule.energy().total_j())
                         .BindBlob(5, Serialize(schedule))
                         .Bind(6, now)
                         .Run());
  const int64_t id = db_.LastInsertId();
  EC_RETURN_IF_ERROR(tx.Commit());
  return id;
}

Result<v1::Schedule> CostDb::GetSchedule(int64_t id) {
  EC_ASSIGN_OR_RETURN(Statement stmt, db_.Prepare("SELECT schedule FROM schedules WHERE id = ?"));
  EC_ASSIGN_OR_RETURN(bool found, stmt.Bind(1, id).Step());
  if (!found) return NotFound("no schedule #" + std::to_string(id) + " in " + path());
  return Parse<v1::Schedule>(stmt.Blob(0), "schedule", path());
}

Result<std::vector<StoredSchedule>> CostDb::ListSchedules(const std::string& model, const std::string& device) {
  EC_ASSIGN_OR_RETURN(Statement stmt, db_.Prepare(
      "SELECT s.id, r.id, coalesce(s.cost_table_id, 0), r.request, s.status, s.energy_j, "
      "s.superseded_at IS NOT NULL, s.created_at FROM schedules s JOIN schedule_requests r ON r.id = s.request_id "
      "WHERE (?1 = '' OR r.model = ?1) AND (?2 = '' OR r.device = ?2) ORDER BY s.id"));
  stmt.Bind(1, model).Bind(2, device);
  std::vector<StoredSchedule> schedules;
  EC_RETURN_IF_ERROR(ForEachRow(stmt, [&]() -> Status {
    StoredSchedule& s = schedules.emplace_back();
    s.id = stmt.Int(0);
    s.request_id = stmt.Int(1);
    s.cost_table_id = stmt.Int(2);
    EC_ASSIGN_OR_RETURN(s.request, Parse<v1::ScheduleRequest>(stmt.Blob(3), "schedule request", path()));
    s.status = static_cast<v1::Schedule::Status>(stmt.Int(4));
    s.energy_j = stmt.Double(5);
    s.superseded = stmt.Int(6) != 0;
    s.created_at = stmt.Text(7);
    return Status::Ok();
  }));
  return schedules;
}

Result<std::vector<std::pair<int64_t, v1::ScheduleRequest>>> CostDb::ListScheduleRequests() {
  EC_ASSIGN_OR_RETURN(Statement stmt, db_.Prepare("SELECT id, request FROM schedule_requests ORDER BY id"));
  std::vector<std::pair<int64_t, v1::ScheduleRequest>> requests;
  EC_RETURN_IF_ERROR(ForEachRow(stmt, [&]() -> Status {
    EC_ASSIGN_OR_RETURN(v1::ScheduleRequest request,
                        Parse<v1::ScheduleRequest>(stmt.Blob(1), "schedule request", path()));
    requests.emplace_back(stmt.Int(0), std::move(request));
    return Status::Ok();
  }));
  return requests;
}

Result<std::vector<std::string>> CostDb::ListModelsWithCosts(const std::string& fingerprint_hash,
                                                             const std::string& cost_source) {
  EC_ASSIGN_OR_RETURN(Statement stmt, db_.Prepare(
      "SELECT DISTINCT m.name FROM cost_tables t JOIN models m ON m.id = t.model_id "
      "JOIN fingerprints f ON f.id = t.fingerprint_id JOIN cost_sources s ON s.id = t.cost_source_id "
      "WHERE f.hash = ? AND s.name = ? AND t.superseded_at IS NULL ORDER BY m.name"));
  stmt.Bind(1, fingerprint_hash).Bind(2, cost_source);  // a binding error surfaces at the first step
  std::vector<std::string> names;
  EC_RETURN_IF_ERROR(ForEachRow(stmt, [&]() -> Status {
    names.push_back(stmt.Text(0));
    return Status::Ok();
  }));
  return names;
}

Status CostDb::PutJob(const StoredJob& stored) {
  static const std::string kSql =
      UpsertSql("jobs", {"id"}, {"id", "kind", "state", "job", "profile_request", "updated_at"});
  EC_ASSIGN_OR_RETURN(Transaction tx, Write());
  EC_ASSIGN_OR_RETURN(Statement stmt, db_.Prepare(kSql));
  EC_RETURN_IF_ERROR(stmt.Bind(1, static_cast<int64_t>(stored.job.id()))
                         .Bind(2, stored.job.kind())
                         .Bind(3, static_cast<int64_t>(stored.job.state()))
                         .BindBlob(4, Serialize(stored.job))
                         .BindBlob(5, Serialize(stored.profile_request))
                         .Bind(6, NowUtc())
                         .Run());
  return tx.Commit();
}

Result<std::vector<StoredJob>> CostDb::ListJobs() {
  EC_ASSIGN_OR_RETURN(Statement stmt, db_.Prepare("SELECT job, profile_request FROM jobs ORDER BY id"));
  std::vector<StoredJob> jobs;
  EC_RETURN_IF_ERROR(ForEachRow(stmt, [&]() -> Status {
    StoredJob& stored = jobs.emplace_back();
    EC_ASSIGN_OR_RETURN(stored.job, Parse<v1::Job>(stmt.Blob(0), "job", path()));
    EC_ASSIGN_OR_RETURN(stored.profile_request, Parse<v1::StartProfileRequest>(stmt.Blob(1), "profile request", path()));
    return Status::Ok();
  }));
  return jobs;
}

Status CostDb::DeleteJob(uint64_t id) {
  EC_ASSIGN_OR_RETURN(Transaction tx, Write());
  EC_ASSIGN_OR_RETURN(Statement stmt, db_.Prepare("DELETE FROM jobs WHERE id = ?"));
  EC_RETURN_IF_ERROR(stmt.Bind(1, id).Run());
  if (db_.Changes() == 0) return NotFound("no job " + std::to_string(id));
  return tx.Commit();
}

Result<DbInfo> CostDb::Info() {
  EC_ASSIGN_OR_RETURN(Transaction tx, Read());  // counts from one snapshot agree with each other
  DbInfo info;
  info.path = path();
  EC_ASSIGN_OR_RETURN(int64_t version, db_.QueryInt("PRAGMA user_version"));
  info.schema_version = static_cast<int>(version);
  std::error_code ec;
  const auto size = fs::file_size(path(), ec);
  info.file_size_bytes = ec ? 0 : static_cast<int64_t>(size);
  EC_ASSIGN_OR_RETURN(Statement mode, db_.Prepare("PRAGMA journal_mode"));
  EC_ASSIGN_OR_RETURN(bool found, mode.Step());
  if (found) info.journal_mode = mode.Text(0);
  for (const char* table : kTables) {
    EC_ASSIGN_OR_RETURN(info.row_counts[table], db_.QueryInt(std::string("SELECT count(*) FROM ") + table));
  }
  return info;
}

}  // namespace edgecost::costdb
