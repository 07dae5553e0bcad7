// The cost database: one SQLite file (or one PostgreSQL schema, a fleet's shared
// store) holding devices and their fingerprints, profiling runs, measured op
// costs with provenance, paging costs, training graphs, cost tables and
// schedules. The typed API below is the only way in; no SQL lives outside costdb/.
//
// Safety: WAL journal, foreign keys, every write in one transaction, schema
// versioned (PRAGMA user_version; on PostgreSQL a one-row table) with forward
// migrations. A file that is not an edgecost database, or comes from a newer
// edgecost, is refused untouched.
//
// A CostDb is one connection: use it from one thread at a time and do not carry
// it across fork(). Other processes may read while one writes. Open() takes a
// file path (SQLite) or a postgresql:// URL; the API and its answers are the same.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "base/status.h"
#include "costdb/sql.h"
#include "proto/edgecost.pb.h"

namespace edgecost::costdb {

// The schema this build writes; files with a higher PRAGMA user_version are refused.
inline constexpr int kSchemaVersion = 9;

enum class OpenMode {
  kReadWrite,  // creates the file (and its folder) if missing, migrates to kSchemaVersion
  kReadOnly,   // the file must exist at kSchemaVersion; every write is refused
};

struct OpenOptions {
  OpenMode mode = OpenMode::kReadWrite;
  int busy_timeout_ms = 5000;  // how long to wait for another process's write to finish
  // This process checked and migrated the database already (costdb::Store): open a connection only.
  bool checked = false;
};

// $EDGECOST_DB, else $XDG_DATA_HOME/edgecost/edgecost.db, else
// ~/.local/share/edgecost/edgecost.db. The CLI's --db flag overrides all three.
std::string DefaultDbPath();

// Selects the current cost table of one training graph on one device.
struct CostTableKey {
  std::string model;
  std::string device;
  std::string cost_source;
  uint32_t batch_size = 1;
  std::string derivation = "exact";  // graph::kDefaultDerivation
  std::string trainable = "all";
  uint32_t threads = 0;  // compute threads the table was measured at; 0: unknown (analytic, or stored before schema 8)
};

enum class RunStatus { kRunning, kComplete, kFailed, kCancelled };
const char* RunStatusText(RunStatus status);  // "complete", as stored

// A profiling run: the provenance of the op costs it measured.
struct StoredRun {
  int64_t id = 0;
  std::string fingerprint_hash;
  std::string cost_source;
  RunStatus status = RunStatus::kRunning;
  std::string started_at;              // UTC, ISO 8601
  std::string finished_at;             // empty while running
  std::optional<double> idle_power_w;  // absent when no sensor measured it
  std::string model;                   // the model profiled; empty for runs stored before schema 9
};

// One fingerprint a device has shown, and when.
struct FingerprintRecord {
  v1::Fingerprint fingerprint;
  std::string first_seen_at;  // UTC, ISO 8601
  std::string superseded_at;  // empty while current
};

struct StoredSchedule {
  int64_t id = 0;
  int64_t request_id = 0;
  int64_t cost_table_id = 0;  // 0 if the schedule was not solved from a stored cost table
  v1::ScheduleRequest request;
  v1::Schedule::Status status = v1::Schedule::STATUS_UNSPECIFIED;
  double energy_j = 0;
  v1::EnergySource energy_source = v1::ENERGY_SOURCE_UNSPECIFIED;  // of energy_j: ESTIMATED is a model's figure
  bool superseded = false;
  std::string created_at;  // UTC, ISO 8601
};

// What a cost table is about, without its rows: `edgecost db` lists these.
struct StoredCostTable {
  int64_t id = 0;
  CostTableKey key;  // model, device, source, batch size, derivation, trainable, threads
  std::string fingerprint_hash;
  int nodes = 0;
  std::string created_at;  // UTC, ISO 8601
};

// A daemon job and, for a profile, the request that started it.
struct StoredJob {
  v1::Job job;
  v1::StartProfileRequest profile_request;
};

// A model imported once and named like a zoo model: the file's bytes under a name.
struct ModelRecord {
  std::string name;
  std::string kind;          // "onnx", "training-graph", "node-link"
  std::string content_hash;  // of the bytes
  int64_t size_bytes = 0;
  std::string added_at;  // UTC, ISO 8601
  std::string bytes;     // empty in listings
  // What a listing shows of its graph (node counts, bytes, batch size, or why it cannot be read),
  // computed once; absent for records stored before summaries were kept, until one is stored.
  std::optional<v1::ModelInfo> summary;
};

struct DbInfo {
  std::string backend;  // "sqlite" or "postgresql"
  std::string path;     // a file, or a URL without its password
  int schema_version = 0;
  int64_t file_size_bytes = 0;  // the main file without the -wal beside it; PostgreSQL: tables with indexes
  std::string journal_mode;
  std::map<std::string, int64_t> row_counts;  // per table, from one snapshot
};

class CostDb {
 public:
  // `path` is a file (SQLite) or a postgresql:// URL (one schema of that database, from the
  // URL's search_path; every table of it is edgecost's).
  static Result<CostDb> Open(const std::string& path, OpenOptions options);
  static Result<CostDb> Open(const std::string& path, OpenMode mode = OpenMode::kReadWrite) {
    return Open(path, OpenOptions{.mode = mode});
  }

