#include "service/cost_export.h"

#include <algorithm>

#include "base/time_text.h"
#include "profiler/node_work.h"

namespace edgecost::service {

Result<v1::CostExport> ExportDevice(costdb::CostDb& db, const std::string& device) {
  v1::CostExport exported;
  EC_ASSIGN_OR_RETURN(*exported.mutable_device(), db.GetDevice(device));
  exported.mutable_device()->clear_history();
  if (exported.device().kind() != v1::Device::KIND_MEASURED) {
    return InvalidArgument("'" + device +
                           "' is a board preset: its costs are computed, not measured; nothing to export");
  }
  const std::string& hash = exported.device().fingerprint().hash();
  EC_ASSIGN_OR_RETURN(std::vector<v1::OpCost> ops, db.ListOpCosts(hash));
  for (v1::OpCost& op : ops) *exported.add_op_costs() = std::move(op);
  EC_ASSIGN_OR_RETURN(std::optional<v1::PagingCost> paging, db.GetPagingCost(hash));
  if (paging) *exported.mutable_paging() = *paging;
  EC_ASSIGN_OR_RETURN(std::vector<costdb::StoredCostTable> tables, db.ListCostTables(device));
  for (const costdb::StoredCostTable& stored : tables) {
    EC_ASSIGN_OR_RETURN(*exported.add_cost_tables(), db.GetCostTableById(stored.id));
  }
  EC_ASSIGN_OR_RETURN(std::vector<v1::EnergyCalibration> calibrations, db.ListCalibrations(hash));
  for (v1::EnergyCalibration& c : calibrations) *exported.add_calibrations() = std::move(c);
  exported.set_exported_at(NowRfc3339());
  return exported;
}

namespace {

// What the writes cannot see: whose the export is. Its numbers are checked by
// the cost database's writes, inside the import's one transaction.
Status CheckExport(const v1::CostExport& exported) {
  const v1::Device& device = exported.device();
  if (device.kind() != v1::Device::KIND_MEASURED) return InvalidArgument("the export holds no measured device");
  if (device.name().empty() || device.fingerprint().hash().empty()) {
    return InvalidArgument("the export's device has no name or no fingerprint");
  }
  const std::string& hash = device.fingerprint().hash();
  for (const v1::CostTable& table : exported.cost_tables()) {
    if (table.device() != device.name() || table.fingerprint_hash() != hash) {
      return InvalidArgument("the export's cost table for " + table.graph().model() + " belongs to " + table.device() +
                             " (" + table.fingerprint_hash() + "), not to the exported device " + device.name() + " (" +
                             hash + ")");
    }
  }
  return Status::Ok();
}

}  // namespace

Result<ImportSummary> ImportDevice(costdb::CostDb& db, const v1::CostExport& exported, const ImportOptions& options) {
  EC_RETURN_IF_ERROR(CheckExport(exported));
  const v1::Device& device = exported.device();
  const std::string& hash = device.fingerprint().hash();
  if (!options.replace) {
    const bool same_name = device.name() == options.host.name();
    if (same_name || hash == options.host.fingerprint().hash()) {
      return FailedPrecondition("the export's device " + device.name() + " (fingerprint " + hash + ") " +
                                (same_name ? "has the name of this host" : "has this host's fingerprint") +
                                ": importing it would " +
                                (same_name && hash != options.host.fingerprint().hash()
                                     ? "mark this host's hardware as changed"
                                     : "overwrite what this host measured") +
                                "; pass --replace if that is meant");
    }
  }
  ImportSummary summary{.device = device.name()};
  EC_ASSIGN_OR_RETURN(costdb::Transaction tx, db.BeginWrite());
  EC_RETURN_IF_ERROR(db.UpsertDevice(device).status());
  for (const v1::OpCost& op : exported.op_costs()) {
    EC_RETURN_IF_ERROR(db.PutOpCost(hash, /*run_id=*/0, op));
    ++summary.op_costs;
  }
  // A device of the same fingerprint elsewhere estimates energy with the same model.
  EC_ASSIGN_OR_RETURN(std::vector<v1::EnergyCalibration> known, db.ListCalibrations(hash));
  for (v1::EnergyCalibration c : exported.calibrations()) {
    c.set_fingerprint_hash(hash);
    const bool stored = std::any_of(known.begin(), known.end(), [&](const v1::EnergyCalibration& k) {
      return k.calibrated_at() == c.calibrated_at() && k.probe() == c.probe();
    });
    if (stored) continue;
    EC_RETURN_IF_ERROR(db.PutCalibration(c).status());
    ++summary.calibrations;
  }
  if (exported.has_paging()) {
    EC_RETURN_IF_ERROR(db.PutPagingCost(hash, exported.paging()));
    summary.paging = true;
  }
  for (v1::CostTable table : exported.cost_tables()) {
    // An export from before tables carried their thread count: its op keys still say it.
    if (table.threads() == 0) table.set_threads(static_cast<uint32_t>(profiler::CostTableOpKeyThreads(table)));
    EC_RETURN_IF_ERROR(db.PutCostTable(table).status());
    ++summary.cost_tables;
  }
  EC_RETURN_IF_ERROR(tx.Commit());
  return summary;
}

}  // namespace edgecost::service
