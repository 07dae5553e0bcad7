// Import functions of the ops that reduce over axes: BatchNormalization, LayerNormalization,
// ReduceMean (LayerNorm's decomposition before opset 17 starts with one) and Softmax.
#include "graph/onnx/attributes.h"
#include "graph/onnx/importer.h"

namespace edgecost::graph::onnx_import {

Status Importer::ImportBatchNorm(const onnx::NodeProto& node, int index, const Inputs& in) {
  const Attributes attrs(node);
  const Value* x = ActivationInput(in, 0);
  if (!x) return NodeError(node, index, "expects an activation");
  ++batch_norms_;
  // Training exports compute batch statistics: training_mode=1 (opset 14+) or extra outputs (before).
  const bool training = opset_ >= 14 ? attrs.Int("training_mode", 0) != 0 : node.output_size() > 1;
  if (!training && eval_batch_norm_.empty()) eval_batch_norm_ = NodeWhere(node, index);
  const int norm = graph_.BatchNorm2d(Act(x), attrs.Float("epsilon", graph::kDefaultNormEpsilon));
  std::vector<std::string> names;  // scale, B, input_mean, input_var
  for (int k = 1; k < 5; ++k) names.push_back(k < node.input_size() ? node.input(k) : "");
  graph_.SetParamNames(norm, std::move(names));
  SetActivation(node, norm);
  return Status::Ok();
}

Status Importer::ImportLayerNorm(const onnx::NodeProto& node, int index, const Inputs& in) {
  const Attributes attrs(node);
  const Value* x = ActivationInput(in, 0);
  if (!x) return NodeError(node, index, "expects an activation");
  const size_t rank = graph_.shape(Act(x)).size();
  if (NormalizeAxis(attrs.Int("axis", -1), rank) != static_cast<int64_t>(rank) - 1) {
    return Unsupported(node, index, "only a normalization over the last axis is supported");
  }
  SetActivation(node, graph_.LayerNorm(Act(x), attrs.Float("epsilon", graph::kDefaultNormEpsilon)));
  return Status::Ok();
}

Status Importer::ImportReduceMean(const onnx::NodeProto& node, int index, const Inputs& in) {
  const Attributes attrs(node);
  const Value* x = ActivationInput(in, 0);
  if (!x) return NodeError(node, index, "expects an activation");
  if (TryLayerNorm(node, Act(x))) return Status::Ok();
  SetActivation(node, graph_.ReduceMean(Act(x), attrs.Ints("axes", {}), attrs.Int("keepdims", 1) != 0));
  return Status::Ok();
}

Status Importer::ImportSoftmax(const onnx::NodeProto& node, int index, const Inputs& in) {
  const Value* x = ActivationInput(in, 0);
  if (!x) return NodeError(node, index, "expects an activation");
  const size_t rank = graph_.shape(Act(x)).size();
  const int64_t axis = NormalizeAxis(Attributes(node).Int("axis", opset_ >= 13 ? -1 : 1), rank);
  // Before opset 13 Softmax flattens from `axis` on: the same as the last axis only when axis is the last.
  if (opset_ < 13 && axis != static_cast<int64_t>(rank) - 1) {
    return Unsupported(node, index, "before opset 13 only a softmax over the last axis is supported");
  }
  SetActivation(node, graph_.Softmax(Act(x), axis));
  return Status::Ok();
}

}  // namespace edgecost::graph::onnx_import