  CostDb(CostDb&&) = default;
  CostDb& operator=(CostDb&&) = default;
  CostDb(const CostDb&) = delete;
  CostDb& operator=(const CostDb&) = delete;

  // The file path, or the PostgreSQL URL without its password: safe to print.
  const std::string& path() const { return db_.path(); }
  Backend backend() const { return db_.backend(); }
  OpenMode mode() const { return mode_; }

  // Records the device and makes its fingerprint current. A changed fingerprint
  // supersedes the old one (kept, with its costs); a fingerprint seen before
  // becomes current again. Returns the device id.
  Result<int64_t> UpsertDevice(const v1::Device& device);
  // The device with its current fingerprint and its history, newest first.
  Result<v1::Device> GetDevice(const std::string& name);
  Result<std::vector<v1::Device>> ListDevices();
  // Every fingerprint of a device, newest first seen first.
  Result<std::vector<FingerprintRecord>> ListFingerprintHistory(const std::string& device);
  // The device a fingerprint is recorded for (current or earlier), if any: in a fleet's
  // store, the board whose records every board of that hardware joins.
  Result<std::optional<std::string>> DeviceWithFingerprint(const std::string& fingerprint_hash);

  // Idempotent on model, derivation, trainable and batch size. A graph that
  // differs from the stored one (a newer derivation) supersedes it, so cost
  // tables of the old graph are kept but no longer served.
  Result<int64_t> PutModelGraph(const v1::TrainingGraph& graph);
  Result<std::vector<v1::TrainingGraph>> ListModelGraphs();  // current graphs only

  // Stores the graph and every node cost in one transaction. An earlier table
  // for the same graph, fingerprint, source and thread count (CostTable.threads)
  // is superseded, not deleted: tables of other thread counts stay current. The
  // table's fingerprint must be recorded (UpsertDevice) first.
  Result<int64_t> PutCostTable(const v1::CostTable& table);
  // The newest current table for `key`, of exactly key.threads; NotFound says what to run otherwise.
  Result<v1::CostTable> GetCostTable(const CostTableKey& key);
  // The thread counts with a current table for `key` (key.threads ignored), ascending.
  Result<std::vector<uint32_t>> CostTableThreads(const CostTableKey& key);
  Result<v1::CostTable> GetCostTableById(int64_t id);
  // The current tables (on current fingerprints), by id; empty `device` matches every device.
  Result<std::vector<StoredCostTable>> ListCostTables(const std::string& device = "");
  // Names of the models with a current cost table from `cost_source` on the fingerprint, by name.
  Result<std::vector<std::string>> ListModelsWithCosts(const std::string& fingerprint_hash,
                                                       const std::string& cost_source);

  // Profiling runs. FinishRun takes the idle power when it was measured.
  Result<int64_t> BeginRun(const std::string& fingerprint_hash, const std::string& cost_source,
                           const std::string& model = "");
  Status FinishRun(int64_t run_id, RunStatus status, std::optional<double> idle_power_w = std::nullopt);
  Result<StoredRun> GetRun(int64_t run_id);
  Result<std::vector<StoredRun>> ListRuns();  // oldest first
  // Every run, newest first, with the number of op costs each still provides.
  Result<std::vector<std::pair<StoredRun, int64_t>>> ListRunsWithOpCounts();
  // The op costs a run measured and that no later run replaced, in the order they were measured.
  Result<std::vector<v1::OpCost>> ListRunOpCosts(int64_t run_id);

  // Measured op costs, one per fingerprint and op signature key; storing a key
  // again replaces its cost. run_id 0 means no run (an imported cost).
  Status PutOpCost(const std::string& fingerprint_hash, int64_t run_id, const v1::OpCost& cost);
  Result<std::optional<v1::OpCost>> GetOpCost(const std::string& fingerprint_hash, const std::string& op_key);
  Result<std::vector<v1::OpCost>> ListOpCosts(const std::string& fingerprint_hash);  // by op key
  // The op keys whose stored counters include `event` with its value per execution (op_counters).
  Result<std::vector<std::pair<std::string, double>>> ListOpCounter(const std::string& fingerprint_hash,
                                                                    const std::string& event);
  // An op's energy per domain of the probe that measured it (op_domain_energy), by domain name.
  Result<std::vector<v1::DomainEnergy>> ListOpDomainEnergy(const std::string& fingerprint_hash,
                                                           const std::string& op_key);

  // Counter-based energy models, per fingerprint; the newest is the one in use.
  Result<int64_t> PutCalibration(const v1::EnergyCalibration& calibration);
  Result<std::optional<v1::EnergyCalibration>> LatestCalibration(const std::string& fingerprint_hash);
  Result<std::vector<v1::EnergyCalibration>> ListCalibrations(const std::string& fingerprint_hash);  // oldest first

