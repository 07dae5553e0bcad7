#include "costdb/costdb.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>

namespace edgecost::costdb {
namespace {

constexpr char kNow[] = "strftime('%Y-%m-%dT%H:%M:%fZ','now')";

// Forward migrations: kMigrations[i] takes user_version i to i + 1.
const char* const kMigrations[] = {
    R"sql(
CREATE TABLE devices (
  id INTEGER PRIMARY KEY,
  name TEXT NOT NULL UNIQUE,
  kind TEXT NOT NULL CHECK (kind IN ('preset', 'measured')),
  created_at TEXT NOT NULL
);
CREATE TABLE fingerprints (
  id INTEGER PRIMARY KEY,
  device_id INTEGER NOT NULL REFERENCES devices(id),
  hash TEXT NOT NULL UNIQUE,
  fingerprint BLOB NOT NULL,          -- edgecost.v1.Fingerprint
  first_seen_at TEXT NOT NULL,
  superseded_at TEXT                  -- set when the device showed another fingerprint
);
CREATE INDEX fingerprints_by_device ON fingerprints(device_id);
CREATE TABLE cost_sources (
  id INTEGER PRIMARY KEY,
  name TEXT NOT NULL UNIQUE
);
CREATE TABLE runs (
  id INTEGER PRIMARY KEY,
  fingerprint_id INTEGER NOT NULL REFERENCES fingerprints(id),
  cost_source_id INTEGER NOT NULL REFERENCES cost_sources(id),
  started_at TEXT NOT NULL,
  finished_at TEXT,
  status TEXT NOT NULL DEFAULT 'running'
);
CREATE TABLE op_costs (
  id INTEGER PRIMARY KEY,
  fingerprint_id INTEGER NOT NULL REFERENCES fingerprints(id),
  op_key TEXT NOT NULL,
  run_id INTEGER REFERENCES runs(id),
  runtime_median_s REAL NOT NULL,
  runtime_stddev_s REAL NOT NULL,
  runtime_ci95_low_s REAL NOT NULL,
  runtime_ci95_high_s REAL NOT NULL,
  repetitions INTEGER NOT NULL,
  energy_j REAL NOT NULL,
  dynamic_energy_j REAL NOT NULL,
  idle_power_w REAL NOT NULL,
  energy_source TEXT NOT NULL,
  energy_probe TEXT NOT NULL,
  output_bytes INTEGER NOT NULL,
  workspace_bytes INTEGER NOT NULL,
  rss_growth_bytes INTEGER NOT NULL,
  op_cost BLOB NOT NULL,              -- edgecost.v1.OpCost, with the full signature
  UNIQUE (fingerprint_id, op_key)
);
CREATE TABLE paging_costs (
  id INTEGER PRIMARY KEY,
  fingerprint_id INTEGER NOT NULL REFERENCES fingerprints(id),
  storage_path TEXT NOT NULL,
  page_out_latency_s REAL NOT NULL,
  page_out_throughput_bytes_per_s REAL NOT NULL,
  page_in_latency_s REAL NOT NULL,
  page_in_throughput_bytes_per_s REAL NOT NULL,
  paging_cost BLOB NOT NULL,          -- edgecost.v1.PagingCost
  measured_at TEXT NOT NULL,
  UNIQUE (fingerprint_id, storage_path)
);
CREATE TABLE model_graphs (
  id INTEGER PRIMARY KEY,
  model TEXT NOT NULL,
  derivation TEXT NOT NULL,
  trainable TEXT NOT NULL,
  batch_size INTEGER NOT NULL,
  node_count INTEGER NOT NULL,
  graph BLOB NOT NULL,                -- edgecost.v1.TrainingGraph
  UNIQUE (model, derivation, trainable, batch_size)
);
CREATE TABLE cost_tables (
  id INTEGER PRIMARY KEY,
  model_graph_id INTEGER NOT NULL REFERENCES model_graphs(id),
  fingerprint_id INTEGER NOT NULL REFERENCES fingerprints(id),
  cost_source_id INTEGER NOT NULL REFERENCES cost_sources(id),
  note TEXT NOT NULL,
  paging BLOB,                        -- edgecost.v1.PagingCost behind page_in_j/page_out_j
  created_at TEXT NOT NULL,
  superseded_at TEXT
);
CREATE INDEX cost_tables_by_key ON cost_tables(model_graph_id, fingerprint_id, cost_source_id);
CREATE TABLE node_costs (
  cost_table_id INTEGER NOT NULL REFERENCES cost_tables(id),
  node INTEGER NOT NULL,
  runtime_s REAL NOT NULL,
  compute_j REAL NOT NULL,
  ram_bytes INTEGER NOT NULL,
  page_in_j REAL NOT NULL,
  page_out_j REAL NOT NULL,
  op_key TEXT NOT NULL,
  PRIMARY KEY (cost_table_id, node)
) WITHOUT ROWID;
CREATE TABLE schedule_requests (
  id INTEGER PRIMARY KEY,
  model TEXT NOT NULL,
  device TEXT NOT NULL,
  request BLOB NOT NULL UNIQUE,       -- edgecost.v1.ScheduleRequest, deterministic encoding
  created_at TEXT NOT NULL
);
CREATE TABLE schedules (
  id INTEGER PRIMARY KEY,
  request_id INTEGER NOT NULL REFERENCES schedule_requests(id),
  cost_table_id INTEGER REFERENCES cost_tables(id),
  status INTEGER NOT NULL,            -- edgecost.v1.Schedule.Status
  energy_j REAL NOT NULL,
  schedule BLOB NOT NULL,             -- edgecost.v1.Schedule
  created_at TEXT NOT NULL,
  superseded_at TEXT
);
CREATE INDEX schedules_by_request ON schedules(request_id);
)sql",
};
constexpr int kMigrationCount = static_cast<int>(std::size(kMigrations));
static_assert(kMigrationCount == kSchemaVersion);

const char* const kTables[] = {"devices",      "fingerprints", "cost_sources", "runs",
                               "op_costs",     "paging_costs", "model_graphs", "cost_tables",
                               "node_costs",   "schedule_requests", "schedules"};

std::string Serialize(const google::protobuf::MessageLite& message) {
  std::string bytes;
  google::protobuf::io::StringOutputStream stream(&bytes);
  google::protobuf::io::CodedOutputStream coded(&stream);
  coded.SetSerializationDeterministic(true);  // equal requests must give equal blobs
  message.SerializeToCodedStream(&coded);
  coded.Trim();
  return bytes;
}

template <typename Message>
Result<Message> Parse(const std::string& bytes, const std::string& what) {
  Message message;
  if (!message.ParseFromString(bytes)) return Internal("stored " + what + " does not decode; the database is damaged");
  return message;
}

// A file that exists but does not start with SQLite's header is refused before SQLite touches it.
Status CheckHeader(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::Ok();  // missing: created later (read-write) or reported by SQLite
  char header[16] = {};
  in.read(header, sizeof header);
  const auto read = in.gcount();
  if (read == 0) return Status::Ok();  // an empty file is a new database
  if (read < 16 || std::memcmp(header, "SQLite format 3", 16) != 0) {
    return InvalidArgument(path + " is not an edgecost database (not SQLite): pass another --db or move the file away");
  }
  return Status::Ok();
}

Status CheckWritable(const std::string& path) {
  const std::filesystem::path file(path);
  std::error_code ec;
  const std::filesystem::path dir = file.has_parent_path() ? file.parent_path() : std::filesystem::path(".");
  if (!std::filesystem::exists(dir, ec)) {
    std::filesystem::create_directories(dir, ec);
    if (ec) {
      return PermissionDenied("cannot create " + dir.string() + " for the cost database (" + ec.message() +
                              "): pass --db with a writable location or set EDGECOST_DB");
    }
  }
  // SQLite needs to write the file and, for WAL, create files beside it.
  if (::access(dir.c_str(), W_OK) != 0) {
    return PermissionDenied(dir.string() + " is read-only (" + std::strerror(errno) +
                            "): the cost database needs a writable folder; pass --db elsewhere or set EDGECOST_DB");
  }
  if (std::filesystem::exists(file, ec) && ::access(path.c_str(), W_OK) != 0) {
    return PermissionDenied(path + " is read-only (" + std::strerror(errno) +
                            "): fix its permissions, or read it with a read-only command such as `edgecost db info`");
  }
  return Status::Ok();
}

Result<int> UserVersion(Db& db) {
  EC_ASSIGN_OR_RETURN(Statement stmt, db.Prepare("PRAGMA user_version"));
  EC_ASSIGN_OR_RETURN(bool row, stmt.Step());
  return row ? static_cast<int>(stmt.Int(0)) : 0;
}

// Refuses databases from a newer edgecost, and SQLite files that hold someone else's tables.
Status CheckSchema(Db& db) {
  EC_ASSIGN_OR_RETURN(int version, UserVersion(db));
  if (version > kSchemaVersion) {
    return FailedPrecondition(db.path() + " was written by a newer edgecost (schema " + std::to_string(version) +
                              " > " + std::to_string(kSchemaVersion) + "): upgrade edgecost to use it");
  }
  if (version == 0) {
    EC_ASSIGN_OR_RETURN(Statement stmt, db.Prepare("SELECT count(*) FROM sqlite_master"));
    EC_ASSIGN_OR_RETURN(bool row, stmt.Step());
    if (row && stmt.Int(0) > 0) {
      return InvalidArgument(db.path() + " is a SQLite database but not an edgecost one: pass another --db");
    }
  }
  return Status::Ok();
}

v1::Device::Kind KindFromText(const std::string& text) {
  return text == "preset" ? v1::Device::KIND_PRESET : v1::Device::KIND_MEASURED;
}

}  // namespace

