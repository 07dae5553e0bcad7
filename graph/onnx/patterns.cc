// Decompositions the exporter writes for one PyTorch op, fused back into that op's layer: GELU's
// Erf form and LayerNorm before opset 17. The fused nodes are marked consumed, so the walk skips them.
#include <cmath>

#include "graph/onnx/attributes.h"
#include "graph/onnx/importer.h"

namespace edgecost::graph::onnx_import {

// The node of type `op` that is the one consumer of `tensor`, if it is not imported yet.
const onnx::NodeProto* Importer::Next(const std::string& tensor, const std::string& op, int* index) const {
  const onnx::NodeProto* n = SoleConsumer(tensor, index);
  return n && n->op_type() == op && !consumed_.count(*index) ? n : nullptr;
}

// The input of `node` other than `tensor`, as a scalar constant.
std::optional<double> Importer::OtherScalar(const onnx::NodeProto& node, const std::string& tensor) const {
  if (node.input_size() != 2) return std::nullopt;
  const int other = node.input(0) == tensor ? 1 : node.input(1) == tensor ? 0 : -1;
  if (other < 0) return std::nullopt;
  return ScalarInput(node, other);
}

// PyTorch before opset 20 exports GELU as Div(x, sqrt 2) -> Erf -> Add(1) -> Mul(x) -> Mul(0.5).
bool Importer::TryGelu(const onnx::NodeProto& div) {
  const Value* x = Input(div, 0);
  const std::optional<double> root2 = ScalarInput(div, 1);
  if (!x || x->kind != Value::Kind::kActivation || !root2 || !Near(*root2, std::sqrt(2.0))) return false;
  int erf_i = -1, add_i = -1, mul_i = -1, half_i = -1;
  const onnx::NodeProto* erf = Next(div.output(0), "Erf", &erf_i);
  const onnx::NodeProto* add = erf ? Next(erf->output(0), "Add", &add_i) : nullptr;
  if (!add || !Near(OtherScalar(*add, erf->output(0)).value_or(0), 1)) return false;
  const onnx::NodeProto* mul = Next(add->output(0), "Mul", &mul_i);
  if (!mul || (mul->input(0) != div.input(0) && mul->input(1) != div.input(0))) return false;
  const onnx::NodeProto* half = Next(mul->output(0), "Mul", &half_i);
  if (!half || !Near(OtherScalar(*half, mul->output(0)).value_or(0), 0.5)) return false;
  consumed_.insert({erf_i, add_i, mul_i, half_i});
  SetOutput(*half, 0, Value::Activation(graph_.Unary(OpKind::kGelu, x->node)));
  return true;
}

// LayerNorm before opset 17: ReduceMean -> Sub -> Pow(2) -> ReduceMean -> Add(eps) -> Sqrt -> Div,
// then Mul(gamma) and Add(beta). The mean feeds Sub only; the difference feeds Pow and Div.
bool Importer::TryLayerNorm(const onnx::NodeProto& mean, int x) {
  const size_t rank = graph_.shape(x).size();
  const std::vector<int64_t> axes = Attributes(mean).Ints("axes", {});
  if (axes.size() != 1 || NormalizeAxis(axes[0], rank) != static_cast<int64_t>(rank) - 1) return false;
  int sub_i = -1, pow_i = -1, mean2_i = -1, add_i = -1, sqrt_i = -1, div_i = -1;
  const onnx::NodeProto* sub = Next(mean.output(0), "Sub", &sub_i);
  if (!sub || sub->input(0) != mean.input(0) || sub->input(1) != mean.output(0)) return false;
  auto uses = consumers_.find(sub->output(0));
  if (uses == consumers_.end() || uses->second.size() != 2) return false;
  const onnx::NodeProto* pow = nullptr;
  const onnx::NodeProto* div = nullptr;
  for (int u : uses->second) {
    const onnx::NodeProto& n = model_.graph().node(u);
    if (n.op_type() == "Pow" && n.input(0) == sub->output(0)) {
      pow = &n;
      pow_i = u;
    }
    if (n.op_type() == "Div" && n.input(0) == sub->output(0)) {
      div = &n;
      div_i = u;
    }
  }
  if (!pow || !div || !Near(ScalarInput(*pow, 1).value_or(0), 2)) return false;
  const onnx::NodeProto* mean2 = Next(pow->output(0), "ReduceMean", &mean2_i);
  if (!mean2 || Attributes(*mean2).Ints("axes", {}) != axes) return false;
  const onnx::NodeProto* add = Next(mean2->output(0), "Add", &add_i);
  if (!add || !OtherScalar(*add, mean2->output(0))) return false;
  const onnx::NodeProto* sqrt = Next(add->output(0), "Sqrt", &sqrt_i);
  if (!sqrt || Next(sqrt->output(0), "Div", &div_i) != div || div->input(1) != sqrt->output(0)) return false;
  consumed_.insert({sub_i, pow_i, mean2_i, add_i, sqrt_i, div_i});
  const std::string out = FuseLayerNormAffine(div->output(0), graph_.shape(x).back());
  const double epsilon = OtherScalar(*add, mean2->output(0)).value_or(graph::kDefaultNormEpsilon);
  values_[out] = Value::Activation(graph_.LayerNorm(x, epsilon));
  return true;
}

// The affine part after the normalized `out`: Mul(gamma), then Add(beta), each a weight of `features`.
// Without it the scale and shift stay at 1 and 0 (counted all the same). Returns the last tensor fused.
std::string Importer::FuseLayerNormAffine(std::string out, int64_t features) {
  auto weight = [&](const onnx::NodeProto& n, const std::string& tensor) {
    const std::string& other = n.input(0) == tensor ? n.input(1) : n.input(0);
    auto it = values_.find(other);
    return it != values_.end() && it->second.kind == Value::Kind::kParameter && it->second.shape == Shape{features};
  };
  int mul_i = -1, beta_i = -1;
  if (const onnx::NodeProto* mul = Next(out, "Mul", &mul_i); mul && weight(*mul, out)) {
    consumed_.insert(mul_i);
    out = mul->output(0);
    if (const onnx::NodeProto* beta = Next(out, "Add", &beta_i); beta && weight(*beta, out)) {
      consumed_.insert(beta_i);
      out = beta->output(0);
    }
  }
  return out;
}

}  // namespace edgecost::graph::onnx_import
