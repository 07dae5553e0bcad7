// Forward graphs: the layers of a model, with shape inference, parameter
// counts and FLOP counts. FLOPs follow POET's counting rules
// (poet/power_computation.py) so that the poet-flops cost source reproduces
// POET's published costs number for number; its quirks are kept on purpose
// and noted where they appear.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace edgecost::graph {

using Shape = std::vector<int64_t>;
int64_t NumElements(const Shape& shape);
std::string ShapeToString(const Shape& shape);

enum class OpKind {
  kInput,
  kConv2d,
  kBatchNorm2d,
  kRelu,
  kMaxPool2d,
  kAvgPool2d,
  kFlatten,
  kLinear,
  kLinearRelu,  // linear followed by ReLU, fused (transformer FFN)
  kDropout,
  kAdd,               // residual (skip) connection
  kQkvProjection,     // fused query/key/value projection of all heads
  kAttentionScores,   // Q K^T with mask and dropout fused
  kAttentionContext,  // softmax(scores) V with head concat fused
  kCrossEntropyLoss,
};

inline constexpr OpKind kLastOpKind = OpKind::kCrossEntropyLoss;

// Stable lower-case name used in graphs, op signatures and the database.
std::string_view OpKindName(OpKind kind);
// The kind a name stands for; InvalidArgument names the unknown one.
Result<OpKind> ParseOpKind(std::string_view name);
// POET's class name, used for node names ("layer3_ReLULayer") so graphs line up with POET's.
std::string_view PoetClassName(OpKind kind);

struct Layer {
  OpKind kind = OpKind::kInput;
  std::vector<int> inputs;  // indices of earlier layers; order matters (POET's depends_on)
  Shape output_shape;
  int64_t param_count = 0;  // weights + biases
  int64_t bias_count = 0;   // the part of param_count that bias-only training updates
  double flops = 0;         // POET's FLOP count for one forward execution
  std::map<std::string, int64_t> attributes;
};

// A model's forward pass ending in its loss. Builder methods append a layer,
// infer its shape and return its index.
class ForwardGraph {
 public:
  ForwardGraph(std::string model, int batch_size) : model_(std::move(model)), batch_size_(batch_size) {}

  int Input(Shape shape);
  int Conv2d(int x, int64_t in_channels, int64_t out_channels, int64_t kernel, int64_t stride, int64_t padding);
  int BatchNorm2d(int x);
  int Relu(int x);
  int MaxPool2d(int x, int64_t kernel, int64_t stride, int64_t padding = 0);
  int AvgPool2d(int x, int64_t kernel, int64_t stride, int64_t padding = 0);
  int Flatten(int x);
  int Linear(int x, int64_t in_features, int64_t out_features);
  int LinearRelu(int x, int64_t in_features, int64_t out_features);
  int Dropout(int x);
  int Add(int a, int b);
  int QkvProjection(int x, int64_t seq_len, int64_t hidden, int64_t head_dim, int64_t heads);
  int AttentionScores(int qkv, int64_t seq_len, int64_t head_dim, int64_t heads);
  int AttentionContext(int scores, int64_t seq_len, int64_t head_dim, int64_t heads);
  int CrossEntropyLoss(int logits, int64_t classes);

  const std::string& model() const { return model_; }
  int batch_size() const { return batch_size_; }
  void set_batch_size(int batch_size) { batch_size_ = batch_size; }
  const std::vector<Layer>& layers() const { return layers_; }
  int size() const { return static_cast<int>(layers_.size()); }
  int last() const { return size() - 1; }
  const Shape& shape(int layer) const { return layers_.at(layer).output_shape; }

 private:
  int Append(Layer layer);

  std::string model_;
  int batch_size_;
  std::vector<Layer> layers_;
};

}  // namespace edgecost::graph
