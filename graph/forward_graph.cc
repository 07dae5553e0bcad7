#include "graph/forward_graph.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <sstream>
#include <stdexcept>

namespace edgecost::graph {
namespace {

[[noreturn]] void Fail(const std::string& what) { throw std::logic_error(what); }

// A count computed in double, saturated where int64 would overflow (Append refuses it).
int64_t SaturatingCount(double count) { return count < 9e18 ? static_cast<int64_t>(count) : int64_t{1} << 62; }

double UnaryFlopsPerElement(OpKind kind);

}  // namespace

int64_t NumElements(const Shape& shape) {
  // Shapes come from files: a product that would overflow saturates, and Append refuses it.
  int64_t n = 1;
  for (int64_t d : shape) {
    if (__builtin_mul_overflow(n, d, &n)) return std::numeric_limits<int64_t>::max();
  }
  return n;
}

bool ValidShape(const Shape& shape) {
  return std::all_of(shape.begin(), shape.end(), [](int64_t d) { return d >= 0 && d <= kMaxTensorElements; }) &&
         NumElements(shape) <= kMaxTensorElements;
}

std::string ShapeToString(const Shape& shape) {
  std::ostringstream out;
  for (size_t i = 0; i < shape.size(); ++i) out << (i ? "x" : "") << shape[i];
  return out.str();
}

int ForwardGraph::Append(Layer layer) {
  for (int input : layer.inputs) {
    if (input < 0 || input >= size()) throw std::logic_error("layer input out of range while building " + model_);
  }
  // Every size later arithmetic multiplies stays far from overflow.
  if (!ValidShape(layer.output_shape) || layer.param_count < 0 || layer.param_count > kMaxTensorElements ||
      !(layer.flops >= 0 && layer.flops < 1e30)) {
    Fail("a layer too large to train in " + model_ + ": output " + ShapeToString(layer.output_shape) + ", " +
         std::to_string(layer.param_count) + " parameters");
  }
  layers_.push_back(std::move(layer));
  return last();
}

Result<ForwardGraph> ForwardGraph::FromLayers(std::string model, int batch_size, std::vector<Layer> layers) {
  ForwardGraph graph(std::move(model), batch_size);
  for (Layer& layer : layers) {
    const int kind = static_cast<int>(layer.kind);
    if (kind < 0 || kind > static_cast<int>(kLastOpKind) || layer.bias_count < 0 ||
        layer.bias_count > layer.param_count || layer.param_names.size() > 4 ||
        layer.module.size() > kMaxModuleNameBytes) {
      return InvalidArgument("layer " + std::to_string(graph.size()) + " of " + graph.model_ + " is malformed");
    }
    try {
      graph.Append(std::move(layer));
    } catch (const std::logic_error& e) {
      return InvalidArgument(e.what());
    }
  }
  return graph;
}

int ForwardGraph::Input(Shape shape) { return Append({.kind = OpKind::kInput, .output_shape = std::move(shape)}); }

int ForwardGraph::Conv2d(int x, int64_t in_channels, int64_t out_channels, int64_t kernel, int64_t stride,
                         int64_t padding, int64_t groups, bool bias) {
  return Conv2d(x, in_channels, out_channels, Hw{kernel, kernel}, stride, Hw{padding, padding}, groups, bias);
}

int ForwardGraph::Conv2d(int x, int64_t in_channels, int64_t out_channels, Hw kernel, int64_t stride, Hw padding,
                         int64_t groups, bool bias) {
  const Shape& in = shape(x);
  if (in.size() != 4 || in[1] != in_channels) throw std::logic_error("conv2d input shape mismatch in " + model_);
  if (groups < 1 || in_channels % groups != 0 || out_channels % groups != 0) {
    throw std::logic_error("conv2d groups do not divide the channels in " + model_);
  }
  const int64_t h = (in[2] - kernel[0] + 2 * padding[0]) / stride + 1;
  const int64_t w = (in[3] - kernel[1] + 2 * padding[1]) / stride + 1;
  Shape out = {in[0], out_channels, h, w};
  Layer layer{.kind = OpKind::kConv2d, .inputs = {x}, .output_shape = out};
  const double window = static_cast<double>(kernel[0]) * static_cast<double>(kernel[1]);
  layer.bias_count = bias ? out_channels : 0;
  layer.param_count =
      SaturatingCount(static_cast<double>(out_channels) * static_cast<double>(in_channels / groups) * window) +
      layer.bias_count;
  // POET counts 2 * k^2 * |input| * C_out (input size, not output size) + |output|; a group
  // sees 1/groups of the input channels.
  layer.flops = 2.0 * window * static_cast<double>(NumElements(in)) * static_cast<double>(out_channels) /
                    static_cast<double>(groups) +
                static_cast<double>(NumElements(out));
  layer.attributes = {{"in_channels", in_channels},
                      {"out_channels", out_channels},
                      {"kernel", kernel[0]},
                      {"stride", stride},
                      {"padding", padding[0]}};
  // Only set where they differ from POET's convolutions, so that existing op signatures stay.
  if (kernel[1] != kernel[0]) layer.attributes["kernel_w"] = kernel[1];
  if (padding[1] != padding[0]) layer.attributes["padding_w"] = padding[1];
  if (groups != 1) layer.attributes["groups"] = groups;
  if (!bias) layer.attributes["no_bias"] = 1;
  return Append(std::move(layer));
}

namespace {

// Only an epsilon other than the default is an attribute, so that op signatures stay as they were.
void SetEpsilon(Layer& layer, double epsilon) {
  if (std::fabs(epsilon - kDefaultNormEpsilon) > 1e-12) layer.attributes["epsilon_e9"] = std::llround(epsilon * 1e9);
}

}  // namespace

int ForwardGraph::BatchNorm2d(int x, double epsilon) {
  const Shape in = shape(x);
  Layer layer{.kind = OpKind::kBatchNorm2d, .inputs = {x}, .output_shape = in};
  layer.param_count = 4 * in.at(1);  // POET counts gamma, beta, running mean and variance
  layer.bias_count = in.at(1);       // beta
  layer.flops = 2.0 * static_cast<double>(NumElements(in));
  layer.attributes = {{"channels", in.at(1)}};
  SetEpsilon(layer, epsilon);
  return Append(std::move(layer));
}

void ForwardGraph::FuseActivationIntoBatchNorm(int batch_norm, OpKind activation) {
  Layer& layer = layers_.at(static_cast<size_t>(batch_norm));
  const std::map<OpKind, OpKind> fused = {{OpKind::kRelu, OpKind::kBatchNormRelu},
                                          {OpKind::kRelu6, OpKind::kBatchNormRelu6},
                                          {OpKind::kSilu, OpKind::kBatchNormSilu},
                                          {OpKind::kHardSwish, OpKind::kBatchNormHardSwish}};
  if (layer.kind != OpKind::kBatchNorm2d || !fused.contains(activation)) {
    Fail("only a batch norm takes a fused ReLU, ReLU6, SiLU or HardSwish");
  }
  layer.kind = fused.at(activation);
  // A comparison a value for ReLU, as Relu counts; the others as their own nodes count.
  const double per_value = activation == OpKind::kRelu ? 1 : UnaryFlopsPerElement(activation);
  layer.flops += per_value * static_cast<double>(NumElements(layer.output_shape));
}

int ForwardGraph::Relu(int x) {
  const Shape in = shape(x);
  return Append(
      {.kind = OpKind::kRelu, .inputs = {x}, .output_shape = in, .flops = static_cast<double>(NumElements(in))});
}

namespace {
Shape PoolShape(const Shape& in, int64_t kernel, int64_t stride, int64_t padding, bool ceil_mode = false) {
  if (in.size() != 4) throw std::logic_error("pooling needs an NCHW input");
  auto extent = [&](int64_t size) {
    const int64_t span = size + 2 * padding - kernel;
    int64_t out = (ceil_mode ? (span + stride - 1) / stride : span / stride) + 1;
    // PyTorch and ONNX: the last window must start inside the input or its left padding.
    if (ceil_mode && (out - 1) * stride >= size + padding) --out;
    return out;
  };
  return {in[0], in[1], extent(in[2]), extent(in[3])};
}
}  // namespace

int ForwardGraph::MaxPool2d(int x, int64_t kernel, int64_t stride, int64_t padding, bool ceil_mode) {
  Shape out = PoolShape(shape(x), kernel, stride, padding, ceil_mode);
  // POET: "Flops assume stride=1 for legacy reasons".
  const double flops = 2.0 * static_cast<double>(kernel * kernel * NumElements(out));
  Layer layer{.kind = OpKind::kMaxPool2d,
              .inputs = {x},
              .output_shape = out,
              .flops = flops,
              .attributes = {{"kernel", kernel}, {"stride", stride}, {"padding", padding}}};
  if (ceil_mode) layer.attributes["ceil_mode"] = 1;
  return Append(std::move(layer));
}

int ForwardGraph::AvgPool2d(int x, int64_t kernel, int64_t stride, int64_t padding, bool count_include_pad) {
  Shape out = PoolShape(shape(x), kernel, stride, padding);
  const double flops = 2.0 * static_cast<double>(kernel * kernel * NumElements(out));
  Layer layer{.kind = OpKind::kAvgPool2d,
              .inputs = {x},
              .output_shape = out,
              .flops = flops,
              .attributes = {{"kernel", kernel}, {"stride", stride}, {"padding", padding}}};
  // Without padding both means are the same: one attribute set, one cost measured.
  if (count_include_pad && padding > 0) layer.attributes["count_include_pad"] = 1;
  return Append(std::move(layer));
}

int ForwardGraph::Flatten(int x) {
  const Shape& in = shape(x);
  Shape out = {in.at(0), NumElements(in) / in.at(0)};
  const double flops = static_cast<double>(NumElements(out));
  return Append({.kind = OpKind::kFlatten, .inputs = {x}, .output_shape = out, .flops = flops});
}

int ForwardGraph::Linear(int x, int64_t in_features, int64_t out_features) {
  const Shape& in = shape(x);
  if (in.size() != 2 || in[1] != in_features) throw std::logic_error("linear input shape mismatch in " + model_);
  Layer layer{.kind = OpKind::kLinear, .inputs = {x}, .output_shape = {in[0], out_features}};
  layer.param_count = (in_features + 1) * out_features;
  layer.bias_count = out_features;
  // POET counts 2 * params + out_features, independent of the batch size.
  layer.flops = 2.0 * static_cast<double>(layer.param_count) + static_cast<double>(out_features);
  layer.attributes = {{"in_features", in_features}, {"out_features", out_features}};
  return Append(std::move(layer));
}

int ForwardGraph::LinearRelu(int x, int64_t in_features, int64_t out_features) {
  const int index = Linear(x, in_features, out_features);
  Layer& layer = layers_[index];
  layer.kind = OpKind::kLinearRelu;
  layer.flops += static_cast<double>(NumElements(layer.output_shape));
  return index;
}

int ForwardGraph::Dropout(int x, double ratio) {
  const Shape in = shape(x);
  Layer layer{
      .kind = OpKind::kDropout, .inputs = {x}, .output_shape = in, .flops = static_cast<double>(NumElements(in))};
  // The default's signature stays what it was, so that existing cost tables keep matching.
  if (std::fabs(ratio - kDefaultDropoutRatio) > 1e-12)
    layer.attributes[kDropoutRatioAttribute] = std::llround(ratio * 1e6);
  return Append(std::move(layer));
}

int ForwardGraph::RowDropout(int x, double ratio) {
  if (!(ratio > 0 && ratio < 1)) Fail("a row dropout's ratio must be in (0, 1), not " + std::to_string(ratio));
  const int layer = Dropout(x, ratio);
  layers_.at(static_cast<size_t>(layer)).attributes[kDropoutRatioAttribute] = std::llround(ratio * 1e6);
  layers_.at(static_cast<size_t>(layer)).attributes["rows"] = 1;
  return layer;
}

int ForwardGraph::Add(int a, int b) {
  // POET takes the first input's shape; ResNet-50 adds tensors of different sizes (zero padding, He et al. 3.3).
  const Shape out = shape(a);
  return Append(
      {.kind = OpKind::kAdd, .inputs = {a, b}, .output_shape = out, .flops = static_cast<double>(NumElements(out))});
}

int ForwardGraph::QkvProjection(int x, int64_t seq_len, int64_t hidden, int64_t head_dim, int64_t heads) {
  Layer layer{.kind = OpKind::kQkvProjection, .inputs = {x}, .output_shape = {3 * seq_len, head_dim, heads}};
  layer.param_count = 3 * hidden * head_dim * heads;  // POET's fused projection has no bias
  layer.flops = static_cast<double>(3 * seq_len * hidden * head_dim * heads);
  layer.attributes = {{"seq_len", seq_len}, {"hidden", hidden}, {"head_dim", head_dim}, {"heads", heads}};
  return Append(std::move(layer));
}

int ForwardGraph::AttentionScores(int qkv, int64_t seq_len, int64_t head_dim, int64_t heads) {
  Layer layer{.kind = OpKind::kAttentionScores, .inputs = {qkv}, .output_shape = {seq_len, seq_len, heads}};
  const double scores = static_cast<double>(seq_len * seq_len * heads);
  layer.flops = static_cast<double>(seq_len * head_dim * seq_len * heads) + 2.0 * scores;  // QK^T + mask + dropout
  layer.attributes = {{"seq_len", seq_len}, {"head_dim", head_dim}, {"heads", heads}};
  return Append(std::move(layer));
}

int ForwardGraph::AttentionContext(int scores, int64_t seq_len, int64_t head_dim, int64_t heads) {
  Layer layer{.kind = OpKind::kAttentionContext, .inputs = {scores}, .output_shape = {seq_len, head_dim * heads}};
  layer.flops = 2.0 * static_cast<double>(seq_len * seq_len * head_dim * heads);  // softmax(S) V + concat
  layer.attributes = {{"seq_len", seq_len}, {"head_dim", head_dim}, {"heads", heads}};
  return Append(std::move(layer));
}

int ForwardGraph::CrossEntropyLoss(int logits, int64_t classes) {
  // POET's loss output is a vector of `classes` values regardless of the batch size.
  const double flops = static_cast<double>(NumElements(shape(logits))) * static_cast<double>(classes);
  return Append({.kind = OpKind::kCrossEntropyLoss,
                 .inputs = {logits},
                 .output_shape = {classes},
                 .flops = flops,
                 .attributes = {{"classes", classes}}});
}

// ---- The op set of imported models ------------------------------------------------------------

namespace {

int64_t Axis(int64_t axis, size_t rank) {
  const int64_t r = static_cast<int64_t>(rank);
  if (axis < -r || axis >= r) Fail("axis " + std::to_string(axis) + " out of range for rank " + std::to_string(r));
  return axis < 0 ? axis + r : axis;
}

// FLOPs per element of the elementwise kinds (a comparison, add or multiply is one).
double UnaryFlopsPerElement(OpKind kind) {
  switch (kind) {
    case OpKind::kRelu6:
    case OpKind::kSqrt:
      return 1;
    case OpKind::kAffine:
    case OpKind::kPow:
      return 2;
    case OpKind::kHardSigmoid:
      return 3;
    case OpKind::kHardSwish:
      return 4;
    case OpKind::kSigmoid:
    case OpKind::kTanh:
      return 4;  // exp, add, divide (and a multiply for tanh)
    case OpKind::kSilu:
      return 5;
    case OpKind::kGelu:
      return 8;  // x * 0.5 * (1 + erf(x / sqrt 2)), erf as a short polynomial
    case OpKind::kInput:
    case OpKind::kConv2d:
    case OpKind::kBatchNorm2d:
    case OpKind::kBatchNormRelu:
    case OpKind::kBatchNormRelu6:
    case OpKind::kBatchNormSilu:
    case OpKind::kBatchNormHardSwish:
    case OpKind::kRelu:
    case OpKind::kMaxPool2d:
    case OpKind::kAvgPool2d:
    case OpKind::kFlatten:
    case OpKind::kLinear:
    case OpKind::kLinearRelu:
    case OpKind::kDropout:
    case OpKind::kAdd:
    case OpKind::kQkvProjection:
    case OpKind::kAttentionScores:
    case OpKind::kAttentionContext:
    case OpKind::kCrossEntropyLoss:
    case OpKind::kMul:
    case OpKind::kSub:
    case OpKind::kDiv:
    case OpKind::kAddBroadcast:
    case OpKind::kMatMul:
    case OpKind::kSoftmax:
    case OpKind::kLayerNorm:
    case OpKind::kReduceMean:
    case OpKind::kConcat:
    case OpKind::kTranspose:
    case OpKind::kReshape:
    case OpKind::kSlice:
    case OpKind::kPad:
    case OpKind::kEmbedding:
    case OpKind::kLstm:
    case OpKind::kGru:
    case OpKind::kCausalMask:
    case OpKind::kResize:
      break;
  }
  Fail(std::string(OpKindName(kind)) + " is not an elementwise op of one input");
}

}  // namespace

Shape BroadcastShapes(const Shape& a, const Shape& b) {
  const size_t rank = std::max(a.size(), b.size());
  Shape out(rank);
  for (size_t i = 0; i < rank; ++i) {
    const int64_t da = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
    const int64_t db = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
    if (da != db && da != 1 && db != 1)
      Fail("shapes " + ShapeToString(a) + " and " + ShapeToString(b) + " do not broadcast");
    out[i] = std::max(da, db);
  }
  return out;
}

int ForwardGraph::Unary(OpKind kind, int x, std::map<std::string, int64_t> attributes) {
  const Shape in = shape(x);
  const double flops = UnaryFlopsPerElement(kind) * static_cast<double>(NumElements(in));
  return Append({.kind = kind, .inputs = {x}, .output_shape = in, .flops = flops, .attributes = std::move(attributes)});
}

int ForwardGraph::Binary(OpKind kind, int a, int b) {
  if (kind != OpKind::kMul && kind != OpKind::kSub && kind != OpKind::kDiv && kind != OpKind::kAddBroadcast) {
    Fail(std::string(OpKindName(kind)) + " is not a binary op");
  }
  Shape out = BroadcastShapes(shape(a), shape(b));
  const double flops = static_cast<double>(NumElements(out));
  return Append({.kind = kind, .inputs = {a, b}, .output_shape = std::move(out), .flops = flops});
}

int ForwardGraph::BinaryParam(OpKind kind, int a, const Shape& param) {
  if (kind != OpKind::kMul && kind != OpKind::kSub && kind != OpKind::kDiv && kind != OpKind::kAddBroadcast) {
    Fail(std::string(OpKindName(kind)) + " is not a binary op");
  }
  Shape p = param;
  while (!p.empty() && p.front() == 1) p.erase(p.begin());
  const Shape& in = shape(a);
  // Axes of p that are 1 where `a` is not: broadcast inside the parameter's trailing axes too
  // (ConvNeXt's layer scale, C x 1 x 1 over N x C x H x W), bit i for axis i of p.
  int64_t broadcast_axes = 0;
  const size_t offset = in.size() - std::min(p.size(), in.size());
  for (size_t i = 0; i < p.size() && p.size() <= in.size(); ++i) {
    if (p[i] == 1 && in[offset + i] != 1) broadcast_axes |= int64_t{1} << i;
  }
  bool fits = p.size() <= in.size() && p.size() < 63;
  for (size_t i = 0; fits && i < p.size(); ++i) fits = p[i] == in[offset + i] || p[i] == 1;
  if (!fits) {
    Fail("parameter of shape " + ShapeToString(param) + " does not broadcast over the trailing axes of " +
         ShapeToString(in));
  }
  Layer layer{.kind = kind, .inputs = {a}, .output_shape = in, .flops = static_cast<double>(NumElements(in))};
  layer.param_count = NumElements(p);
  if (kind == OpKind::kAddBroadcast || kind == OpKind::kSub) layer.bias_count = layer.param_count;
  layer.attributes = {{"param_rank", static_cast<int64_t>(p.size())}};
  if (broadcast_axes != 0) layer.attributes["param_broadcast_axes"] = broadcast_axes;
  return Append(std::move(layer));
}

int ForwardGraph::LinearNd(int x, int64_t in_features, int64_t out_features, bool bias) {
  const Shape& in = shape(x);
  if (in.size() < 2 || in.back() != in_features) Fail("linear input shape mismatch in " + model_);
  Shape out = in;
  out.back() = out_features;
  const int64_t rows = NumElements(in) / in_features;
  Layer layer{.kind = OpKind::kLinear, .inputs = {x}, .output_shape = out};
  layer.bias_count = bias ? out_features : 0;
  layer.param_count =
      SaturatingCount(static_cast<double>(in_features) * static_cast<double>(out_features)) + layer.bias_count;
  layer.flops = 2.0 * static_cast<double>(rows) * static_cast<double>(in_features) * static_cast<double>(out_features) +
                (bias ? static_cast<double>(rows) * static_cast<double>(out_features) : 0.0);
  layer.attributes = {{"in_features", in_features}, {"out_features", out_features}};
  if (!bias) layer.attributes["no_bias"] = 1;
  return Append(std::move(layer));
}

int ForwardGraph::MatMul(int a, int b) {
  const Shape& sa = shape(a);
  const Shape& sb = shape(b);
  if (sa.size() < 2 || sb.size() < 2 || sa.back() != sb[sb.size() - 2]) {
    Fail("matmul of " + ShapeToString(sa) + " and " + ShapeToString(sb) + " in " + model_);
  }
  Shape out = BroadcastShapes(Shape(sa.begin(), sa.end() - 2), Shape(sb.begin(), sb.end() - 2));
  out.push_back(sa[sa.size() - 2]);
  out.push_back(sb.back());
  const double flops = 2.0 * static_cast<double>(NumElements(out)) * static_cast<double>(sa.back());
  return Append({.kind = OpKind::kMatMul, .inputs = {a, b}, .output_shape = std::move(out), .flops = flops});
}

int ForwardGraph::Softmax(int x, int64_t axis) {
  const Shape in = shape(x);
  return Append({.kind = OpKind::kSoftmax,
                 .inputs = {x},
                 .output_shape = in,
                 .flops = 5.0 * static_cast<double>(NumElements(in)),  // max, subtract, exp, sum, divide
                 .attributes = {{"axis", Axis(axis, in.size())}}});
}

int ForwardGraph::LayerNorm(int x, double epsilon) {
  const Shape in = shape(x);
  if (in.empty()) Fail("layer normalization of a scalar in " + model_);
  Layer layer{.kind = OpKind::kLayerNorm, .inputs = {x}, .output_shape = in};
  layer.param_count = 2 * in.back();  // scale and shift
  layer.bias_count = in.back();
  layer.flops = 8.0 * static_cast<double>(NumElements(in));  // mean, variance, normalize, scale and shift
  SetEpsilon(layer, epsilon);
  return Append(std::move(layer));
}

int ForwardGraph::ReduceMean(int x, const std::vector<int64_t>& axes, bool keepdims) {
  const Shape in = shape(x);
  int64_t mask = 0;
  for (int64_t a : axes) mask |= int64_t{1} << Axis(a, in.size());
  if (axes.empty()) mask = (int64_t{1} << in.size()) - 1;  // ONNX: no axes reduces all
  Shape out;
  for (size_t i = 0; i < in.size(); ++i) {
    if (!(mask >> i & 1)) {
      out.push_back(in[i]);
    } else if (keepdims) {
      out.push_back(1);
    }
  }
  return Append({.kind = OpKind::kReduceMean,
                 .inputs = {x},
                 .output_shape = out,
                 .flops = static_cast<double>(NumElements(in)),
                 .attributes = {{"axes", mask}, {"keepdims", keepdims ? 1 : 0}}});
}

int ForwardGraph::Concat(const std::vector<int>& inputs, int64_t axis) {
  if (inputs.empty()) Fail("concat of nothing in " + model_);
  Shape out = shape(inputs[0]);
  const int64_t a = Axis(axis, out.size());
  out[a] = 0;
  for (int input : inputs) {
    const Shape& s = shape(input);
    for (size_t i = 0; i < s.size(); ++i) {
      if (static_cast<int64_t>(i) != a && (s.size() != out.size() || s[i] != out[i])) {
        Fail("concat of mismatched shapes in " + model_);
      }
    }
    out[a] += s[a];
  }
  const double flops = static_cast<double>(NumElements(out));
  return Append({.kind = OpKind::kConcat,
                 .inputs = inputs,
                 .output_shape = std::move(out),
                 .flops = flops,
                 .attributes = {{"axis", a}}});
}

int64_t EncodePerm(const std::vector<int64_t>& perm) {
  int64_t code = 0;
  for (int64_t p : perm) code = code * 10 + p;
  return code;
}

std::vector<int64_t> DecodePerm(int64_t code, size_t rank) {
  std::vector<int64_t> perm(rank);
  for (size_t i = rank; i-- > 0;) {
    perm[i] = code % 10;
    code /= 10;
  }
  return perm;
}

int ForwardGraph::Transpose(int x, const std::vector<int64_t>& perm) {
  const Shape in = shape(x);
  if (perm.size() != in.size() || in.size() > 9) Fail("transpose permutation does not fit the input in " + model_);
  Shape out(in.size());
  std::vector<bool> seen(in.size(), false);
  for (size_t i = 0; i < perm.size(); ++i) {
    if (perm[i] < 0 || perm[i] >= static_cast<int64_t>(in.size()) || seen[perm[i]]) Fail("bad permutation");
    seen[perm[i]] = true;
    out[i] = in[perm[i]];
  }
  return Append({.kind = OpKind::kTranspose,
                 .inputs = {x},
                 .output_shape = std::move(out),
                 .flops = static_cast<double>(NumElements(in)),
                 .attributes = {{"perm", EncodePerm(perm)}}});
}

int ForwardGraph::Reshape(int x, const Shape& target) {
  if (NumElements(target) != NumElements(shape(x))) {
    Fail("reshape of " + ShapeToString(shape(x)) + " to " + ShapeToString(target) + " in " + model_);
  }
  return Append({.kind = OpKind::kReshape, .inputs = {x}, .output_shape = target, .flops = 0});
}

int ForwardGraph::Slice(int x, int64_t axis, int64_t start, int64_t end, bool squeeze) {
  const Shape in = shape(x);
  const int64_t a = Axis(axis, in.size());
  if (start < 0 || end > in[a] || start >= end || (squeeze && end != start + 1)) {
    Fail("slice [" + std::to_string(start) + ", " + std::to_string(end) + ") of axis " + std::to_string(a) + " of " +
         ShapeToString(in));
  }
  Shape out = in;
  out[a] = end - start;
  if (squeeze) out.erase(out.begin() + a);
  const double flops = static_cast<double>(NumElements(out));
  return Append({.kind = OpKind::kSlice,
                 .inputs = {x},
                 .output_shape = std::move(out),
                 .flops = flops,
                 .attributes = {{"axis", a}, {"start", start}, {"end", end}}});
}

int ForwardGraph::Pad(int x, int64_t axis, int64_t before, int64_t after) {
  const Shape in = shape(x);
  const int64_t a = Axis(axis, in.size());
  if (before < 0 || after < 0 || before + after == 0 || before > kMaxTensorElements || after > kMaxTensorElements) {
    Fail("padding of " + std::to_string(before) + " and " + std::to_string(after) + " of axis " + std::to_string(a) +
         " of " + ShapeToString(in));
  }
  Shape out = in;
  out[a] += before + after;
  const double flops = static_cast<double>(NumElements(out));  // a copy per element
  return Append({.kind = OpKind::kPad,
                 .inputs = {x},
                 .output_shape = std::move(out),
                 .flops = flops,
                 .attributes = {{"axis", a}, {"before", before}, {"after", after}}});
}

std::vector<int64_t> RelativePositionIndex(int64_t window) {
  const int64_t n = window * window, span = 2 * window - 1;
  std::vector<int64_t> index(static_cast<size_t>(n * n));
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      const int64_t dy = i / window - j / window + window - 1, dx = i % window - j % window + window - 1;
      index[static_cast<size_t>(i * n + j)] = dy * span + dx;
    }
  }
  return index;
}

