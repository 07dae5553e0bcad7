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

}  // namespace

Status CostDb::PutModelRecord(const ModelRecord& record) {
  if (record.name.empty()) return InvalidArgument("a model record needs a name");
  const std::string now = NowUtc();
  EC_ASSIGN_OR_RETURN(Transaction tx, Write());
  EC_ASSIGN_OR_RETURN(Statement current, db_.Prepare("SELECT content_hash FROM model_records WHERE name = ?"));
  EC_ASSIGN_OR_RETURN(bool found, current.Bind(1, record.name).Step());
  if (found && current.Text(0) != record.content_hash) EC_RETURN_IF_ERROR(SupersedeGraphs(db_, record.name, now));
  static const std::string kSql =
      UpsertSql("model_records", {"name"}, {"name", "kind", "content_hash", "size_bytes", "bytes", "added_at"});
  EC_ASSIGN_OR_RETURN(Statement stmt, db_.Prepare(kSql));
  EC_RETURN_IF_ERROR(stmt.Bind(1, record.name)
                         .Bind(2, record.kind)
                         .Bind(3, record.content_hash)
                         .Bind(4, static_cast<int64_t>(record.bytes.size()))
                         .BindBlob(5, record.bytes)
                         .Bind(6, now)
                         .Run()
                         .WithContext("storing model " + record.name));
  return tx.Commit();
}

Result<std::optional<ModelRecord>> CostDb::GetModelRecord(const std::string& name) {
  EC_ASSIGN_OR_RETURN(Statement stmt,
                      db_.Prepare("SELECT name, kind, content_hash, size_bytes, added_at, bytes FROM model_records "
                                  "WHERE name = ?"));
  EC_ASSIGN_OR_RETURN(bool found, stmt.Bind(1, name).Step());
  if (!found) return std::optional<ModelRecord>();
  return std::optional<ModelRecord>(
      ModelRecord{stmt.Text(0), stmt.Text(1), stmt.Text(2), stmt.Int(3), stmt.Text(4), stmt.Blob(5)});
}

Result<std::vector<ModelRecord>> CostDb::ListModelRecords() {
  EC_ASSIGN_OR_RETURN(
      Statement stmt,
      db_.Prepare("SELECT name, kind, content_hash, size_bytes, added_at FROM model_records ORDER BY name"));
  std::vector<ModelRecord> records;
  EC_RETURN_IF_ERROR(ForEachRow(stmt, [&]() -> Status {
    records.push_back({stmt.Text(0), stmt.Text(1), stmt.Text(2), stmt.Int(3), stmt.Text(4), ""});
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

}  // namespace edgecost::costdb
