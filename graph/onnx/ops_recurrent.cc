// LSTM and GRU as torch.nn exports them, and the exporter's plumbing between torch.nn's weights and
// the ONNX node (Identity, Slice, Concat and Unsqueeze reordering the gates), followed row by row so
// that the layer's parameters are torch.nn's own initializers.
#include "graph/onnx/attributes.h"
#include "graph/onnx/constant_folding.h"
#include "graph/onnx/importer.h"

namespace edgecost::graph::onnx_import {
namespace {

bool Given(const onnx::NodeProto& node, int i) { return i < node.input_size() && !node.input(i).empty(); }

// Input `i` if it is a parameter whose initializer rows are known.
const Value* RowsOf(const Inputs& in, int i) {
  const Value* v = i < static_cast<int>(in.size()) ? in[i] : nullptr;
  return v && v->kind == Value::Kind::kParameter && !v->rows.empty() ? v : nullptr;
}

// Unsqueeze on axis 0 only.
std::optional<Value> UnsqueezedRows(const onnx::NodeProto& node, const Value& p, const Inputs& in) {
  std::vector<int64_t> axes = Attributes(node).Ints("axes", {});
  if (in.size() > 1 && in[1] && in[1]->has_data) axes = ToInts(in[1]->data);
  if (axes != std::vector<int64_t>{0}) return std::nullopt;
  Value out = p;
  out.shape.insert(out.shape.begin(), 1);
  ++out.lead_ones;
  return out;
}

// A constant slice of axis 0 with unit steps: the rows of each block it keeps (none for an empty one).
std::optional<Value> SlicedRows(const Value& p, const Inputs& in) {
  const bool constant = in.size() >= 3 && in[1] && in[2] && in[1]->has_data && in[2]->has_data &&
                        in[1]->data.size() == 1 && in[2]->data.size() == 1;
  const bool axis0 = in.size() < 4 || !in[3] || (in[3]->has_data && in[3]->data.size() == 1 && in[3]->data[0] == 0);
  const bool unit = in.size() < 5 || !in[4] || (in[4]->has_data && in[4]->data.size() == 1 && in[4]->data[0] == 1);
  if (!constant || !axis0 || !unit || p.lead_ones != 0) return std::nullopt;
  const auto [start, end] = ConstantFolder::SliceRange(ToInt(in[1]->data[0]), ToInt(in[2]->data[0]), p.shape.at(0));
  Value out = p;
  out.rows.clear();
  int64_t at = 0;  // row of p where the current block starts
  for (const Value::RowBlock& b : p.rows) {
    const int64_t lo = std::max(start, at), hi = std::min(end, at + (b.end - b.start));
    if (lo < hi) out.rows.push_back({b.initializer, b.start + (lo - at), b.start + (hi - at)});
    at += b.end - b.start;
  }
  out.shape[0] = std::max<int64_t>(end - start, 0);
  return out;
}

// A concatenation along axis 0 of parameters of the same other extents.
std::optional<Value> ConcatenatedRows(const onnx::NodeProto& node, const Value& p, const Inputs& in) {
  if (Attributes(node).Int("axis", 0) != 0 || p.lead_ones != 0) return std::nullopt;
  Value out = p;
  for (int i = 1; i < node.input_size(); ++i) {
    const Value* q = RowsOf(in, i);
    if (!q || q->lead_ones != 0 || q->shape.size() != p.shape.size() ||
        !std::equal(q->shape.begin() + 1, q->shape.end(), p.shape.begin() + 1)) {
      return std::nullopt;
    }
    out.rows.insert(out.rows.end(), q->rows.begin(), q->rows.end());
    out.shape[0] += q->shape[0];
  }
  return out;
}

}  // namespace

// ONNX LSTM and GRU as torch.nn.LSTM and torch.nn.GRU export them (one direction, one layer per
// node, zero initial state, linear before reset): one layer whose parameters are torch.nn's own
// weight_ih, weight_hh, bias_ih and bias_hh, found behind the exporter's gate reordering.
Status Importer::ImportRecurrent(const onnx::NodeProto& node, int index, const Inputs& in) {
  const bool lstm = node.op_type() == "LSTM";
  const Value* x = ActivationInput(in, 0);
  if (!x || graph_.shape(Act(x)).size() != 3) {
    return Unsupported(node, index, "the input must be an activation of shape (time, batch, features)");
  }
  const int64_t hidden = Attributes(node).Int("hidden_size", 0);
  if (hidden <= 0) return NodeError(node, index, "needs hidden_size");
  if (const std::string why = RecurrentUnsupported(node, in); !why.empty()) return Unsupported(node, index, why);
  // ONNX's gate k is torch.nn's gate torch_gate[k]: ONNX orders i o f c and z r h, PyTorch i f g o and r z n.
  const std::vector<int64_t> torch_gate = lstm ? std::vector<int64_t>{0, 3, 1, 2} : std::vector<int64_t>{1, 0, 2};
  const int64_t gh = static_cast<int64_t>(torch_gate.size()) * hidden;
  const std::string fix =
      "its weights must be torch.nn's parameters as PyTorch's training-mode export reorders them "
      "(torch.onnx.export(..., training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False))";
  const auto weight = [&](int i, int64_t first, int64_t count, int64_t cols) {
    return RecurrentWeight(Given(node, i) ? in[i] : nullptr, first, count, cols, hidden, torch_gate);
  };
  const int64_t features = graph_.shape(Act(x))[2];
  const std::string w_ih = weight(1, 0, gh, features), w_hh = weight(2, 0, gh, hidden);
  if (!Given(node, 3)) return Unsupported(node, index, "a recurrent layer without biases is not supported");
  const std::string b_ih = weight(3, 0, gh, 0), b_hh = weight(3, gh, gh, 0);
  if (w_ih.empty() || w_hh.empty() || b_ih.empty() || b_hh.empty()) return Unsupported(node, index, fix);
  const int layer = graph_.Recurrent(lstm ? OpKind::kLstm : OpKind::kGru, Act(x), hidden);
  graph_.SetParamNames(layer, {w_ih, w_hh, b_ih, b_hh});
  SetActivation(node, layer);
  ImportLastHiddenState(node, layer);
  return Status::Ok();
}

// Why the node's attributes or inputs are not what torch.nn's export writes, or "".
std::string Importer::RecurrentUnsupported(const onnx::NodeProto& node, const Inputs& in) const {
  const bool lstm = node.op_type() == "LSTM";
  const Attributes attrs(node);
  if (attrs.String("direction", "forward") != "forward") {
    return "only one direction (forward) is supported, not bidirectional or reverse";
  }
  if (attrs.Int("layout", 0) != 0 || attrs.Has("clip") || attrs.Int("input_forget", 0) != 0) {
    return "layout, clip and input_forget are not supported";
  }
  if (!lstm && attrs.Int("linear_before_reset", 0) != 1) {
    return "only linear_before_reset=1 (torch.nn.GRU's equations) is supported";
  }
  const std::vector<std::string> defaults =
      lstm ? std::vector<std::string>{"Sigmoid", "Tanh", "Tanh"} : std::vector<std::string>{"Sigmoid", "Tanh"};
  for (const onnx::AttributeProto& a : node.attribute()) {
    if (a.name() == "activations" && std::vector<std::string>(a.strings().begin(), a.strings().end()) != defaults) {
      return "only the default activations are supported";
    }
    if (a.name() == "activation_alpha" || a.name() == "activation_beta") {
      return "activation_alpha and activation_beta are not supported";
    }
  }
  if (Given(node, 4)) return "sequence_lens is not supported (every sequence is whole)";
  if (lstm && Given(node, 7)) return "peepholes are not supported";
  for (int i : lstm ? std::vector<int>{5, 6} : std::vector<int>{5}) {
    if (!Given(node, i)) continue;
    const Value* state = in[i];
    const bool zero =
        state->has_data && std::all_of(state->data.begin(), state->data.end(), [](double d) { return d == 0; });
    if (!zero) return "only a zero initial state is supported";
  }
  if (lstm && node.output_size() > 2 && !node.output(2).empty() && consumers_.count(node.output(2))) {
    return "the last cell state (Y_c) is not supported; use the outputs Y";
  }
  return "";
}

// The initializer behind rows [first, first + count) of the weight input `w` (after its leading
// axis of one), when the rows of ONNX's gate k are torch.nn's gate torch_gate[k] of one initializer
// of shape (gates x hidden, cols) ((gates x hidden) when cols is 0); "" when they are anything else.
std::string Importer::RecurrentWeight(const Value* w, int64_t first, int64_t count, int64_t cols, int64_t hidden,
                                      const std::vector<int64_t>& torch_gate) const {
  if (!w || w->kind != Value::Kind::kParameter || w->lead_ones != 1 || w->rows.empty()) return "";
  std::string name;
  int64_t r = 0;
  for (const Value::RowBlock& b : w->rows) {
    for (int64_t row = b.start; row < b.end; ++row, ++r) {
      if (r < first || r >= first + count) continue;
      const int64_t k = (r - first) / hidden, unit = (r - first) % hidden;
      if (!name.empty() && b.initializer != name) return "";
      name = b.initializer;
      if (row != torch_gate[k] * hidden + unit) return "";
    }
  }
  auto v = values_.find(name);
  if (r != w->shape.at(1) || v == values_.end()) return "";
  const int64_t gh = static_cast<int64_t>(torch_gate.size()) * hidden;
  const Shape expected = cols > 0 ? Shape{gh, cols} : Shape{gh};
  return v->second.shape == expected ? name : "";
}

// Y_h, the last step's hidden state, when something reads it: a slice of Y.
void Importer::ImportLastHiddenState(const onnx::NodeProto& node, int layer) {
  if (node.output_size() <= 1 || node.output(1).empty() || !consumers_.count(node.output(1))) return;
  const Shape y = graph_.shape(layer);  // a copy: Slice appends to the layers
  const int last = graph_.Slice(layer, 0, y[0] - 1, y[0]);
  SetOutput(node, 1, Value::Activation(graph_.Reshape(last, {1, y[2], y[3]})));
}

// The nodes between torch.nn's recurrent weights and an LSTM or GRU (Identity, Slice, Concat,
// Unsqueeze on axis 0: the exporter's reordering of the gates), found before import so that only
// these, and no other op on weights, follow initializer rows.
void Importer::MarkRecurrentWeights() {
  const onnx::GraphProto& g = model_.graph();
  std::map<std::string, int> producer;
  for (int i = 0; i < g.node_size(); ++i) {
    for (const std::string& out : g.node(i).output()) producer[out] = i;
  }
  static const std::set<std::string> plumbing = {"Identity", "Slice", "Concat", "Unsqueeze"};
  std::vector<std::string> pending;
  for (const onnx::NodeProto& node : g.node()) {
    if (node.op_type() != "LSTM" && node.op_type() != "GRU") continue;
    for (int i = 1; i <= 3 && i < node.input_size(); ++i) pending.push_back(node.input(i));
  }
  while (!pending.empty()) {
    const std::string tensor = pending.back();
    pending.pop_back();
    auto it = producer.find(tensor);
    if (it == producer.end() || !plumbing.count(g.node(it->second).op_type())) continue;
    if (!recurrent_weight_nodes_.insert(it->second).second) continue;
    const onnx::NodeProto& node = g.node(it->second);
    // Slice's and Unsqueeze's other inputs are constants; Concat's are all parts.
    const int parts = node.op_type() == "Concat" ? node.input_size() : 1;
    for (int i = 0; i < parts; ++i) pending.push_back(node.input(i));
  }
}

// Rows of an initializer (axis 0) through Identity, Slice, Concat and Unsqueeze(0).
Status Importer::ImportRecurrentWeightOp(const onnx::NodeProto& node, int index, const Inputs& in) {
  const std::string& op = node.op_type();
  const std::string unsupported = "only slices, concatenations and unsqueezes of weights along their first axis";
  const Value* p = RowsOf(in, 0);
  if (!p) return Unsupported(node, index, unsupported);
  std::optional<Value> out;
  if (op == "Identity") {
    out = *p;
  } else if (op == "Unsqueeze") {
    out = UnsqueezedRows(node, *p, in);
  } else if (op == "Slice") {
    out = SlicedRows(*p, in);
    if (out && out->rows.empty()) return Unsupported(node, index, "an empty slice of a weight");
  } else if (op == "Concat") {
    out = ConcatenatedRows(node, *p, in);
  }
  if (!out) return Unsupported(node, index, unsupported);
  out->has_data = false;  // a trained weight, never a constant
  out->data.clear();
  SetOutput(node, 0, std::move(*out));
  return Status::Ok();
}

}  // namespace edgecost::graph::onnx_import
