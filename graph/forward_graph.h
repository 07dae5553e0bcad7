// Forward graphs: the layers of a model, with shape inference, parameter
// counts and FLOP counts. FLOPs follow POET's counting rules
// (poet/power_computation.py) so that the poet-flops cost source reproduces
// POET's published costs number for number; its quirks are kept on purpose
// and noted where they appear.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "graph/op_kinds.h"

namespace edgecost::graph {

using Shape = std::vector<int64_t>;
// A size along the height and the width axes of NCHW.
using Hw = std::array<int64_t, 2>;
// Elements of a shape; saturates at the int64 maximum instead of overflowing.
int64_t NumElements(const Shape& shape);
// The largest tensor (elements) or parameter count a graph may hold: 2^40, far
// above any trainable model and far below where sizes in bytes or flops overflow.
inline constexpr int64_t kMaxTensorElements = int64_t{1} << 40;
inline constexpr size_t kMaxModuleNameBytes = 1024;  // Layer::module, as a hostile file may set it
// A shape a graph may hold: no negative extent, no extent and no product above kMaxTensorElements.
bool ValidShape(const Shape& shape);
std::string ShapeToString(const Shape& shape);


// Batch and layer normalization's epsilon unless a model says otherwise (PyTorch's default).
inline constexpr double kDefaultNormEpsilon = 1e-5;
// Dropout's ratio unless a model says otherwise (the zoo's), and the attribute that says it, in millionths.
inline constexpr double kDefaultDropoutRatio = 0.1;
inline constexpr char kDropoutRatioAttribute[] = "ratio_ppm";

struct Layer {
  OpKind kind = OpKind::kInput;
  std::vector<int> inputs;  // indices of earlier layers; order matters (POET's depends_on)
  Shape output_shape;
  int64_t param_count = 0;  // weights + biases
  int64_t bias_count = 0;   // the part of param_count that bias-only training updates
  double flops = 0;         // POET's FLOP count for one forward execution
  std::map<std::string, int64_t> attributes;
  // ONNX imports: the initializer behind each of the layer's parameters, in the executor's order
  // (weights, bias; a batch norm's scale, shift, running mean, running variance), "" for one it
  // does not have. Empty for a kind the importer does not map (its weights cannot be loaded).
  // Not part of the training graph (its hash would change).
  std::vector<std::string> param_names;
  // The weight is stored (in, out) in the file (MatMul, Gemm without transB); the layer's is (out, in).
  bool param_transposed = false;
  // ONNX imports of PyTorch models: the qualified name of the nn.Module the layer came from
  // ("features.3.conv.0"), from the exporter's scopes; "" for the model itself or when unknown.
  // Shown next to node names; not part of the training graph's hash.
  std::string module;
};

// A model's forward pass ending in its loss. Builder methods append a layer,
// infer its shape and return its index.
class ForwardGraph {
 public:
  ForwardGraph(std::string model, int batch_size) : model_(std::move(model)), batch_size_(batch_size) {}
  // A graph from layers built elsewhere (the isolated ONNX importer's child process): checked as
  // the builders check them (inputs are earlier layers, sizes in range); InvalidArgument otherwise.
  static Result<ForwardGraph> FromLayers(std::string model, int batch_size, std::vector<Layer> layers);

  int Input(Shape shape);
  // groups > 1 is a grouped convolution (groups == channels: depthwise); PyTorch's convolutions
  // before a batch norm have no bias.
  int Conv2d(int x, int64_t in_channels, int64_t out_channels, int64_t kernel, int64_t stride, int64_t padding,
             int64_t groups = 1, bool bias = true);
  // The same with a kernel_h x kernel_w window and per-axis padding (Inception's 1x7 and 7x1): the
  // attributes "kernel" and "padding" are the height's; "kernel_w" and "padding_w" are set only
  // where the width's differ, so that square convolutions keep their op signatures.
  int Conv2d(int x, int64_t in_channels, int64_t out_channels, Hw kernel, int64_t stride, Hw padding,
             int64_t groups = 1, bool bias = true);
  // `epsilon` other than PyTorch's default 1e-5 (MobileNet V3's 1e-3) is the attribute
  // "epsilon_e9", epsilon times 10^9.
  int BatchNorm2d(int x, double epsilon = kDefaultNormEpsilon);
  // Fuses the activation `activation` (kRelu, kRelu6, kSilu or kHardSwish) into the batch norm
  // `batch_norm`, whose output only it reads: the layer becomes kBatchNormRelu, kBatchNormRelu6,
  // kBatchNormSilu or kBatchNormHardSwish and gives the activation's output.
  void FuseActivationIntoBatchNorm(int batch_norm, OpKind activation);
  int Relu(int x);
  int MaxPool2d(int x, int64_t kernel, int64_t stride, int64_t padding = 0, bool ceil_mode = false);
  // `count_include_pad`: the padding's zeros count in every window's mean (PyTorch's default), so each
  // output is its window's sum over kernel^2; otherwise the mean is over the window's real elements.
  int AvgPool2d(int x, int64_t kernel, int64_t stride, int64_t padding = 0, bool count_include_pad = false);
  int Flatten(int x);
  // POET's LinearLayer: FLOPs 2 x params + out_features whatever the batch, as the zoo's
  // parity with POET needs; an imported model's layers count every row with LinearNd.
  int Linear(int x, int64_t in_features, int64_t out_features);
  int LinearRelu(int x, int64_t in_features, int64_t out_features);
  int Dropout(int x, double ratio = kDefaultDropoutRatio);  // ratio in [0, 1)
  // Stochastic depth (torchvision's StochasticDepth, mode "row"): a dropout that keeps or zeroes each
  // sample (each index of the first axis) whole; attribute "rows" = 1.
  int RowDropout(int x, double ratio);
  int Add(int a, int b);
  int QkvProjection(int x, int64_t seq_len, int64_t hidden, int64_t head_dim, int64_t heads);
  int AttentionScores(int qkv, int64_t seq_len, int64_t head_dim, int64_t heads);
  int AttentionContext(int scores, int64_t seq_len, int64_t head_dim, int64_t heads);
  int CrossEntropyLoss(int logits, int64_t classes);

