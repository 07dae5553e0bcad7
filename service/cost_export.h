// Moving a device's measurements between cost databases: `edgecost db export`
// on the board, `edgecost db import` on the host, then `solve --device BOARD`
// on the host plans with what the board measured.
#pragma once

#include <string>

#include "base/status.h"
#include "costdb/costdb.h"
#include "proto/edgecost.pb.h"

namespace edgecost::service {

// The device's current fingerprint with its op costs, paging cost and current cost tables.
Result<v1::CostExport> ExportDevice(costdb::CostDb& db, const std::string& device);

struct ImportSummary {
  std::string device;
  int op_costs = 0;
  int cost_tables = 0;
  int calibrations = 0;  // energy models new to this database
  bool paging = false;
};

struct ImportOptions {
  // This host, as a profile here would record it: an export under its name or
  // with its fingerprint would supersede or overwrite what this host measured
  // (and make the daemon see a hardware change that did not happen), so it
  // needs `replace`.
  v1::Device host;
  bool replace = false;
};

// Records the device and its fingerprint, then every cost, in the receiving
// database, in one transaction: each write checks what it stores, and a failed
// one leaves nothing of the import.
Result<ImportSummary> ImportDevice(costdb::CostDb& db, const v1::CostExport& exported, const ImportOptions& options);

}  // namespace edgecost::service
