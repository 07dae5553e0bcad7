// Graph files from other tools and for other tools:
//   training-graph/v1 JSON (docs/ARCHITECTURE.md): nodes with costs and edges;
//   networkx node-link JSON, as Checkmate and Moccasin publish graphs: one compute
//   cost per node (cost_cpu) and output bytes (cost_ram).
// Errors name the field and the node.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "base/status.h"
#include "proto/edgecost.pb.h"

namespace edgecost::graph {

inline constexpr std::string_view kTrainingGraphFormat = "training-graph/v1";
// Bounds on what a graph may hold, so that every sum of sizes is exact in a
// signed 64-bit integer: 2^40 bytes (1 TiB) per tensor times 2^20 nodes is 2^60.
inline constexpr uint64_t kMaxTensorBytes = uint64_t{1} << 40;
inline constexpr int kMaxNodes = 1 << 20;
// POET's convention for graphs that carry only compute costs (extract_costs_from_dfgraph).
inline constexpr double kImportedPagingCostRatio = 5.0;

// Parses either format from text; `origin` names the file in error messages.
Result<v1::CostTable> ParseCostTableJson(std::string_view text, std::string_view origin);
Result<v1::CostTable> ReadCostTableFile(const std::string& path);

// training-graph/v1 of a cost table (its graph's edges and its per-node costs).
std::string CostTableToTrainingGraphJson(const v1::CostTable& table);

// Graphviz of a training graph: forward nodes in one colour, backward in another.
std::string TrainingGraphToDot(const v1::TrainingGraph& graph);

// Checks what every consumer relies on: node i has index i, inputs precede their users,
// costs (if any) are finite and non-negative and one per node.
Status ValidateCostTable(const v1::CostTable& table, std::string_view origin);

}  // namespace edgecost::graph
