// The walk over an ONNX model's nodes that builds a forward graph. Importer keeps a Value per tensor
// name and the nodes fused into earlier ones; each op that becomes graph nodes has an import function
// (Importer::OpTable, op_table.cc), defined with its family in ops_*.cc. The exporter's
// decompositions and model-specific forms are recognized in patterns.cc, swin.cc,
// stochastic_depth.cc, ops_recurrent.cc and weights.cc. Internal to the importer (graph/onnx/).
#pragma once

#include <array>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <onnx/onnx_pb.h>

#include "base/status.h"
#include "graph/forward_graph.h"
#include "graph/onnx/value.h"

namespace edgecost::graph::onnx_import {

// op_table.cc: the first line of defence, before ONNX's shape inference sees the model: only ops the
// importer takes (OpTable, and the shape arithmetic it folds), of the default domain, without
// subgraphs, at an opset it reads. What passes still runs isolated (ImportOnnxBytes).
Status CheckOpsAndOpset(const onnx::ModelProto& model, const std::string& origin);
// "N unsupported op kind(s), each with its first node: ...", then the supported ones.
std::string UnsupportedOpsError(const std::map<std::string, std::string>& first_node_of_op);
// The model metadata (ONNX metadata_props) edgecost.torch sets on the models it plans: they train on
// PyTorch's kernels, which run a batch norm and its activation as two ops, so the importer fuses none.
inline constexpr char kRunsOnKey[] = "edgecost.runs_on";
inline constexpr char kRunsOnPyTorch[] = "pytorch";
// "node 3 ('/features/Conv')"
std::string NodeWhere(const onnx::NodeProto& node, int index);
// The qualified name of the nn.Module a PyTorch export's node came from ("features.1.conv.0.0"), or "".
std::string ModuleOf(const onnx::NodeProto& node);

// import.cc: parsing, the op check, rebatching, ONNX's shape inference and the walk, in this process
// (what the isolated child runs).
Result<ForwardGraph> ImportInProcess(const std::string& bytes, const std::string& origin, const std::string& name,
                                     int batch_size);

class Importer {
 public:
  // Imports one node whose inputs include an activation: sets its outputs, or records why it cannot.
  using ImportFn = Status (Importer::*)(const onnx::NodeProto& node, int index, const Inputs& in);
  // Every ONNX op that becomes graph nodes, with its import function: the allow-list of the op check
  // and of the unsupported-op error, and ImportActivationOp's dispatch.
  static const std::map<std::string_view, ImportFn>& OpTable();

  Importer(const onnx::ModelProto& model, std::string origin, std::string name)
      : model_(model), origin_(std::move(origin)), graph_(std::move(name), 1) {}

  Result<ForwardGraph> Run();

 private:
  // importer.cc: the walk.
  Status ReadInitializers();
  void ReadInferredShapes();
  Status ReadDataInput();
  Status ImportNodes();
  Status ImportNode(const onnx::NodeProto& node, int index);
  Status FoldNode(const onnx::NodeProto& node, int index, const Inputs& in);
  Status ImportActivationNode(const onnx::NodeProto& node, int index, const Inputs& in);
  Status ImportActivationOp(const onnx::NodeProto& node, int index, const Inputs& in);
  Status CheckInferredShapes(const onnx::NodeProto& node, int index, size_t layers_before) const;
  Result<int> Logits() const;
  Status CheckTrainingExport() const;

