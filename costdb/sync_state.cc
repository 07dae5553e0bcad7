// Records copied from another database keep their identity, so that a copy made
// twice (an export imported again, a push retried after a lost acknowledgement)
// stores them once; and the marks a sync keeps of what a central store acknowledged.
#include <string>

#include "costdb/costdb.h"
#include "costdb/internal.h"

namespace edgecost::costdb {
using namespace internal;

Result<CostDb::Copied> CostDb::CopyRun(const StoredRun& run) {
  if (run.status == RunStatus::kRunning) {
    return InvalidArgument("only a finished run is copied: the run started " + run.started_at + " is still running");
  }
  if (run.started_at.empty()) return InvalidArgument("a copied run needs the time it started (its identity)");
  EC_ASSIGN_OR_RETURN(Transaction tx, Write());
  EC_ASSIGN_OR_RETURN(FingerprintRow fingerprint, FindFingerprint(run.fingerprint_hash));
  EC_ASSIGN_OR_RETURN(int64_t source_id, CostSourceId(run.cost_source));
  EC_ASSIGN_OR_RETURN(Statement find,
                      db_.Prepare("SELECT id FROM runs WHERE fingerprint_id = ? AND cost_source_id = ? AND model = ? "
                                  "AND started_at = ? ORDER BY id LIMIT 1"));
  EC_ASSIGN_OR_RETURN(bool found,
                      find.Bind(1, fingerprint.id).Bind(2, source_id).Bind(3, run.model).Bind(4, run.started_at).Step());
  if (found) return Copied{.id = find.Int(0), .added = false};
  EC_ASSIGN_OR_RETURN(Statement insert,
                      db_.Prepare("INSERT INTO runs (fingerprint_id, cost_source_id, started_at, finished_at, status, "
                                  "idle_power_w, model) VALUES (?, ?, ?, ?, ?, ?, ?)"));
  EC_RETURN_IF_ERROR(insert.Bind(1, fingerprint.id)
                         .Bind(2, source_id)
                         .Bind(3, run.started_at)
                         .Bind(4, run.finished_at.empty() ? std::optional<std::string>() : run.finished_at)
                         .Bind(5, RunStatusText(run.status))
                         .Bind(6, run.idle_power_w)
                         .Bind(7, run.model)
                         .Run());
  EC_ASSIGN_OR_RETURN(const int64_t id, db_.LastInsertId());
  EC_RETURN_IF_ERROR(tx.Commit());
  return Copied{.id = id, .added = true};
}

Result<CostDb::Copied> CostDb::CopyTrainRun(const v1::TrainRun& run) {
  if (run.created_at().empty()) return InvalidArgument("a copied training run needs its created_at (its identity)");
  EC_ASSIGN_OR_RETURN(Transaction tx, Write());
  EC_ASSIGN_OR_RETURN(
      Statement find,
      db_.Prepare("SELECT id FROM train_runs WHERE model = ? AND device = ? AND created_at = ? ORDER BY id LIMIT 1"));
  EC_ASSIGN_OR_RETURN(bool found, find.Bind(1, run.model()).Bind(2, run.device()).Bind(3, run.created_at()).Step());
  if (found) return Copied{.id = find.Int(0), .added = false};
  v1::TrainRun stored = run;
  stored.clear_id();  // the id is the database's
  EC_ASSIGN_OR_RETURN(
      Statement insert,
      db_.Prepare("INSERT INTO train_runs (model, device, schedule_id, run, created_at) VALUES (?, ?, ?, ?, ?)"));
  EC_RETURN_IF_ERROR(insert.Bind(1, run.model())
                         .Bind(2, run.device())
                         .Bind(3, run.schedule_id() != 0
                                      ? std::optional<int64_t>(static_cast<int64_t>(run.schedule_id()))
                                      : std::nullopt)
                         .BindBlob(4, Serialize(stored))
                         .Bind(5, run.created_at())
                         .Run());
  EC_ASSIGN_OR_RETURN(const int64_t id, db_.LastInsertId());
  EC_RETURN_IF_ERROR(tx.Commit());
  return Copied{.id = id, .added = true};
}

Result<std::vector<int64_t>> CostDb::ListCostTableVersions(const v1::CostTable& table) {
  EC_ASSIGN_OR_RETURN(
      Statement stmt,
      db_.Prepare("SELECT t.id FROM cost_tables t JOIN models m ON m.id = t.model_id "
                  "JOIN fingerprints f ON f.id = t.fingerprint_id JOIN cost_sources s ON s.id = t.cost_source_id "
                  "WHERE m.name = ? AND m.derivation = ? AND m.trainable = ? AND m.batch_size = ? AND f.hash = ? "
                  "AND s.name = ? AND t.threads = ? ORDER BY t.id DESC"));
  stmt.Bind(1, table.graph().model())
      .Bind(2, table.graph().derivation())
      .Bind(3, table.graph().trainable())
      .Bind(4, table.graph().batch_size())
      .Bind(5, table.fingerprint_hash())
      .Bind(6, table.cost_source())
      .Bind(7, table.threads());
  std::vector<int64_t> ids;
  EC_RETURN_IF_ERROR(ForEachRow(stmt, [&]() -> Status {
    ids.push_back(stmt.Int(0));
    return Status::Ok();
  }));
  return ids;
}

// Kept beside the 'costs' counter, under a prefix no counter uses.
Result<int64_t> CostDb::GetSyncMark(const std::string& name) {
  EC_ASSIGN_OR_RETURN(Statement stmt, db_.Prepare("SELECT value FROM change_counters WHERE name = ?"));
  EC_ASSIGN_OR_RETURN(bool found, stmt.Bind(1, "sync:" + name).Step());
  return found ? stmt.Int(0) : 0;
}

Status CostDb::SetSyncMark(const std::string& name, int64_t value) {
  if (name.empty()) return InvalidArgument("a sync mark needs a name");
  EC_ASSIGN_OR_RETURN(Transaction tx, Write());
  EC_ASSIGN_OR_RETURN(Statement stmt,
                      db_.Prepare("INSERT INTO change_counters (name, value) VALUES (?, ?) "
                                  "ON CONFLICT (name) DO UPDATE SET value = excluded.value"));
  EC_RETURN_IF_ERROR(stmt.Bind(1, "sync:" + name).Bind(2, value).Run());
  return tx.Commit();
}

}  // namespace edgecost::costdb