std::string DefaultDbPath() {
  if (const char* env = std::getenv("EDGECOST_DB"); env && *env) return env;
  if (const char* xdg = std::getenv("XDG_DATA_HOME"); xdg && *xdg) return std::string(xdg) + "/edgecost/edgecost.db";
  const char* home = std::getenv("HOME");
  return std::string(home && *home ? home : ".") + "/.local/share/edgecost/edgecost.db";
}

Result<CostDb> CostDb::Open(const std::string& path, OpenOptions options) {
  EC_RETURN_IF_ERROR(CheckHeader(path));
  const bool read_only = options.mode == OpenMode::kReadOnly;
  if (read_only) {
    if (!std::filesystem::exists(path)) {
      return NotFound("no cost database at " + path + "; create one with `edgecost costs MODEL --store` or pass --db");
    }
  } else {
    EC_RETURN_IF_ERROR(CheckWritable(path));
    // Inspect an existing file read-only first, so that a refused file is never modified.
    if (std::filesystem::exists(path) && std::filesystem::file_size(path) > 0) {
      EC_ASSIGN_OR_RETURN(Db probe, Db::Open(path, /*read_only=*/true, options.busy_timeout_ms));
      EC_RETURN_IF_ERROR(CheckSchema(probe));
    }
  }
  EC_ASSIGN_OR_RETURN(Db db, Db::Open(path, read_only, options.busy_timeout_ms));
  EC_RETURN_IF_ERROR(CheckSchema(db));
  EC_RETURN_IF_ERROR(db.Exec("PRAGMA foreign_keys = ON"));
  CostDb cost_db(std::move(db));
  if (read_only) {
    EC_ASSIGN_OR_RETURN(int version, UserVersion(cost_db.db_));
    if (version < kSchemaVersion) {
      return FailedPrecondition(path + " has schema " + std::to_string(version) + " < " +
                                std::to_string(kSchemaVersion) + "; open it once with a writing command to migrate it");
    }
  } else {
    EC_RETURN_IF_ERROR(cost_db.Migrate());
  }
  return cost_db;
}