std::vector<float> ShiftedWindowMask(int64_t side, int64_t window, int64_t shift) {
  // Regions as torchvision numbers them: [0, side - window), [side - window, side - shift), [side - shift, side)
  // on each axis; a token's region is 3 x its row region + its column region.
  auto region = [&](int64_t p) { return p < side - window ? 0 : p < side - shift ? 1 : 2; };
  const int64_t per_side = side / window, n = window * window;
  std::vector<float> mask(static_cast<size_t>(per_side * per_side * n * n));
  for (int64_t w = 0; w < per_side * per_side; ++w) {
    auto token_region = [&](int64_t t) {
      const int64_t y = (w / per_side) * window + t / window, x = (w % per_side) * window + t % window;
      return 3 * region(y) + region(x);
    };
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        mask[static_cast<size_t>((w * n + i) * n + j)] = token_region(i) == token_region(j) ? 0.0f : -100.0f;
      }
    }
  }
  return mask;
}

int ForwardGraph::RelativePositionBias(int x, int64_t window) {
  const Shape& in = shape(x);
  const int64_t n = window * window;
  if (window < 1 || window > 64 || in.size() < 3 || in[in.size() - 1] != n || in[in.size() - 2] != n) {
    Fail("a relative position bias of window " + std::to_string(window) + " over " + ShapeToString(in));
  }
  const int64_t heads = in[in.size() - 3];
  Layer layer{.kind = OpKind::kAddBroadcast, .inputs = {x}, .output_shape = in};
  layer.param_count = (2 * window - 1) * (2 * window - 1) * heads;
  layer.bias_count = layer.param_count;
  layer.flops = 2.0 * static_cast<double>(NumElements(in));  // the gather and the add
  layer.attributes = {{"relative_position_window", window}};
  return Append(std::move(layer));
}

