#include "graph/onnx_import.h"

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include <onnx/onnx_pb.h>
#include <onnx/shape_inference/implementation.h>

namespace edgecost::graph {
namespace {

// One ONNX node's integer attributes, with defaults.
class Attributes {
 public:
  explicit Attributes(const onnx::NodeProto& node) {
    for (const onnx::AttributeProto& a : node.attribute()) {
      if (a.type() == onnx::AttributeProto::INT) ints_[a.name()] = {a.i()};
      if (a.type() == onnx::AttributeProto::INTS) ints_[a.name()] = {a.ints().begin(), a.ints().end()};
    }
  }
  std::vector<int64_t> Ints(const std::string& name, std::vector<int64_t> fallback) const {
    auto it = ints_.find(name);
    return it == ints_.end() ? fallback : it->second;
  }
  int64_t Int(const std::string& name, int64_t fallback) const { return Ints(name, {fallback})[0]; }

 private:
  std::map<std::string, std::vector<int64_t>> ints_;
};

bool AllEqual(const std::vector<int64_t>& v) {
  for (int64_t x : v) {
    if (x != v[0]) return false;
  }
  return true;
}

class Importer {
 public:
  Importer(const onnx::ModelProto& model, std::string origin, std::string name)
      : model_(model), origin_(std::move(origin)), graph_(std::move(name), 1) {}

  Result<ForwardGraph> Run() {
    const onnx::GraphProto& g = model_.graph();
    for (const onnx::TensorProto& t : g.initializer()) {
      initializers_[t.name()] = Shape(t.dims().begin(), t.dims().end());
    }
    for (const onnx::ValueInfoProto& v : g.value_info()) inferred_[v.name()] = ShapeOf(v);
    for (const onnx::ValueInfoProto& v : g.output()) inferred_[v.name()] = ShapeOf(v);
    int inputs = 0;
    for (const onnx::ValueInfoProto& v : g.input()) {
      if (initializers_.count(v.name())) continue;  // old exporters list weights as inputs
      const Shape shape = ShapeOf(v);
      for (int64_t d : shape) {
        if (d <= 0)
          return Error("input '" + v.name() + "' has a symbolic or unknown dimension; export with fixed shapes");
      }
      tensors_[v.name()] = graph_.Input(shape);
      if (shape.size() >= 2) graph_.set_batch_size(static_cast<int>(shape[0]));
      ++inputs;
    }
    if (inputs != 1) return Error("expected one data input, found " + std::to_string(inputs));
    for (int i = 0; i < g.node_size(); ++i) EC_RETURN_IF_ERROR(ImportNode(g.node(i), i));
    if (g.output_size() != 1 || !tensors_.count(g.output(0).name())) {
      return Error("expected one output computed by the graph");
    }
    const int logits = tensors_.at(g.output(0).name());
    graph_.CrossEntropyLoss(logits, graph_.shape(logits).back());
    return std::move(graph_);
  }

 private:
  static Shape ShapeOf(const onnx::ValueInfoProto& v) {
    Shape shape;
    for (const auto& d : v.type().tensor_type().shape().dim()) shape.push_back(d.has_dim_value() ? d.dim_value() : -1);
    return shape;
  }

  Status Error(const std::string& what) const { return InvalidArgument(origin_ + ": " + what); }

  Status NodeError(const onnx::NodeProto& node, int index, const std::string& what) const {
    return Error("node " + std::to_string(index) + " ('" + node.name() + "', " + node.op_type() + "): " + what);
  }

  Result<int> Activation(const onnx::NodeProto& node, int index, int input) const {
    if (input >= node.input_size()) return NodeError(node, index, "missing input " + std::to_string(input));
    auto it = tensors_.find(node.input(input));
    if (it == tensors_.end()) {
      return NodeError(node, index, "input '" + node.input(input) + "' is not computed by a supported op");
    }
    return it->second;
  }

  Result<Shape> Initializer(const onnx::NodeProto& node, int index, int input) const {
    auto it = input < node.input_size() ? initializers_.find(node.input(input)) : initializers_.end();
    if (it == initializers_.end())
      return NodeError(node, index, "expects a constant weight as input " + std::to_string(input));
    return it->second;
  }