Status CostDb::Migrate() {
  EC_ASSIGN_OR_RETURN(int version, UserVersion(db_));
  if (version == kSchemaVersion) return Status::Ok();
  // WAL persists in the file; it lets readers go on while a profile writes.
  EC_RETURN_IF_ERROR(db_.Exec("PRAGMA journal_mode = WAL"));
  EC_ASSIGN_OR_RETURN(Transaction tx, Transaction::Begin(db_));
  EC_ASSIGN_OR_RETURN(version, UserVersion(db_));  // another process may have migrated meanwhile
  for (int v = version; v < kMigrationCount; ++v) {
    EC_RETURN_IF_ERROR(db_.Exec(kMigrations[v]));
  }
  EC_RETURN_IF_ERROR(db_.Exec("PRAGMA user_version = " + std::to_string(kSchemaVersion)));
  return tx.Commit();
}

Result<int64_t> CostDb::CostSourceId(const std::string& name) {
  EC_ASSIGN_OR_RETURN(Statement insert, db_.Prepare("INSERT OR IGNORE INTO cost_sources(name) VALUES (?)"));
  EC_RETURN_IF_ERROR(insert.Bind(1, name).Run());
  EC_ASSIGN_OR_RETURN(Statement select, db_.Prepare("SELECT id FROM cost_sources WHERE name = ?"));
  EC_ASSIGN_OR_RETURN(bool row, select.Bind(1, name).Step());
  if (!row) return Internal("cost source '" + name + "' vanished");
  return select.Int(0);
}

Result<int64_t> CostDb::FingerprintId(const std::string& hash) {
  EC_ASSIGN_OR_RETURN(Statement stmt, db_.Prepare("SELECT id FROM fingerprints WHERE hash = ?"));
  EC_ASSIGN_OR_RETURN(bool row, stmt.Bind(1, hash).Step());
  if (!row) return NotFound("no device with fingerprint " + hash + " in " + path() + "; profile the device first");
  return stmt.Int(0);
}

Result<int64_t> CostDb::UpsertDeviceInTransaction(const v1::Device& device) {
  const std::string kind = device.kind() == v1::Device::KIND_PRESET ? "preset" : "measured";
  EC_ASSIGN_OR_RETURN(Statement insert,
                      db_.Prepare(std::string("INSERT OR IGNORE INTO devices(name, kind, created_at) VALUES (?, ?, ") +
                                  kNow + ")"));
  EC_RETURN_IF_ERROR(insert.Bind(1, device.name()).Bind(2, kind).Run());
  EC_ASSIGN_OR_RETURN(Statement select, db_.Prepare("SELECT id FROM devices WHERE name = ?"));
  EC_ASSIGN_OR_RETURN(bool row, select.Bind(1, device.name()).Step());
  if (!row) return Internal("device '" + device.name() + "' vanished");
  const int64_t device_id = select.Int(0);

  const std::string& hash = device.fingerprint().hash();
  if (hash.empty()) return InvalidArgument("device '" + device.name() + "' has no fingerprint hash");
  EC_ASSIGN_OR_RETURN(Statement existing,
                      db_.Prepare("SELECT device_id, superseded_at IS NOT NULL FROM fingerprints WHERE hash = ?"));
  EC_ASSIGN_OR_RETURN(bool known, existing.Bind(1, hash).Step());
  if (known && existing.Int(0) != device_id) {
    return InvalidArgument("fingerprint " + hash + " already belongs to another device");
  }
  if (known && existing.Int(1) == 0) return device_id;  // already current
  // A new or returning fingerprint becomes the current one; the others are superseded.
  EC_ASSIGN_OR_RETURN(Statement supersede,
                      db_.Prepare(std::string("UPDATE fingerprints SET superseded_at = ") + kNow +
                                  " WHERE device_id = ? AND superseded_at IS NULL AND hash != ?"));
  EC_RETURN_IF_ERROR(supersede.Bind(1, device_id).Bind(2, hash).Run());
  if (known) {
    EC_ASSIGN_OR_RETURN(Statement revive, db_.Prepare("UPDATE fingerprints SET superseded_at = NULL WHERE hash = ?"));
    EC_RETURN_IF_ERROR(revive.Bind(1, hash).Run());
  } else {
    EC_ASSIGN_OR_RETURN(Statement add,
                        db_.Prepare(std::string("INSERT INTO fingerprints(device_id, hash, fingerprint, first_seen_at) "
                                                "VALUES (?, ?, ?, ") + kNow + ")"));
    EC_RETURN_IF_ERROR(add.Bind(1, device_id).Bind(2, hash).BindBlob(3, Serialize(device.fingerprint())).Run());
  }
  return device_id;
}

