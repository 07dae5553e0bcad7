#include "service/cost_export.h"

#include <time.h>

#include <chrono>

namespace edgecost::service {
namespace {

std::string NowRfc3339() {
  const std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm utc{};
  ::gmtime_r(&now, &utc);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &utc);
  return text;
}

}  // namespace

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
  exported.set_exported_at(NowRfc3339());
  return exported;
}

Result<ImportSummary> ImportDevice(costdb::CostDb& db, const v1::CostExport& exported) {
  const v1::Device& device = exported.device();
  if (device.kind() != v1::Device::KIND_MEASURED) return InvalidArgument("the export holds no measured device");
  const std::string& hash = device.fingerprint().hash();
  for (const v1::CostTable& table : exported.cost_tables()) {
    if (table.device() != device.name() || table.fingerprint_hash() != hash) {
      return InvalidArgument("the export's cost table for " + table.graph().model() + " belongs to " + table.device() +
                             " (" + table.fingerprint_hash() + "), not to the exported device " + device.name() + " (" +
                             hash + ")");
    }
  }
  ImportSummary summary{.device = device.name()};
  EC_RETURN_IF_ERROR(db.UpsertDevice(device).status());
  for (const v1::OpCost& op : exported.op_costs()) {
    EC_RETURN_IF_ERROR(db.PutOpCost(hash, /*run_id=*/0, op));
    ++summary.op_costs;
  }
  if (exported.has_paging()) {
    EC_RETURN_IF_ERROR(db.PutPagingCost(hash, exported.paging()));
    summary.paging = true;
  }
  for (const v1::CostTable& table : exported.cost_tables()) {
    EC_RETURN_IF_ERROR(db.PutCostTable(table).status());
    ++summary.cost_tables;
  }
  return summary;
}

}  // namespace edgecost::service
