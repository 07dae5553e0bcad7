#include "graph/resolve.h"

#include <filesystem>

#include "graph/cost_source.h"
#include "graph/graph_io.h"
#include "graph/onnx_import.h"

namespace edgecost::graph {

bool IsOnnxModel(std::string_view model_or_file) { return model_or_file.ends_with(".onnx"); }

bool IsGraphFile(std::string_view model_or_file) {
  const std::string name(model_or_file);
  if (IsOnnxModel(name)) return false;
  return name.ends_with(".json") || name.find('/') != std::string::npos || std::filesystem::is_regular_file(name);
}

std::string ModelName(std::string_view model_or_file) {
  return IsOnnxModel(model_or_file) ? std::filesystem::path(model_or_file).stem().string()
                                    : std::string(model_or_file);
}

Result<v1::TrainingGraph> LoadTrainingGraph(const GraphSpec& spec) {
  if (IsGraphFile(spec.model_or_file)) {
    EC_ASSIGN_OR_RETURN(v1::CostTable table, ReadCostTableFile(spec.model_or_file));
    return table.graph();
  }
  if (IsOnnxModel(spec.model_or_file)) {
    EC_ASSIGN_OR_RETURN(ForwardGraph forward, ImportOnnx(spec.model_or_file));
    return DeriveTrainingGraph(forward, spec.derivation, spec.trainable);
  }
  return ZooTrainingGraph(spec.model_or_file, spec.batch_size, spec.derivation, spec.trainable);
}

Result<v1::CostTable> LoadCostTable(const GraphSpec& spec, std::string_view platform, std::string_view source) {
  if (IsGraphFile(spec.model_or_file)) return ReadCostTableFile(spec.model_or_file);
  if (source != kPoetFlopsSource) {
    return InvalidArgument("unknown cost source '" + std::string(source) + "'; available: " +
                           std::string(kPoetFlopsSource) + " (measured costs arrive with `edgecost profile`)");
  }
  EC_ASSIGN_OR_RETURN(v1::TrainingGraph graph, LoadTrainingGraph(spec));
  EC_ASSIGN_OR_RETURN(std::unique_ptr<CostSource> costs, MakePoetFlopsSource(platform));
  return costs->CostTableFor(graph);
}

}  // namespace edgecost::graph
