// Evaluates the shape arithmetic exporters emit (Shape, Gather, Unsqueeze, Concat, Constant,
// ConstantOfShape, Range, Cast, Equal, Where, arithmetic...) on constants. ONNX's C++ library
// infers shapes but has no evaluator, so the few ops that compute them are evaluated here.
// Internal to the importer (graph/onnx/).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <onnx/onnx_pb.h>

#include "base/status.h"
#include "graph/onnx/value.h"

namespace edgecost::graph::onnx_import {

class ConstantFolder {
 public:
  // The node's outputs, or an error naming why it cannot be folded.
  static Result<std::vector<Value>> Fold(const onnx::NodeProto& node, const Inputs& in, int opset);
  // Whether Fold evaluates the op at all (the op check before shape inference reads it).
  static bool CanFold(const std::string& op);

  static Result<Shape> SqueezeShape(bool unsqueeze, const Shape& in, std::vector<int64_t> axes);
  // ONNX Reshape's target: 0 copies the input's extent, -1 takes what is left.
  static Result<Shape> ReshapeTarget(const Shape& in, const std::vector<double>& target, bool allowzero);
  // ONNX Slice's clamping of [start, end) on an axis of extent n, for a unit step.
  static std::pair<int64_t, int64_t> SliceRange(int64_t start, int64_t end, int64_t n);

  static constexpr int64_t kMaxElements = 1 << 20;
};

}  // namespace edgecost::graph::onnx_import
