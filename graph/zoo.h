// The model zoo: POET's eight models, built layer for layer as POET's
// poet/architectures/ builds them, with a batch-size parameter.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "graph/forward_graph.h"

namespace edgecost::graph {

struct ZooModel {
  std::string_view name;
  std::string_view description;
  bool batched = true;  // false: no batch dimension in POET's model (bert, transformer: one sequence)

  // The batch size this model is built with when `batch_size` is asked for.
  int BatchSize(int batch_size) const { return batched ? batch_size : 1; }
};

const std::vector<ZooModel>& ZooModels();

// Beyond this, activation sizes of the larger models leave what any device or file holds.
inline constexpr int kMaxBatchSize = 65536;

// The forward graph (ending in its loss) of a zoo model; NotFound lists the valid names.
Result<ForwardGraph> BuildZooModel(std::string_view name, int batch_size = 1);

}  // namespace edgecost::graph