  Status ImportNode(const onnx::NodeProto& node, int index) {
    const std::string& op = node.op_type();
    const Attributes attrs(node);
    int out = -1;
    if (op == "Identity" || op == "Dropout") {
      EC_ASSIGN_OR_RETURN(int x, Activation(node, index, 0));
      out = op == "Dropout" ? graph_.Dropout(x) : x;
    } else if (op == "Conv") {
      EC_ASSIGN_OR_RETURN(int x, Activation(node, index, 0));
      EC_ASSIGN_OR_RETURN(Shape w, Initializer(node, index, 1));
      const auto kernel = attrs.Ints("kernel_shape", {w[2], w[3]});
      const auto strides = attrs.Ints("strides", {1, 1});
      const auto pads = attrs.Ints("pads", {0, 0, 0, 0});
      if (attrs.Int("group", 1) != 1) return NodeError(node, index, "grouped convolution is not supported");
      if (!AllEqual(attrs.Ints("dilations", {1, 1})) || attrs.Ints("dilations", {1, 1})[0] != 1) {
        return NodeError(node, index, "dilated convolution is not supported");
      }
      if (!AllEqual(kernel) || !AllEqual(strides) || !AllEqual(pads)) {
        return NodeError(node, index, "only square kernels, equal strides and symmetric padding are supported");
      }
      out = graph_.Conv2d(x, w[1], w[0], kernel[0], strides[0], pads[0]);
    } else if (op == "BatchNormalization") {
      EC_ASSIGN_OR_RETURN(int x, Activation(node, index, 0));
      out = graph_.BatchNorm2d(x);
    } else if (op == "Relu") {
      EC_ASSIGN_OR_RETURN(int x, Activation(node, index, 0));
      out = graph_.Relu(x);
    } else if (op == "MaxPool" || op == "AveragePool") {
      EC_ASSIGN_OR_RETURN(int x, Activation(node, index, 0));
      const auto kernel = attrs.Ints("kernel_shape", {1, 1});
      const auto strides = attrs.Ints("strides", {1, 1});
      const auto pads = attrs.Ints("pads", {0, 0, 0, 0});
      if (!AllEqual(kernel) || !AllEqual(strides) || !AllEqual(pads) || attrs.Int("ceil_mode", 0) != 0) {
        return NodeError(node, index,
                         "only square windows, equal strides, symmetric padding and floor mode are supported");
      }
      out = op == "MaxPool" ? graph_.MaxPool2d(x, kernel[0], strides[0], pads[0])
                            : graph_.AvgPool2d(x, kernel[0], strides[0], pads[0]);
    } else if (op == "GlobalAveragePool") {
      EC_ASSIGN_OR_RETURN(int x, Activation(node, index, 0));
      const Shape& in = graph_.shape(x);
      if (in.size() != 4 || in[2] != in[3]) return NodeError(node, index, "needs a square NCHW input");
      out = graph_.AvgPool2d(x, in[2], 1);
    } else if (op == "Flatten" || op == "Reshape") {
      EC_ASSIGN_OR_RETURN(int x, Activation(node, index, 0));
      if (op == "Flatten" && attrs.Int("axis", 1) != 1) return NodeError(node, index, "only axis 1 is supported");
      out = graph_.Flatten(x);
      if (op == "Reshape" && inferred_.count(node.output(0)) && inferred_.at(node.output(0)) != graph_.shape(out)) {
        return NodeError(node, index, "only reshapes to (batch, features) are supported");
      }
    } else if (op == "Gemm") {
      EC_ASSIGN_OR_RETURN(int x, Activation(node, index, 0));
      EC_ASSIGN_OR_RETURN(Shape w, Initializer(node, index, 1));
      if (attrs.Int("transA", 0) != 0 || attrs.Int("transB", 0) != 1) {
        return NodeError(node, index, "only Gemm with transB=1 (torch.nn.Linear) is supported");
      }
      if (graph_.shape(x).size() != 2 || graph_.shape(x)[1] != w[1]) {
        return NodeError(node, index, "input features do not match the weight");
      }
      out = graph_.Linear(x, w[1], w[0]);
    } else if (op == "Add") {
      EC_ASSIGN_OR_RETURN(int a, Activation(node, index, 0));
      EC_ASSIGN_OR_RETURN(int b, Activation(node, index, 1));
      out = graph_.Add(a, b);
    } else {
      return NodeError(node, index,
                       "unsupported op; supported: Conv, BatchNormalization, Relu, MaxPool, "
                       "AveragePool, GlobalAveragePool, Flatten, Reshape, Gemm, Add, Dropout, Identity");
    }
    // Our shapes must agree with ONNX's own shape inference.
    auto inferred = inferred_.find(node.output(0));
    if (inferred != inferred_.end() && inferred->second != graph_.shape(out) && op != "Identity") {
      return NodeError(
          node, index,
          "computed shape " + ShapeToString(graph_.shape(out)) + " but ONNX infers " + ShapeToString(inferred->second));
    }
    tensors_[node.output(0)] = out;
    return Status::Ok();
  }

  const onnx::ModelProto& model_;
  std::string origin_;
  ForwardGraph graph_;
  std::map<std::string, Shape> initializers_;
  std::map<std::string, Shape> inferred_;
  std::map<std::string, int> tensors_;
};

}  // namespace

Result<ForwardGraph> ImportOnnx(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound("cannot read ONNX model '" + path + "'");
  onnx::ModelProto model;
  if (!model.ParseFromIstream(&in)) return InvalidArgument(path + " is not an ONNX model (protobuf parse failed)");
  try {
    onnx::shape_inference::InferShapes(model);
  } catch (const std::exception& e) {
    return InvalidArgument(path + ": ONNX shape inference failed: " + e.what());
  }
  std::string name = std::filesystem::path(path).stem().string();
  try {
    return Importer(model, path, name).Run();
  } catch (const std::logic_error& e) {
    return InvalidArgument(path + ": " + e.what());
  }
}

}  // namespace edgecost::graph
