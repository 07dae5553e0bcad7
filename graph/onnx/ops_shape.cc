// Import functions of the ops that move an activation's elements: Flatten, Reshape, Squeeze,
// Unsqueeze, Transpose, Concat (with a weight expanded to the batch), Split, Slice and Gather.
#include "graph/onnx/attributes.h"
#include "graph/onnx/constant_folding.h"
#include "graph/onnx/importer.h"

namespace edgecost::graph::onnx_import {

Status Importer::ImportFlatten(const onnx::NodeProto& node, int index, const Inputs& in) {
  const Value* x = ActivationInput(in, 0);
  if (!x) return NodeError(node, index, "expects an activation");
  const Shape& s = graph_.shape(Act(x));
  const int64_t axis = NormalizeAxis(Attributes(node).Int("axis", 1), s.size());
  if (axis < 0 || axis > static_cast<int64_t>(s.size())) {
    return NodeError(node, index, "axis " + std::to_string(axis) + " is outside the input's " +
                                      std::to_string(s.size()) + " dimensions");
  }
  if (axis == 1) {
    SetActivation(node, graph_.Flatten(Act(x)));
  } else {
    int64_t outer = 1;
    for (int64_t d = 0; d < axis; ++d) outer *= s[d];
    SetActivation(node, graph_.Reshape(Act(x), {outer, NumElements(s) / outer}));
  }
  return Status::Ok();
}

// Reshape, Squeeze and Unsqueeze: a reshape layer, or the input itself when the shape stays.
Status Importer::ImportReshape(const onnx::NodeProto& node, int index, const Inputs& in) {
  const std::string& op = node.op_type();
  const Attributes attrs(node);
  const Value* x = ActivationInput(in, 0);
  if (!x) return NodeError(node, index, "expects an activation");
  const Shape& s = graph_.shape(Act(x));
  Result<Shape> target = InvalidArgument("");
  if (op == "Reshape") {
    if (in.size() < 2 || !in[1] || !in[1]->has_data) {
      return Unsupported(node, index, "the target shape must be a constant");
    }
    target = ConstantFolder::ReshapeTarget(s, in[1]->data, attrs.Int("allowzero", 0) != 0);
  } else {
    std::vector<int64_t> axes = attrs.Ints("axes", {});
    if (in.size() > 1 && in[1]) {
      if (!in[1]->has_data) return Unsupported(node, index, "the axes must be a constant");
      axes = ToInts(in[1]->data);
    }
    target = ConstantFolder::SqueezeShape(op == "Unsqueeze", s, axes);
  }
  if (!target.ok()) return NodeError(node, index, target.status().message());
  SetActivation(node, *target == s ? Act(x) : graph_.Reshape(Act(x), *target));
  return Status::Ok();
}

Status Importer::ImportTranspose(const onnx::NodeProto& node, int index, const Inputs& in) {
  const Value* x = ActivationInput(in, 0);
  if (!x) return NodeError(node, index, "expects an activation");
  SetActivation(node, graph_.Transpose(Act(x), Attributes(node).Perm(graph_.shape(Act(x)).size())));
  return Status::Ok();
}

Status Importer::ImportConcat(const onnx::NodeProto& node, int index, const Inputs& in) {
  std::vector<int> inputs;
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i] && in[i]->expanded_param) {
      const std::optional<int> lowered = ExpandedParamAsActivation(node, in, i);
      if (!lowered) {
        return Unsupported(node, index, "an expanded weight needs an activation input of its shape off the axis");
      }
      inputs.push_back(*lowered);
      continue;
    }
    if (!ActivationInput(in, static_cast<int>(i))) {
      return Unsupported(node, index, "every input must be an activation");
    }
    inputs.push_back(Act(in[i]));
  }
  SetActivation(node, graph_.Concat(inputs, Attributes(node).Int("axis", 0)));
  return Status::Ok();
}

// A parameter Expand-ed to the batch as a Concat input (ViT's class token, torch.cat([token.expand(n, -1, -1),
// x], 1)): zeros taken from the leading rows of an activation input of the Concat, then the parameter added
// with broadcasting. Slice, Affine(0) and AddBroadcast are kinds with kernels, gradients and costs already;
// the parameter's gradient is dY summed over the batch, as Expand's backward is.
std::optional<int> Importer::ExpandedParamAsActivation(const onnx::NodeProto& node, const Inputs& in,
                                                       size_t param_input) {
  const Value& p = *in[param_input];
  const int64_t axis = NormalizeAxis(Attributes(node).Int("axis", 0), p.shape.size());
  for (const Value* v : in) {
    if (!v || v->kind != Value::Kind::kActivation) continue;
    const Shape& s = graph_.shape(v->node);
    if (s.size() != p.shape.size() || axis < 0 || axis >= static_cast<int64_t>(s.size()) || s[axis] < p.shape[axis]) {
      continue;
    }
    bool fits = true;
    for (size_t d = 0; d < s.size(); ++d) fits &= static_cast<int64_t>(d) == axis || s[d] == p.shape[d];
    if (!fits) continue;
    const int rows = s[axis] == p.shape[axis] ? v->node : graph_.Slice(v->node, axis, 0, p.shape[axis]);
    const int zeros = graph_.Unary(OpKind::kAffine, rows, {{"alpha_e6", 0}, {"beta_e6", 0}});
    return graph_.BinaryParam(OpKind::kAddBroadcast, zeros, *p.expanded_param);
  }
  return std::nullopt;
}

