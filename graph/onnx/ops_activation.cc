// Import functions of the unary ops on an activation: Identity and Cast, Dropout, the activation
// functions (with x * Sigmoid(x) and x * HardSigmoid(x) fused), Sqrt and Pow.
#include <cmath>
#include <limits>

#include "graph/onnx/attributes.h"
#include "graph/onnx/importer.h"

namespace edgecost::graph::onnx_import {

Status Importer::ImportUnary(const onnx::NodeProto& node, int index, const Inputs& in, OpKind kind,
                             std::map<std::string, int64_t> attributes) {
  const Value* x = ActivationInput(in, 0);
  if (!x) return Unsupported(node, index, "the first input must be an activation");
  SetActivation(node, graph_.Unary(kind, Act(x), std::move(attributes)));
  return Status::Ok();
}

// x * f(x), where `node` computes f(x) and that product is its one consumer: one layer of `kind`.
// SiLU or HardSwish of a batch norm that nothing else reads is fused into it (TryFuseIntoBatchNorm).
bool Importer::TryFuseProductWithInput(const onnx::NodeProto& node, const Value* x, OpKind kind) {
  int mul_index = -1;
  const onnx::NodeProto* mul = SoleConsumer(node.output(0), &mul_index);
  if (!x || !mul || mul->op_type() != "Mul" || mul->input_size() != 2 ||
      (mul->input(0) != node.input(0) && mul->input(1) != node.input(0))) {
    return false;
  }
  consumed_.insert(mul_index);
  if (!TryFuseIntoBatchNorm(node, x, kind, mul)) SetOutput(*mul, 0, Value::Activation(graph_.Unary(kind, Act(x))));
  return true;
}

// Identity and Cast: the output is the input's node.
Status Importer::ImportAlias(const onnx::NodeProto& node, int index, const Inputs& in) {
  const Value* x = ActivationInput(in, 0);
  if (!x) return NodeError(node, index, "expects an activation");
  SetOutput(node, 0, *x);
  return Status::Ok();
}

Status Importer::ImportDropout(const onnx::NodeProto& node, int index, const Inputs& in) {
  const Value* x = ActivationInput(in, 0);
  if (!x) return NodeError(node, index, "expects an activation");
  const std::optional<double> training = ScalarInput(node, 2);
  // The ratio is an input from opset 12 (an attribute before), 0.5 when not given.
  std::optional<double> ratio = 0.5;
  if (opset_ >= 12 && node.input_size() > 1 && !node.input(1).empty()) {
    ratio = ScalarInput(node, 1);
  } else if (opset_ < 12) {
    ratio = Attributes(node).Float("ratio", 0.5f);
  }
  // Dropout is the identity unless training mode is on (opset 12+), or before opset 12, and
  // always with a ratio of 0 (nn.Dropout(0.0)).
  if ((opset_ >= 12 && (!training || *training == 0)) || (ratio && *ratio == 0)) {
    SetOutput(node, 0, *x);
  } else if (!ratio) {
    return Unsupported(node, index, "the ratio must be a constant");
  } else if (!(*ratio > 0 && *ratio < 1)) {
    return NodeError(node, index, "the ratio must be in [0, 1), not " + std::to_string(*ratio));
  } else {
    SetActivation(node, graph_.Dropout(Act(x), *ratio));
  }
  return Status::Ok();
}

// A batch norm whose output x only the activation reads takes it into its own passes (the layer
// keeps the batch norm's module), unless the model trains on PyTorch's kernels. The activation is
// `node`, or with `product` the x * f(x) of `node`'s f(x): x then has those two readers.
bool Importer::TryFuseIntoBatchNorm(const onnx::NodeProto& node, const Value* x, OpKind activation,
                                    const onnx::NodeProto* product) {
  const size_t readers = product ? 2 : 1;
  if (!fuse_into_batch_norm_ || !x || graph_.layers().at(static_cast<size_t>(Act(x))).kind != OpKind::kBatchNorm2d ||
      Consumers(node.input(0)).size() != readers) {
    return false;
  }
  graph_.FuseActivationIntoBatchNorm(Act(x), activation);
  SetActivation(product ? *product : node, Act(x));
  return true;
}

Status Importer::ImportRelu(const onnx::NodeProto& node, int index, const Inputs& in) {
  const Value* x = ActivationInput(in, 0);
  if (!x) return NodeError(node, index, "expects an activation");
  if (!TryFuseIntoBatchNorm(node, x, OpKind::kRelu)) SetActivation(node, graph_.Relu(Act(x)));
  return Status::Ok();
}

// Clip(0, 6) is ReLU6 and Clip(0) ReLU; bounds are attributes before opset 11, inputs from it.
Status Importer::ImportClip(const onnx::NodeProto& node, int index, const Inputs& in) {
  const Attributes attrs(node);
  double lo = attrs.Float("min", -std::numeric_limits<float>::max());
  double hi = attrs.Float("max", std::numeric_limits<float>::max());
  if (in.size() > 1 && in[1]) {
    if (!in[1]->scalar()) return Unsupported(node, index, "bounds must be constants");
    lo = in[1]->data[0];
  }
  if (in.size() > 2 && in[2]) {
    if (!in[2]->scalar()) return Unsupported(node, index, "bounds must be constants");
    hi = in[2]->data[0];
  }
  const Value* x = ActivationInput(in, 0);
  if (!x) return NodeError(node, index, "expects an activation");
  if (lo == 0 && hi == 6) {
    if (!TryFuseIntoBatchNorm(node, x, OpKind::kRelu6)) SetActivation(node, graph_.Unary(OpKind::kRelu6, Act(x)));
  } else if (lo == 0 && hi >= std::numeric_limits<float>::max()) {
    if (!TryFuseIntoBatchNorm(node, x, OpKind::kRelu)) SetActivation(node, graph_.Relu(Act(x)));
  } else {
    return Unsupported(node, index, "only Clip(0, 6) (ReLU6) and Clip(0) (ReLU) are supported");
  }
  return Status::Ok();
}

Status Importer::ImportHardSigmoid(const onnx::NodeProto& node, int index, const Inputs& in) {
  const Attributes attrs(node);
  if (!Near(attrs.Float("alpha", 0.2f), 1.0 / 6) || !Near(attrs.Float("beta", 0.5f), 0.5)) {
    return Unsupported(node, index, "only PyTorch's hardsigmoid (alpha 1/6, beta 1/2) is supported");
  }
  // x * HardSigmoid(x) is how opset 13 spells HardSwish.
  if (TryFuseProductWithInput(node, ActivationInput(in, 0), OpKind::kHardSwish)) return Status::Ok();
  return ImportUnary(node, index, in, OpKind::kHardSigmoid);
}

Status Importer::ImportHardSwish(const onnx::NodeProto& node, int index, const Inputs& in) {
  if (TryFuseIntoBatchNorm(node, ActivationInput(in, 0), OpKind::kHardSwish)) return Status::Ok();
  return ImportUnary(node, index, in, OpKind::kHardSwish);
}

Status Importer::ImportSigmoid(const onnx::NodeProto& node, int index, const Inputs& in) {
  // x * Sigmoid(x) is SiLU (swish).
  if (TryFuseProductWithInput(node, ActivationInput(in, 0), OpKind::kSilu)) return Status::Ok();
  return ImportUnary(node, index, in, OpKind::kSigmoid);
}

Status Importer::ImportTanh(const onnx::NodeProto& node, int index, const Inputs& in) {
  return ImportUnary(node, index, in, OpKind::kTanh);
}

Status Importer::ImportSqrt(const onnx::NodeProto& node, int index, const Inputs& in) {
  return ImportUnary(node, index, in, OpKind::kSqrt);
}

// Erf alone is not taken; TryGelu (patterns.cc) consumes it with the rest of GELU.
Status Importer::ImportErf(const onnx::NodeProto& node, int index, const Inputs&) {
  return Unsupported(node, index, "Erf is supported as part of GELU, x * 0.5 * (1 + erf(x / sqrt(2)))");
}

Status Importer::ImportPow(const onnx::NodeProto& node, int index, const Inputs& in) {
  const std::optional<double> exponent = ScalarInput(node, 1);
  if (!ActivationInput(in, 0) || !exponent) {
    return Unsupported(node, index, "only an activation to a constant power is supported");
  }
  if (*exponent == 0.5) return ImportUnary(node, index, in, OpKind::kSqrt);
  if (*exponent == std::round(*exponent) && std::fabs(*exponent) <= 16) {
    return ImportUnary(node, index, in, OpKind::kPow, {{"exponent", static_cast<int64_t>(*exponent)}});
  }
  return Unsupported(node, index, "only integer exponents and 0.5 are supported");
}

}  // namespace edgecost::graph::onnx_import
