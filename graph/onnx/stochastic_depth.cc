// Random numbers, taken only as stochastic depth (torchvision's StochasticDepth, mode "row"), which
// PyTorch exports from torch.bernoulli as x * (Cast(RandomUniformLike(batch, 1, ...) < s) / s): a row
// dropout of ratio 1 - s, whose mask the executor draws per step like any dropout's.
#include "graph/onnx/attributes.h"
#include "graph/onnx/importer.h"

namespace edgecost::graph::onnx_import {
namespace {

constexpr char kRandomUse[] = "random numbers are supported as stochastic depth's row mask only";

// The input other than `except` that is a constant of one repeated value: that value.
std::optional<double> RepeatedConstant(const Inputs& in, const Value* except) {
  for (const Value* v : in) {
    if (v == except || !v || !v->has_data || v->data.empty()) continue;
    if (std::all_of(v->data.begin(), v->data.end(), [&](double d) { return d == v->data[0]; })) return v->data[0];
  }
  return std::nullopt;
}

}  // namespace

// Uniform noise in [0, 1) of shape (batch, 1, ...): the draw of a row mask.
Status Importer::ImportRandomUniformLike(const onnx::NodeProto& node, int index, const Inputs& in) {
  const Attributes attrs(node);
  const Value* like = in.empty() ? nullptr : in[0];
  if (!like || attrs.Float("low", 0) != 0 || attrs.Float("high", 1) != 1) return Unsupported(node, index, kRandomUse);
  const Shape shape = ShapeOfValue(*like);
  if (shape.size() < 2 || std::any_of(shape.begin() + 1, shape.end(), [](int64_t d) { return d != 1; })) {
    return Unsupported(node, index, kRandomUse);
  }
  Value v = Value::Parameter(shape);
  v.kind = Value::Kind::kConstant;  // no data: nothing folds it
  v.random = Value::Random::kUniform;
  SetOutput(node, 0, std::move(v));
  return Status::Ok();
}

// A node with a random input: the next step of the chain (Less, Cast, Div, then Mul into an activation).
Status Importer::ImportRandomOp(const onnx::NodeProto& node, int index, const Inputs& in) {
  const std::string& op = node.op_type();
  const Value* r = nullptr;
  for (const Value* v : in) {
    if (v && v->random != Value::Random::kNone) r = v;
  }
  Value v = *r;
  if (op == "Less" && r == in[0] && r->random == Value::Random::kUniform) {
    const std::optional<double> s = RepeatedConstant(in, r);
    if (!s || !(*s > 0 && *s <= 1)) return Unsupported(node, index, kRandomUse);
    v.random = Value::Random::kKeep;
    v.survival = *s;
  } else if ((op == "Cast" || op == "Identity") && r->random == Value::Random::kKeep) {
  } else if (op == "Div" && r == in[0] && r->random == Value::Random::kKeep && RepeatedConstant(in, r) &&
             Near(*RepeatedConstant(in, r), r->survival)) {
    v.random = Value::Random::kScaled;
  } else if (op == "Mul" && r->random == Value::Random::kScaled && in.size() == 2) {
    const Value* x = in[0] == r ? in[1] : in[0];
    if (!x || x->kind != Value::Kind::kActivation || graph_.shape(x->node).size() != r->shape.size() ||
        graph_.shape(x->node)[0] != r->shape[0]) {
      return Unsupported(node, index, kRandomUse);
    }
    const size_t before = graph_.layers().size();
    SetActivation(node, r->survival == 1 ? x->node : graph_.RowDropout(x->node, 1 - r->survival));
    SetModules(node, before);
    return Status::Ok();
  } else {
    return Unsupported(node, index, kRandomUse);
  }
  SetOutput(node, 0, std::move(v));
  return Status::Ok();
}

}  // namespace edgecost::graph::onnx_import