  // importer.cc: errors, inputs and outputs.
  Status Error(const std::string& what) const { return InvalidArgument(origin_ + ": " + what); }
  Status NodeError(const onnx::NodeProto& node, int index, const std::string& what) const;
  // Records an op the importer cannot take (the first node of each kind), so that one error lists them
  // all; returns Ok, since the walk goes on to find every unsupported kind.
  Status Unsupported(const onnx::NodeProto& node, int index, const std::string& why);
  const Value* Input(const onnx::NodeProto& node, int i) const;
  // The input `i` if it is an activation.
  static const Value* ActivationInput(const Inputs& in, int i);
  static int Act(const Value* v) { return v->node; }
  Shape ShapeOfValue(const Value& v) const;
  // The scalar a constant input holds, if it is one.
  std::optional<double> ScalarInput(const onnx::NodeProto& node, int i) const;
  void SetOutput(const onnx::NodeProto& node, int i, Value v);
  void SetOutputs(const onnx::NodeProto& node, std::vector<Value> values);
  void SetActivation(const onnx::NodeProto& node, int layer) { SetOutput(node, 0, Value::Activation(layer)); }
  // Names the nn.Module of `node` on the layers added since there were `layers_before`.
  void SetModules(const onnx::NodeProto& node, size_t layers_before);
  // The nodes consuming `tensor`, one entry per input that reads it; none for a graph output.
  std::vector<int> Consumers(const std::string& tensor) const;
  // The one node consuming `tensor`, if it has exactly one consumer (and is not a graph output).
  const onnx::NodeProto* SoleConsumer(const std::string& tensor, int* index) const;

  // ops_activation.cc
  Status ImportUnary(const onnx::NodeProto& node, int index, const Inputs& in, OpKind kind,
                     std::map<std::string, int64_t> attributes = {});
  bool TryFuseProductWithInput(const onnx::NodeProto& node, const Value* x, OpKind kind);
  bool TryFuseIntoBatchNorm(const onnx::NodeProto& node, const Value* x, OpKind activation,
                            const onnx::NodeProto* product = nullptr);
  Status ImportAlias(const onnx::NodeProto& node, int index, const Inputs& in);
  Status ImportDropout(const onnx::NodeProto& node, int index, const Inputs& in);
  Status ImportRelu(const onnx::NodeProto& node, int index, const Inputs& in);
  Status ImportClip(const onnx::NodeProto& node, int index, const Inputs& in);
  Status ImportHardSigmoid(const onnx::NodeProto& node, int index, const Inputs& in);
  Status ImportHardSwish(const onnx::NodeProto& node, int index, const Inputs& in);
  Status ImportSigmoid(const onnx::NodeProto& node, int index, const Inputs& in);
  Status ImportTanh(const onnx::NodeProto& node, int index, const Inputs& in);
  Status ImportSqrt(const onnx::NodeProto& node, int index, const Inputs& in);
  Status ImportErf(const onnx::NodeProto& node, int index, const Inputs& in);
  Status ImportPow(const onnx::NodeProto& node, int index, const Inputs& in);

  // ops_arithmetic.cc
  Status ImportArithmetic(const onnx::NodeProto& node, int index, const Inputs& in);
  Status ImportScalarArithmetic(const onnx::NodeProto& node, int index, const Value& x, double k, bool x_first);
  Status ImportWhere(const onnx::NodeProto& node, int index, const Inputs& in);

  // ops_conv_pool.cc
  Status ImportConv(const onnx::NodeProto& node, int index, const Inputs& in);
  Status ImportPool(const onnx::NodeProto& node, int index, const Inputs& in);
  Status ImportGlobalAveragePool(const onnx::NodeProto& node, int index, const Inputs& in);
  Status ImportPad(const onnx::NodeProto& node, int index, const Inputs& in);
  bool TryPaddedAveragePool(const onnx::NodeProto& pad, int x, int64_t spatial);
  Status ImportResize(const onnx::NodeProto& node, int index, const Inputs& in);

  // ops_normalization.cc
  Status ImportBatchNorm(const onnx::NodeProto& node, int index, const Inputs& in);
  Status ImportLayerNorm(const onnx::NodeProto& node, int index, const Inputs& in);
  Status ImportReduceMean(const onnx::NodeProto& node, int index, const Inputs& in);
  Status ImportSoftmax(const onnx::NodeProto& node, int index, const Inputs& in);

