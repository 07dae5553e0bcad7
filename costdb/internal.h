// What the files of costdb/ share: SQL helpers, encodings of stored values
// and the table list. Private to costdb/; the API is costdb.h.
#pragma once

#include <filesystem>
#include <initializer_list>
#include <string>
#include <string_view>

#include <google/protobuf/message_lite.h>

#include "costdb/costdb.h"
#include "costdb/sqlite.h"

namespace edgecost::costdb::internal {

namespace fs = std::filesystem;
using Kind = Transaction::Kind;

inline constexpr const char* kTables[] = {
    "devices",          "fingerprints", "cost_sources", "runs",        "op_costs",
    "paging_costs",     "models",       "cost_tables",  "node_costs",  "schedule_requests",
    "schedules",        "jobs",         "train_runs",   "op_counters", "energy_calibrations",
    "op_domain_energy", "model_records"};

// "INSERT ... ON CONFLICT (key) DO UPDATE SET every other column", with one
// `?` per column in `columns` order, so that binding follows the same list.
std::string UpsertSql(std::string_view table, std::initializer_list<std::string_view> key,
                      std::initializer_list<std::string_view> columns);
std::string NowUtc();  // UTC, ISO 8601 with milliseconds
// Deterministic encoding: equal messages give equal blobs.
std::string Serialize(const google::protobuf::MessageLite& message);
std::string EnergySourceText(v1::EnergySource source);  // ENERGY_SOURCE_COUNTER -> "counter"
RunStatus RunStatusFromText(const std::string& text);
Result<std::string> DeviceKindText(const v1::Device& device);

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

}  // namespace edgecost::costdb::internal