int ForwardGraph::ShiftedWindowMask(int x, int64_t side, int64_t window, int64_t shift) {
  const Shape& in = shape(x);
  const int64_t n = window * window;
  if (window < 1 || window > 64 || side % window != 0 || shift <= 0 || shift >= window || in.size() < 4 ||
      in[in.size() - 1] != n || in[in.size() - 2] != n || in[in.size() - 4] != (side / window) * (side / window)) {
    Fail("a shifted window mask of side " + std::to_string(side) + ", window " + std::to_string(window) +
         " over " + ShapeToString(in));
  }
  return Append({.kind = OpKind::kAddBroadcast,
                 .inputs = {x},
                 .output_shape = in,
                 .flops = static_cast<double>(NumElements(in)),
                 .attributes = {{"shifted_window_side", side},
                                {"shifted_window_size", window},
                                {"shifted_window_shift", shift}}});
}

int ForwardGraph::StridedSlice(int x, int64_t axis, int64_t start, int64_t end, int64_t step) {
  if (step == 1) return Slice(x, axis, start, end);
  const Shape in = shape(x);
  const int64_t a = Axis(axis, in.size());
  if (step < 1 || start < 0 || end > in[a] || start >= end) {
    Fail("slice [" + std::to_string(start) + ", " + std::to_string(end) + ") step " + std::to_string(step) +
         " of axis " + std::to_string(a) + " of " + ShapeToString(in));
  }
  Shape out = in;
  out[a] = (end - start + step - 1) / step;
  end = start + (out[a] - 1) * step + 1;  // the same elements, one end for them (one op signature)
  const double flops = static_cast<double>(NumElements(out));
  return Append({.kind = OpKind::kSlice,
                 .inputs = {x},
                 .output_shape = std::move(out),
                 .flops = flops,
                 .attributes = {{"axis", a}, {"start", start}, {"end", end}, {"step", step}}});
}

