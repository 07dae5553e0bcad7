#include "graph/forward_graph.h"

#include <cassert>
#include <sstream>
#include <stdexcept>

namespace edgecost::graph {

int64_t NumElements(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string ShapeToString(const Shape& shape) {
  std::ostringstream out;
  for (size_t i = 0; i < shape.size(); ++i) out << (i ? "x" : "") << shape[i];
  return out.str();
}

std::string_view OpKindName(OpKind kind) {
  switch (kind) {
    case OpKind::kInput:
      return "input";
    case OpKind::kConv2d:
      return "conv2d";
    case OpKind::kBatchNorm2d:
      return "batchnorm2d";
    case OpKind::kRelu:
      return "relu";
    case OpKind::kMaxPool2d:
      return "maxpool2d";
    case OpKind::kAvgPool2d:
      return "avgpool2d";
    case OpKind::kFlatten:
      return "flatten";
    case OpKind::kLinear:
      return "linear";
    case OpKind::kLinearRelu:
      return "linear_relu";
    case OpKind::kDropout:
      return "dropout";
    case OpKind::kAdd:
      return "add";
    case OpKind::kQkvProjection:
      return "qkv_projection";
    case OpKind::kAttentionScores:
      return "attention_scores";
    case OpKind::kAttentionContext:
      return "attention_context";
    case OpKind::kCrossEntropyLoss:
      return "cross_entropy_loss";
  }
  return "unknown";
}

Result<OpKind> ParseOpKind(std::string_view name) {
  for (int k = 0; k <= static_cast<int>(kLastOpKind); ++k) {
    if (OpKindName(static_cast<OpKind>(k)) == name) return static_cast<OpKind>(k);
  }
  return InvalidArgument("unknown op kind '" + std::string(name) + "'");
}

std::string_view PoetClassName(OpKind kind) {
  switch (kind) {
    case OpKind::kInput:
      return "InputLayer";
    case OpKind::kConv2d:
      return "Conv2dLayer";
    case OpKind::kBatchNorm2d:
      return "BatchNorm2d";
    case OpKind::kRelu:
      return "ReLULayer";
    case OpKind::kMaxPool2d:
      return "MaxPool2d";
    case OpKind::kAvgPool2d:
      return "AvgPool2d";
    case OpKind::kFlatten:
      return "FlattenLayer";
    case OpKind::kLinear:
      return "LinearLayer";
    case OpKind::kLinearRelu:
      return "LinearLayerReLU";
    case OpKind::kDropout:
      return "DropoutLayer";
    case OpKind::kAdd:
      return "SkipAddLayer";
    case OpKind::kQkvProjection:
      return "QueryKeyValueMatrix";
    case OpKind::kAttentionScores:
      return "QKTMatrix";
    case OpKind::kAttentionContext:
      return "QKTVMatrix";
    case OpKind::kCrossEntropyLoss:
      return "CrossEntropyLoss";
  }
  return "Unknown";
}

int ForwardGraph::Append(Layer layer) {
  for (int input : layer.inputs) {
    if (input < 0 || input >= size()) throw std::logic_error("layer input out of range while building " + model_);
  }
  layers_.push_back(std::move(layer));
  return last();
}

int ForwardGraph::Input(Shape shape) { return Append({.kind = OpKind::kInput, .output_shape = std::move(shape)}); }

int ForwardGraph::Conv2d(int x, int64_t in_channels, int64_t out_channels, int64_t kernel, int64_t stride,
                         int64_t padding) {
  const Shape& in = shape(x);
  if (in.size() != 4 || in[1] != in_channels) throw std::logic_error("conv2d input shape mismatch in " + model_);
  const int64_t h = (in[2] - kernel + 2 * padding) / stride + 1;
  const int64_t w = (in[3] - kernel + 2 * padding) / stride + 1;
  Shape out = {in[0], out_channels, h, w};
  Layer layer{.kind = OpKind::kConv2d, .inputs = {x}, .output_shape = out};
  layer.param_count = out_channels * in_channels * kernel * kernel + out_channels;
  layer.bias_count = out_channels;
  // POET counts 2 * k^2 * |input| * C_out (input size, not output size) + |output|.
  layer.flops = 2.0 * static_cast<double>(kernel * kernel * NumElements(in) * out_channels) +
                static_cast<double>(NumElements(out));
  layer.attributes = {{"in_channels", in_channels},
                      {"out_channels", out_channels},
                      {"kernel", kernel},
                      {"stride", stride},
                      {"padding", padding}};
  return Append(std::move(layer));
}

int ForwardGraph::BatchNorm2d(int x) {
  const Shape in = shape(x);
  Layer layer{.kind = OpKind::kBatchNorm2d, .inputs = {x}, .output_shape = in};
  layer.param_count = 4 * in.at(1);  // POET counts gamma, beta, running mean and variance
  layer.bias_count = in.at(1);       // beta
  layer.flops = 2.0 * static_cast<double>(NumElements(in));
  layer.attributes = {{"channels", in.at(1)}};
  return Append(std::move(layer));
}

int ForwardGraph::Relu(int x) {
  const Shape in = shape(x);
  return Append(
      {.kind = OpKind::kRelu, .inputs = {x}, .output_shape = in, .flops = static_cast<double>(NumElements(in))});
}

namespace {
Shape PoolShape(const Shape& in, int64_t kernel, int64_t stride, int64_t padding) {
  if (in.size() != 4) throw std::logic_error("pooling needs an NCHW input");
  return {in[0], in[1], (in[2] + 2 * padding - kernel) / stride + 1, (in[3] + 2 * padding - kernel) / stride + 1};
}
}  // namespace

int ForwardGraph::MaxPool2d(int x, int64_t kernel, int64_t stride, int64_t padding) {
  Shape out = PoolShape(shape(x), kernel, stride, padding);
  // POET: "Flops assume stride=1 for legacy reasons".
  const double flops = 2.0 * static_cast<double>(kernel * kernel * NumElements(out));
  return Append({.kind = OpKind::kMaxPool2d,
                 .inputs = {x},
                 .output_shape = out,
                 .flops = flops,
                 .attributes = {{"kernel", kernel}, {"stride", stride}, {"padding", padding}}});
}

int ForwardGraph::AvgPool2d(int x, int64_t kernel, int64_t stride, int64_t padding) {
  Shape out = PoolShape(shape(x), kernel, stride, padding);
  const double flops = 2.0 * static_cast<double>(kernel * kernel * NumElements(out));
  return Append({.kind = OpKind::kAvgPool2d,
                 .inputs = {x},
                 .output_shape = out,
                 .flops = flops,
                 .attributes = {{"kernel", kernel}, {"stride", stride}, {"padding", padding}}});
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

int ForwardGraph::Dropout(int x) {
  const Shape in = shape(x);
  return Append(
      {.kind = OpKind::kDropout, .inputs = {x}, .output_shape = in, .flops = static_cast<double>(NumElements(in))});
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
  const double flops = static_cast<double>(NumElements(shape(logits)) * classes);
  return Append({.kind = OpKind::kCrossEntropyLoss,
                 .inputs = {logits},
                 .output_shape = {classes},
                 .flops = flops,
                 .attributes = {{"classes", classes}}});
}

}  // namespace edgecost::graph
