// Moving a device's measurements between cost databases: `edgecost db export`
// on the board, `edgecost db import` on the host, then `solve --device BOARD`
// on the host plans with what the board measured. The same export, limited to
// what is new, is what an agent pushes to a central store (service/sync.h).
//
// An export carries what its costs need on the other side: the model records
// its cost tables, runs and schedules name, the runs that measured its op
// costs, its schedules and training runs. Every record is identified by its
// content, and an import writes only what the receiving database lacks, so
// importing an export twice, or two exports that overlap, adds nothing the
// second time.
#pragma once

#include <cstdint>
#include <string>

#include "base/status.h"
#include "costdb/costdb.h"
#include "proto/edgecost.pb.h"

namespace edgecost::service {

// Local ids at or below these were exported before (a sync's marks): only newer runs, cost
// tables, schedules and training runs are exported. 0: everything.
struct ExportOptions {
  int64_t after_run_id = 0;
  int64_t after_cost_table_id = 0;
  int64_t after_schedule_id = 0;
  int64_t after_train_run_id = 0;
};

// What an export covered: the ids to pass as ExportOptions next time.
struct ExportMarks {
  int64_t run_id = 0;  // below the first run still running: it is exported when it finishes
  int64_t cost_table_id = 0;
  int64_t schedule_id = 0;
  int64_t train_run_id = 0;
};

// The device's current fingerprint with its op costs, paging cost, calibrations and current
// cost tables; its earlier fingerprints; its finished runs, schedules and training runs; and
// the model records these name.
Result<v1::CostExport> ExportDevice(costdb::CostDb& db, const std::string& device, const ExportOptions& options = {},
                                    ExportMarks* marks = nullptr);

struct ImportSummary {
  std::string device;
  int op_costs = 0;  // new or changed in this database; the same for every count below
  int cost_tables = 0;
  int calibrations = 0;  // energy models new to this database
  bool paging = false;
  int models = 0;
  int runs = 0;
  int schedules = 0;
  int train_runs = 0;
  int fingerprints = 0;  // earlier fingerprints new to this database
  int unchanged = 0;     // records of the export this database held already
  int Added() const {
    return op_costs + cost_tables + calibrations + (paging ? 1 : 0) + models + runs + schedules + train_runs +
           fingerprints;
  }
};

struct ImportOptions {
  // This host, as a profile here would record it: an export under its name or
  // with its fingerprint would supersede or overwrite what this host measured
  // (and make the daemon see a hardware change that did not happen), so it
  // needs `replace`.
  v1::Device host;
  bool replace = false;
};

// Records the device and its fingerprints, then every record the database lacks, in
// one transaction: each write checks what it stores, and a failed one leaves
// nothing of the import. A model stored here under the same name with other bytes
// fails the import: the export's costs were measured on its own model.
Result<ImportSummary> ImportDevice(costdb::CostDb& db, const v1::CostExport& exported, const ImportOptions& options);

// The file forms of an export. kBinary, the default, is the protobuf encoding compressed
// with gzip (`zcat FILE | protoc --decode` reads it); kProtobuf is uncompressed (.pb).
enum class ExportFormat { kBinary, kProtobuf, kJson };
Result<std::string> EncodeExport(const v1::CostExport& exported, ExportFormat format);
// Any of the three forms, told apart by their first bytes.
Result<v1::CostExport> DecodeExport(const std::string& bytes, const std::string& what);

}  // namespace edgecost::service
