// Models as records: a model file imported once (`edgecost models add`,
// CostService.AddModel) is stored in the cost database under its name and
// content hash, and then named like a zoo model by every command and RPC.
// ResolveModel is the one place a name becomes a zoo model or a record.
#pragma once

#include <cstdint>
#include <string>

#include "base/status.h"
#include "costdb/costdb.h"
#include "costdb/store.h"
#include "graph/resolve.h"
#include "proto/edgecost.pb.h"

namespace edgecost::service {

// The most a stored model may hold (SQLite's blobs stop below 1 GB).
inline constexpr int64_t kMaxModelBytes = int64_t{512} << 20;

bool IsZooModel(const std::string& name);

// Attaches the model record that `spec` names, when it names one: files and
// zoo models come back as they are. A name that is neither in the zoo nor in
// the database is NotFound, with both lists. `db` may be null (then only files
// and the zoo resolve).
Result<graph::GraphSpec> ResolveModel(costdb::CostDb* db, graph::GraphSpec spec);
// The same, opening the store only when a record is looked up (and there is a database).
Result<graph::GraphSpec> ResolveModel(costdb::Store& store, graph::GraphSpec spec);

// Stores `bytes` (an ONNX model, or a training-graph/v1 or node-link JSON graph,
// checked by reading it as the commands will) under `name`. The name follows
// graph::CheckModelName and must not be a zoo model's; an existing record with
// other bytes is replaced only with `replace`; the same bytes again change nothing.
struct AddedModel {
  enum class Outcome { kAdded, kUnchanged, kReplaced };
  Outcome outcome = Outcome::kAdded;
  v1::ModelInfo info;
};
std::string_view OutcomeName(AddedModel::Outcome outcome);  // "added", "unchanged", "replaced"
Result<AddedModel> AddModel(costdb::CostDb& db, const std::string& name, const std::string& bytes, bool replace);

// Removes a record (its cost tables stay stored, no longer served). Zoo models cannot be removed.
Status RemoveModel(costdb::CostDb& db, const std::string& name);

// The batch size a stored model's summary describes (ListModels's, and the CLI's default).
inline constexpr int kSummaryBatchSize = 1;

// The zoo, then the records (`db` may be null: the zoo alone), as `edgecost models` and ListModels show them.
// A record is listed from the summary stored with it, never imported, at kSummaryBatchSize; a
// record stored before summaries were kept is described once and its summary stored (read-write).
Result<v1::ListModelsResponse> ListModels(costdb::CostDb* db, int batch_size);

}  // namespace edgecost::service