int ForwardGraph::Embedding(int ids, int64_t vocabulary, int64_t dim) {
  Shape out = shape(ids);
  out.push_back(dim);
  Layer layer{.kind = OpKind::kEmbedding, .inputs = {ids}, .output_shape = out};
  layer.param_count = vocabulary * dim;
  layer.flops = static_cast<double>(NumElements(out));  // a copy per element
  layer.attributes = {{"vocabulary", vocabulary}, {"dim", dim}};
  return Append(std::move(layer));
}

int ForwardGraph::Recurrent(OpKind kind, int x, int64_t hidden) {
  if (kind != OpKind::kLstm && kind != OpKind::kGru) Fail("not a recurrent op kind");
  const Shape in = shape(x);
  if (in.size() != 3 || hidden <= 0) {
    Fail("a recurrent layer reads (time, batch, features), not " + ShapeToString(in) + ", in " + model_);
  }
  const int64_t time = in[0], batch = in[1], features = in[2];
  const int64_t gates = kind == OpKind::kLstm ? 4 : 3;
  Layer layer{.kind = kind, .inputs = {x}, .output_shape = {time, 1, batch, hidden}};
  layer.bias_count = 2 * gates * hidden;
  layer.param_count = gates * hidden * (features + hidden) + layer.bias_count;
  // Per step and row: the two products with the weights, then about 10 elementwise ops per unit.
  layer.flops = static_cast<double>(time) * static_cast<double>(batch) *
                (2.0 * static_cast<double>(gates * hidden * (features + hidden)) + 10.0 * static_cast<double>(hidden));
  layer.attributes = {{"hidden", hidden}};
  return Append(std::move(layer));
}