Result<int64_t> CostDb::UpsertDevice(const v1::Device& device) {
  EC_ASSIGN_OR_RETURN(Transaction tx, Transaction::Begin(db_));
  EC_ASSIGN_OR_RETURN(int64_t id, UpsertDeviceInTransaction(device));
  EC_RETURN_IF_ERROR(tx.Commit());
  return id;
}

Result<v1::Device> CostDb::GetDevice(const std::string& name) {
  EC_ASSIGN_OR_RETURN(Statement stmt, db_.Prepare(
      "SELECT d.kind, f.fingerprint, f.superseded_at IS NOT NULL FROM devices d "
      "JOIN fingerprints f ON f.device_id = d.id WHERE d.name = ? "
      "ORDER BY f.superseded_at IS NOT NULL, f.superseded_at DESC, f.id DESC"));
  stmt.Bind(1, name);
  v1::Device device;
  device.set_name(name);
  bool found = false;
  for (;;) {
    EC_ASSIGN_OR_RETURN(bool row, stmt.Step());
    if (!row) break;
    found = true;
    device.set_kind(KindFromText(stmt.Text(0)));
    EC_ASSIGN_OR_RETURN(v1::Fingerprint fingerprint, Parse<v1::Fingerprint>(stmt.Blob(1), "fingerprint"));
    if (stmt.Int(2) == 0) {
      *device.mutable_fingerprint() = fingerprint;
    } else {
      *device.add_history() = fingerprint;
    }
  }
  if (!found) return NotFound("no device '" + name + "' in " + path() + "; see `edgecost db info`");
  return device;
}

Result<std::vector<v1::Device>> CostDb::ListDevices() {
  EC_ASSIGN_OR_RETURN(Statement stmt, db_.Prepare("SELECT name FROM devices ORDER BY name"));
  std::vector<std::string> names;
  for (;;) {
    EC_ASSIGN_OR_RETURN(bool row, stmt.Step());
    if (!row) break;
    names.push_back(stmt.Text(0));
  }
  std::vector<v1::Device> devices;
  for (const std::string& name : names) {
    EC_ASSIGN_OR_RETURN(v1::Device device, GetDevice(name));
    devices.push_back(std::move(device));
  }
  return devices;
}

Result<int64_t> CostDb::PutModelGraphInTransaction(const v1::TrainingGraph& graph) {
  EC_ASSIGN_OR_RETURN(Statement insert, db_.Prepare(
      "INSERT INTO model_graphs(model, derivation, trainable, batch_size, node_count, graph) VALUES (?, ?, ?, ?, ?, ?) "
      "ON CONFLICT (model, derivation, trainable, batch_size) DO UPDATE SET node_count = excluded.node_count, "
      "graph = excluded.graph"));
  EC_RETURN_IF_ERROR(insert.Bind(1, graph.model())
                         .Bind(2, graph.derivation())
                         .Bind(3, graph.trainable())
                         .Bind(4, static_cast<int64_t>(graph.batch_size()))
                         .Bind(5, static_cast<int64_t>(graph.nodes_size()))
                         .BindBlob(6, Serialize(graph))
                         .Run());
  EC_ASSIGN_OR_RETURN(Statement select, db_.Prepare(
      "SELECT id FROM model_graphs WHERE model = ? AND derivation = ? AND trainable = ? AND batch_size = ?"));
  EC_ASSIGN_OR_RETURN(bool row, select.Bind(1, graph.model())
                                    .Bind(2, graph.derivation())
                                    .Bind(3, graph.trainable())
                                    .Bind(4, static_cast<int64_t>(graph.batch_size()))
                                    .Step());
  if (!row) return Internal("model graph vanished");
  return select.Int(0);
}

Result<int64_t> CostDb::PutModelGraph(const v1::TrainingGraph& graph) {
  EC_ASSIGN_OR_RETURN(Transaction tx, Transaction::Begin(db_));
  EC_ASSIGN_OR_RETURN(int64_t id, PutModelGraphInTransaction(graph));
  EC_RETURN_IF_ERROR(tx.Commit());
  return id;
}

