#include "graph/step_nodes.h"

#include <algorithm>

#include "graph/derive.h"
#include "graph/op_kinds.h"

namespace edgecost::graph {
namespace {

// Forward nodes whose parameter is also another layer's (tied_node names the owner).
std::vector<bool> TiedLayers(const v1::TrainingGraph& graph) {
  std::vector<bool> tied(static_cast<size_t>(graph.nodes_size()), false);
  for (int v = 0; v < graph.nodes_size(); ++v) {
    const auto& attributes = graph.nodes(v).attributes();
    const auto owner = attributes.find("tied_node");
    if (owner == attributes.end()) continue;
    tied[static_cast<size_t>(v)] = true;
    if (owner->second >= 0 && owner->second < graph.nodes_size()) tied[static_cast<size_t>(owner->second)] = true;
  }
  return tied;
}

// A weight or bias pass, or the dX pass of a kind whose one primitive gives the parameters' gradients too.
bool GivesParameterGradient(const v1::TrainingNode& node, const v1::TrainingNode& forward) {
  if (node.role() == GradRoleName(GradRole::kGradWeight) || node.role() == GradRoleName(GradRole::kGradBias)) return true;
  const Result<OpKind> kind = ParseOpKind(forward.op_kind());
  return node.role() == GradRoleName(GradRole::kGrad) && forward.param_count() > 0 && kind.ok() &&
         DxPassGivesParameterGradients(*kind);
}

}  // namespace

StepNodes StepNodesOf(const v1::TrainingGraph& graph, bool update_in_backward) {
  const int n = graph.nodes_size();
  StepNodes nodes{std::vector<int64_t>(static_cast<size_t>(n)), std::vector<std::vector<int>>(static_cast<size_t>(n)),
                  std::vector<int>(static_cast<size_t>(n), -1), std::vector<bool>(static_cast<size_t>(n), false)};
  for (int v = 0; v < n; ++v) {
    const v1::TrainingNode& node = graph.nodes(v);
    nodes.bytes[static_cast<size_t>(v)] = static_cast<int64_t>(node.output_bytes());
    std::vector<int>& preds = nodes.preds[static_cast<size_t>(v)];
    for (uint32_t u : node.inputs()) {
      if (u < static_cast<uint32_t>(v)) preds.push_back(static_cast<int>(u));
    }
  }
  if (update_in_backward) {
    const std::vector<bool> tied = TiedLayers(graph);
    // A layer's anchor: its last backward node, once some backward node gives it a parameter gradient.
    std::vector<int> last_backward(static_cast<size_t>(n), -1);
    std::vector<bool> trains(static_cast<size_t>(n), false);
    for (int v = 0; v < n; ++v) {
      const v1::TrainingNode& node = graph.nodes(v);
      const int f = node.forward_of();
      if (node.phase() != v1::PHASE_BACKWARD || f < 0 || f >= v) continue;
      last_backward[static_cast<size_t>(f)] = v;
      trains[static_cast<size_t>(f)] = trains[static_cast<size_t>(f)] || GivesParameterGradient(node, graph.nodes(f));
    }
    for (int f = 0; f < n; ++f) {
      if (trains[static_cast<size_t>(f)] && !tied[static_cast<size_t>(f)]) {
        nodes.update_anchor[static_cast<size_t>(f)] = last_backward[static_cast<size_t>(f)];
      }
    }
    for (int v = 0; v < n; ++v) {
      const v1::TrainingNode& node = graph.nodes(v);
      const int f = node.forward_of();
      if (node.phase() != v1::PHASE_BACKWARD || f < 0 || f >= v || nodes.update_anchor[static_cast<size_t>(f)] < 0 ||
          (node.role() != GradRoleName(GradRole::kGradWeight) && node.role() != GradRoleName(GradRole::kGradBias))) {
        continue;
      }
      const Result<OpKind> kind = ParseOpKind(graph.nodes(f).op_kind());
      if (!kind.ok() || DxPassGivesParameterGradients(*kind)) continue;
      int64_t elements = 1;
      for (int64_t d : node.output_shape().dims()) elements *= d;
      nodes.bytes[static_cast<size_t>(v)] = elements * kBytesPerElement;
      nodes.holds_parameter_gradients[static_cast<size_t>(v)] = true;
      const int anchor = nodes.update_anchor[static_cast<size_t>(f)];
      if (anchor != v) nodes.preds[static_cast<size_t>(anchor)].push_back(v);
    }
  }
  for (std::vector<int>& preds : nodes.preds) {
    std::sort(preds.begin(), preds.end());
    preds.erase(std::unique(preds.begin(), preds.end()), preds.end());
  }
  return nodes;
}

}  // namespace edgecost::graph
