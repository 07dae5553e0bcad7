#include "graph/layouts.h"

#include <numeric>

namespace edgecost::graph {
namespace {

bool HasGroupedConvolution(const ForwardGraph& forward) {
  for (const Layer& layer : forward.layers()) {
    const auto groups = layer.attributes.find("groups");
    if (layer.kind == OpKind::kConv2d && groups != layer.attributes.end() && groups->second > 1) return true;
  }
  return false;
}

bool FeatureMap(const Shape& shape) { return shape.size() == 4; }
bool OnePixel(const Shape& shape) { return FeatureMap(shape) && shape[2] * shape[3] == 1; }

// The layer's kernels take channels-last activations. POET's residual add of a smaller tensor into a
// larger one adds flat prefixes, which only NCHW lines up; a product takes them for squeeze-excite's
// X times a scale per channel and image, (N, C, 1, 1), or of two maps alike.
bool TakesChannelsLast(const ForwardGraph& forward, const Layer& layer) {
  if (ActivationLayoutsOf(layer.kind) == ActivationLayouts::kPlain) return false;
  const auto shape = [&](size_t k) -> const Shape& {
    return forward.layers()[static_cast<size_t>(layer.inputs[k])].output_shape;
  };
  const Shape& out = layer.output_shape;
  switch (layer.kind) {
    case OpKind::kAdd:
      return shape(0) == out && shape(1) == out;
    case OpKind::kMul: {
      if (layer.inputs.size() != 2 || !FeatureMap(out)) return false;
      const auto fits = [&](const Shape& in) { return in == out || in == Shape{out[0], out[1], 1, 1}; };
      return (shape(0) == out || shape(1) == out) && fits(shape(0)) && fits(shape(1));
    }
    default:
      return true;
  }
}

int Root(std::vector<int>& parent, int i) {
  while (parent[static_cast<size_t>(i)] != i) {
    parent[static_cast<size_t>(i)] = parent[static_cast<size_t>(parent[static_cast<size_t>(i)])];  // halving
    i = parent[static_cast<size_t>(i)];
  }
  return i;
}

}  // namespace

std::vector<bool> ChannelsLastOutputs(const ForwardGraph& forward) {
  const auto n = static_cast<size_t>(forward.size());
  std::vector<bool> channels_last(n, false);
  if (!HasGroupedConvolution(forward)) return channels_last;
  const std::vector<Layer>& layers = forward.layers();
  // Tensors (layer outputs) that must share a layout, as sets; and whether each tensor may be NHWC.
  std::vector<int> parent(n);
  std::iota(parent.begin(), parent.end(), 0);
  std::vector<bool> may(n);
  for (size_t i = 0; i < n; ++i) {
    may[i] = FeatureMap(layers[i].output_shape) &&
             (OnePixel(layers[i].output_shape) || TakesChannelsLast(forward, layers[i]));
  }
  for (size_t i = 0; i < n; ++i) {
    const Layer& layer = layers[i];
    const bool takes = TakesChannelsLast(forward, layer);
    for (int input : layer.inputs) {
      const auto in = static_cast<size_t>(input);
      if (!takes && !OnePixel(layers[in].output_shape)) may[in] = false;
      if (takes && ActivationLayoutsOf(layer.kind) == ActivationLayouts::kShared && FeatureMap(layers[in].output_shape)) {
        parent[static_cast<size_t>(Root(parent, input))] = Root(parent, static_cast<int>(i));
      }
    }
  }
  std::vector<bool> set_may(n, true);
  for (size_t i = 0; i < n; ++i) {
    if (!may[i]) set_may[static_cast<size_t>(Root(parent, static_cast<int>(i)))] = false;
  }
  for (size_t i = 0; i < n; ++i) channels_last[i] = may[i] && set_may[static_cast<size_t>(Root(parent, static_cast<int>(i)))];
  return channels_last;
}

void SetChannelsLastAttributes(const ForwardGraph& forward, int index, const std::vector<bool>& channels_last,
                               std::map<std::string, int64_t>& attributes) {
  const Layer& layer = forward.layers()[static_cast<size_t>(index)];
  if (!TakesChannelsLast(forward, layer)) return;
  int64_t inputs = 0;
  for (size_t k = 0; k < layer.inputs.size(); ++k) {
    if (channels_last[static_cast<size_t>(layer.inputs[k])]) inputs |= int64_t{1} << k;
  }
  if (inputs != 0) attributes[kChannelsLastInputsAttribute] = inputs;
  if (channels_last[static_cast<size_t>(index)]) attributes[kChannelsLastOutputAttribute] = 1;
}

}  // namespace edgecost::graph
