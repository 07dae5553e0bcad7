// Training run records: a schedule's predictions next to what real steps measured.
#include <string>
#include <vector>

#include "costdb/costdb.h"
#include "costdb/internal.h"

namespace edgecost::costdb {
using namespace internal;

Result<int64_t> CostDb::PutTrainRun(const v1::TrainRun& run) {
  EC_ASSIGN_OR_RETURN(Transaction tx, Write());
  EC_ASSIGN_OR_RETURN(
      Statement stmt,
      db_.Prepare("INSERT INTO train_runs (model, device, schedule_id, run, created_at) VALUES (?, ?, ?, ?, ?)"));
  v1::TrainRun stored = run;
  stored.set_created_at(NowUtc());
  EC_RETURN_IF_ERROR(stmt.Bind(1, run.model())
                         .Bind(2, run.device())
                         .Bind(3, run.schedule_id() != 0
                                      ? std::optional<int64_t>(static_cast<int64_t>(run.schedule_id()))
                                      : std::nullopt)
                         .BindBlob(4, Serialize(stored))
                         .Bind(5, stored.created_at())
                         .Run());
  EC_ASSIGN_OR_RETURN(const int64_t id, db_.LastInsertId());
  EC_RETURN_IF_ERROR(tx.Commit());
  return id;
}

Result<std::vector<v1::TrainRun>> CostDb::ListTrainRuns(const std::string& model, int limit, bool steps) {
  EC_ASSIGN_OR_RETURN(Statement stmt,
                      db_.Prepare("SELECT id, run FROM (SELECT id, run FROM train_runs WHERE ? = '' OR model = ? "
                                  "ORDER BY id DESC LIMIT ?) AS newest ORDER BY id"));
  stmt.Bind(1, model).Bind(2, model).Bind(3, static_cast<int64_t>(limit > 0 ? limit : 100));
  std::vector<v1::TrainRun> runs;
  EC_RETURN_IF_ERROR(ForEachRow(stmt, [&]() -> Status {
    EC_ASSIGN_OR_RETURN(v1::TrainRun run, Parse<v1::TrainRun>(stmt.Blob(1), "training run", path()));
    run.set_id(static_cast<uint64_t>(stmt.Int(0)));
    if (!steps) run.clear_step_stats();
    runs.push_back(std::move(run));
    return Status::Ok();
  }));
  return runs;
}

Result<v1::TrainRun> CostDb::GetTrainRun(int64_t id) {
  EC_ASSIGN_OR_RETURN(Statement stmt, db_.Prepare("SELECT run FROM train_runs WHERE id = ?"));
  stmt.Bind(1, id);
  EC_ASSIGN_OR_RETURN(bool found, stmt.Step());
  if (!found) return NotFound("no training run " + std::to_string(id) + "; `edgecost runs` lists them");
  EC_ASSIGN_OR_RETURN(v1::TrainRun run, Parse<v1::TrainRun>(stmt.Blob(0), "training run", path()));
  run.set_id(static_cast<uint64_t>(id));
  return run;
}

}  // namespace edgecost::costdb
