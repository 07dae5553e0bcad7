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

bool TakesChannelsLast(const ForwardGraph& forward, const Layer& layer) {
  std::vector<Shape> inputs;
  for (int input : layer.inputs) inputs.push_back(forward.layers()[static_cast<size_t>(input)].output_shape);
  return TakesChannelsLast(layer.kind, inputs, layer.output_shape);
}

}  // namespace

bool TakesChannelsLast(OpKind kind, const std::vector<Shape>& inputs, const Shape& output) {
  if (ActivationLayoutsOf(kind) == ActivationLayouts::kPlain) return false;
  switch (kind) {
    case OpKind::kAdd:
      return inputs.size() == 2 && inputs[0] == output && inputs[1] == output;
    case OpKind::kMul: {
      if (inputs.size() != 2 || !FeatureMap(output)) return false;
      const auto fits = [&](const Shape& in) { return in == output || in == Shape{output[0], output[1], 1, 1}; };
      return (inputs[0] == output || inputs[1] == output) && fits(inputs[0]) && fits(inputs[1]);
    }
    default:
      return true;
  }
}

std::vector<bool> ChannelsLastOutputs(const ForwardGraph& forward) {
  const std::vector<Layer>& layers = forward.layers();
  const size_t n = layers.size();
  if (!HasGroupedConvolution(forward)) return std::vector<bool>(n, false);
  // Whether each tensor (a layer's output) may lie channels-last, and the sets of tensors that must
  // lie alike (a union-find forest).
  std::vector<bool> takes(n), may(n);
  std::vector<size_t> parent(n);
  std::iota(parent.begin(), parent.end(), size_t{0});
  const auto root = [&](size_t i) {
    while (parent[i] != i) i = parent[i] = parent[parent[i]];
    return i;
  };
  for (size_t i = 0; i < n; ++i) {
    const Shape& shape = layers[i].output_shape;
    takes[i] = TakesChannelsLast(forward, layers[i]);
    may[i] = FeatureMap(shape) && (OnePixel(shape) || takes[i]);
  }
  for (size_t i = 0; i < n; ++i) {
    const bool shares = takes[i] && ActivationLayoutsOf(layers[i].kind) == ActivationLayouts::kShared;
    for (int input : layers[i].inputs) {
      const auto in = static_cast<size_t>(input);
      if (!takes[i] && !OnePixel(layers[in].output_shape)) may[in] = false;
      if (shares && FeatureMap(layers[in].output_shape)) parent[root(in)] = root(i);
    }
  }
  std::vector<bool> set_may(n, true);
  for (size_t i = 0; i < n; ++i) {
    if (!may[i]) set_may[root(i)] = false;
  }
  std::vector<bool> channels_last(n);
  for (size_t i = 0; i < n; ++i) channels_last[i] = may[i] && set_may[root(i)];
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