Status Importer::ImportSplit(const onnx::NodeProto& node, int index, const Inputs& in) {
  const Attributes attrs(node);
  const Value* x = ActivationInput(in, 0);
  if (!x) return NodeError(node, index, "expects an activation");
  const Shape& s = graph_.shape(Act(x));
  const int64_t axis = NormalizeAxis(attrs.Int("axis", 0), s.size());
  std::vector<int64_t> sizes = attrs.Ints("split", {});
  if (in.size() > 1 && in[1]) {
    if (!in[1]->has_data) return Unsupported(node, index, "split sizes must be constants");
    sizes = ToInts(in[1]->data);
  }
  if (sizes.empty()) sizes.assign(node.output_size(), s.at(axis) / node.output_size());
  int64_t start = 0;
  for (int o = 0; o < node.output_size() && o < static_cast<int>(sizes.size()); ++o) {
    SetOutput(node, o, Value::Activation(graph_.Slice(Act(x), axis, start, start + sizes[o])));
    start += sizes[o];
  }
  return Status::Ok();
}

// Slice by constant starts, ends, axes and positive steps: a slice layer per axis that changes.
Status Importer::ImportSlice(const onnx::NodeProto& node, int index, const Inputs& in) {
  const Value* x0 = ActivationInput(in, 0);
  if (!x0) return NodeError(node, index, "expects an activation");
  for (int i = 1; i < static_cast<int>(in.size()); ++i) {
    if (in[i] && !in[i]->has_data) return Unsupported(node, index, "starts, ends, axes and steps must be constants");
  }
  if (in.size() < 3 || !in[1] || !in[2]) return Unsupported(node, index, "needs starts and ends (opset 10+)");
  int x = Act(x0);
  for (size_t k = 0; k < in[1]->data.size(); ++k) {
    const Shape& s = graph_.shape(x);
    const int64_t axis =
        NormalizeAxis(in.size() > 3 && in[3] ? ToInt(in[3]->data.at(k)) : static_cast<int64_t>(k), s.size());
    const int64_t step = in.size() > 4 && in[4] ? ToInt(in[4]->data.at(k)) : 1;
    if (step < 1) return Unsupported(node, index, "only positive steps are supported");
    const double start_d = in[1]->data[k], end_d = in[2]->data.at(k);
    const auto [start, end] = ConstantFolder::SliceRange(ToInt(start_d), ToInt(end_d), s.at(axis));
    if (step > 1 && end > start) {
      x = graph_.StridedSlice(x, axis, start, end, step);
    } else if (start != 0 || end != s[axis]) {
      x = graph_.Slice(x, axis, start, end);
    }
  }
  SetActivation(node, x);
  return Status::Ok();
}

// Rows of a weight by activation ids (an embedding), or one constant index of an activation (a slice).
Status Importer::ImportGather(const onnx::NodeProto& node, int index, const Inputs& in) {
  const int64_t axis = Attributes(node).Int("axis", 0);
  const Value* x = ActivationInput(in, 0);
  if (in[0]->kind == Value::Kind::kParameter && ActivationInput(in, 1) && axis == 0 && in[0]->shape.size() == 2) {
    const int embedding = graph_.Embedding(Act(in[1]), in[0]->shape[0], in[0]->shape[1]);
    graph_.SetParamNames(embedding, {node.input(0)});
    SetActivation(node, embedding);
  } else if (x && in[1] && in[1]->has_data && in[1]->data.size() == 1) {
    const Shape& s = graph_.shape(Act(x));
    const int64_t a = NormalizeAxis(axis, s.size());
    int64_t i = ToInt(in[1]->data[0]);
    if (i < 0) i += s.at(a);
    SetActivation(node, graph_.Slice(Act(x), a, i, i + 1, /*squeeze=*/in[1]->shape.empty()));
  } else {
    return Unsupported(node, index,
                       "supported: rows of a weight by activation ids (embeddings), one constant index of an "
                       "activation");
  }
  return Status::Ok();
}

}  // namespace edgecost::graph::onnx_import
