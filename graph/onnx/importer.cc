// The walk over an ONNX model's nodes, and the Importer's helpers for inputs, outputs and errors.
#include "graph/onnx/importer.h"

#include <algorithm>
#include <stdexcept>

#include "graph/onnx/constant_folding.h"

namespace edgecost::graph::onnx_import {
namespace {

Shape ShapeOf(const onnx::ValueInfoProto& v) {
  Shape shape;
  for (const auto& d : v.type().tensor_type().shape().dim()) shape.push_back(d.has_dim_value() ? d.dim_value() : -1);
  return shape;
}

}  // namespace

// The nn.Module a PyTorch export's node came from. The exporter names nodes by scope, one path
// component per module, each the child's name under its own parent's component:
// "/features/features.1/conv/conv.0/conv.0.0/Conv" is module features.1.conv.0.0, and
// "/features/features.1/Add" an op of features.1's own forward. Other names give "".
std::string ModuleOf(const onnx::NodeProto& node) {
  const std::string& name = node.name();
  if (name.size() < 2 || name[0] != '/') return "";
  std::vector<std::string> scopes;
  for (size_t start = 1, slash; (slash = name.find('/', start)) != std::string::npos; start = slash + 1) {
    scopes.push_back(name.substr(start, slash - start));
  }
  std::string module, previous;
  for (const std::string& scope : scopes) {
    const bool child = !previous.empty() && scope.size() > previous.size() &&
                       scope.compare(0, previous.size(), previous) == 0 && scope[previous.size()] == '.';
    const std::string part = child ? scope.substr(previous.size() + 1) : scope;
    if (part.empty()) return "";
    module += (module.empty() ? "" : ".") + part;
    previous = scope;
  }
  return module.size() <= kMaxModuleNameBytes ? module : "";
}

Result<ForwardGraph> Importer::Run() {
  for (const onnx::OperatorSetIdProto& o : model_.opset_import()) {
    if (o.domain().empty() || o.domain() == "ai.onnx") opset_ = static_cast<int>(o.version());
  }
  for (const onnx::StringStringEntryProto& entry : model_.metadata_props()) {
    if (entry.key() == kRunsOnKey && entry.value() == kRunsOnPyTorch) fuse_into_batch_norm_ = false;
  }
  EC_RETURN_IF_ERROR(ReadInitializers());
  ReadInferredShapes();
  EC_RETURN_IF_ERROR(ReadDataInput());
  EC_RETURN_IF_ERROR(ImportNodes());
  if (!unsupported_.empty()) return Error(UnsupportedOpsError(unsupported_));
  EC_RETURN_IF_ERROR(CheckTrainingExport());
  EC_ASSIGN_OR_RETURN(const int logits, Logits());
  // A time-major sequence's first axis is time: a recurrent model's batch is its logits' rows.
  const bool recurrent = std::any_of(graph_.layers().begin(), graph_.layers().end(), [](const graph::Layer& l) {
    return l.kind == OpKind::kLstm || l.kind == OpKind::kGru;
  });
  if (recurrent) graph_.set_batch_size(static_cast<int>(graph_.shape(logits)[0]));
  EC_RETURN_IF_ERROR(TieSharedWeights());
  graph_.CrossEntropyLoss(logits, graph_.shape(logits).back());
  return std::move(graph_);
}

Status Importer::ReadInitializers() {
  for (const onnx::TensorProto& t : model_.graph().initializer()) {
    Value v = Value::Parameter(Shape(t.dims().begin(), t.dims().end()));
    if (!ValidShape(v.shape)) return Error("initializer '" + t.name() + "' has shape " + ShapeToString(v.shape));
    // Small ones may be constants (eps, shape targets); integers are never weights (Swin's index tables).
    if (NumElements(v.shape) <= 64 ||
        (IsIntegerType(t.data_type()) && NumElements(v.shape) <= ConstantFolder::kMaxElements)) {
      auto data = TensorValues(t);
      if (data.ok()) {
        v.data = std::move(*data);
        v.has_data = true;
        v.integer = IsIntegerType(t.data_type());
        if (v.integer) v.kind = Value::Kind::kConstant;  // integers are never weights
      }
    }
    if (!v.shape.empty()) v.rows = {{t.name(), 0, v.shape[0]}};
    values_[t.name()] = std::move(v);
  }
  return Status::Ok();
}

void Importer::ReadInferredShapes() {
  for (const auto* list : {&model_.graph().value_info(), &model_.graph().output()}) {
    for (const onnx::ValueInfoProto& v : *list) {
      if (v.type().tensor_type().has_shape()) inferred_[v.name()] = ShapeOf(v);  // else the rank is unknown
    }
  }
}

// The one graph input that is not an initializer: the data, of fixed shape.
Status Importer::ReadDataInput() {
  int inputs = 0;
  for (const onnx::ValueInfoProto& v : model_.graph().input()) {
    if (values_.count(v.name())) continue;  // old exporters list weights as inputs
    const Shape shape = ShapeOf(v);
    for (int64_t d : shape) {
      if (d <= 0)
        return Error("input '" + v.name() + "' has a symbolic or unknown dimension; export with fixed shapes");
    }
    if (!ValidShape(shape)) return Error("input '" + v.name() + "' has shape " + ShapeToString(shape));
    values_[v.name()] = Value::Activation(graph_.Input(shape));
    if (shape.size() >= 2) graph_.set_batch_size(static_cast<int>(shape[0]));
    ++inputs;
  }
  if (inputs != 1) return Error("expected one data input, found " + std::to_string(inputs));
  return Status::Ok();
}

Status Importer::ImportNodes() {
  const onnx::GraphProto& g = model_.graph();
  for (int i = 0; i < g.node_size(); ++i) {
    for (const std::string& input : g.node(i).input()) consumers_[input].push_back(i);
  }
  MarkRecurrentWeights();
  // Constants first: the fusions look ahead at nodes whose constant inputs come later in the file.
  for (int i = 0; i < g.node_size(); ++i) {
    if (g.node(i).op_type() != "Constant") continue;
    consumed_.insert(i);
    EC_RETURN_IF_ERROR(ImportNode(g.node(i), i));
  }
  for (int i = 0; i < g.node_size(); ++i) {
    if (consumed_.count(i)) continue;
    EC_RETURN_IF_ERROR(ImportNode(g.node(i), i));
  }
  return Status::Ok();
}

Status Importer::ImportNode(const onnx::NodeProto& node, int index) {
  Inputs in;
  bool missing = false, any_activation = false, any_parameter = false;
  for (int i = 0; i < node.input_size(); ++i) {
    const Value* v = Input(node, i);
    if (!node.input(i).empty() && !v) missing = true;
    if (v && v->kind == Value::Kind::kActivation) any_activation = true;
    if (v && v->kind == Value::Kind::kParameter) any_parameter = true;
    in.push_back(v);
  }
  const std::string& op = node.op_type();
  if (missing) {  // downstream of an unsupported op: only its kind is of interest
    if (!OpTable().count(op) && !ConstantFolder::CanFold(op)) (void)Unsupported(node, index, "");
    return Status::Ok();
  }
  // Random numbers, whatever their inputs' kinds: only stochastic depth's chain takes them.
  if (op == "RandomUniformLike") return ImportRandomUniformLike(node, index, in);
  if (std::any_of(in.begin(), in.end(), [](const Value* v) { return v && v->random != Value::Random::kNone; })) {
    return ImportRandomOp(node, index, in);
  }
  if ((op == "Shape" || op == "Size") && !in.empty() && in[0]) {  // of anything with a known shape
    Value shape_only = Value::Parameter(ShapeOfValue(*in[0]));
    auto folded = ConstantFolder::Fold(node, {&shape_only}, opset_);
    if (!folded.ok()) return NodeError(node, index, folded.status().message());
    SetOutput(node, 0, std::move((*folded)[0]));
    return Status::Ok();
  }
  if (!any_activation && !any_parameter) return FoldNode(node, index, in);
  if (!any_activation) return ImportParameterOp(node, index, in);
  return ImportActivationNode(node, index, in);
}

// A node of constants alone: evaluated now.
Status Importer::FoldNode(const onnx::NodeProto& node, int index, const Inputs& in) {
  auto folded = ConstantFolder::Fold(node, in, opset_);
  if (!folded.ok()) {
    return Unsupported(node, index, "cannot be evaluated at import (" + folded.status().message() + ")");
  }
  // Each fold is bounded; so is their sum, which a small file of many folds would make large.
  for (const Value& v : *folded) folded_elements_ += NumElements(v.shape);
  if (folded_elements_ > kMaxFoldedElements) {
    return NodeError(node, index,
                     "constant folding computes more than " + std::to_string(kMaxFoldedElements) +
                         " values in all (a model's shape arithmetic takes far fewer): refused");
  }
  SetOutputs(node, std::move(*folded));
  return Status::Ok();
}

Status Importer::ImportActivationNode(const onnx::NodeProto& node, int index, const Inputs& in) {
  const size_t before = graph_.layers().size();
  Status status = Status::Ok();
  try {
    status = ImportActivationOp(node, index, in);
  } catch (const std::logic_error& e) {
    status = NodeError(node, index, e.what());
  }
  if (!status.ok()) return status;
  SetModules(node, before);
  return CheckInferredShapes(node, index, before);
}

Status Importer::ImportActivationOp(const onnx::NodeProto& node, int index, const Inputs& in) {
  const auto& table = OpTable();
  auto op = table.find(node.op_type());
  if (op == table.end()) return Unsupported(node, index, "");
  return (this->*op->second)(node, index, in);
}

// Our shapes must agree with ONNX's own shape inference.
Status Importer::CheckInferredShapes(const onnx::NodeProto& node, int index, size_t layers_before) const {
  if (graph_.layers().size() == layers_before) return Status::Ok();  // an alias
  for (int o = 0; o < node.output_size(); ++o) {
    auto v = values_.find(node.output(o));
    auto inferred = inferred_.find(node.output(o));
    if (v == values_.end() || v->second.kind != Value::Kind::kActivation || inferred == inferred_.end()) continue;
    const Shape& ours = graph_.shape(v->second.node);
    if (inferred->second != ours &&
        std::all_of(inferred->second.begin(), inferred->second.end(), [](int64_t d) { return d >= 0; })) {
      return NodeError(node, index,
                       "computed shape " + ShapeToString(ours) + " but ONNX infers " + ShapeToString(inferred->second));
    }
  }
  return Status::Ok();
}

// The graph's one output: logits of shape (batch, classes) that the graph computes.
Result<int> Importer::Logits() const {
  const onnx::GraphProto& g = model_.graph();
  if (g.output_size() != 1) return Error("expected one output, found " + std::to_string(g.output_size()));
  auto out = values_.find(g.output(0).name());
  if (out == values_.end() || out->second.kind != Value::Kind::kActivation) {
    return Error("expected one output computed by the graph");
  }
  const int logits = out->second.node;
  if (graph_.shape(logits).size() != 2) {
    return Error("the output has shape " + ShapeToString(graph_.shape(logits)) +
                 "; a cross-entropy loss needs logits of shape (batch, classes)");
  }
  return logits;
}

// An eval-mode export has its batch norms folded into the convolutions (their weights renamed
// onnx::Conv_N by the exporter) or running statistics in place of batch statistics: its
// training graph would be wrong without a word.
Status Importer::CheckTrainingExport() const {
  const std::string fix =
      "export in training mode: torch.onnx.export(..., training=torch.onnx.TrainingMode.TRAINING, "
      "do_constant_folding=False)";
  if (!eval_batch_norm_.empty()) {
    return Error("batch normalization at " + eval_batch_norm_ +
                 " uses running statistics: the model was exported in eval mode; " + fix);
  }
  if (batch_norms_ == 0) {
    for (const std::string& w : weight_names_) {
      if (w.starts_with("onnx::Conv_")) {
        return Error("convolution weight '" + w +
                     "' was computed by the exporter and there is no BatchNormalization: the batch norms were "
                     "folded into the convolutions by an eval-mode export; " +
                     fix);
      }
    }
  }
  return Status::Ok();
}

Status Importer::NodeError(const onnx::NodeProto& node, int index, const std::string& what) const {
  return Error(NodeWhere(node, index) + ", " + node.op_type() + ": " + what);
}

Status Importer::Unsupported(const onnx::NodeProto& node, int index, const std::string& why) {
  std::string key = node.op_type();
  if (!unsupported_.count(key)) unsupported_[key] = NodeWhere(node, index) + (why.empty() ? "" : ": " + why);
  return Status::Ok();
}

const Value* Importer::Input(const onnx::NodeProto& node, int i) const {
  if (i >= node.input_size() || node.input(i).empty()) return nullptr;
  auto it = values_.find(node.input(i));
  return it == values_.end() ? nullptr : &it->second;
}

const Value* Importer::ActivationInput(const Inputs& in, int i) {
  return i < static_cast<int>(in.size()) && in[i] && in[i]->kind == Value::Kind::kActivation ? in[i] : nullptr;
}

Shape Importer::ShapeOfValue(const Value& v) const {
  return v.kind == Value::Kind::kActivation ? graph_.shape(v.node) : v.shape;
}

std::optional<double> Importer::ScalarInput(const onnx::NodeProto& node, int i) const {
  const Value* v = Input(node, i);
  if (!v || !v->scalar()) return std::nullopt;
  return v->data[0];
}

void Importer::SetOutput(const onnx::NodeProto& node, int i, Value v) {
  if (i < node.output_size() && !node.output(i).empty()) values_[node.output(i)] = std::move(v);
}

void Importer::SetOutputs(const onnx::NodeProto& node, std::vector<Value> values) {
  for (size_t i = 0; i < values.size(); ++i) SetOutput(node, static_cast<int>(i), std::move(values[i]));
}

void Importer::SetModules(const onnx::NodeProto& node, size_t layers_before) {
  for (int layer = static_cast<int>(layers_before); layer < graph_.size(); ++layer) {
    graph_.SetModule(layer, ModuleOf(node));
  }
}

std::vector<int> Importer::Consumers(const std::string& tensor) const {
  for (const onnx::ValueInfoProto& out : model_.graph().output()) {
    if (out.name() == tensor) return {};
  }
  auto it = consumers_.find(tensor);
  return it == consumers_.end() ? std::vector<int>{} : it->second;
}

const onnx::NodeProto* Importer::SoleConsumer(const std::string& tensor, int* index) const {
  const std::vector<int> consumers = Consumers(tensor);
  if (consumers.size() != 1) return nullptr;
  *index = consumers[0];
  return &model_.graph().node(*index);
}

}  // namespace edgecost::graph::onnx_import