  // The kinds of imported models. Shapes that do not fit throw std::logic_error, as above.
  // Elementwise of one input: kRelu6 .. kAffine; `attributes` as the kernel reads them
  // (kPow: exponent; kAffine: alpha_e6, beta_e6, the constants times 10^6).
  int Unary(OpKind kind, int x, std::map<std::string, int64_t> attributes = {});
  // kMul, kSub, kDiv, kAddBroadcast of two activations, NumPy broadcasting.
  int Binary(OpKind kind, int a, int b);
  // The same with a trainable parameter as the second operand, broadcast over the leading axes
  // of `a` and over its own axes of size 1 (after dropping leading ones, NumPy broadcasting against
  // a's trailing axes): attributes param_rank and, for axes of 1, the bitmask param_broadcast_axes.
  int BinaryParam(OpKind kind, int a, const Shape& param);
  // A linear layer over the last axis of an input of any rank (MatMul by a weight, Gemm).
  int LinearNd(int x, int64_t in_features, int64_t out_features, bool bias);
  int MatMul(int a, int b);
  int Softmax(int x, int64_t axis);
  int LayerNorm(int x, double epsilon = kDefaultNormEpsilon);
  int ReduceMean(int x, const std::vector<int64_t>& axes, bool keepdims);
  int Concat(const std::vector<int>& inputs, int64_t axis);
  int Transpose(int x, const std::vector<int64_t>& perm);
  int Reshape(int x, const Shape& shape);
  // Elements [start, end) of `axis`; `squeeze` drops the axis (Gather of one index).
  int Slice(int x, int64_t axis, int64_t start, int64_t end, bool squeeze = false);
  // `before` zeros, x, `after` zeros along `axis` (the inverse of a slice).
  int Pad(int x, int64_t axis, int64_t before, int64_t after);
  // Every step-th element of [start, end) of `axis` (Swin's patch merging, x[:, 0::2, 1::2]): attribute
  // "step", set only for steps above 1.
  int StridedSlice(int x, int64_t axis, int64_t start, int64_t end, int64_t step);
  int Embedding(int ids, int64_t vocabulary, int64_t dim);
  // kLstm or kGru over x of shape (time, batch, features), `hidden` units: output (time, 1, batch,
  // hidden), ONNX's Y with its one direction; attribute "hidden".
  int Recurrent(OpKind kind, int x, int64_t hidden);
  int CausalMask(int x, float fill);
  int Resize(int x, Hw size, bool linear);
  // Swin's window attention biases, both a kAddBroadcast over attention logits (..., heads, N, N) with
  // N = window^2 tokens per window. The relative position bias adds table[RelativePositionIndex(window)]
  // (a trainable table of (2 window - 1)^2 x heads, attribute relative_position_window); the shifted
  // window mask adds ShiftedWindowMask(side, window, shift) over (..., windows, heads, N, N), a constant
  // the kernel builds from its attributes (shifted_window_side, _size, _shift), with no parameter.
  int RelativePositionBias(int x, int64_t window);
  int ShiftedWindowMask(int x, int64_t side, int64_t window, int64_t shift);

  const std::string& model() const { return model_; }
  int batch_size() const { return batch_size_; }
  void set_batch_size(int batch_size) { batch_size_ = batch_size; }
  const std::vector<Layer>& layers() const { return layers_; }
  // The ONNX initializers behind a layer's parameters (Layer::param_names).
  void SetParamNames(int layer, std::vector<std::string> names, bool transposed = false) {
    layers_.at(static_cast<size_t>(layer)).param_names = std::move(names);
    layers_.at(static_cast<size_t>(layer)).param_transposed = transposed;
  }
  // Replaces a layer's attributes (the importer's tied weights: tied_node, tied_param).
  void SetAttributes(int layer, std::map<std::string, int64_t> attributes) {
    layers_.at(static_cast<size_t>(layer)).attributes = std::move(attributes);
  }
  void SetModule(int layer, std::string module) { layers_.at(static_cast<size_t>(layer)).module = std::move(module); }
  int size() const { return static_cast<int>(layers_.size()); }
  int last() const { return size() - 1; }
  const Shape& shape(int layer) const { return layers_.at(layer).output_shape; }

 private:
  int Append(Layer layer);

  std::string model_;
  int batch_size_;
  std::vector<Layer> layers_;
};

// Swin's relative position index (torchvision's relative_position_index): for tokens i, j of a window
// of window x window, the row of the bias table for their offset, window^4 entries, row-major (i, j).
std::vector<int64_t> RelativePositionIndex(int64_t window);
// Swin's shifted-window attention mask over a side x side map (a multiple of window) rolled by `shift`:
// windows x N x N (N = window^2), -100 between tokens that came from different regions, 0 otherwise.
std::vector<float> ShiftedWindowMask(int64_t side, int64_t window, int64_t shift);

// NumPy broadcasting of two shapes; std::logic_error when they do not broadcast.
Shape BroadcastShapes(const Shape& a, const Shape& b);
// kTranspose's "perm" attribute: the permutation's digits (ranks up to 9).
int64_t EncodePerm(const std::vector<int64_t>& perm);
std::vector<int64_t> DecodePerm(int64_t code, size_t rank);

}  // namespace edgecost::graph