Result<std::vector<v1::TrainingGraph>> CostDb::ListModelGraphs() {
  EC_ASSIGN_OR_RETURN(Statement stmt, db_.Prepare("SELECT graph FROM model_graphs ORDER BY model, id"));
  std::vector<v1::TrainingGraph> graphs;
  for (;;) {
    EC_ASSIGN_OR_RETURN(bool row, stmt.Step());
    if (!row) break;
    EC_ASSIGN_OR_RETURN(v1::TrainingGraph graph, Parse<v1::TrainingGraph>(stmt.Blob(0), "graph"));
    graphs.push_back(std::move(graph));
  }
  return graphs;
}

Result<int64_t> CostDb::PutCostTable(const v1::CostTable& table) {
  if (table.costs_size() != table.graph().nodes_size()) {
    return InvalidArgument("cost table has " + std::to_string(table.costs_size()) + " costs for " +
                           std::to_string(table.graph().nodes_size()) + " nodes");
  }
  v1::Device device;
  device.set_name(table.device().empty() ? "unspecified" : table.device());
  const bool preset = table.fingerprint_hash().empty() || table.fingerprint_hash().starts_with("preset:");
  device.set_kind(preset ? v1::Device::KIND_PRESET : v1::Device::KIND_MEASURED);
  const std::string hash = table.fingerprint_hash().empty() ? "preset:" + device.name() : table.fingerprint_hash();
  device.mutable_fingerprint()->set_hash(hash);
  if (preset) device.mutable_fingerprint()->set_board_preset(device.name());

  EC_ASSIGN_OR_RETURN(Transaction tx, Transaction::Begin(db_));
  // A measured device's fingerprint is recorded by the profiler; presets are created on first use.
  Result<int64_t> fingerprint_id = FingerprintId(hash);
  if (!fingerprint_id.ok()) {
    if (!preset) return fingerprint_id.status();
    EC_RETURN_IF_ERROR(UpsertDeviceInTransaction(device).status());
    fingerprint_id = FingerprintId(hash);
    if (!fingerprint_id.ok()) return fingerprint_id.status();
  }
  EC_ASSIGN_OR_RETURN(int64_t graph_id, PutModelGraphInTransaction(table.graph()));
  EC_ASSIGN_OR_RETURN(int64_t source_id, CostSourceId(table.cost_source()));
  EC_ASSIGN_OR_RETURN(Statement supersede, db_.Prepare(
      std::string("UPDATE cost_tables SET superseded_at = ") + kNow +
      " WHERE model_graph_id = ? AND fingerprint_id = ? AND cost_source_id = ? AND superseded_at IS NULL"));
  EC_RETURN_IF_ERROR(supersede.Bind(1, graph_id).Bind(2, *fingerprint_id).Bind(3, source_id).Run());
  EC_ASSIGN_OR_RETURN(Statement insert, db_.Prepare(
      std::string("INSERT INTO cost_tables(model_graph_id, fingerprint_id, cost_source_id, note, paging, created_at) "
                  "VALUES (?, ?, ?, ?, ?, ") + kNow + ")"));
  insert.Bind(1, graph_id).Bind(2, *fingerprint_id).Bind(3, source_id).Bind(4, table.note());
  if (table.has_paging()) {
    insert.BindBlob(5, Serialize(table.paging()));
  } else {
    insert.BindNull(5);
  }
  EC_RETURN_IF_ERROR(insert.Run());
  const int64_t table_id = db_.LastInsertId();
  EC_ASSIGN_OR_RETURN(Statement node, db_.Prepare(
      "INSERT INTO node_costs(cost_table_id, node, runtime_s, compute_j, ram_bytes, page_in_j, page_out_j, op_key) "
      "VALUES (?, ?, ?, ?, ?, ?, ?, ?)"));
  for (const v1::NodeCost& cost : table.costs()) {
    EC_RETURN_IF_ERROR(node.Bind(1, table_id)
                           .Bind(2, static_cast<int64_t>(cost.node()))
                           .Bind(3, cost.runtime_s())
                           .Bind(4, cost.compute_j())
                           .Bind(5, static_cast<int64_t>(cost.ram_bytes()))
                           .Bind(6, cost.page_in_j())
                           .Bind(7, cost.page_out_j())
                           .Bind(8, cost.op_key())
                           .Run());
  }
  EC_RETURN_IF_ERROR(tx.Commit());
  return table_id;
}

