// The daemon's jobs.
#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "costdb/costdb.h"
#include "costdb/internal.h"

namespace edgecost::costdb {
using namespace internal;

Status CostDb::PutJob(const StoredJob& stored) {
  static const std::string kSql =
      UpsertSql("jobs", {"id"}, {"id", "kind", "state", "job", "profile_request", "updated_at"});
  EC_ASSIGN_OR_RETURN(Transaction tx, Write());
  EC_ASSIGN_OR_RETURN(Statement stmt, db_.Prepare(kSql));
  EC_RETURN_IF_ERROR(stmt.Bind(1, static_cast<int64_t>(stored.job.id()))
                         .Bind(2, stored.job.kind())
                         .Bind(3, static_cast<int64_t>(stored.job.state()))
                         .BindBlob(4, Serialize(stored.job))
                         .BindBlob(5, Serialize(stored.profile_request))
                         .Bind(6, NowUtc())
                         .Run());
  return tx.Commit();
}

namespace {

// Rows of (job, profile_request), in the statement's order.
Result<std::vector<StoredJob>> ReadJobs(Statement& stmt, const std::string& path) {
  std::vector<StoredJob> jobs;
  EC_RETURN_IF_ERROR(ForEachRow(stmt, [&]() -> Status {
    StoredJob& stored = jobs.emplace_back();
    EC_ASSIGN_OR_RETURN(stored.job, Parse<v1::Job>(stmt.Blob(0), "job", path));
    EC_ASSIGN_OR_RETURN(stored.profile_request, Parse<v1::StartProfileRequest>(stmt.Blob(1), "profile request", path));
    return Status::Ok();
  }));
  return jobs;
}

}  // namespace

Result<std::vector<StoredJob>> CostDb::ListJobs() {
  EC_ASSIGN_OR_RETURN(Statement stmt, db_.Prepare("SELECT job, profile_request FROM jobs ORDER BY id"));
  return ReadJobs(stmt, path());
}

Result<std::vector<StoredJob>> CostDb::ListJobs(uint64_t max_id, size_t limit) {
  EC_ASSIGN_OR_RETURN(
      Statement stmt,
      db_.Prepare("SELECT job, profile_request FROM (SELECT id, job, profile_request FROM jobs WHERE id <= ? "
                  "ORDER BY id DESC LIMIT ?) AS newest ORDER BY id"));
  const uint64_t clamped_id = std::min<uint64_t>(max_id, static_cast<uint64_t>(INT64_MAX));
  stmt.Bind(1, clamped_id).Bind(2, static_cast<int64_t>(std::min<size_t>(limit, static_cast<size_t>(INT64_MAX))));
  return ReadJobs(stmt, path());
}

Result<std::optional<StoredJob>> CostDb::GetJob(uint64_t id) {
  if (id > static_cast<uint64_t>(INT64_MAX)) return std::optional<StoredJob>();
  EC_ASSIGN_OR_RETURN(Statement stmt, db_.Prepare("SELECT job, profile_request FROM jobs WHERE id = ?"));
  stmt.Bind(1, id);
  EC_ASSIGN_OR_RETURN(std::vector<StoredJob> jobs, ReadJobs(stmt, path()));
  if (jobs.empty()) return std::optional<StoredJob>();
  return std::optional<StoredJob>(std::move(jobs.front()));
}

Status CostDb::DeleteJob(uint64_t id) {
  EC_ASSIGN_OR_RETURN(Transaction tx, Write());
  EC_ASSIGN_OR_RETURN(Statement stmt, db_.Prepare("DELETE FROM jobs WHERE id = ?"));
  EC_RETURN_IF_ERROR(stmt.Bind(1, id).Run());
  if (db_.Changes() == 0) return NotFound("no job " + std::to_string(id));
  return tx.Commit();
}

}  // namespace edgecost::costdb
