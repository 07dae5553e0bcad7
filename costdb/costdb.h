// The cost database: one SQLite file holding devices and their fingerprints,
// measured op costs with provenance, paging costs, training graphs, cost tables
// and schedules. The typed API below is the only way in; no SQL lives elsewhere.
//
// Safety: WAL journal, foreign keys, every write in one transaction, schema
// versioned by PRAGMA user_version with forward migrations. A file that is not
// an edgecost database, or comes from a newer edgecost, is refused untouched.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "costdb/sqlite.h"
#include "proto/edgecost.pb.h"

namespace edgecost::costdb {

inline constexpr int kSchemaVersion = 1;

enum class OpenMode { kReadWrite, kReadOnly };

struct OpenOptions {
  OpenMode mode = OpenMode::kReadWrite;
  int busy_timeout_ms = 5000;  // how long a write waits for another writer
};

// $EDGECOST_DB, else $XDG_DATA_HOME/edgecost/edgecost.db, else ~/.local/share/edgecost/edgecost.db.
std::string DefaultDbPath();

struct CostTableKey {
  std::string model;
  std::string device;
  std::string cost_source;
  uint32_t batch_size = 1;
  std::string derivation = "poet";
  std::string trainable = "all";
};

struct StoredSchedule {
  int64_t id = 0;
  int64_t request_id = 0;
  v1::ScheduleRequest request;
  v1::Schedule::Status status = v1::Schedule::STATUS_UNSPECIFIED;
  double energy_j = 0;
  bool superseded = false;
  std::string created_at;
};

struct DbInfo {
  std::string path;
  int schema_version = 0;
  int64_t file_size_bytes = 0;
  std::string journal_mode;
  std::map<std::string, int64_t> row_counts;  // per table
};

class CostDb {
 public:
  static Result<CostDb> Open(const std::string& path, OpenOptions options = {});
  static Result<CostDb> Open(const std::string& path, OpenMode mode) { return Open(path, OpenOptions{mode}); }

  CostDb(CostDb&&) = default;
  CostDb& operator=(CostDb&&) = default;

  const std::string& path() const { return db_.path(); }

  // Devices. Upserting a device whose fingerprint hash changed keeps the old
  // fingerprint, marked superseded, and makes the new one current.
  Result<int64_t> UpsertDevice(const v1::Device& device);
  Result<v1::Device> GetDevice(const std::string& name);
  Result<std::vector<v1::Device>> ListDevices();

  // Training graphs, idempotent on model, derivation, trainable and batch size.
  Result<int64_t> PutModelGraph(const v1::TrainingGraph& graph);
  Result<std::vector<v1::TrainingGraph>> ListModelGraphs();

  // Cost tables: the graph, device and per-node costs in one transaction. An
  // earlier table for the same graph, fingerprint and source is superseded, not deleted.
  Result<int64_t> PutCostTable(const v1::CostTable& table);
  Result<v1::CostTable> GetCostTable(const CostTableKey& key);
  Result<v1::CostTable> GetCostTableById(int64_t id);

  // Measured op costs, keyed by fingerprint and op signature, with the run that measured them.
  Result<int64_t> BeginRun(const std::string& fingerprint_hash, const std::string& cost_source);
  Status FinishRun(int64_t run_id, const std::string& status);
  Status PutOpCost(const std::string& fingerprint_hash, int64_t run_id, const v1::OpCost& cost);
  Result<std::optional<v1::OpCost>> GetOpCost(const std::string& fingerprint_hash, const std::string& op_key);
  Result<std::vector<v1::OpCost>> ListOpCosts(const std::string& fingerprint_hash);

  Status PutPagingCost(const std::string& fingerprint_hash, const v1::PagingCost& cost);
  Result<std::optional<v1::PagingCost>> GetPagingCost(const std::string& fingerprint_hash);

  // Schedules. A request is stored once; a new schedule for it supersedes the earlier ones.
  Result<int64_t> PutScheduleRequest(const v1::ScheduleRequest& request);
  Result<int64_t> PutSchedule(int64_t request_id, int64_t cost_table_id, const v1::Schedule& schedule);
  Result<v1::Schedule> GetSchedule(int64_t id);
  Result<std::vector<StoredSchedule>> ListSchedules(const std::string& model = "", const std::string& device = "");
  Result<std::vector<std::pair<int64_t, v1::ScheduleRequest>>> ListScheduleRequests();

  Result<DbInfo> Info();

 private:
  explicit CostDb(Db db) : db_(std::move(db)) {}
  Status Migrate();
  Result<int64_t> FingerprintId(const std::string& hash);
  Result<int64_t> CostSourceId(const std::string& name);
  Result<int64_t> PutModelGraphInTransaction(const v1::TrainingGraph& graph);
  Result<int64_t> UpsertDeviceInTransaction(const v1::Device& device);

  Db db_;
};

}  // namespace edgecost::costdb
