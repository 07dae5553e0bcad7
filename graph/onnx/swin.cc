// Swin Transformer's attention addends as the exporter writes them: the relative position bias (a
// table gathered by a constant index, then laid out as (heads, N, N)) and the shifted-window mask
// (a folded constant), each recognized by comparing with what graph::ForwardGraph computes.
#include <cmath>

#include "graph/onnx/attributes.h"
#include "graph/onnx/constant_folding.h"
#include "graph/onnx/importer.h"

namespace edgecost::graph::onnx_import {

// The window whose relative position index (graph::RelativePositionIndex) `indices` is, over a table of
// (2 window - 1)^2 rows; 0 if it is not one.
int64_t Importer::RelativeWindow(const Shape& table, const Value& indices) {
  const auto n = static_cast<int64_t>(indices.data.size());
  const auto window = static_cast<int64_t>(std::llround(std::sqrt(std::sqrt(static_cast<double>(n)))));
  if (window < 1 || window > 64 || window * window * window * window != n ||
      table[0] != (2 * window - 1) * (2 * window - 1)) {
    return 0;
  }
  const std::vector<int64_t> expected = RelativePositionIndex(window);
  for (int64_t i = 0; i < n; ++i) {
    if (indices.data[static_cast<size_t>(i)] != static_cast<double>(expected[static_cast<size_t>(i)])) return 0;
  }
  return window;
}

// Swin's bias table gathered by the relative position index, on its way to the attention logits:
// table[index] (N^2 x heads) -> Reshape (N, N, heads) -> Transpose (heads, N, N) -> Unsqueeze (1, heads, N, N).
// Added to the logits it is graph::RelativePositionBias (ImportArithmetic); other ops on it are not supported.
Status Importer::ImportRelativeBiasOp(const onnx::NodeProto& node, int index, const Inputs& in) {
  const std::string& op = node.op_type();
  const Value& p = *in[0];
  const int64_t n = p.relative_window * p.relative_window, heads = p.expanded_param->at(1);
  Shape target;
  if (op == "Reshape" && in.size() > 1 && in[1] && in[1]->has_data) {
    auto reshaped = ConstantFolder::ReshapeTarget(p.shape, in[1]->data, false);
    if (reshaped.ok()) target = *reshaped;
  } else if (op == "Unsqueeze" || op == "Squeeze") {
    std::vector<int64_t> axes = Attributes(node).Ints("axes", {});
    if (in.size() > 1 && in[1] && in[1]->has_data) axes = ToInts(in[1]->data);
    auto squeezed = ConstantFolder::SqueezeShape(op == "Unsqueeze", p.shape, axes);
    if (squeezed.ok()) target = *squeezed;
  }
  Value v = p;
  Shape core = target;  // without leading ones
  while (!core.empty() && core.front() == 1) core.erase(core.begin());
  if (op == "Identity" || op == "Cast") {
    SetOutput(node, 0, v);
    return Status::Ok();
  }
  if (!p.relative_heads_first && !target.empty() && core == Shape{n, n, heads}) {
    v.shape = target;
  } else if (p.relative_heads_first && !target.empty() && core == Shape{heads, n, n}) {
    v.shape = target;
  } else if (op == "Transpose" && !p.relative_heads_first && p.shape == Shape{n, n, heads} &&
             Attributes(node).Ints("perm", {}) == std::vector<int64_t>{2, 0, 1}) {
    v.shape = {heads, n, n};
    v.relative_heads_first = true;
  } else {
    return Unsupported(node, index, "a relative position bias table gathered, then only laid out as (heads, N, N)");
  }
  SetOutput(node, 0, std::move(v));
  return Status::Ok();
}

// The side, window and shift of a constant that is Swin's shifted-window mask (graph::ShiftedWindowMask)
// shaped (1, windows, 1, N, N) as it is added to the logits: found by comparing, not assumed.
std::optional<std::array<int64_t, 3>> Importer::ShiftedWindowMaskOf(const Value& c) {
  Shape s = c.shape;
  if (s.size() != 5 || s[0] != 1 || s[2] != 1 || s[3] != s[4]) return std::nullopt;
  const int64_t n = s[3], windows = s[1];
  const auto window = static_cast<int64_t>(std::llround(std::sqrt(static_cast<double>(n))));
  const auto per_side = static_cast<int64_t>(std::llround(std::sqrt(static_cast<double>(windows))));
  if (window * window != n || per_side * per_side != windows) return std::nullopt;
  for (int64_t shift = 1; shift < window; ++shift) {
    const std::vector<float> mask = ShiftedWindowMask(per_side * window, window, shift);
    if (mask.size() == c.data.size() && std::equal(mask.begin(), mask.end(), c.data.begin(),
                                                   [](float m, double d) { return static_cast<double>(m) == d; })) {
      return std::array<int64_t, 3>{per_side * window, window, shift};
    }
  }
  return std::nullopt;
}

}  // namespace edgecost::graph::onnx_import
