// ONNX import: a model exported by torch.onnx.export becomes a forward graph
// (with a cross-entropy loss on its output), using ONNX's own shape inference
// to check every shape. Unsupported ops are named with their node.
#pragma once

#include <string>

#include "base/status.h"
#include "graph/forward_graph.h"

namespace edgecost::graph {

Result<ForwardGraph> ImportOnnx(const std::string& path);

}  // namespace edgecost::graph