Result<v1::CostTable> CostDb::GetCostTableById(int64_t id) {
  EC_ASSIGN_OR_RETURN(Statement head, db_.Prepare(
      "SELECT g.graph, d.name, f.hash, s.name, t.note, t.paging FROM cost_tables t "
      "JOIN model_graphs g ON g.id = t.model_graph_id JOIN fingerprints f ON f.id = t.fingerprint_id "
      "JOIN devices d ON d.id = f.device_id JOIN cost_sources s ON s.id = t.cost_source_id WHERE t.id = ?"));
  EC_ASSIGN_OR_RETURN(bool found, head.Bind(1, id).Step());
  if (!found) return NotFound("no cost table #" + std::to_string(id) + " in " + path());
  v1::CostTable table;
  EC_ASSIGN_OR_RETURN(*table.mutable_graph(), Parse<v1::TrainingGraph>(head.Blob(0), "graph"));
  table.set_device(head.Text(1));
  table.set_fingerprint_hash(head.Text(2));
  table.set_cost_source(head.Text(3));
  table.set_note(head.Text(4));
  if (!head.IsNull(5)) {
    EC_ASSIGN_OR_RETURN(*table.mutable_paging(), Parse<v1::PagingCost>(head.Blob(5), "paging cost"));
  }
  EC_ASSIGN_OR_RETURN(Statement rows, db_.Prepare(
      "SELECT node, runtime_s, compute_j, ram_bytes, page_in_j, page_out_j, op_key FROM node_costs "
      "WHERE cost_table_id = ? ORDER BY node"));
  rows.Bind(1, id);
  for (;;) {
    EC_ASSIGN_OR_RETURN(bool row, rows.Step());
    if (!row) break;
    v1::NodeCost& cost = *table.add_costs();
    cost.set_node(static_cast<uint32_t>(rows.Int(0)));
    cost.set_runtime_s(rows.Double(1));
    cost.set_compute_j(rows.Double(2));
    cost.set_ram_bytes(static_cast<uint64_t>(rows.Int(3)));
    cost.set_page_in_j(rows.Double(4));
    cost.set_page_out_j(rows.Double(5));
    cost.set_op_key(rows.Text(6));
  }
  return table;
}

Result<v1::CostTable> CostDb::GetCostTable(const CostTableKey& key) {
  EC_ASSIGN_OR_RETURN(Statement stmt, db_.Prepare(
      "SELECT t.id FROM cost_tables t JOIN model_graphs g ON g.id = t.model_graph_id "
      "JOIN fingerprints f ON f.id = t.fingerprint_id JOIN devices d ON d.id = f.device_id "
      "JOIN cost_sources s ON s.id = t.cost_source_id "
      "WHERE g.model = ? AND d.name = ? AND s.name = ? AND g.batch_size = ? AND g.derivation = ? "
      "AND g.trainable = ? AND t.superseded_at IS NULL AND f.superseded_at IS NULL ORDER BY t.id DESC LIMIT 1"));
  EC_ASSIGN_OR_RETURN(bool found, stmt.Bind(1, key.model)
                                      .Bind(2, key.device)
                                      .Bind(3, key.cost_source)
                                      .Bind(4, static_cast<int64_t>(key.batch_size))
                                      .Bind(5, key.derivation)
                                      .Bind(6, key.trainable)
                                      .Step());
  if (!found) {
    return NotFound("no " + key.cost_source + " cost table for " + key.model + " on " + key.device +
                    " (batch size " + std::to_string(key.batch_size) + ", derivation " + key.derivation +
                    ", trainable " + key.trainable + ") in " + path() +
                    "; compute one with `edgecost costs " + key.model + " --platform " + key.device +
                    " --store` or profile the device");
  }
  return GetCostTableById(stmt.Int(0));
}

Result<int64_t> CostDb::BeginRun(const std::string& fingerprint_hash, const std::string& cost_source) {
  EC_ASSIGN_OR_RETURN(Transaction tx, Transaction::Begin(db_));
  EC_ASSIGN_OR_RETURN(int64_t fingerprint_id, FingerprintId(fingerprint_hash));
  EC_ASSIGN_OR_RETURN(int64_t source_id, CostSourceId(cost_source));
  EC_ASSIGN_OR_RETURN(Statement stmt, db_.Prepare(
      std::string("INSERT INTO runs(fingerprint_id, cost_source_id, started_at) VALUES (?, ?, ") + kNow + ")"));
  EC_RETURN_IF_ERROR(stmt.Bind(1, fingerprint_id).Bind(2, source_id).Run());
  const int64_t id = db_.LastInsertId();
  EC_RETURN_IF_ERROR(tx.Commit());
  return id;
}

Status CostDb::FinishRun(int64_t run_id, const std::string& status) {
  EC_ASSIGN_OR_RETURN(Statement stmt, db_.Prepare(
      std::string("UPDATE runs SET status = ?, finished_at = ") + kNow + " WHERE id = ?"));
  return stmt.Bind(1, status).Bind(2, run_id).Run();
}

Status CostDb::PutOpCost(const std::string& fingerprint_hash, int64_t run_id, const v1::OpCost& cost) {
  EC_ASSIGN_OR_RETURN(Transaction tx, Transaction::Begin(db_));
  EC_ASSIGN_OR_RETURN(int64_t fingerprint_id, FingerprintId(fingerprint_hash));
  EC_ASSIGN_OR_RETURN(Statement stmt, db_.Prepare(
      "INSERT OR REPLACE INTO op_costs(fingerprint_id, op_key, run_id, runtime_median_s, runtime_stddev_s, "
      "runtime_ci95_low_s, runtime_ci95_high_s, repetitions, energy_j, dynamic_energy_j, idle_power_w, energy_source, "
      "energy_probe, output_bytes, workspace_bytes, rss_growth_bytes, op_cost) "
      "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"));
  stmt.Bind(1, fingerprint_id).Bind(2, cost.signature().key());
  if (run_id > 0) {
    stmt.Bind(3, run_id);
  } else {
    stmt.BindNull(3);
  }
  EC_RETURN_IF_ERROR(stmt.Bind(4, cost.runtime().median_s())
                         .Bind(5, cost.runtime().stddev_s())
                         .Bind(6, cost.runtime().ci95_low_s())
                         .Bind(7, cost.runtime().ci95_high_s())
                         .Bind(8, static_cast<int64_t>(cost.runtime().repetitions()))
                         .Bind(9, cost.energy_j())
                         .Bind(10, cost.dynamic_energy_j())
                         .Bind(11, cost.idle_power_w())
                         .Bind(12, v1::EnergySource_Name(cost.energy_source()))
                         .Bind(13, cost.energy_probe())
                         .Bind(14, static_cast<int64_t>(cost.output_bytes()))
                         .Bind(15, static_cast<int64_t>(cost.workspace_bytes()))
                         .Bind(16, cost.rss_growth_bytes())
                         .BindBlob(17, Serialize(cost))
                         .Run());
  return tx.Commit();
}