  // ops_shape.cc
  Status ImportFlatten(const onnx::NodeProto& node, int index, const Inputs& in);
  Status ImportReshape(const onnx::NodeProto& node, int index, const Inputs& in);
  Status ImportTranspose(const onnx::NodeProto& node, int index, const Inputs& in);
  Status ImportConcat(const onnx::NodeProto& node, int index, const Inputs& in);
  std::optional<int> ExpandedParamAsActivation(const onnx::NodeProto& node, const Inputs& in, size_t param_input);
  Status ImportSplit(const onnx::NodeProto& node, int index, const Inputs& in);
  Status ImportSlice(const onnx::NodeProto& node, int index, const Inputs& in);
  Status ImportGather(const onnx::NodeProto& node, int index, const Inputs& in);

  // ops_matmul.cc
  Status ImportMatMul(const onnx::NodeProto& node, int index, const Inputs& in);
  Status ImportGemm(const onnx::NodeProto& node, int index, const Inputs& in);
  bool TryLinearWithBias(const onnx::NodeProto& matmul, int x, int64_t in_features, int64_t out_features);
  Status ImportEinsum(const onnx::NodeProto& node, int index, const Inputs& in);

  // ops_recurrent.cc
  Status ImportRecurrent(const onnx::NodeProto& node, int index, const Inputs& in);
  std::string RecurrentUnsupported(const onnx::NodeProto& node, const Inputs& in) const;
  std::string RecurrentWeight(const Value* w, int64_t first, int64_t count, int64_t cols, int64_t hidden,
                              const std::vector<int64_t>& torch_gate) const;
  void ImportLastHiddenState(const onnx::NodeProto& node, int layer);
  void MarkRecurrentWeights();
  Status ImportRecurrentWeightOp(const onnx::NodeProto& node, int index, const Inputs& in);

  // weights.cc
  Status ImportParameterOp(const onnx::NodeProto& node, int index, const Inputs& in);
  Status ImportExpandedParam(const onnx::NodeProto& node, int index, const Value& p, const Value& target);
  Status TieSharedWeights();

  // patterns.cc
  const onnx::NodeProto* Next(const std::string& tensor, const std::string& op, int* index) const;
  std::optional<double> OtherScalar(const onnx::NodeProto& node, const std::string& tensor) const;
  bool TryGelu(const onnx::NodeProto& div);
  bool TryLayerNorm(const onnx::NodeProto& mean, int x);
  std::string FuseLayerNormAffine(std::string out, int64_t features);

  // swin.cc
  static int64_t RelativeWindow(const Shape& table, const Value& indices);
  Status ImportRelativeBiasOp(const onnx::NodeProto& node, int index, const Inputs& in);
  static std::optional<std::array<int64_t, 3>> ShiftedWindowMaskOf(const Value& c);

  // stochastic_depth.cc
  Status ImportRandomUniformLike(const onnx::NodeProto& node, int index, const Inputs& in);
  Status ImportRandomOp(const onnx::NodeProto& node, int index, const Inputs& in);

  const onnx::ModelProto& model_;
  std::string origin_;
  ForwardGraph graph_;
  int opset_ = 13;
  // False for a model that trains on PyTorch's kernels (kRunsOnPyTorch): its graph keeps PyTorch's
  // ops, so that plans map onto them one for one.
  bool fuse_into_batch_norm_ = true;
  // Values computed by constant folding so far, and their bound over a whole import.
  int64_t folded_elements_ = 0;
  static constexpr int64_t kMaxFoldedElements = int64_t{16} << 20;
  std::map<std::string, Value> values_;
  std::map<std::string, Shape> inferred_;
  std::map<std::string, std::vector<int>> consumers_;
  std::set<int> consumed_;                // nodes fused into an earlier one
  std::set<int> recurrent_weight_nodes_;  // MarkRecurrentWeights
  std::map<std::string, std::string> unsupported_;
  std::vector<std::string> weight_names_;
  int batch_norms_ = 0;
  std::string eval_batch_norm_;
};

}  // namespace edgecost::graph::onnx_import
