// Schedule requests and schedules.
#include <string>
#include <vector>

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/wire_format_lite.h>

#include "costdb/costdb.h"
#include "costdb/internal.h"

namespace edgecost::costdb {
using namespace internal;
namespace {

// A stored schedule's energy source read off its bytes: a listing needs this one enum
// of each row, not the whole schedule parsed.
v1::EnergySource EnergySourceOf(const std::string& schedule_bytes) {
  using google::protobuf::internal::WireFormatLite;
  google::protobuf::io::CodedInputStream in(reinterpret_cast<const uint8_t*>(schedule_bytes.data()),
                                            static_cast<int>(schedule_bytes.size()));
  v1::EnergySource source = v1::ENERGY_SOURCE_UNSPECIFIED;
  while (const uint32_t tag = in.ReadTag()) {
    if (WireFormatLite::GetTagFieldNumber(tag) == v1::Schedule::kEnergySourceFieldNumber &&
        WireFormatLite::GetTagWireType(tag) == WireFormatLite::WIRETYPE_VARINT) {
      uint32_t value = 0;
      if (!in.ReadVarint32(&value)) break;
      if (v1::EnergySource_IsValid(static_cast<int>(value))) source = static_cast<v1::EnergySource>(value);
    } else if (!WireFormatLite::SkipField(&in, tag)) {
      break;
    }
  }
  return source;
}

}  // namespace

Result<int64_t> CostDb::PutScheduleRequest(const v1::ScheduleRequest& request) {
  const std::string blob = Serialize(request);
  EC_ASSIGN_OR_RETURN(Transaction tx, Write());
  EC_ASSIGN_OR_RETURN(
      Statement insert,
      db_.Prepare(
          "INSERT INTO schedule_requests (model, device, cost_source, request, created_at) VALUES (?, ?, ?, ?, ?) "
          "ON CONFLICT (request) DO NOTHING"));
  EC_RETURN_IF_ERROR(insert.Bind(1, request.model().empty() ? request.graph_file() : request.model())
                         .Bind(2, request.device())
                         .Bind(3, request.cost_source())
                         .BindBlob(4, blob)
                         .Bind(5, NowUtc())
                         .Run());
  EC_ASSIGN_OR_RETURN(Statement select, db_.Prepare("SELECT id FROM schedule_requests WHERE request = ?"));
  EC_ASSIGN_OR_RETURN(bool found, select.BindBlob(1, blob).Step());
  if (!found) return Internal("a schedule request vanished from " + path());
  const int64_t id = select.Int(0);
  EC_RETURN_IF_ERROR(tx.Commit());
  return id;
}

Result<int64_t> CostDb::PutSchedule(int64_t request_id, int64_t cost_table_id, const v1::Schedule& schedule) {
  const std::string now = NowUtc();
  EC_ASSIGN_OR_RETURN(Transaction tx, Write());
  // Named checks rather than a bare FOREIGN KEY failure.
  EC_ASSIGN_OR_RETURN(int64_t requests,
                      db_.QueryInt("SELECT count(*) FROM schedule_requests WHERE id = " + std::to_string(request_id)));
  if (requests == 0) {
    return NotFound("no schedule request #" + std::to_string(request_id) + " in " + path() +
                    ": store the request first");
  }
  if (cost_table_id != 0) {
    EC_ASSIGN_OR_RETURN(int64_t tables,
                        db_.QueryInt("SELECT count(*) FROM cost_tables WHERE id = " + std::to_string(cost_table_id)));
    if (tables == 0) return NotFound("no cost table #" + std::to_string(cost_table_id) + " in " + path());
  }
  EC_ASSIGN_OR_RETURN(
      Statement supersede,
      db_.Prepare("UPDATE schedules SET superseded_at = ? WHERE request_id = ? AND superseded_at IS NULL"));
  EC_RETURN_IF_ERROR(supersede.Bind(1, now).Bind(2, request_id).Run());
  EC_ASSIGN_OR_RETURN(
      Statement insert,
      db_.Prepare("INSERT INTO schedules (request_id, cost_table_id, status, energy_j, schedule, created_at) "
                  "VALUES (?, ?, ?, ?, ?, ?)"));
  EC_RETURN_IF_ERROR(insert.Bind(1, request_id)
                         .Bind(2, cost_table_id != 0 ? std::optional<int64_t>(cost_table_id) : std::nullopt)
                         .Bind(3, static_cast<int>(schedule.status()))
                         .Bind(4, schedule.energy().total_j())
                         .BindBlob(5, Serialize(schedule))
                         .Bind(6, now)
                         .Run());
  EC_ASSIGN_OR_RETURN(const int64_t id, db_.LastInsertId());
  EC_RETURN_IF_ERROR(tx.Commit());
  return id;
}

Result<v1::Schedule> CostDb::GetSchedule(int64_t id) {
  EC_ASSIGN_OR_RETURN(Statement stmt, db_.Prepare("SELECT schedule FROM schedules WHERE id = ?"));
  EC_ASSIGN_OR_RETURN(bool found, stmt.Bind(1, id).Step());
  if (!found) return NotFound("no schedule #" + std::to_string(id) + " in " + path());
  return Parse<v1::Schedule>(stmt.Blob(0), "schedule", path());
}

Result<int64_t> CostDb::ScheduleCostTableId(int64_t schedule_id) {
  EC_ASSIGN_OR_RETURN(Statement stmt, db_.Prepare("SELECT coalesce(cost_table_id, 0) FROM schedules WHERE id = ?"));
  EC_ASSIGN_OR_RETURN(bool found, stmt.Bind(1, schedule_id).Step());
  if (!found) return NotFound("no schedule #" + std::to_string(schedule_id) + " in " + path());
  return stmt.Int(0);
}

Result<std::vector<StoredSchedule>> CostDb::ListSchedules(const std::string& model, const std::string& device) {
  EC_ASSIGN_OR_RETURN(
      Statement stmt,
      db_.Prepare(
          "SELECT s.id, r.id, coalesce(s.cost_table_id, 0), r.request, s.status, s.energy_j, "
          "s.superseded_at IS NOT NULL, s.created_at, s.schedule FROM schedules s JOIN schedule_requests r ON r.id = s.request_id "
          "WHERE (?1 = '' OR r.model = ?1) AND (?2 = '' OR r.device = ?2) ORDER BY s.id"));
  stmt.Bind(1, model).Bind(2, device);
  std::vector<StoredSchedule> schedules;
  EC_RETURN_IF_ERROR(ForEachRow(stmt, [&]() -> Status {
    StoredSchedule& s = schedules.emplace_back();
    s.id = stmt.Int(0);
    s.request_id = stmt.Int(1);
    s.cost_table_id = stmt.Int(2);
    EC_ASSIGN_OR_RETURN(s.request, Parse<v1::ScheduleRequest>(stmt.Blob(3), "schedule request", path()));
    s.status = static_cast<v1::Schedule::Status>(stmt.Int(4));
    s.energy_j = stmt.Double(5);
    s.superseded = stmt.Int(6) != 0;
    s.created_at = stmt.Text(7);
    s.energy_source = EnergySourceOf(stmt.Blob(8));
    return Status::Ok();
  }));
  return schedules;
}

Result<std::vector<std::pair<int64_t, v1::ScheduleRequest>>> CostDb::ListScheduleRequests() {
  EC_ASSIGN_OR_RETURN(Statement stmt, db_.Prepare("SELECT id, request FROM schedule_requests ORDER BY id"));
  std::vector<std::pair<int64_t, v1::ScheduleRequest>> requests;
  EC_RETURN_IF_ERROR(ForEachRow(stmt, [&]() -> Status {
    EC_ASSIGN_OR_RETURN(v1::ScheduleRequest request,
                        Parse<v1::ScheduleRequest>(stmt.Blob(1), "schedule request", path()));
    requests.emplace_back(stmt.Int(0), std::move(request));
    return Status::Ok();
  }));
  return requests;
}

}  // namespace edgecost::costdb
