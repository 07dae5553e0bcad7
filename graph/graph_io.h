// Graph files from other tools and for other tools:
//   training-graph/v1 JSON (docs/design/models.md): nodes with costs and edges;
//   networkx node-link JSON, as Checkmate and Moccasin publish graphs: one compute
//   cost per node (cost_cpu) and output bytes (cost_ram).
// Errors name the field and the node.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "base/status.h"
#include "graph/cost_checks.h"  // ValidateCostTable, the bounds on sizes
#include "proto/edgecost.pb.h"

namespace edgecost::graph {

inline constexpr std::string_view kTrainingGraphFormat = "training-graph/v1";
// POET's convention for graphs that carry only compute costs (extract_costs_from_dfgraph).
inline constexpr double kImportedPagingCostRatio = 5.0;

// Parses either format from text; `origin` names the file in error messages.
Result<v1::CostTable> ParseCostTableJson(std::string_view text, std::string_view origin);
Result<v1::CostTable> ReadCostTableFile(const std::string& path);

// training-graph/v1 of a cost table (its graph's edges and its per-node costs).
std::string CostTableToTrainingGraphJson(const v1::CostTable& table);

// Graphviz of a training graph: forward nodes in one colour, backward in another.
std::string TrainingGraphToDot(const v1::TrainingGraph& graph);


}  // namespace edgecost::graph
