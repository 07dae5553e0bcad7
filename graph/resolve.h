// Resolves what users name on the command line or in RPC requests, "MODEL|FILE",
// into training graphs and cost tables, so that the CLI and the daemon share it.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "graph/derive.h"
#include "graph/forward_graph.h"
#include "proto/edgecost.pb.h"

namespace onnx {
class ModelProto;
}

namespace edgecost::graph {

// A model imported into the cost database (`edgecost models add`): read from its
// bytes under its name, never from a file. service::ResolveModel attaches it.
enum class StoredModelKind { kOnnx, kTrainingGraph, kNodeLink };
std::string_view StoredModelKindName(StoredModelKind kind);  // "onnx", "training-graph", "node-link"
Result<StoredModelKind> ParseStoredModelKind(std::string_view name);

struct StoredModel {
  std::string name;
  StoredModelKind kind = StoredModelKind::kOnnx;
  std::string bytes;
  std::string content_hash;
};

struct GraphSpec {
  std::string model_or_file;  // a zoo model, an ONNX model (.onnx), or a training-graph/v1 or node-link JSON file
  int batch_size = 1;
  Derivation derivation = kDefaultDerivation;
  Trainable trainable;
  std::shared_ptr<const StoredModel> stored;  // set when model_or_file names a model record
};

// Whether the spec's graph carries its own costs (a graph file, or a stored one): no device measures it.
bool CarriesCosts(const GraphSpec& spec);

// What a model file holds, checked by reading it whole as the commands would
// (ONNX import and derivation, or a graph file's validation); errors name `origin`.
Result<StoredModelKind> DetectModelKind(const std::string& bytes, const std::string& origin);

// True when the argument names a graph file with costs (a .json name or a path)
// rather than a model. Decided by the name alone: the file system is not asked.
bool IsGraphFile(std::string_view model_or_file);
bool IsOnnxModel(std::string_view model_or_file);

// The rule for a model named by a caller who must not reach files (RPC): 1 to
// 128 characters of [A-Za-z0-9._-], starting with a letter or digit, and not
// a graph or ONNX file name. Such a name is only ever looked up, never opened.
Status CheckModelName(std::string_view name);
// The model name graphs and cost tables are stored under: the zoo name, or the ONNX file's stem.
std::string ModelName(std::string_view model_or_file);

// An ONNX model, parsed, and its imported forward graph (whose layers name their initializers), for
// loading and writing its weights; nullopt for a zoo model or a graph file. Its bytes are not kept:
// one copy of the weights is the parsed model's, whose initializers the trainer frees once their
// values are in the layers and fills again when it writes the trained model (service/onnx_weights).
struct OnnxModel {
  std::shared_ptr<onnx::ModelProto> model;
  std::string origin;  // how errors name it
  ForwardGraph forward;
};
Result<std::optional<OnnxModel>> LoadOnnxModel(const GraphSpec& spec);

// The training graph of a zoo or ONNX model, or the graph stored in a file.
Result<v1::TrainingGraph> LoadTrainingGraph(const GraphSpec& spec);

// The content hash of a training graph (its nodes, shapes, bytes, edges, batch
// size, derivation and trainable parameters): which graph a schedule is for.
std::string GraphHash(const v1::TrainingGraph& graph);
// The content hashes of a cost table's numbers, and the kinds (runtime_s,
// compute_j, ...) whose hash differs between two digests.
v1::CostDigest CostDigest(const v1::CostTable& table);
std::vector<std::string> ChangedCosts(const v1::CostDigest& solved, const v1::CostDigest& now);

// Costs for the graph: an analytic source on a board preset for zoo models, or the
// file's own costs for graph files (whose cost source the file names).
Result<v1::CostTable> LoadCostTable(const GraphSpec& spec, std::string_view platform, std::string_view source);

}  // namespace edgecost::graph
