// Ops on weights alone (no activation input), and weights shared by two layers (tied weights).
#include <stdexcept>

#include "graph/onnx/attributes.h"
#include "graph/onnx/constant_folding.h"
#include "graph/onnx/importer.h"

namespace edgecost::graph::onnx_import {

// Ops on weights alone: a weight seen through Identity, transposed for MatMul, expanded to the batch,
// or rows of it picked by constant ids (position embeddings, Swin's relative position bias).
Status Importer::ImportParameterOp(const onnx::NodeProto& node, int index, const Inputs& in) {
  const std::string& op = node.op_type();
  const Attributes attrs(node);
  const Value& p = *in[0];
  if (recurrent_weight_nodes_.count(index)) return ImportRecurrentWeightOp(node, index, in);
  if (p.kind == Value::Kind::kParameter && p.relative_window > 0) return ImportRelativeBiasOp(node, index, in);
  const bool parameter = p.kind == Value::Kind::kParameter;
  const Value* constant = in.size() > 1 && in[1] && in[1]->has_data ? in[1] : nullptr;
  const bool gather_rows = op == "Gather" && parameter && constant && attrs.Int("axis", 0) == 0 && p.shape.size() == 2;
  if (op == "Identity" || op == "Cast") {
    SetOutput(node, 0, p);
  } else if (op == "Transpose" && parameter) {
    Shape out;
    for (int64_t a : attrs.Perm(p.shape.size())) out.push_back(p.shape.at(a));
    SetOutput(node, 0, Value::Parameter(out));
  } else if (op == "Expand" && parameter && constant) {
    return ImportExpandedParam(node, index, p, *constant);
  } else if (gather_rows && RelativeWindow(p.shape, *constant) > 0) {
    Value v = Value::Parameter({constant->shape.empty() ? 1 : NumElements(constant->shape), p.shape[1]});
    v.relative_window = RelativeWindow(p.shape, *constant);
    v.expanded_param = p.shape;  // the table: what is trained
    SetOutput(node, 0, std::move(v));
  } else if (gather_rows) {
    Shape out = constant->shape;
    out.push_back(p.shape[1]);
    SetOutput(node, 0, Value::Parameter(out));
  } else {
    auto folded = ConstantFolder::Fold(node, in, opset_);  // small weights with data (eps), and Shape
    if (!folded.ok()) return Unsupported(node, index, "an op on weights alone is not supported");
    SetOutputs(node, std::move(*folded));
  }
  return Status::Ok();
}

// A weight Expand-ed to the constant shape `target`, kept symbolic: a consumer that has an
// activation to take the batch from lowers it (Concat).
Status Importer::ImportExpandedParam(const onnx::NodeProto& node, int index, const Value& p, const Value& target) {
  Value v = Value::Parameter(p.shape);
  try {
    v.shape = BroadcastShapes(p.shape, ToInts(target.data));
  } catch (const std::logic_error& e) {
    return NodeError(node, index, e.what());
  }
  v.expanded_param = p.expanded_param.value_or(p.shape);
  SetOutput(node, 0, std::move(v));
  return Status::Ok();
}

// Tied weights (a language model's LM head that reuses its token embedding): an initializer that
// two layers read, as it is or through Transpose, in the same layout. The later layer's weight is
// marked tied_node (the earlier layer) and tied_param (that layer's parameter index); the
// executor keeps the two copies equal and gives both the sum of their gradients.
Status Importer::TieSharedWeights() {
  std::map<std::string, std::pair<std::string, bool>> through;  // Transpose/Identity output -> (input, flips)
  for (const onnx::NodeProto& n : model_.graph().node()) {
    if ((n.op_type() == "Transpose" || n.op_type() == "Identity") && n.input_size() == 1 && n.output_size() == 1) {
      through[n.output(0)] = {n.input(0), n.op_type() == "Transpose"};
    }
  }
  struct Use {
    int layer, param;
    bool transposed;
  };
  std::map<std::string, Use> first;
  for (int l = 0; l < graph_.size(); ++l) {
    const Layer& layer = graph_.layers()[static_cast<size_t>(l)];
    for (int k = 0; k < static_cast<int>(layer.param_names.size()); ++k) {
      std::string name = layer.param_names[static_cast<size_t>(k)];
      if (name.empty()) continue;
      bool transposed = k == 0 && layer.param_transposed;
      for (int hops = 0; hops < 4 && through.count(name); ++hops) {
        transposed = transposed != through[name].second;
        name = through[name].first;
      }
      auto v = values_.find(name);
      if (v == values_.end() || v->second.kind != Value::Kind::kParameter || v->second.shape.size() != 2) continue;
      auto [it, added] = first.insert({name, {l, k, transposed}});
      if (added || it->second.layer == l) continue;
      if (k != 0 || it->second.transposed != transposed || layer.attributes.count("tied_node")) {
        return Error("weight '" + name +
                     "' is shared by two layers in a way the importer does not support (only a "
                     "layer's weight tied to an earlier layer's parameter in the same layout, as an LM head tied "
                     "to the token embedding)");
      }
      Layer tied = layer;
      tied.attributes["tied_node"] = it->second.layer;
      tied.attributes["tied_param"] = it->second.param;
      graph_.SetAttributes(l, tied.attributes);
      graph_.SetParamNames(l, {name, k + 1 < static_cast<int>(layer.param_names.size()) ? layer.param_names[1] : ""},
                           transposed);
    }
  }
  return Status::Ok();
}

}  // namespace edgecost::graph::onnx_import
