// Import functions of the spatial ops on NCHW activations: Conv, MaxPool, AveragePool,
// GlobalAveragePool, Pad (with the average pooling it pads) and Resize.
#include <cmath>

#include "graph/onnx/attributes.h"
#include "graph/onnx/importer.h"

namespace edgecost::graph::onnx_import {

Status Importer::ImportConv(const onnx::NodeProto& node, int index, const Inputs& in) {
  const Attributes attrs(node);
  const Value* x = ActivationInput(in, 0);
  if (!x || in.size() < 2 || !in[1] || in[1]->kind != Value::Kind::kParameter) {
    return Unsupported(node, index, "needs an activation and a weight");
  }
  const Shape& w = in[1]->shape;
  if (w.size() != 4) return Unsupported(node, index, "only 2-D convolutions are supported");
  const auto kernel = attrs.Ints("kernel_shape", {w[2], w[3]});
  const auto strides = attrs.Ints("strides", {1, 1});
  const auto pads = attrs.Ints("pads", {0, 0, 0, 0});
  const int64_t groups = attrs.Int("group", 1);
  if (!AllEqual(attrs.Ints("dilations", {1, 1})) || attrs.Ints("dilations", {1, 1})[0] != 1) {
    return Unsupported(node, index, "dilated convolution is not supported");
  }
  // Pads are (top, left, bottom, right): symmetric per axis; kernels may be rectangular (1x7).
  if (kernel.size() != 2 || !AllEqual(strides) || pads.size() != 4 || pads[0] != pads[2] || pads[1] != pads[3]) {
    return Unsupported(node, index, "only equal strides and the same padding on both sides of an axis are supported");
  }
  weight_names_.push_back(node.input(1));
  const bool has_bias = in.size() > 2 && in[2];
  const int conv = graph_.Conv2d(Act(x), w[1] * groups, w[0], graph::Hw{kernel[0], kernel[1]}, strides[0],
                                 graph::Hw{pads[0], pads[1]}, groups, has_bias);
  graph_.SetParamNames(conv, {node.input(1), has_bias ? node.input(2) : ""});
  SetActivation(node, conv);
  return Status::Ok();
}

// MaxPool and AveragePool.
Status Importer::ImportPool(const onnx::NodeProto& node, int index, const Inputs& in) {
  const std::string& op = node.op_type();
  const Attributes attrs(node);
  const Value* x = ActivationInput(in, 0);
  if (!x) return NodeError(node, index, "expects an activation");
  const auto kernel = attrs.Ints("kernel_shape", {1, 1});
  const auto strides = attrs.Ints("strides", {1, 1});
  const auto pads = attrs.Ints("pads", {0, 0, 0, 0});
  const bool ceil_mode = attrs.Int("ceil_mode", 0) != 0;
  const auto positive = [](const std::vector<int64_t>& v) {
    return std::all_of(v.begin(), v.end(), [](int64_t d) { return d > 0; });
  };
  if (kernel.empty() || !positive(kernel) || strides.empty() || !positive(strides)) {
    return NodeError(node, index, "a pooling window and its strides are at least 1");  // [0, 0] pooled to NaN
  }
  if (!AllEqual(kernel) || !AllEqual(strides) || !AllEqual(pads) || (ceil_mode && op == "AveragePool")) {
    return Unsupported(node, index,
                       "only square windows, equal strides, symmetric padding (and floor mode for average "
                       "pooling) are supported");
  }
  SetActivation(node, op == "MaxPool" ? graph_.MaxPool2d(Act(x), kernel[0], strides[0], pads[0], ceil_mode)
                                      : graph_.AvgPool2d(Act(x), kernel[0], strides[0], pads[0],
                                                         attrs.Int("count_include_pad", 0) != 0));
  return Status::Ok();
}

Status Importer::ImportGlobalAveragePool(const onnx::NodeProto& node, int index, const Inputs& in) {
  const Value* x = ActivationInput(in, 0);
  if (!x) return NodeError(node, index, "expects an activation");
  const Shape& s = graph_.shape(Act(x));
  if (s.size() != 4 || s[2] != s[3]) return Unsupported(node, index, "needs a square NCHW input");
  SetActivation(node, graph_.AvgPool2d(Act(x), s[2], 1));
  return Status::Ok();
}

// Pad: the identity when it pads nothing (PyTorch's export of an unpadded average pooling); zeros
// around the spatial axes before an unpadded AveragePool are that pooling's padding counted in the
// mean (PyTorch's avg_pool2d with padding, count_include_pad). Other zero padding is a pad layer per
// padded axis; any other padding is not supported.
Status Importer::ImportPad(const onnx::NodeProto& node, int index, const Inputs& in) {
  const Attributes attrs(node);
  const Value* x = ActivationInput(in, 0);
  if (!x) return Unsupported(node, index, "only padding an activation is supported");
  const Value* pads = in.size() > 1 ? in[1] : nullptr;
  const std::optional<double> value = node.input_size() > 2 && !node.input(2).empty() ? ScalarInput(node, 2) : 0.0;
  const bool axes_given = node.input_size() > 3 && !node.input(3).empty();
  if (opset_ < 11 || attrs.String("mode", "constant") != "constant" || !pads || !pads->has_data || value != 0.0 ||
      axes_given) {
    return Unsupported(node, index, "only constant zero padding with constant pads (opset 11+) is supported");
  }
  const size_t rank = graph_.shape(Act(x)).size();
  if (pads->data.size() != 2 * rank) return NodeError(node, index, "pads must have two entries per axis");
  if (std::all_of(pads->data.begin(), pads->data.end(), [](double p) { return p == 0; })) {
    SetOutput(node, 0, *x);
    return Status::Ok();
  }
  // The spatial padding of NCHW, the same on every side; none on the batch and channel axes.
  const double spatial = pads->data[2];
  const bool square = rank == 4 && pads->data[0] == 0 && pads->data[1] == 0 && pads->data[4] == 0 &&
                      pads->data[5] == 0 && pads->data[3] == spatial && pads->data[6] == spatial &&
                      pads->data[7] == spatial && spatial > 0;
  if (square && TryPaddedAveragePool(node, Act(x), static_cast<int64_t>(spatial))) return Status::Ok();
  // Any other zero padding: one pad op per padded axis (Swin's windows below 224x224).
  if (std::any_of(pads->data.begin(), pads->data.end(), [](double p) { return p < 0; })) {
    return Unsupported(node, index, "negative pads (cropping) are not supported");
  }
  int padded = Act(x);
  for (size_t axis = 0; axis < rank; ++axis) {
    const int64_t before = ToInt(pads->data[axis]), after = ToInt(pads->data[axis + rank]);
    if (before + after > 0) padded = graph_.Pad(padded, static_cast<int64_t>(axis), before, after);
  }
  SetActivation(node, padded);
  return Status::Ok();
}

// The unpadded AveragePool that is `pad`'s one consumer, as one pooling padded by `spatial` whose
// mean counts the zeros.
bool Importer::TryPaddedAveragePool(const onnx::NodeProto& pad, int x, int64_t spatial) {
  int pool_index = -1;
  const onnx::NodeProto* pool = SoleConsumer(pad.output(0), &pool_index);
  if (!pool || pool->op_type() != "AveragePool") return false;
  const Attributes pool_attrs(*pool);
  const auto kernel = pool_attrs.Ints("kernel_shape", {1, 1});
  const auto strides = pool_attrs.Ints("strides", {1, 1});
  const auto pool_pads = pool_attrs.Ints("pads", {0, 0, 0, 0});
  const bool unpadded = std::all_of(pool_pads.begin(), pool_pads.end(), [](int64_t p) { return p == 0; });
  if (!AllEqual(kernel) || !AllEqual(strides) || !unpadded || pool_attrs.Int("ceil_mode", 0) != 0) return false;
  consumed_.insert(pool_index);
  SetOutput(*pool, 0,
            Value::Activation(graph_.AvgPool2d(x, kernel[0], strides[0], spatial, /*count_include_pad=*/true)));
  return true;
}

// Resize of NCHW's spatial axes by integer factors, as F.interpolate and nn.Upsample export it:
// nearest (asymmetric coordinates, floor) or bilinear (half-pixel centres: align_corners=False).
Status Importer::ImportResize(const onnx::NodeProto& node, int index, const Inputs& in) {
  const Attributes attrs(node);
  const Value* x = ActivationInput(in, 0);
  if (!x || graph_.shape(Act(x)).size() != 4) return Unsupported(node, index, "only a resize of an NCHW activation");
  const Shape xs = graph_.shape(Act(x));
  // Opset 10: (X, scales); 11+: (X, roi, scales, sizes), one of scales and sizes given.
  const int scales_at = opset_ >= 11 ? 2 : 1, sizes_at = 3;
  Shape out;
  const Value* scales = scales_at < static_cast<int>(in.size()) ? in[scales_at] : nullptr;
  const Value* sizes = sizes_at < static_cast<int>(in.size()) ? in[sizes_at] : nullptr;
  if (sizes && sizes->has_data && sizes->data.size() == 4) {
    out = ToInts(sizes->data);
  } else if (scales && scales->has_data && scales->data.size() == 4) {
    for (size_t a = 0; a < 4; ++a) {
      const double extent = static_cast<double>(xs[a]) * scales->data[a];
      if (extent != std::floor(extent)) return Unsupported(node, index, "only integer upsampling factors");
      out.push_back(static_cast<int64_t>(extent));
    }
  } else {
    return Unsupported(node, index, "scales or sizes must be constants of the four NCHW axes");
  }
  if (out[0] != xs[0] || out[1] != xs[1] || out[2] % xs[2] != 0 || out[3] % xs[3] != 0 || out[2] < xs[2] ||
      out[3] < xs[3]) {
    return Unsupported(node, index, "only upsampling of the spatial axes by integer factors is supported");
  }
  const std::string mode = attrs.String("mode", "nearest");
  const std::string coordinates = attrs.String("coordinate_transformation_mode", "half_pixel");
  const bool nearest =
      mode == "nearest" && coordinates == "asymmetric" && attrs.String("nearest_mode", "round_prefer_floor") == "floor";
  const bool linear = mode == "linear" && (coordinates == "half_pixel" || coordinates == "pytorch_half_pixel");
  if (!nearest && !linear) {
    return Unsupported(node, index,
                       "supported: nearest with asymmetric coordinates and floor (F.interpolate's 'nearest'), "
                       "linear with half-pixel coordinates ('bilinear', align_corners=False)");
  }
  SetActivation(node, graph_.Resize(Act(x), {out[2], out[3]}, linear));
  return Status::Ok();
}

}  // namespace edgecost::graph::onnx_import
