#include "graph/resolve.h"

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>
#include <onnx/onnx_pb.h>

#include "base/hash.h"
#include "graph/cost_source.h"
#include "graph/graph_io.h"
#include "graph/onnx/import.h"

namespace edgecost::graph {

bool IsOnnxModel(std::string_view model_or_file) { return model_or_file.ends_with(".onnx"); }

bool IsGraphFile(std::string_view model_or_file) {
  if (IsOnnxModel(model_or_file)) return false;
  return model_or_file.ends_with(".json") || model_or_file.find('/') != std::string_view::npos;
}

Status CheckModelName(std::string_view name) {
  constexpr size_t kMaxModelNameLength = 128;
  const auto allowed = [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-';
  };
  if (name.empty()) return InvalidArgument("model is required");
  if (name.size() > kMaxModelNameLength) {
    return InvalidArgument("a model name has at most " + std::to_string(kMaxModelNameLength) + " characters, not " +
                           std::to_string(name.size()));
  }
  if (IsGraphFile(name) || IsOnnxModel(name)) {
    return InvalidArgument("'" + std::string(name) +
                           "' is a file name: name a model here (files are read by the local CLI only)");
  }
  if (!std::isalnum(static_cast<unsigned char>(name.front())) || !std::all_of(name.begin(), name.end(), allowed)) {
    return InvalidArgument("a model name is letters, digits, '.', '_' and '-', starting with a letter or digit");
  }
  return Status::Ok();
}

std::string_view StoredModelKindName(StoredModelKind kind) {
  switch (kind) {
    case StoredModelKind::kOnnx:
      return "onnx";
    case StoredModelKind::kTrainingGraph:
      return "training-graph";
    case StoredModelKind::kNodeLink:
      return "node-link";
  }
  return "?";
}

Result<StoredModelKind> ParseStoredModelKind(std::string_view name) {
  for (StoredModelKind kind : {StoredModelKind::kOnnx, StoredModelKind::kTrainingGraph, StoredModelKind::kNodeLink}) {
    if (StoredModelKindName(kind) == name) return kind;
  }
  return InvalidArgument("unknown model kind '" + std::string(name) + "'; expected onnx, training-graph or node-link");
}

bool CarriesCosts(const GraphSpec& spec) {
  if (spec.stored) return spec.stored->kind != StoredModelKind::kOnnx;
  return IsGraphFile(spec.model_or_file);
}

namespace {

bool LooksLikeJson(const std::string& bytes) {
  const size_t first = bytes.find_first_not_of(" \t\r\n");
  return first != std::string::npos && (bytes[first] == '{' || bytes[first] == '[');
}

Result<v1::CostTable> StoredCostTable(const StoredModel& stored) {
  EC_ASSIGN_OR_RETURN(v1::CostTable table, ParseCostTableJson(stored.bytes, "model '" + stored.name + "'"));
  table.mutable_graph()->set_model(stored.name);
  return table;
}

}  // namespace

// An ONNX export fixes its batch; a batch size above 1 asks for another one.
static int OnnxBatch(const GraphSpec& spec) { return spec.batch_size > 1 ? spec.batch_size : 0; }

Result<StoredModelKind> DetectModelKind(const std::string& bytes, const std::string& origin) {
  if (bytes.empty()) return InvalidArgument(origin + " is empty: expected an ONNX model or a graph JSON file");
  if (LooksLikeJson(bytes)) {
    EC_ASSIGN_OR_RETURN(v1::CostTable table, ParseCostTableJson(bytes, origin));
    return table.cost_source().starts_with("imported:networkx") ? StoredModelKind::kNodeLink
                                                                : StoredModelKind::kTrainingGraph;
  }
  EC_ASSIGN_OR_RETURN(ForwardGraph forward, ImportOnnxBytes(bytes, origin, "model"));
  EC_RETURN_IF_ERROR(DeriveTrainingGraph(forward, kDefaultDerivation).status());
  return StoredModelKind::kOnnx;
}

std::string ModelName(std::string_view model_or_file) {
  return IsOnnxModel(model_or_file) ? std::filesystem::path(model_or_file).stem().string() : std::string(model_or_file);
}

Result<v1::TrainingGraph> LoadTrainingGraph(const GraphSpec& spec) {
  if (spec.stored) {
    if (spec.stored->kind != StoredModelKind::kOnnx) {
      EC_ASSIGN_OR_RETURN(v1::CostTable table, StoredCostTable(*spec.stored));
      return table.graph();
    }
    EC_ASSIGN_OR_RETURN(ForwardGraph forward, ImportOnnxBytes(spec.stored->bytes, "model '" + spec.stored->name + "'",
                                                              spec.stored->name, OnnxBatch(spec)));
    return DeriveTrainingGraph(forward, spec.derivation, spec.trainable);
  }
  if (IsGraphFile(spec.model_or_file)) {
    EC_ASSIGN_OR_RETURN(v1::CostTable table, ReadCostTableFile(spec.model_or_file));
    return table.graph();
  }
  if (IsOnnxModel(spec.model_or_file)) {
    EC_ASSIGN_OR_RETURN(ForwardGraph forward, ImportOnnx(spec.model_or_file, OnnxBatch(spec)));
    return DeriveTrainingGraph(forward, spec.derivation, spec.trainable);
  }
  return ZooTrainingGraph(spec.model_or_file, spec.batch_size, spec.derivation, spec.trainable);
}

// The model `bytes` hold, imported (in an isolated child, graph/onnx/isolation.cc) and parsed.
static Result<std::optional<OnnxModel>> ParsedOnnxModel(const std::string& bytes, const std::string& origin,
                                                        const std::string& name, const GraphSpec& spec) {
  EC_ASSIGN_OR_RETURN(ForwardGraph forward, ImportOnnxBytes(bytes, origin, name, OnnxBatch(spec)));
  auto model = std::make_shared<onnx::ModelProto>();
  if (!model->ParseFromString(bytes)) return InvalidArgument(origin + " is not an ONNX model (protobuf parse failed)");
  return std::optional<OnnxModel>(OnnxModel{std::move(model), origin, std::move(forward)});
}

Result<std::optional<OnnxModel>> LoadOnnxModel(const GraphSpec& spec) {
  if (spec.stored) {
    if (spec.stored->kind != StoredModelKind::kOnnx) return std::optional<OnnxModel>();
    return ParsedOnnxModel(spec.stored->bytes, "model '" + spec.stored->name + "'", spec.stored->name, spec);
  }
  if (IsGraphFile(spec.model_or_file) || !IsOnnxModel(spec.model_or_file)) return std::optional<OnnxModel>();
  std::ifstream in(spec.model_or_file, std::ios::binary);
  if (!in) return NotFound("cannot read ONNX model '" + spec.model_or_file + "'");
  std::ostringstream stream;
  stream << in.rdbuf();
  const std::string bytes = std::move(stream).str();  // C++20: the buffer itself, not a copy
  return ParsedOnnxModel(bytes, spec.model_or_file, std::filesystem::path(spec.model_or_file).stem().string(), spec);
}

Result<v1::CostTable> LoadCostTable(const GraphSpec& spec, std::string_view platform, std::string_view source) {
  if (spec.stored && spec.stored->kind != StoredModelKind::kOnnx) return StoredCostTable(*spec.stored);
  if (IsGraphFile(spec.model_or_file)) return ReadCostTableFile(spec.model_or_file);
  if (source != kPoetFlopsSource) {
    return InvalidArgument("unknown cost source '" + std::string(source) + "'; available: " +
                           std::string(kPoetFlopsSource) + " (measured costs arrive with `edgecost profile`)");
  }
  EC_ASSIGN_OR_RETURN(v1::TrainingGraph graph, LoadTrainingGraph(spec));
  EC_ASSIGN_OR_RETURN(std::unique_ptr<CostSource> costs, MakePoetFlopsSource(platform));
  return costs->CostTableFor(graph);
}

std::string GraphHash(const v1::TrainingGraph& graph) {
  // Module names are for people: a graph hashes alike with or without them.
  const bool named = std::any_of(graph.nodes().begin(), graph.nodes().end(),
                                 [](const v1::TrainingNode& node) { return !node.module().empty(); });
  if (named) {
    v1::TrainingGraph unnamed = graph;
    for (v1::TrainingNode& node : *unnamed.mutable_nodes()) node.clear_module();
    return GraphHash(unnamed);
  }
  std::string bytes;
  {
    google::protobuf::io::StringOutputStream stream(&bytes);
    google::protobuf::io::CodedOutputStream coded(&stream);
    coded.SetSerializationDeterministic(true);  // the attribute maps in a fixed order
    graph.SerializeToCodedStream(&coded);
  }
  return Fnv1aHex(bytes);
}

namespace {

// A number's 8 bytes, least significant first whatever the machine's byte
// order, so that a schedule file hashes alike wherever it is checked.
template <typename T>
void Append(std::string& bytes, T value) {
  static_assert(sizeof(T) == 8);
  uint64_t bits = 0;
  std::memcpy(&bits, &value, sizeof bits);
  for (int i = 0; i < 8; ++i) bytes.push_back(static_cast<char>(bits >> (8 * i)));
}

}  // namespace

v1::CostDigest CostDigest(const v1::CostTable& table) {
  std::string runtime, compute, ram, page;
  for (const v1::NodeCost& cost : table.costs()) {
    Append(runtime, cost.runtime_s());
    Append(compute, cost.compute_j());
    Append(ram, cost.ram_bytes());
    Append(page, cost.page_in_j());
    Append(page, cost.page_out_j());
  }
  std::string paging;
  table.paging().SerializeToString(&paging);  // scalars only: deterministic
  v1::CostDigest digest;
  digest.set_runtime_s(Fnv1aHex(runtime));
  digest.set_compute_j(Fnv1aHex(compute));
  digest.set_ram_bytes(Fnv1aHex(ram));
  digest.set_page_j(Fnv1aHex(page));
  digest.set_paging(Fnv1aHex(paging));
  return digest;
}

std::vector<std::string> ChangedCosts(const v1::CostDigest& solved, const v1::CostDigest& now) {
  std::vector<std::string> changed;
  const auto* descriptor = v1::CostDigest::descriptor();
  const auto* reflection = v1::CostDigest::GetReflection();
  for (int i = 0; i < descriptor->field_count(); ++i) {
    const auto* field = descriptor->field(i);
    if (reflection->GetString(solved, field) != reflection->GetString(now, field)) changed.push_back(field->name());
  }
  return changed;
}

}  // namespace edgecost::graph
