// Import functions of the binary elementwise ops: Add, Sub, Mul and Div (with GELU's Erf form and
// Swin's attention addends recognized), and Where as a causal mask.
#include <cmath>

#include "graph/onnx/importer.h"

namespace edgecost::graph::onnx_import {

// Add, Sub, Mul, Div: of two activations, an activation and a scalar constant (an affine map),
// or an activation and a weight. x * 0.5 * (1 + erf(x / sqrt 2)) is GELU.
Status Importer::ImportArithmetic(const onnx::NodeProto& node, int index, const Inputs& in) {
  const std::string& op = node.op_type();
  if (in.size() != 2 || !in[0] || !in[1]) return NodeError(node, index, "expects two inputs");
  if (op == "Div" && TryGelu(node)) return Status::Ok();
  const bool a_act = in[0]->kind == Value::Kind::kActivation, b_act = in[1]->kind == Value::Kind::kActivation;
  const OpKind kind = op == "Add"   ? OpKind::kAddBroadcast
                      : op == "Sub" ? OpKind::kSub
                      : op == "Mul" ? OpKind::kMul
                                    : OpKind::kDiv;
  if (a_act && b_act) {
    const Shape& sa = graph_.shape(in[0]->node);
    if (op == "Add" && sa == graph_.shape(in[1]->node)) {
      SetActivation(node, graph_.Add(in[0]->node, in[1]->node));
    } else {
      SetActivation(node, graph_.Binary(kind, in[0]->node, in[1]->node));
    }
    return Status::Ok();
  }
  const Value& x = a_act ? *in[0] : *in[1];
  const Value& c = a_act ? *in[1] : *in[0];
  if (c.scalar()) return ImportScalarArithmetic(node, index, x, c.data[0], a_act);
  if (c.kind == Value::Kind::kParameter && c.relative_window > 0) {
    if (op != "Add" || !c.relative_heads_first) {
      return Unsupported(node, index, "a relative position bias is only added, laid out as (heads, N, N)");
    }
    SetActivation(node, graph_.RelativePositionBias(x.node, c.relative_window));
    return Status::Ok();
  }
  if (op == "Add" && c.kind == Value::Kind::kConstant && c.has_data) {
    if (const std::optional<std::array<int64_t, 3>> mask = ShiftedWindowMaskOf(c)) {
      SetActivation(node, graph_.ShiftedWindowMask(x.node, (*mask)[0], (*mask)[1], (*mask)[2]));
      return Status::Ok();
    }
    return Unsupported(node, index, "adding a constant tensor is supported for Swin's shifted-window mask only");
  }
  if (c.kind == Value::Kind::kParameter && (a_act || op == "Add" || op == "Mul")) {
    SetActivation(node, graph_.BinaryParam(kind, x.node, c.expanded_param.value_or(c.shape)));
    return Status::Ok();
  }
  return Unsupported(node, index, "only an activation with another, a scalar constant or a weight is supported");
}

// The activation `x` and the constant `k` (`x_first`: x is the first operand): an affine map
// alpha x + beta.
Status Importer::ImportScalarArithmetic(const onnx::NodeProto& node, int index, const Value& x, double k,
                                        bool x_first) {
  const std::string& op = node.op_type();
  double alpha = 1, beta = 0;
  if (op == "Add") {
    beta = k;
  } else if (op == "Sub") {
    alpha = x_first ? 1 : -1;
    beta = x_first ? -k : k;
  } else if (op == "Mul") {
    alpha = k;
  } else if (x_first && k != 0) {
    alpha = 1 / k;
  } else {
    return Unsupported(node, index, "dividing a constant by an activation is not supported");
  }
  SetActivation(node, graph_.Unary(OpKind::kAffine, x.node,
                                   {{"alpha_e6", std::llround(alpha * 1e6)}, {"beta_e6", std::llround(beta * 1e6)}}));
  return Status::Ok();
}

// Where(mask, fill, x) or Where(keep, x, fill) with a constant causal mask over the last two axes
// (masked_fill of attention scores by the future positions): a causal_mask layer.
Status Importer::ImportWhere(const onnx::NodeProto& node, int index, const Inputs& in) {
  const std::string only =
      "only a constant causal mask over an activation's last two axes (masked_fill of the "
      "future positions by a constant) is supported";
  if (in.size() != 3 || !in[0] || !in[1] || !in[2] || !in[0]->has_data) return Unsupported(node, index, only);
  const bool fill_first = in[2]->kind == Value::Kind::kActivation;
  const Value* x = fill_first ? in[2] : in[1];
  const Value* fill = fill_first ? in[1] : in[2];
  if (x->kind != Value::Kind::kActivation || !fill->scalar()) return Unsupported(node, index, only);
  const Shape xs = graph_.shape(Act(x));
  const Shape& ms = in[0]->shape;
  if (xs.size() < 2 || ms.size() < 2 || ms.size() > xs.size()) return Unsupported(node, index, only);
  const int64_t rows = xs[xs.size() - 2], cols = xs.back();
  if (ms[ms.size() - 2] != rows || ms.back() != cols ||
      !std::all_of(ms.begin(), ms.end() - 2, [](int64_t d) { return d == 1; })) {
    return Unsupported(node, index, only);
  }
  // Where(mask, fill, x) fills where the condition holds (column > row); Where(keep, x, fill) keeps there.
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      const bool condition = in[0]->data[static_cast<size_t>(r * cols + c)] != 0;
      if (condition != (fill_first ? c > r : c <= r)) return Unsupported(node, index, only);
    }
  }
  SetActivation(node, graph_.CausalMask(Act(x), static_cast<float>(fill->data[0])));
  return Status::Ok();
}

}  // namespace edgecost::graph::onnx_import
