// What the importer takes: the dispatch table of the ops that become graph nodes (with the constant
// folder's ops, the whole allow-list), the opsets it reads, and the check of both before ONNX's shape
// inference sees a model. Adding an op: a row here and its import function.
#include "graph/onnx/constant_folding.h"
#include "graph/onnx/importer.h"

namespace edgecost::graph::onnx_import {
namespace {

// The opsets of the default domain the importer reads. torch.onnx.export (Debian's 1.13) writes 7
// to 17; the importer handles 9 on (BatchNormalization lost `spatial` at 9), and 13 and 17 are
// tested. Opset 18 moves ReduceMean's axes and Split's count into inputs, which the importer reads
// as attributes. Old opsets are also where ONNX's inference crashed on a hostile file (Gemm-6).
constexpr int64_t kMinOpset = 9, kMaxOpset = 17;

std::string SupportedList() {
  std::string list;
  for (const auto& [op, fn] : Importer::OpTable()) list += (list.empty() ? "" : ", ") + std::string(op);
  return list +
         "; shape arithmetic on constants (Constant, Shape, Gather, Unsqueeze, Concat, "
         "ConstantOfShape, Range, Cast, Equal, Where, ...) is folded at import";
}

Status CheckOpset(const onnx::ModelProto& model, const std::string& origin) {
  std::optional<int64_t> opset;
  for (const onnx::OperatorSetIdProto& o : model.opset_import()) {
    if (o.domain().empty() || o.domain() == "ai.onnx") opset = o.version();
  }
  const std::string range = std::to_string(kMinOpset) + " to " + std::to_string(kMaxOpset);
  if (!opset) {
    return InvalidArgument(origin + " declares no opset of the default ONNX domain; the importer reads opsets " +
                           range + " (torch.onnx.export(..., opset_version=13))");
  }
  if (*opset < kMinOpset || *opset > kMaxOpset) {
    return InvalidArgument(origin + " uses opset " + std::to_string(*opset) + "; the importer reads opsets " + range +
                           ": export it with torch.onnx.export(..., opset_version=13)");
  }
  return Status::Ok();
}

Status CheckNoSubgraph(const onnx::NodeProto& node, int index, const std::string& origin) {
  for (const onnx::AttributeProto& a : node.attribute()) {
    if (a.type() == onnx::AttributeProto::GRAPH || a.type() == onnx::AttributeProto::GRAPHS || a.has_g() ||
        a.graphs_size() > 0) {
      return InvalidArgument(origin + ": " + NodeWhere(node, index) + ", " + node.op_type() + ": attribute '" +
                             a.name() + "' is a subgraph, which no op the importer reads has");
    }
  }
  return Status::Ok();
}

}  // namespace

const std::map<std::string_view, Importer::ImportFn>& Importer::OpTable() {
  static const std::map<std::string_view, ImportFn> table = {
      // ops_activation.cc
      {"Identity", &Importer::ImportAlias},
      {"Cast", &Importer::ImportAlias},
      {"Dropout", &Importer::ImportDropout},
      {"Relu", &Importer::ImportRelu},
      {"Clip", &Importer::ImportClip},
      {"HardSigmoid", &Importer::ImportHardSigmoid},
      {"HardSwish", &Importer::ImportHardSwish},
      {"Sigmoid", &Importer::ImportSigmoid},
      {"Tanh", &Importer::ImportTanh},
      {"Sqrt", &Importer::ImportSqrt},
      {"Erf", &Importer::ImportErf},
      {"Pow", &Importer::ImportPow},
      // ops_arithmetic.cc
      {"Add", &Importer::ImportArithmetic},
      {"Sub", &Importer::ImportArithmetic},
      {"Mul", &Importer::ImportArithmetic},
      {"Div", &Importer::ImportArithmetic},
      {"Where", &Importer::ImportWhere},
      // ops_conv_pool.cc
      {"Conv", &Importer::ImportConv},
      {"MaxPool", &Importer::ImportPool},
      {"AveragePool", &Importer::ImportPool},
      {"GlobalAveragePool", &Importer::ImportGlobalAveragePool},
      {"Pad", &Importer::ImportPad},
      {"Resize", &Importer::ImportResize},
      // ops_normalization.cc
      {"BatchNormalization", &Importer::ImportBatchNorm},
      {"LayerNormalization", &Importer::ImportLayerNorm},
      {"ReduceMean", &Importer::ImportReduceMean},
      {"Softmax", &Importer::ImportSoftmax},
      // ops_shape.cc
      {"Flatten", &Importer::ImportFlatten},
      {"Reshape", &Importer::ImportReshape},
      {"Squeeze", &Importer::ImportReshape},
      {"Unsqueeze", &Importer::ImportReshape},
      {"Transpose", &Importer::ImportTranspose},
      {"Concat", &Importer::ImportConcat},
      {"Split", &Importer::ImportSplit},
      {"Slice", &Importer::ImportSlice},
      {"Gather", &Importer::ImportGather},
      // ops_matmul.cc
      {"MatMul", &Importer::ImportMatMul},
      {"Gemm", &Importer::ImportGemm},
      {"Einsum", &Importer::ImportEinsum},
      // ops_recurrent.cc
      {"LSTM", &Importer::ImportRecurrent},
      {"GRU", &Importer::ImportRecurrent},
      // stochastic_depth.cc (ImportNode routes random numbers there whatever their inputs)
      {"RandomUniformLike", &Importer::ImportRandomUniformLike},
  };
  return table;
}

std::string NodeWhere(const onnx::NodeProto& node, int index) {
  return "node " + std::to_string(index) + " ('" + node.name() + "')";
}

std::string UnsupportedOpsError(const std::map<std::string, std::string>& first_node_of_op) {
  std::string list;
  for (const auto& [op, where] : first_node_of_op) list += "\n  " + op + ": " + where;
  return std::to_string(first_node_of_op.size()) + " unsupported op kind(s), each with its first node:" + list +
         "\nsupported: " + SupportedList();
}

Status CheckOpsAndOpset(const onnx::ModelProto& model, const std::string& origin) {
  EC_RETURN_IF_ERROR(CheckOpset(model, origin));
  std::map<std::string, std::string> unsupported;  // op kind -> its first node
  const onnx::GraphProto& g = model.graph();
  for (int i = 0; i < g.node_size(); ++i) {
    const onnx::NodeProto& node = g.node(i);
    const bool default_domain = node.domain().empty() || node.domain() == "ai.onnx";
    if (default_domain && (Importer::OpTable().count(node.op_type()) || ConstantFolder::CanFold(node.op_type()))) {
      EC_RETURN_IF_ERROR(CheckNoSubgraph(node, i, origin));
      continue;
    }
    const std::string why = default_domain ? "" : ": ops of domain '" + node.domain() + "' are not supported";
    const std::string key = node.domain().empty() ? node.op_type() : node.domain() + "." + node.op_type();
    if (!unsupported.count(key)) unsupported[key] = NodeWhere(node, i) + why;
  }
  if (unsupported.empty()) return Status::Ok();
  return InvalidArgument(origin + ": " + UnsupportedOpsError(unsupported));
}

}  // namespace edgecost::graph::onnx_import
