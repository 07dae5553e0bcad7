#include "service/models.h"

#include <filesystem>

#include "base/hash.h"
#include "base/units.h"
#include "costdb/postgres.h"
#include "graph/derive.h"
#include "graph/zoo.h"
#include "service/cost_tables.h"

namespace edgecost::service {
namespace {

std::string ZooNames() {
  std::string names;
  for (const graph::ZooModel& model : graph::ZooModels())
    names += (names.empty() ? "" : ", ") + std::string(model.name);
  return names;
}

Result<std::shared_ptr<const graph::StoredModel>> ToStored(costdb::ModelRecord record) {
  auto stored = std::make_shared<graph::StoredModel>();
  EC_ASSIGN_OR_RETURN(stored->kind, graph::ParseStoredModelKind(record.kind));
  stored->name = std::move(record.name);
  stored->bytes = std::move(record.bytes);
  stored->content_hash = std::move(record.content_hash);
  return std::shared_ptr<const graph::StoredModel>(std::move(stored));
}

// Node counts and bytes of a model's training graph in the default derivation.
Status Describe(const graph::GraphSpec& spec, v1::ModelInfo& info) {
  EC_ASSIGN_OR_RETURN(v1::TrainingGraph training, graph::LoadTrainingGraph(spec));
  info.set_forward_nodes(0);
  for (const v1::TrainingNode& node : training.nodes()) {
    if (node.phase() == v1::PHASE_FORWARD) info.set_forward_nodes(info.forward_nodes() + 1);
  }
  info.set_training_nodes(static_cast<uint32_t>(training.nodes_size()));
  info.set_param_bytes(training.param_bytes());
  info.set_activation_bytes(graph::ActivationBytes(training));
  info.set_batch_size(training.batch_size());
  return Status::Ok();
}

// What a listing keeps of a description: the graph's figures, or why it cannot be read.
v1::ModelInfo SummaryOf(const v1::ModelInfo& info) {
  v1::ModelInfo summary;
  summary.set_forward_nodes(info.forward_nodes());
  summary.set_training_nodes(info.training_nodes());
  summary.set_param_bytes(info.param_bytes());
  summary.set_activation_bytes(info.activation_bytes());
  summary.set_batch_size(info.batch_size());
  summary.set_error(info.error());
  return summary;
}

// The summary of a model's bytes, described at kSummaryBatchSize; an error is kept as the summary too.
v1::ModelInfo DescribeRecord(const costdb::ModelRecord& record) {
  v1::ModelInfo info;
  graph::GraphSpec spec;
  spec.model_or_file = record.name;
  spec.batch_size = kSummaryBatchSize;
  Result<std::shared_ptr<const graph::StoredModel>> stored = ToStored(record);
  Status described = stored.status();
  if (stored.ok()) {
    spec.stored = *stored;
    described = Describe(spec, info);
  }
  if (!described.ok()) info.set_error(described.message());
  return SummaryOf(info);
}

v1::ModelInfo RecordInfo(const costdb::ModelRecord& record) {
  v1::ModelInfo info;
  info.set_name(record.name);
  info.set_stored(true);
  info.set_kind(record.kind);
  info.set_content_hash(record.content_hash);
  info.set_size_bytes(static_cast<uint64_t>(record.size_bytes));
  info.set_added_at(record.added_at);
  if (record.summary) info.MergeFrom(*record.summary);
  return info;
}

}  // namespace

bool IsZooModel(const std::string& name) {
  for (const graph::ZooModel& model : graph::ZooModels()) {
    if (model.name == name) return true;
  }
  return false;
}

Result<graph::GraphSpec> ResolveModel(costdb::CostDb* db, graph::GraphSpec spec) {
  const std::string& name = spec.model_or_file;
  if (spec.stored || graph::IsGraphFile(name) || graph::IsOnnxModel(name) || IsZooModel(name)) return spec;
  EC_RETURN_IF_ERROR(graph::CheckModelName(name));
  if (db != nullptr) {
    EC_ASSIGN_OR_RETURN(std::optional<costdb::ModelRecord> record, db->GetModelRecord(name));
    if (record) {
      EC_ASSIGN_OR_RETURN(spec.stored, ToStored(std::move(*record)));
      return spec;
    }
  }
  return NotFound("no model '" + name + "': the zoo has " + ZooNames() +
                  (db ? ", and " + db->path() + " holds no model of that name" : std::string()) +
                  " (`edgecost models` lists both; `edgecost models add FILE --name " + name + "` imports one)");
}

Result<graph::GraphSpec> ResolveModel(costdb::Store& store, graph::GraphSpec spec) {
  const std::string& name = spec.model_or_file;
  if (spec.stored || graph::IsGraphFile(name) || graph::IsOnnxModel(name) || IsZooModel(name)) return spec;
  const std::string& path = store.path();
  if (!costdb::IsPostgresUrl(path) && !std::filesystem::exists(path)) return ResolveModel(nullptr, std::move(spec));
  EC_ASSIGN_OR_RETURN(costdb::CostDb * db, store.Db());
  return ResolveModel(db, std::move(spec));
}

std::string_view OutcomeName(AddedModel::Outcome outcome) {
  switch (outcome) {
    case AddedModel::Outcome::kAdded:
      return "added";
    case AddedModel::Outcome::kUnchanged:
      return "unchanged";
    case AddedModel::Outcome::kReplaced:
      return "replaced";
  }
  return "?";
}

Result<AddedModel> AddModel(costdb::CostDb& db, const std::string& name, const std::string& bytes, bool replace) {
  if (name.empty()) return InvalidArgument("a name is required: the name the model will be used by (--name)");
  EC_RETURN_IF_ERROR(graph::CheckModelName(name));
  if (IsZooModel(name)) {
    return AlreadyExists("'" + name + "' is a zoo model; choose another name for the imported one");
  }
  if (bytes.empty()) return InvalidArgument("the model is empty: give the bytes of an ONNX model or a graph JSON file");
  if (static_cast<int64_t>(bytes.size()) > kMaxModelBytes) {
    return ResourceExhausted("the model has " + FormatBytes(static_cast<double>(bytes.size())) +
                             "; a stored model has at most " + FormatBytes(static_cast<double>(kMaxModelBytes)));
  }
  EC_ASSIGN_OR_RETURN(graph::StoredModelKind kind, graph::DetectModelKind(bytes, "model '" + name + "'"));
  costdb::ModelRecord record;
  record.name = name;
  record.kind = std::string(graph::StoredModelKindName(kind));
  record.content_hash = Fnv1aHex(bytes);
  record.size_bytes = static_cast<int64_t>(bytes.size());
  record.bytes = bytes;
  AddedModel added;
  EC_ASSIGN_OR_RETURN(std::optional<costdb::ModelRecord> existing, db.GetModelRecord(name));
  if (existing && existing->content_hash == record.content_hash && existing->bytes == bytes) {
    added.outcome = AddedModel::Outcome::kUnchanged;
    existing->bytes.clear();
    if (!existing->summary || !existing->summary->error().empty()) {  // stored before summaries were kept
      existing->summary = DescribeRecord(record);
      EC_RETURN_IF_ERROR(db.PutModelSummary(name, record.content_hash, *existing->summary).status());
    }
    if (!existing->summary->error().empty()) {
      return InvalidArgument("model '" + name + "': " + existing->summary->error());
    }
    added.info = RecordInfo(*existing);
  } else {
    if (existing && !replace) {
      return AlreadyExists("a different model is stored as '" + name + "' (hash " + existing->content_hash +
                           ", added " + existing->added_at +
                           "); add with --replace (replace in RPC) to replace it, "
                           "or choose another name");
    }
    added.outcome = existing ? AddedModel::Outcome::kReplaced : AddedModel::Outcome::kAdded;
    // Described once here and stored with the bytes, so that listing never imports the model again.
    record.summary = DescribeRecord(record);
    if (!record.summary->error().empty()) return InvalidArgument("model '" + name + "': " + record.summary->error());
    EC_RETURN_IF_ERROR(db.PutModelRecord(record));
    EC_ASSIGN_OR_RETURN(std::optional<costdb::ModelRecord> stored, db.GetModelRecord(name));
    if (!stored) return Internal("model '" + name + "' vanished from " + db.path() + " after it was stored");
    stored->bytes.clear();
    added.info = RecordInfo(*stored);
  }
  return added;
}

Status RemoveModel(costdb::CostDb& db, const std::string& name) {
  EC_RETURN_IF_ERROR(graph::CheckModelName(name));
  if (IsZooModel(name))
    return InvalidArgument("'" + name + "' is a zoo model, built into edgecost: it cannot be removed");
  return db.DeleteModelRecord(name);
}

Result<v1::ListModelsResponse> ListModels(costdb::CostDb* db, int batch_size) {
  EC_ASSIGN_OR_RETURN(v1::ListModelsResponse response, DescribeZoo(batch_size));
  for (v1::ModelInfo& info : *response.mutable_models()) info.set_kind("zoo");
  if (db == nullptr) return response;
  EC_ASSIGN_OR_RETURN(std::vector<costdb::ModelRecord> records, db->ListModelRecords());
  for (const costdb::ModelRecord& listed : records) {
    v1::ModelInfo& info = *response.add_models() = RecordInfo(listed);
    if (listed.summary && batch_size == kSummaryBatchSize) continue;  // the summary stored when it was added
    // Another batch size is described from the bytes (the CLI's --batch-size); so is, once, a record
    // stored before summaries were kept, whose summary is then stored.
    EC_ASSIGN_OR_RETURN(std::optional<costdb::ModelRecord> record, db->GetModelRecord(listed.name));
    if (!record) continue;  // removed meanwhile
    if (batch_size == kSummaryBatchSize) {
      const v1::ModelInfo summary = DescribeRecord(*record);
      info.MergeFrom(summary);
      // Best effort: a read-only listing (the CLI's) or a busy database describes it again next time.
      (void)db->PutModelSummary(record->name, record->content_hash, summary);
      continue;
    }
    graph::GraphSpec spec;
    spec.model_or_file = listed.name;
    spec.batch_size = batch_size;
    EC_ASSIGN_OR_RETURN(spec.stored, ToStored(std::move(*record)));
    info.clear_error();
    if (Status described = Describe(spec, info); !described.ok()) info.set_error(described.message());
  }
  return response;
}

}  // namespace edgecost::service
