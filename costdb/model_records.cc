// Models imported once (`edgecost models add`): the file's bytes under a name.
#include <optional>
#include <string>
#include <vector>

#include "costdb/costdb.h"
#include "costdb/internal.h"

namespace edgecost::costdb {
using namespace internal;

namespace {

// Cost tables of a replaced or removed model stay stored, but are no longer served.
Status SupersedeGraphs(Db& db, const std::string& name, const std::string& now) {
  EC_ASSIGN_OR_RETURN(Statement stmt,
                      db.Prepare("UPDATE models SET superseded_at = ? WHERE name = ? AND superseded_at IS NULL"));
  return stmt.Bind(1, now).Bind(2, name).Run();
}

// A summary that does not decode is computed again rather than failing the listing.
std::optional<v1::ModelInfo> ReadSummary(const Statement& stmt, int column) {
  if (stmt.IsNull(column)) return std::nullopt;
  v1::ModelInfo summary;
  if (!summary.ParseFromString(stmt.Blob(column))) return std::nullopt;
  return summary;
}

}  // namespace

Status CostDb::PutModelRecord(const ModelRecord& record) {
  if (record.name.empty()) return InvalidArgument("a model record needs a name");
  const std::string now = NowUtc();
  EC_ASSIGN_OR_RETURN(Transaction tx, Write());
  EC_ASSIGN_OR_RETURN(Statement current, db_.Prepare("SELECT content_hash FROM model_records WHERE name = ?"));
  EC_ASSIGN_OR_RETURN(bool found, current.Bind(1, record.name).Step());
  if (found && current.Text(0) != record.content_hash) EC_RETURN_IF_ERROR(SupersedeGraphs(db_, record.name, now));
  static const std::string kSql = UpsertSql(
      "model_records", {"name"}, {"name", "kind", "content_hash", "size_bytes", "bytes", "added_at", "summary"});
  EC_ASSIGN_OR_RETURN(Statement stmt, db_.Prepare(kSql));
  stmt.Bind(1, record.name)
      .Bind(2, record.kind)
      .Bind(3, record.content_hash)
      .Bind(4, static_cast<int64_t>(record.bytes.size()))
      .BindBlob(5, record.bytes)
      .Bind(6, now);
  if (record.summary) {
    stmt.BindBlob(7, Serialize(*record.summary));
  } else {
    stmt.Bind(7, nullptr);  // a replaced record's summary was the old bytes'
  }
  EC_RETURN_IF_ERROR(stmt.Run().WithContext("storing model " + record.name));
  return tx.Commit();
}

Result<std::optional<ModelRecord>> CostDb::GetModelRecord(const std::string& name) {
  EC_ASSIGN_OR_RETURN(Statement stmt,
                      db_.Prepare("SELECT name, kind, content_hash, size_bytes, added_at, bytes, summary "
                                  "FROM model_records WHERE name = ?"));
  EC_ASSIGN_OR_RETURN(bool found, stmt.Bind(1, name).Step());
  if (!found) return std::optional<ModelRecord>();
  return std::optional<ModelRecord>(ModelRecord{stmt.Text(0), stmt.Text(1), stmt.Text(2), stmt.Int(3), stmt.Text(4),
                                                stmt.Blob(5), ReadSummary(stmt, 6)});
}

Result<std::vector<ModelRecord>> CostDb::ListModelRecords() {
  EC_ASSIGN_OR_RETURN(
      Statement stmt,
      db_.Prepare("SELECT name, kind, content_hash, size_bytes, added_at, summary FROM model_records ORDER BY name"));
  std::vector<ModelRecord> records;
  EC_RETURN_IF_ERROR(ForEachRow(stmt, [&]() -> Status {
    records.push_back({stmt.Text(0), stmt.Text(1), stmt.Text(2), stmt.Int(3), stmt.Text(4), "", ReadSummary(stmt, 5)});
    return Status::Ok();
  }));
  return records;
}

Status CostDb::DeleteModelRecord(const std::string& name) {
  EC_ASSIGN_OR_RETURN(Transaction tx, Write());
  EC_ASSIGN_OR_RETURN(Statement stmt, db_.Prepare("DELETE FROM model_records WHERE name = ?"));
  EC_RETURN_IF_ERROR(stmt.Bind(1, name).Run());
  if (db_.Changes() == 0) return NotFound("no model '" + name + "' in " + path() + "; `edgecost models` lists them");
  EC_RETURN_IF_ERROR(SupersedeGraphs(db_, name, NowUtc()));
  return tx.Commit();
}

Result<bool> CostDb::PutModelSummary(const std::string& name, const std::string& content_hash,
                                     const v1::ModelInfo& summary) {
  EC_ASSIGN_OR_RETURN(Transaction tx, Write());
  EC_ASSIGN_OR_RETURN(Statement stmt,
                      db_.Prepare("UPDATE model_records SET summary = ? WHERE name = ? AND content_hash = ?"));
  EC_RETURN_IF_ERROR(stmt.BindBlob(1, Serialize(summary)).Bind(2, name).Bind(3, content_hash).Run());
  const bool stored = db_.Changes() > 0;
  EC_RETURN_IF_ERROR(tx.Commit());
  return stored;
}

Result<int64_t> CostDb::CostsVersion() {
  EC_ASSIGN_OR_RETURN(Statement stmt, db_.Prepare("SELECT value FROM change_counters WHERE name = 'costs'"));
  EC_ASSIGN_OR_RETURN(bool found, stmt.Step());
  if (!found) return Internal("the costs change counter is missing from " + path() + ": the file was edited");
  return stmt.Int(0);
}

}  // namespace edgecost::costdb
