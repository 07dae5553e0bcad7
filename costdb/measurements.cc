// Profiling runs, measured op costs and paging costs.
#include <string>
#include <vector>

#include "costdb/costdb.h"
#include "costdb/internal.h"
#include "graph/cost_checks.h"

namespace edgecost::costdb {
using namespace internal;

Result<int64_t> CostDb::BeginRun(const std::string& fingerprint_hash, const std::string& cost_source,
                                 const std::string& model) {
  EC_ASSIGN_OR_RETURN(Transaction tx, Write());
  EC_ASSIGN_OR_RETURN(FingerprintRow fingerprint, FindFingerprint(fingerprint_hash));
  EC_ASSIGN_OR_RETURN(int64_t source_id, CostSourceId(cost_source));
  EC_ASSIGN_OR_RETURN(
      Statement stmt,
      db_.Prepare("INSERT INTO runs (fingerprint_id, cost_source_id, started_at, status, model) VALUES (?, ?, ?, ?, ?)"));
  EC_RETURN_IF_ERROR(stmt.Bind(1, fingerprint.id)
                         .Bind(2, source_id)
                         .Bind(3, NowUtc())
                         .Bind(4, RunStatusText(RunStatus::kRunning))
                         .Bind(5, model)
                         .Run());
  EC_ASSIGN_OR_RETURN(const int64_t id, db_.LastInsertId());
  EC_RETURN_IF_ERROR(tx.Commit());
  return id;
}

Status CostDb::FinishRun(int64_t run_id, RunStatus status, std::optional<double> idle_power_w) {
  if (status == RunStatus::kRunning) return InvalidArgument("a run finishes as complete, failed or cancelled");
  EC_ASSIGN_OR_RETURN(Transaction tx, Write());
  EC_ASSIGN_OR_RETURN(
      Statement stmt,
      db_.Prepare(
          "UPDATE runs SET status = ?, finished_at = ?, idle_power_w = coalesce(?, idle_power_w) WHERE id = ?"));
  EC_RETURN_IF_ERROR(stmt.Bind(1, RunStatusText(status)).Bind(2, NowUtc()).Bind(3, idle_power_w).Bind(4, run_id).Run());
  if (db_.Changes() == 0) return NotFound("no run #" + std::to_string(run_id) + " in " + path());
  return tx.Commit();
}

Result<StoredRun> CostDb::GetRun(int64_t run_id) {
  EC_ASSIGN_OR_RETURN(
      Statement stmt,
      db_.Prepare("SELECT f.hash, s.name, r.status, r.started_at, r.finished_at, r.idle_power_w, r.model FROM runs r "
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
                   .idle_power_w = stmt.OptionalDouble(5),
                   .model = stmt.Text(6)};
}

Result<std::vector<StoredRun>> CostDb::ListRuns() {
  EC_ASSIGN_OR_RETURN(
      Statement stmt,
      db_.Prepare("SELECT r.id, f.hash, s.name, r.status, r.started_at, r.finished_at, r.idle_power_w, r.model FROM runs r "
                  "JOIN fingerprints f ON f.id = r.fingerprint_id JOIN cost_sources s ON s.id = r.cost_source_id "
                  "ORDER BY r.id"));
  std::vector<StoredRun> runs;
  EC_RETURN_IF_ERROR(ForEachRow(stmt, [&]() -> Status {
    runs.push_back({.id = stmt.Int(0),
                    .fingerprint_hash = stmt.Text(1),
                    .cost_source = stmt.Text(2),
                    .status = RunStatusFromText(stmt.Text(3)),
                    .started_at = stmt.Text(4),
                    .finished_at = stmt.Text(5),
                    .idle_power_w = stmt.OptionalDouble(6),
                    .model = stmt.Text(7)});
    return Status::Ok();
  }));
  return runs;
}

Result<std::vector<std::pair<StoredRun, int64_t>>> CostDb::ListRunsWithOpCounts() {
  EC_ASSIGN_OR_RETURN(
      Statement stmt,
      db_.Prepare("SELECT r.id, f.hash, s.name, r.status, r.started_at, r.finished_at, r.idle_power_w, "
                  "(SELECT count(*) FROM op_costs o WHERE o.run_id = r.id), r.model FROM runs r "
                  "JOIN fingerprints f ON f.id = r.fingerprint_id JOIN cost_sources s ON s.id = r.cost_source_id "
                  "ORDER BY r.id DESC"));
  std::vector<std::pair<StoredRun, int64_t>> runs;
  EC_RETURN_IF_ERROR(ForEachRow(stmt, [&]() -> Status {
    runs.emplace_back(StoredRun{.id = stmt.Int(0),
                                .fingerprint_hash = stmt.Text(1),
                                .cost_source = stmt.Text(2),
                                .status = RunStatusFromText(stmt.Text(3)),
                                .started_at = stmt.Text(4),
                                .finished_at = stmt.Text(5),
                                .idle_power_w = stmt.OptionalDouble(6),
                                .model = stmt.Text(8)},
                      stmt.Int(7));
    return Status::Ok();
  }));
  return runs;
}

Result<std::vector<v1::OpCost>> CostDb::ListRunOpCosts(int64_t run_id) {
  EC_RETURN_IF_ERROR(GetRun(run_id).status());
  EC_ASSIGN_OR_RETURN(Statement stmt,
                      db_.Prepare("SELECT op_cost FROM op_costs WHERE run_id = ? ORDER BY measured_at, id"));
  stmt.Bind(1, run_id);
  std::vector<v1::OpCost> costs;
  EC_RETURN_IF_ERROR(ForEachRow(stmt, [&]() -> Status {
    EC_ASSIGN_OR_RETURN(costs.emplace_back(), Parse<v1::OpCost>(stmt.Blob(0), "op cost", path()));
    return Status::Ok();
  }));
  return costs;
}

Status CostDb::PutOpCost(const std::string& fingerprint_hash, int64_t run_id, const v1::OpCost& cost) {
  if (cost.signature().key().empty()) return InvalidArgument("an op cost needs its signature key");
  EC_RETURN_IF_ERROR(graph::CheckOpCost(cost, "a measured cost"));
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
  static const std::string kSql =
      UpsertSql("op_costs", {"fingerprint_id", "op_key"},
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
  // The counters of the cost stored now replace the earlier ones.
  EC_ASSIGN_OR_RETURN(Statement clear, db_.Prepare("DELETE FROM op_counters WHERE fingerprint_id = ? AND op_key = ?"));
  EC_RETURN_IF_ERROR(clear.Bind(1, fingerprint.id).Bind(2, cost.signature().key()).Run());
  if (cost.counters_size() > 0) {
    EC_ASSIGN_OR_RETURN(Statement counter,
                        db_.Prepare(UpsertSql("op_counters", {"fingerprint_id", "op_key", "event"},
                                              {"fingerprint_id", "op_key", "event", "per_execution", "running_fraction"})));
    for (const v1::OpCounter& c : cost.counters()) {
      EC_RETURN_IF_ERROR(counter.Bind(1, fingerprint.id)
                             .Bind(2, cost.signature().key())
                             .Bind(3, c.event())
                             .Bind(4, c.per_execution())
                             .Bind(5, c.running_fraction())
                             .Run());
    }
  }
  // Likewise its energy per domain; an estimate has none, so none stays stored.
  EC_ASSIGN_OR_RETURN(Statement clear_domains,
                      db_.Prepare("DELETE FROM op_domain_energy WHERE fingerprint_id = ? AND op_key = ?"));
  EC_RETURN_IF_ERROR(clear_domains.Bind(1, fingerprint.id).Bind(2, cost.signature().key()).Run());
  if (cost.domains_size() > 0) {
    EC_ASSIGN_OR_RETURN(Statement domain,
                        db_.Prepare(UpsertSql("op_domain_energy", {"fingerprint_id", "op_key", "domain"},
                                              {"fingerprint_id", "op_key", "domain", "inside", "energy_j", "idle_power_w",
                                               "dynamic_energy_j"})));
    for (const v1::DomainEnergy& d : cost.domains()) {
      EC_RETURN_IF_ERROR(domain.Bind(1, fingerprint.id)
                             .Bind(2, cost.signature().key())
                             .Bind(3, d.domain())
                             .Bind(4, d.inside())
                             .Bind(5, d.energy_j())
                             .Bind(6, d.idle_power_w())
                             .Bind(7, d.dynamic_energy_j())
                             .Run());
    }
  }
  return tx.Commit();
}

Result<std::vector<v1::DomainEnergy>> CostDb::ListOpDomainEnergy(const std::string& fingerprint_hash,
                                                                 const std::string& op_key) {
  EC_ASSIGN_OR_RETURN(Statement stmt,
                      db_.Prepare("SELECT d.domain, d.inside, d.energy_j, d.idle_power_w, d.dynamic_energy_j FROM "
                                  "op_domain_energy d JOIN fingerprints f ON f.id = d.fingerprint_id WHERE f.hash = ? "
                                  "AND d.op_key = ? ORDER BY d.domain"));
  stmt.Bind(1, fingerprint_hash).Bind(2, op_key);
  std::vector<v1::DomainEnergy> rows;
  EC_RETURN_IF_ERROR(ForEachRow(stmt, [&]() -> Status {
    v1::DomainEnergy& d = rows.emplace_back();
    d.set_domain(stmt.Text(0));
    d.set_inside(stmt.Text(1));
    d.set_energy_j(stmt.Double(2));
    d.set_idle_power_w(stmt.Double(3));
    d.set_dynamic_energy_j(stmt.Double(4));
    return Status::Ok();
  }));
  return rows;
}

Result<std::vector<std::pair<std::string, double>>> CostDb::ListOpCounter(const std::string& fingerprint_hash,
                                                                          const std::string& event) {
  EC_ASSIGN_OR_RETURN(Statement stmt,
                      db_.Prepare("SELECT c.op_key, c.per_execution FROM op_counters c JOIN fingerprints f ON "
                                  "f.id = c.fingerprint_id WHERE f.hash = ? AND c.event = ? ORDER BY c.op_key"));
  stmt.Bind(1, fingerprint_hash).Bind(2, event);
  std::vector<std::pair<std::string, double>> rows;
  EC_RETURN_IF_ERROR(ForEachRow(stmt, [&]() -> Status {
    rows.emplace_back(stmt.Text(0), stmt.Double(1));
    return Status::Ok();
  }));
  return rows;
}

Result<int64_t> CostDb::PutCalibration(const v1::EnergyCalibration& calibration) {
  if (calibration.probe().empty()) return InvalidArgument("a calibration names the probe it was fitted against");
  EC_RETURN_IF_ERROR(graph::CheckEnergyCalibration(calibration, "an energy calibration"));
  EC_ASSIGN_OR_RETURN(Transaction tx, Write());
  EC_ASSIGN_OR_RETURN(FingerprintRow fingerprint, FindFingerprint(calibration.fingerprint_hash()));
  EC_ASSIGN_OR_RETURN(Statement stmt,
                      db_.Prepare("INSERT INTO energy_calibrations (fingerprint_id, probe, calibrated_at, "
                                  "relative_error, calibration) VALUES (?, ?, ?, ?, ?)"));
  EC_RETURN_IF_ERROR(stmt.Bind(1, fingerprint.id)
                         .Bind(2, calibration.probe())
                         .Bind(3, calibration.calibrated_at())
                         .Bind(4, calibration.relative_error())
                         .BindBlob(5, Serialize(calibration))
                         .Run());
  EC_ASSIGN_OR_RETURN(const int64_t id, db_.LastInsertId());
  EC_RETURN_IF_ERROR(tx.Commit());
  return id;
}

Result<std::vector<v1::EnergyCalibration>> CostDb::ListCalibrations(const std::string& fingerprint_hash) {
  EC_ASSIGN_OR_RETURN(Statement stmt,
                      db_.Prepare("SELECT c.calibration FROM energy_calibrations c JOIN fingerprints f ON "
                                  "f.id = c.fingerprint_id WHERE f.hash = ? ORDER BY c.calibrated_at, c.id"));
  stmt.Bind(1, fingerprint_hash);
  std::vector<v1::EnergyCalibration> out;
  EC_RETURN_IF_ERROR(ForEachRow(stmt, [&]() -> Status {
    EC_ASSIGN_OR_RETURN(out.emplace_back(), Parse<v1::EnergyCalibration>(stmt.Blob(0), "calibration", path()));
    return Status::Ok();
  }));
  return out;
}

Result<std::optional<v1::EnergyCalibration>> CostDb::LatestCalibration(const std::string& fingerprint_hash) {
  EC_ASSIGN_OR_RETURN(std::vector<v1::EnergyCalibration> all, ListCalibrations(fingerprint_hash));
  if (all.empty()) return std::optional<v1::EnergyCalibration>();
  return std::optional<v1::EnergyCalibration>(std::move(all.back()));
}

Result<std::optional<v1::OpCost>> CostDb::GetOpCost(const std::string& fingerprint_hash, const std::string& op_key) {
  EC_ASSIGN_OR_RETURN(Statement stmt,
                      db_.Prepare("SELECT o.op_cost FROM op_costs o JOIN fingerprints f ON f.id = o.fingerprint_id "
                                  "WHERE f.hash = ? AND o.op_key = ?"));
  EC_ASSIGN_OR_RETURN(bool found, stmt.Bind(1, fingerprint_hash).Bind(2, op_key).Step());
  if (!found) return std::optional<v1::OpCost>();
  EC_ASSIGN_OR_RETURN(v1::OpCost cost, Parse<v1::OpCost>(stmt.Blob(0), "op cost", path()));
  return std::optional<v1::OpCost>(std::move(cost));
}

Result<std::vector<v1::OpCost>> CostDb::ListOpCosts(const std::string& fingerprint_hash) {
  EC_ASSIGN_OR_RETURN(
      Statement stmt,
      db_.Prepare("SELECT o.op_cost FROM op_costs o JOIN fingerprints f ON f.id = o.fingerprint_id WHERE f.hash = ? "
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
  EC_RETURN_IF_ERROR(graph::CheckPagingCost(cost, "the paging cost of " + cost.storage_path()));
  EC_ASSIGN_OR_RETURN(Transaction tx, Write());
  EC_ASSIGN_OR_RETURN(FingerprintRow fingerprint, FindFingerprint(fingerprint_hash));
  static const std::string kSql =
      UpsertSql("paging_costs", {"fingerprint_id", "storage_path"},
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
  EC_ASSIGN_OR_RETURN(
      Statement stmt,
      db_.Prepare(
          "SELECT p.paging_cost FROM paging_costs p JOIN fingerprints f ON f.id = p.fingerprint_id WHERE f.hash = ? "
          "ORDER BY p.measured_at DESC, p.id DESC LIMIT 1"));
  EC_ASSIGN_OR_RETURN(bool found, stmt.Bind(1, fingerprint_hash).Step());
  if (!found) return std::optional<v1::PagingCost>();
  EC_ASSIGN_OR_RETURN(v1::PagingCost cost, Parse<v1::PagingCost>(stmt.Blob(0), "paging cost", path()));
  return std::optional<v1::PagingCost>(std::move(cost));
}

}  // namespace edgecost::costdb
