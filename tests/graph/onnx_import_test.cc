// ONNX import of small models exported by torch.onnx.export (tests/graph/data/make_onnx.py).
#include "graph/onnx_import.h"

#include <gtest/gtest.h>

#include "graph/derive.h"
#include "graph/resolve.h"

namespace edgecost::graph {
namespace {

std::vector<OpKind> Kinds(const ForwardGraph& g) {
  std::vector<OpKind> kinds;
  for (const Layer& layer : g.layers()) kinds.push_back(layer.kind);
  return kinds;
}

TEST(OnnxImport, ResidualCnnBecomesAForwardGraphWithALoss) {
  auto g = ImportOnnx("tests/graph/data/small_resnet.onnx");
  ASSERT_TRUE(g.ok()) << g.status().message();
  EXPECT_EQ(g->model(), "small_resnet");
  EXPECT_EQ(g->batch_size(), 2);
  EXPECT_EQ(Kinds(*g),
            (std::vector<OpKind>{OpKind::kInput, OpKind::kConv2d, OpKind::kBatchNorm2d, OpKind::kRelu,
                                 OpKind::kMaxPool2d, OpKind::kConv2d, OpKind::kBatchNorm2d, OpKind::kAdd, OpKind::kRelu,
                                 OpKind::kAvgPool2d, OpKind::kFlatten, OpKind::kLinear, OpKind::kCrossEntropyLoss}));
  EXPECT_EQ(g->shape(4), (Shape{2, 8, 8, 8}));                 // max pool 3x3, stride 2, padding 1
  EXPECT_EQ(g->layers()[7].inputs, (std::vector<int>{4, 6}));  // the residual
  EXPECT_EQ(g->layers()[4].attributes.at("padding"), 1);
  EXPECT_EQ(g->shape(12), (Shape{10}));  // loss over the 10 logits
  EXPECT_EQ(g->layers()[1].param_count, 8 * 3 * 9 + 8);
}

TEST(OnnxImport, TrainingGraphOfAnMlp) {
  GraphSpec spec{"tests/graph/data/mlp.onnx", 1, Derivation::kExact, {}};
  EXPECT_TRUE(IsOnnxModel(spec.model_or_file));
  EXPECT_FALSE(IsGraphFile(spec.model_or_file));
  EXPECT_EQ(ModelName(spec.model_or_file), "mlp");
  auto graph = LoadTrainingGraph(spec);
  ASSERT_TRUE(graph.ok()) << graph.status().message();
  EXPECT_EQ(graph->nodes_size(), 15);  // 7 forward + loss grad + 3 x (dW) + 2 x (dX) + 2 ReLU grads
  EXPECT_EQ(graph->nodes(1).op_kind(), "linear");
}

TEST(OnnxImport, UnsupportedOpIsNamedWithItsNode) {
  auto g = ImportOnnx("tests/graph/data/sigmoid.onnx");
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(g.status().message().find("Sigmoid"), std::string::npos) << g.status().message();
  EXPECT_NE(g.status().message().find("node 1"), std::string::npos) << g.status().message();
}

TEST(OnnxImport, NotAModel) {
  EXPECT_EQ(ImportOnnx("tests/graph/data/missing.onnx").status().code(), ErrorCode::kNotFound);
  EXPECT_EQ(ImportOnnx("tests/graph/data/make_onnx.py").status().code(), ErrorCode::kInvalidArgument);
}

}  // namespace
}  // namespace edgecost::graph
