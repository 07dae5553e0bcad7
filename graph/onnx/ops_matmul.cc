// Import functions of the matrix products: MatMul and Gemm (by a weight: linear layers, with the
// bias of a following Add; of two activations: matmul) and Einsum as a batched matrix product.
#include <set>

#include "graph/onnx/attributes.h"
#include "graph/onnx/importer.h"

namespace edgecost::graph::onnx_import {
namespace {

bool ActivationFirst(const Inputs& in) {
  return in.size() >= 2 && in[0] && in[1] && in[0]->kind == Value::Kind::kActivation;
}

}  // namespace

Status Importer::ImportMatMul(const onnx::NodeProto& node, int index, const Inputs& in) {
  if (!ActivationFirst(in)) return Unsupported(node, index, "the first input must be an activation");
  const int x = in[0]->node;
  if (in[1]->kind == Value::Kind::kActivation) {
    SetActivation(node, graph_.MatMul(x, in[1]->node));
    return Status::Ok();
  }
  if (in[1]->kind != Value::Kind::kParameter || in[1]->shape.size() != 2) {
    return Unsupported(node, index, "only a product with a 2-D weight or another activation is supported");
  }
  const int64_t in_features = in[1]->shape[0], out_features = in[1]->shape[1];
  if (TryLinearWithBias(node, x, in_features, out_features)) return Status::Ok();
  const int linear = graph_.LinearNd(x, in_features, out_features, false);
  graph_.SetParamNames(linear, {node.input(1), ""}, true);
  SetActivation(node, linear);
  return Status::Ok();
}

// torch.nn.Linear on more than two axes exports MatMul, then Add of the bias: one linear layer.
bool Importer::TryLinearWithBias(const onnx::NodeProto& matmul, int x, int64_t in_features, int64_t out_features) {
  int add_index = -1;
  const onnx::NodeProto* add = SoleConsumer(matmul.output(0), &add_index);
  if (!add || add->op_type() != "Add" || add->input_size() != 2) return false;
  const std::string& other = add->input(0) == matmul.output(0) ? add->input(1) : add->input(0);
  auto bias = values_.find(other);
  if (bias == values_.end() || bias->second.kind != Value::Kind::kParameter ||
      bias->second.shape != Shape{out_features}) {
    return false;
  }
  consumed_.insert(add_index);
  const int linear = graph_.LinearNd(x, in_features, out_features, true);
  graph_.SetParamNames(linear, {matmul.input(1), other}, true);
  SetOutput(*add, 0, Value::Activation(linear));
  return true;
}

Status Importer::ImportGemm(const onnx::NodeProto& node, int index, const Inputs& in) {
  const Attributes attrs(node);
  if (!ActivationFirst(in)) return Unsupported(node, index, "the first input must be an activation");
  const int x = in[0]->node;
  if (attrs.Int("transA", 0) != 0 || attrs.Float("alpha", 1) != 1 || attrs.Float("beta", 1) != 1 ||
      in[1]->kind != Value::Kind::kParameter) {
    return Unsupported(node, index, "only Gemm by a weight, without transA, alpha or beta, is supported");
  }
  if (in[1]->shape.size() != 2) return NodeError(node, index, "a Gemm weight must have two dimensions");
  const Shape& w = in[1]->shape;
  const bool trans_b = attrs.Int("transB", 0) != 0;
  const int64_t in_features = trans_b ? w[1] : w[0], out_features = trans_b ? w[0] : w[1];
  if (graph_.shape(x).size() != 2 || graph_.shape(x)[1] != in_features) {
    return NodeError(node, index, "input features do not match the weight");
  }
  const bool bias = in.size() > 2 && in[2];
  // LinearNd, not Linear: POET's count (2 x params + out_features, for its zoo only) leaves out
  // every row but one, 33,152 FLOPs for a 64x128 input to 128 -> 128 instead of 2.1 M.
  const int linear = graph_.LinearNd(x, in_features, out_features, bias);
  graph_.SetParamNames(linear, {node.input(1), bias ? node.input(2) : ""}, !trans_b);
  SetActivation(node, linear);
  return Status::Ok();
}

// Einsum of two activations that is a batched matrix product (MaxViT's attention): the same leading
// letters on both inputs and the output, then "i k, k j -> i j" (MatMul) or "i k, j k -> i j" (MatMul by
// the second transposed). Other equations are not supported.
Status Importer::ImportEinsum(const onnx::NodeProto& node, int index, const Inputs& in) {
  std::string equation;
  for (char c : Attributes(node).String("equation", "")) {
    if (c != ' ') equation += c;
  }
  const size_t comma = equation.find(','), arrow = equation.find("->");
  const char* kWhy = "only batched matrix products (\"...ik,...kj->...ij\" or \"...ik,...jk->...ij\") are supported";
  if (in.size() != 2 || !ActivationInput(in, 0) || !ActivationInput(in, 1) || comma == std::string::npos ||
      arrow == std::string::npos || arrow < comma) {
    return Unsupported(node, index, kWhy);
  }
  const std::string a = equation.substr(0, comma), b = equation.substr(comma + 1, arrow - comma - 1),
                    out = equation.substr(arrow + 2);
  const size_t rank = a.size();
  if (rank < 2 || b.size() != rank || out.size() != rank || a.find('.') != std::string::npos ||
      graph_.shape(in[0]->node).size() != rank || graph_.shape(in[1]->node).size() != rank) {
    return Unsupported(node, index, kWhy);
  }
  const std::string prefix = a.substr(0, rank - 2);
  const char i = a[rank - 2], k = a[rank - 1];
  const std::set<char> letters(a.begin(), a.end());
  if (letters.size() != rank || b.compare(0, rank - 2, prefix) != 0 || out.compare(0, rank - 2, prefix) != 0 ||
      out[rank - 2] != i || i == k) {
    return Unsupported(node, index, kWhy);
  }
  const char j = out[rank - 1];
  int second = in[1]->node;
  if (b[rank - 2] == j && b[rank - 1] == k && j != k && !letters.count(j)) {
    std::vector<int64_t> perm;
    for (size_t d = 0; d < rank; ++d) perm.push_back(static_cast<int64_t>(d));
    std::swap(perm[rank - 2], perm[rank - 1]);
    second = graph_.Transpose(second, perm);
  } else if (!(b[rank - 2] == k && b[rank - 1] == j && j != k && !letters.count(j))) {
    return Unsupported(node, index, kWhy);
  }
  SetActivation(node, graph_.MatMul(in[0]->node, second));
  return Status::Ok();
}

}  // namespace edgecost::graph::onnx_import