Result<std::optional<v1::OpCost>> CostDb::GetOpCost(const std::string& fingerprint_hash, const std::string& op_key) {
  EC_ASSIGN_OR_RETURN(Statement stmt, db_.Prepare(
      "SELECT o.op_cost FROM op_costs o JOIN fingerprints f ON f.id = o.fingerprint_id "
      "WHERE f.hash = ? AND o.op_key = ?"));
  EC_ASSIGN_OR_RETURN(bool row, stmt.Bind(1, fingerprint_hash).Bind(2, op_key).Step());
  if (!row) return std::optional<v1::OpCost>();
  EC_ASSIGN_OR_RETURN(v1::OpCost cost, Parse<v1::OpCost>(stmt.Blob(0), "op cost"));
  return std::optional<v1::OpCost>(std::move(cost));
}

Result<std::vector<v1::OpCost>> CostDb::ListOpCosts(const std::string& fingerprint_hash) {
  EC_ASSIGN_OR_RETURN(Statement stmt, db_.Prepare(
      "SELECT o.op_cost FROM op_costs o JOIN fingerprints f ON f.id = o.fingerprint_id WHERE f.hash = ? "
      "ORDER BY o.op_key"));
  stmt.Bind(1, fingerprint_hash);
  std::vector<v1::OpCost> costs;
  for (;;) {
    EC_ASSIGN_OR_RETURN(bool row, stmt.Step());
    if (!row) break;
    EC_ASSIGN_OR_RETURN(v1::OpCost cost, Parse<v1::OpCost>(stmt.Blob(0), "op cost"));
    costs.push_back(std::move(cost));
  }
  return costs;
}

Status CostDb::PutPagingCost(const std::string& fingerprint_hash, const v1::PagingCost& cost) {
  EC_ASSIGN_OR_RETURN(Transaction tx, Transaction::Begin(db_));
  EC_ASSIGN_OR_RETURN(int64_t fingerprint_id, FingerprintId(fingerprint_hash));
  EC_ASSIGN_OR_RETURN(Statement stmt, db_.Prepare(
      std::string("INSERT OR REPLACE INTO paging_costs(fingerprint_id, storage_path, page_out_latency_s, "
                  "page_out_throughput_bytes_per_s, page_in_latency_s, page_in_throughput_bytes_per_s, paging_cost, "
                  "measured_at) VALUES (?, ?, ?, ?, ?, ?, ?, ") + kNow + ")"));
  EC_RETURN_IF_ERROR(stmt.Bind(1, fingerprint_id)
                         .Bind(2, cost.storage_path())
                         .Bind(3, cost.page_out_latency_s())
                         .Bind(4, cost.page_out_throughput_bytes_per_s())
                         .Bind(5, cost.page_in_latency_s())
                         .Bind(6, cost.page_in_throughput_bytes_per_s())
                         .BindBlob(7, Serialize(cost))
                         .Run());
  return tx.Commit();
}

Result<std::optional<v1::PagingCost>> CostDb::GetPagingCost(const std::string& fingerprint_hash) {
  EC_ASSIGN_OR_RETURN(Statement stmt, db_.Prepare(
      "SELECT p.paging_cost FROM paging_costs p JOIN fingerprints f ON f.id = p.fingerprint_id WHERE f.hash = ? "
      "ORDER BY p.measured_at DESC LIMIT 1"));
  EC_ASSIGN_OR_RETURN(bool row, stmt.Bind(1, fingerprint_hash).Step());
  if (!row) return std::optional<v1::PagingCost>();
  EC_ASSIGN_OR_RETURN(v1::PagingCost cost, Parse<v1::PagingCost>(stmt.Blob(0), "paging cost"));
  return std::optional<v1::PagingCost>(std::move(cost));
}

Result<int64_t> CostDb::PutScheduleRequest(const v1::ScheduleRequest& request) {
  const std::string blob = Serialize(request);
  EC_ASSIGN_OR_RETURN(Transaction tx, Transaction::Begin(db_));
  EC_ASSIGN_OR_RETURN(Statement insert, db_.Prepare(
      std::string("INSERT OR IGNORE INTO schedule_requests(model, device, request, created_at) VALUES (?, ?, ?, ") +
      kNow + ")"));
  EC_RETURN_IF_ERROR(insert.Bind(1, request.model().empty() ? request.graph_file() : request.model())
                         .Bind(2, request.device())
                         .BindBlob(3, blob)
                         .Run());
  EC_ASSIGN_OR_RETURN(Statement select, db_.Prepare("SELECT id FROM schedule_requests WHERE request = ?"));
  EC_ASSIGN_OR_RETURN(bool row, select.BindBlob(1, blob).Step());
  if (!row) return Internal("schedule request vanished");
  const int64_t id = select.Int(0);
  EC_RETURN_IF_ERROR(tx.Commit());
  return id;
}