int ForwardGraph::CausalMask(int x, float fill) {
  const Shape in = shape(x);
  if (in.size() < 2) Fail("a causal mask needs (..., rows, columns), not " + ShapeToString(in) + ", in " + model_);
  uint32_t bits = 0;
  std::memcpy(&bits, &fill, sizeof bits);
  return Append({.kind = OpKind::kCausalMask,
                 .inputs = {x},
                 .output_shape = in,
                 .flops = static_cast<double>(NumElements(in)),
                 .attributes = {{"fill_bits", static_cast<int64_t>(bits)}}});
}

int ForwardGraph::Resize(int x, Hw size, bool linear) {
  const Shape in = shape(x);
  if (in.size() != 4 || size[0] <= 0 || size[1] <= 0) {
    Fail("a resize reads NCHW to a positive size, not " + ShapeToString(in) + ", in " + model_);
  }
  Shape out = {in[0], in[1], size[0], size[1]};
  // Per output element: 4 products and 3 sums for bilinear, a copy for nearest.
  const double flops = static_cast<double>(NumElements(out)) * (linear ? 7.0 : 1.0);
  return Append({.kind = OpKind::kResize,
                 .inputs = {x},
                 .output_shape = std::move(out),
                 .flops = flops,
                 .attributes = {{"linear", linear ? 1 : 0}}});
}

}  // namespace edgecost::graph