  // Paging costs, one per fingerprint and storage path; Get returns the latest measured.
  Status PutPagingCost(const std::string& fingerprint_hash, const v1::PagingCost& cost);
  Result<std::optional<v1::PagingCost>> GetPagingCost(const std::string& fingerprint_hash);

  // Schedules. An identical request is stored once; a new schedule for a
  // request supersedes the earlier ones. cost_table_id 0 means none.
  Result<int64_t> PutScheduleRequest(const v1::ScheduleRequest& request);
  Result<int64_t> PutSchedule(int64_t request_id, int64_t cost_table_id, const v1::Schedule& schedule);
  Result<v1::Schedule> GetSchedule(int64_t id);
  // The cost table a stored schedule was solved from; 0 when none was stored.
  Result<int64_t> ScheduleCostTableId(int64_t schedule_id);
  // Empty filters match everything; oldest first.
  Result<std::vector<StoredSchedule>> ListSchedules(const std::string& model = "", const std::string& device = "");
  Result<std::vector<std::pair<int64_t, v1::ScheduleRequest>>> ListScheduleRequests();

  // The daemon's jobs, by id; storing a job again replaces it.
  Status PutJob(const StoredJob& stored);
  Result<std::vector<StoredJob>> ListJobs();
  // The newest `limit` jobs whose id is at most `max_id`, oldest first.
  Result<std::vector<StoredJob>> ListJobs(uint64_t max_id, size_t limit);
  Result<std::optional<StoredJob>> GetJob(uint64_t id);
  Status DeleteJob(uint64_t id);  // NotFound if there is none

  // Training run records (edgecost train): predicted against measured. Put returns the id.
  Result<int64_t> PutTrainRun(const v1::TrainRun& run);
  // Newest `limit` runs (0: 100), oldest first; an empty model matches every model. A listing holds
  // each run's summary: its per-step records (step_stats), which grow with the steps, only with
  // `steps` (an export); GetTrainRun has them.
  Result<std::vector<v1::TrainRun>> ListTrainRuns(const std::string& model = "", int limit = 0, bool steps = false);
  Result<v1::TrainRun> GetTrainRun(int64_t id);  // NotFound if there is none

  // Model records, one per name. Put replaces a record of the same name, and
  // supersedes the training graphs stored under that name, so that cost tables
  // of the old model are kept but no longer served.
  Status PutModelRecord(const ModelRecord& record);
  Result<std::optional<ModelRecord>> GetModelRecord(const std::string& name);  // with its bytes
  Result<std::vector<ModelRecord>> ListModelRecords();                         // by name, without bytes
  // Removes the record and supersedes its training graphs; NotFound if there is none.
  Status DeleteModelRecord(const std::string& name);
  // Stores a record's summary, only while it still holds the bytes of `content_hash`
  // (a record replaced meanwhile keeps its own); false when it did not.
  Result<bool> PutModelSummary(const std::string& name, const std::string& content_hash, const v1::ModelInfo& summary);

  // A number that grows with every write, by any process, to what a cost table read from the
  // database depends on (op costs, cost tables, training graphs, devices, fingerprints, model
  // records): a table read while it was N may be served again while it is still N.
  Result<int64_t> CostsVersion();

  Result<DbInfo> Info();

  // Records copied from another database (db import, a push to a central store), identified
  // by their content so that copying them again adds nothing (costdb/sync_state.cc).
  struct Copied {
    int64_t id = 0;      // of the stored record, new or already there
    bool added = false;  // false: an equal record was stored before
  };
  // A finished run with its own times, identified by fingerprint, cost source, model and started_at.
  Result<Copied> CopyRun(const StoredRun& run);
  // A training run with its own created_at, identified by model, device and created_at.
  Result<Copied> CopyTrainRun(const v1::TrainRun& run);
  // The ids of every stored table, current or superseded, of the table's graph (model, derivation,
  // trainable, batch size), fingerprint, cost source and thread count, newest first: an import
  // compares against each, so that a table stored before and superseded since is not stored again.
  Result<std::vector<int64_t>> ListCostTableVersions(const v1::CostTable& table);
  // Named numbers a sync keeps of what a central store acknowledged; 0 when never set.
  Result<int64_t> GetSyncMark(const std::string& name);
  Status SetSyncMark(const std::string& name, int64_t value);

  // One transaction around several calls (an import): the calls join it, and
  // nothing they wrote stays unless Commit() succeeds, even under kill -9.
  Result<Transaction> BeginWrite() { return Write(); }

 private:
  struct FingerprintRow {
    int64_t id = 0;
    std::string device;
  };

  CostDb(Db db, OpenMode mode) : db_(std::move(db)), mode_(mode) {}
  Status Migrate();
  Result<Transaction> Read();
  Result<Transaction> Write();  // refuses in read-only mode
  Result<FingerprintRow> FindFingerprint(const std::string& hash);
  Result<int64_t> CostSourceId(const std::string& name);
  Result<std::vector<v1::Device>> ReadDevices(const std::optional<std::string>& name);

  Db db_;
  OpenMode mode_ = OpenMode::kReadWrite;
};

}  // namespace edgecost::costdb