Result<int64_t> CostDb::PutSchedule(int64_t request_id, int64_t cost_table_id, const v1::Schedule& schedule) {
  EC_ASSIGN_OR_RETURN(Transaction tx, Transaction::Begin(db_));
  EC_ASSIGN_OR_RETURN(Statement supersede, db_.Prepare(
      std::string("UPDATE schedules SET superseded_at = ") + kNow +
      " WHERE request_id = ? AND superseded_at IS NULL"));
  EC_RETURN_IF_ERROR(supersede.Bind(1, request_id).Run());
  EC_ASSIGN_OR_RETURN(Statement insert, db_.Prepare(
      std::string("INSERT INTO schedules(request_id, cost_table_id, status, energy_j, schedule, created_at) "
                  "VALUES (?, ?, ?, ?, ?, ") + kNow + ")"));
  insert.Bind(1, request_id);
  if (cost_table_id > 0) {
    insert.Bind(2, cost_table_id);
  } else {
    insert.BindNull(2);
  }
  EC_RETURN_IF_ERROR(insert.Bind(3, static_cast<int64_t>(schedule.status()))
                         .Bind(4, schedule.energy().total_j())
                         .BindBlob(5, Serialize(schedule))
                         .Run());
  const int64_t id = db_.LastInsertId();
  EC_RETURN_IF_ERROR(tx.Commit());
  return id;
}

Result<v1::Schedule> CostDb::GetSchedule(int64_t id) {
  EC_ASSIGN_OR_RETURN(Statement stmt, db_.Prepare("SELECT schedule FROM schedules WHERE id = ?"));
  EC_ASSIGN_OR_RETURN(bool row, stmt.Bind(1, id).Step());
  if (!row) return NotFound("no schedule #" + std::to_string(id) + " in " + path());
  return Parse<v1::Schedule>(stmt.Blob(0), "schedule");
}

Result<std::vector<StoredSchedule>> CostDb::ListSchedules(const std::string& model, const std::string& device) {
  EC_ASSIGN_OR_RETURN(Statement stmt, db_.Prepare(
      "SELECT s.id, r.id, r.request, s.status, s.energy_j, s.superseded_at IS NOT NULL, s.created_at "
      "FROM schedules s JOIN schedule_requests r ON r.id = s.request_id "
      "WHERE (?1 = '' OR r.model = ?1) AND (?2 = '' OR r.device = ?2) ORDER BY s.id"));
  stmt.Bind(1, model).Bind(2, device);
  std::vector<StoredSchedule> out;
  for (;;) {
    EC_ASSIGN_OR_RETURN(bool row, stmt.Step());
    if (!row) break;
    StoredSchedule s;
    s.id = stmt.Int(0);
    s.request_id = stmt.Int(1);
    EC_ASSIGN_OR_RETURN(s.request, Parse<v1::ScheduleRequest>(stmt.Blob(2), "schedule request"));
    s.status = static_cast<v1::Schedule::Status>(stmt.Int(3));
    s.energy_j = stmt.Double(4);
    s.superseded = stmt.Int(5) != 0;
    s.created_at = stmt.Text(6);
    out.push_back(std::move(s));
  }
  return out;
}

Result<std::vector<std::pair<int64_t, v1::ScheduleRequest>>> CostDb::ListScheduleRequests() {
  EC_ASSIGN_OR_RETURN(Statement stmt, db_.Prepare("SELECT id, request FROM schedule_requests ORDER BY id"));
  std::vector<std::pair<int64_t, v1::ScheduleRequest>> out;
  for (;;) {
    EC_ASSIGN_OR_RETURN(bool row, stmt.Step());
    if (!row) break;
    EC_ASSIGN_OR_RETURN(v1::ScheduleRequest request, Parse<v1::ScheduleRequest>(stmt.Blob(1), "schedule request"));
    out.emplace_back(stmt.Int(0), std::move(request));
  }
  return out;
}

Result<DbInfo> CostDb::Info() {
  DbInfo info;
  info.path = path();
  EC_ASSIGN_OR_RETURN(info.schema_version, UserVersion(db_));
  std::error_code ec;
  info.file_size_bytes = static_cast<int64_t>(std::filesystem::file_size(path(), ec));
  EC_ASSIGN_OR_RETURN(Statement mode, db_.Prepare("PRAGMA journal_mode"));
  EC_ASSIGN_OR_RETURN(bool row, mode.Step());
  if (row) info.journal_mode = mode.Text(0);
  for (const char* table : kTables) {
    EC_ASSIGN_OR_RETURN(Statement count, db_.Prepare(std::string("SELECT count(*) FROM ") + table));
    EC_ASSIGN_OR_RETURN(bool has, count.Step());
    info.row_counts[table] = has ? count.Int(0) : 0;
  }
  return info;
}

}  // namespace edgecost::costdb
