// What an ONNX tensor name stands for during import (Value), the decoding of
// constant tensors, and the number helpers the constant folder and the import
// functions share. Internal to the importer (graph/onnx/).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <onnx/onnx_pb.h>

#include "base/status.h"
#include "graph/forward_graph.h"

namespace edgecost::graph::onnx_import {

// An activation (a node of the forward graph), a constant folded at import (shape arithmetic), a
// parameter (an initializer: only its shape matters) or nothing usable (the output of an op that
// could not be imported).
struct Value {
  enum class Kind { kActivation, kConstant, kParameter, kMissing };
  Kind kind = Kind::kMissing;
  int node = -1;
  Shape shape;               // constants and parameters
  std::vector<double> data;  // constants, and parameters small enough to be read as constants
  bool integer = false;      // an integer or boolean constant (for Div and Cast)
  bool has_data = false;
  // Parameters that feed an LSTM or GRU: which initializer rows (along axis 0, after `lead_ones`
  // leading axes of one) they are, as PyTorch's export slices and concatenates torch.nn's weights
  // into ONNX's gate order. Empty elsewhere.
  struct RowBlock {
    std::string initializer;
    int64_t start = 0, end = 0;
  };
  std::vector<RowBlock> rows;
  int lead_ones = 0;
  // A parameter Expand-ed to `shape` (ViT's class token to the batch): the parameter's own shape.
  std::optional<Shape> expanded_param;
  // Rows of a 2-D parameter table gathered by Swin's relative position index for this window (0: not
  // such a gather); relative_heads_first: reshaped to (N, N, heads) and transposed to (heads, N, N).
  int64_t relative_window = 0;
  bool relative_heads_first = false;
  // Stochastic depth's per-sample noise as PyTorch exports torch.bernoulli (RandomUniformLike of shape
  // (batch, 1, ...), Less than the survival rate, Cast, Div by it): kUniform, kKeep (the 0/1 draw, survival
  // in `survival`), kScaled (divided by the survival rate). Multiplied into an activation: a row dropout.
  enum class Random { kNone, kUniform, kKeep, kScaled };
  Random random = Random::kNone;
  double survival = 0;

  static Value Activation(int node) { return {.kind = Kind::kActivation, .node = node}; }
  static Value Constant(Shape shape, std::vector<double> data, bool integer) {
    return {.kind = Kind::kConstant,
            .shape = std::move(shape),
            .data = std::move(data),
            .integer = integer,
            .has_data = true};
  }
  static Value Parameter(Shape shape) { return {.kind = Kind::kParameter, .shape = std::move(shape)}; }
  bool scalar() const { return has_data && data.size() == 1; }
};

// A node's inputs, in order; nullptr where an optional input is not given.
using Inputs = std::vector<const Value*>;

// tensor_values.cc: whether an ONNX data type holds integers (or booleans), and the values of a
// tensor of one of the types exporters use for constants.
bool IsIntegerType(int type);
Result<std::vector<double>> TensorValues(const onnx::TensorProto& t);

inline bool AllEqual(const std::vector<int64_t>& v) {
  return std::all_of(v.begin(), v.end(), [&](int64_t x) { return x == v[0]; });
}

inline bool Near(double a, double b) { return std::fabs(a - b) <= 1e-4 * std::max(1.0, std::fabs(b)); }

inline int64_t NormalizeAxis(int64_t axis, size_t rank) { return axis < 0 ? axis + static_cast<int64_t>(rank) : axis; }

// A value from the file as an integer (an extent, an axis, an index): clamped,
// since casting a double outside int64's range (or NaN) is undefined.
inline int64_t ToInt(double d) { return std::isnan(d) ? 0 : static_cast<int64_t>(std::clamp(d, -9e18, 9e18)); }

inline std::vector<int64_t> ToInts(const std::vector<double>& values) {
  std::vector<int64_t> out;
  out.reserve(values.size());
  for (double d : values) out.push_back(ToInt(d));
  return out;
}

}  // namespace edgecost::graph::onnx_import
