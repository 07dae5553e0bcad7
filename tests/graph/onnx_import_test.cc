// ONNX import of small models exported by torch.onnx.export (tests/graph/data/make_onnx.py).
#include <gtest/gtest.h>

#include <fstream>
#include <iterator>

#include "graph/derive.h"
#include "graph/onnx/import.h"
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
            (std::vector<OpKind>{OpKind::kInput, OpKind::kConv2d, OpKind::kBatchNormRelu, OpKind::kMaxPool2d,
                                 OpKind::kConv2d, OpKind::kBatchNorm2d, OpKind::kAdd, OpKind::kRelu,
                                 OpKind::kAvgPool2d, OpKind::kFlatten, OpKind::kLinear, OpKind::kCrossEntropyLoss}));
  EXPECT_EQ(g->shape(3), (Shape{2, 8, 8, 8}));                 // max pool 3x3, stride 2, padding 1
  EXPECT_EQ(g->layers()[6].inputs, (std::vector<int>{3, 5}));  // the residual
  EXPECT_EQ(g->layers()[3].attributes.at("padding"), 1);
  EXPECT_EQ(g->shape(11), (Shape{10}));  // loss over the 10 logits
  EXPECT_EQ(g->layers()[1].param_count, 8 * 3 * 9 + 8);
}

// A model edgecost.torch plans trains on PyTorch's kernels: its batch norms stay apart from their
// activations, as PyTorch runs them (the metadata entry python/edgecost/torch.py appends).
TEST(OnnxImport, AModelThatRunsOnPyTorchKeepsItsBatchNormsApart) {
  std::ifstream in("tests/graph/data/small_resnet.onnx", std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_FALSE(bytes.empty());
  // ModelProto's metadata_props (field 14), one entry: key (1) "edgecost.runs_on", value (2) "pytorch".
  const std::string entry = std::string("\x0a\x10") + "edgecost.runs_on" + "\x12\x07" + "pytorch";
  const std::string marked = bytes + "\x72" + static_cast<char>(entry.size()) + entry;
  auto fused = ImportOnnxBytes(bytes, "small_resnet.onnx", "small_resnet");
  auto apart = ImportOnnxBytes(marked, "small_resnet.onnx", "small_resnet");
  ASSERT_TRUE(fused.ok() && apart.ok()) << apart.status().message();
  EXPECT_EQ(Kinds(*fused)[2], OpKind::kBatchNormRelu);
  EXPECT_EQ(Kinds(*apart)[2], OpKind::kBatchNorm2d);
  EXPECT_EQ(Kinds(*apart)[3], OpKind::kRelu);
  EXPECT_EQ(apart->size(), fused->size() + 1);
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

// A batch size asks for another batch than the export's: the input's first dimension is set and
// every shape inferred again; an export whose shapes hold no batch of their own still imports.
TEST(OnnxImport, ABatchSizeRebatchesTheExport) {
  auto four = ImportOnnx("tests/graph/data/small_resnet.onnx", 4);
  ASSERT_TRUE(four.ok()) << four.status().message();
  EXPECT_EQ(four->batch_size(), 4);
  EXPECT_EQ(four->shape(4), (Shape{4, 8, 8, 8}));
  EXPECT_EQ(four->layers()[1].param_count, 8 * 3 * 9 + 8);  // the parameters do not change
  auto same = ImportOnnx("tests/graph/data/small_resnet.onnx", 2);
  ASSERT_TRUE(same.ok());
  EXPECT_EQ(same->shape(4), (Shape{2, 8, 8, 8}));
  GraphSpec spec{"tests/graph/data/mlp.onnx", 3, Derivation::kExact, {}};
  auto graph = LoadTrainingGraph(spec);
  ASSERT_TRUE(graph.ok()) << graph.status().message();
  EXPECT_EQ(graph->batch_size(), 3u);
  EXPECT_EQ(graph->nodes(0).output_shape().dims(0), 3);
  // The tracer folded x.size() into a constant Reshape target: that export holds its batch.
  auto fixed = ImportOnnx("tests/graph/data/view_by_shape.onnx", 8);
  ASSERT_FALSE(fixed.ok());
  EXPECT_NE(fixed.status().message().find("exported at batch size 2"), std::string::npos);
  EXPECT_NE(fixed.status().message().find("export it at batch size 8"), std::string::npos) << fixed.status().message();
  EXPECT_TRUE(ImportOnnx("tests/graph/data/view_by_shape.onnx", 2).ok());
}

// An imported Gemm counts every row of its input: POET's LinearLayer count (2 x params +
// out_features, whatever the batch) is for its own zoo; 64 rows of 128 -> 128 are 2.1 MFLOPs, not 33,152.
TEST(OnnxImport, AGemmCountsTheFlopsOfEveryRow) {
  for (int batch : {1, 64}) {
    auto g = ImportOnnx("tests/graph/data/mlp.onnx", batch);
    ASSERT_TRUE(g.ok()) << g.status().message();
    int linears = 0;
    for (const Layer& layer : g->layers()) {
      if (layer.kind != OpKind::kLinear && layer.kind != OpKind::kLinearRelu) continue;
      ++linears;
      const double in = static_cast<double>(layer.attributes.at("in_features"));
      const double out = static_cast<double>(layer.attributes.at("out_features"));
      const double bias_flops = layer.attributes.count("no_bias") ? 0.0 : batch * out;
      EXPECT_DOUBLE_EQ(layer.flops, 2.0 * batch * in * out + bias_flops) << batch;
      EXPECT_EQ(layer.param_count, static_cast<int64_t>(in * out + layer.bias_count));
    }
    EXPECT_GT(linears, 0);
  }
  ForwardGraph g("attention_output", 1);
  const int x = g.Input({64, 128});
  EXPECT_DOUBLE_EQ(g.layers()[g.LinearNd(x, 128, 128, true)].flops, 2.0 * 64 * 128 * 128 + 64 * 128);
}

TEST(OnnxImport, SigmoidIsAnOp) {
  auto g = ImportOnnx("tests/graph/data/sigmoid.onnx");
  ASSERT_TRUE(g.ok()) << g.status().message();
  EXPECT_EQ(Kinds(*g),
            (std::vector<OpKind>{OpKind::kInput, OpKind::kLinear, OpKind::kSigmoid, OpKind::kCrossEntropyLoss}));
}

// A training-mode Dropout keeps the model's ratio (in millionths: 0.25); one at 0 is the identity.
TEST(OnnxImport, DropoutKeepsTheModelsRatio) {
  auto g = ImportOnnx("tests/graph/data/dropout.onnx");
  ASSERT_TRUE(g.ok()) << g.status().message();
  EXPECT_EQ(Kinds(*g), (std::vector<OpKind>{OpKind::kInput, OpKind::kLinear, OpKind::kRelu, OpKind::kDropout,
                                            OpKind::kLinear, OpKind::kCrossEntropyLoss}));
  EXPECT_EQ(g->layers()[3].attributes.at(kDropoutRatioAttribute), 250000);
}

// Every unsupported op kind at once, each with its first node, not one per attempt.
TEST(OnnxImport, UnsupportedOpsAreListedAllAtOnce) {
  auto g = ImportOnnx("tests/graph/data/unsupported.onnx");
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().code(), ErrorCode::kInvalidArgument);
  const std::string message = g.status().message();
  EXPECT_NE(message.find("2 unsupported op kind(s)"), std::string::npos) << message;
  EXPECT_NE(message.find("Sin: node 1"), std::string::npos) << message;
  EXPECT_NE(message.find("CumSum: node 3"), std::string::npos) << message;
  EXPECT_EQ(message.find("node 4"), std::string::npos) << "one node of each kind: " << message;
  EXPECT_NE(message.find("supported: "), std::string::npos) << message;
}

// chunk and a channel shuffle: Shape, Gather, Add, Div, Mul, Unsqueeze and Concat on shapes are
// folded; what remains are ops on activations.
TEST(OnnxImport, ShapeArithmeticIsFolded) {
  auto g = ImportOnnx("tests/graph/data/view_by_shape.onnx");
  ASSERT_TRUE(g.ok()) << g.status().message();
  EXPECT_EQ(Kinds(*g), (std::vector<OpKind>{OpKind::kInput, OpKind::kConv2d, OpKind::kRelu, OpKind::kSlice,
                                            OpKind::kSlice, OpKind::kConcat, OpKind::kReshape, OpKind::kTranspose,
                                            OpKind::kReshape, OpKind::kLinear, OpKind::kCrossEntropyLoss}));
  EXPECT_EQ(g->layers()[3].attributes.at("start"), 0);  // the first chunk: channels [0, 2)
  EXPECT_EQ(g->layers()[4].attributes.at("start"), 2);
  EXPECT_EQ(g->shape(6), (Shape{2, 2, 2, 4, 4}));  // view(n, 2, c / 2, h, w)
  EXPECT_EQ(g->shape(7), (Shape{2, 2, 2, 4, 4}));
  EXPECT_EQ(g->shape(8), (Shape{2, 64}));
  auto graph = DeriveTrainingGraph(*g, Derivation::kExact);
  ASSERT_TRUE(graph.ok()) << graph.status().message();
}

// PyTorch's average pooling: a Pad of zeros before an unpadded AveragePool is padding counted in the
// mean, a Pad of nothing is the identity, and the AveragePool's own padding is left out of the mean.
TEST(OnnxImport, PaddedAveragePoolingKeepsWhetherThePaddingCounts) {
  auto g = ImportOnnx("tests/graph/data/padded_pools.onnx");
  ASSERT_TRUE(g.ok()) << g.status().message();
  EXPECT_EQ(Kinds(*g),
            (std::vector<OpKind>{OpKind::kInput, OpKind::kConv2d, OpKind::kAvgPool2d, OpKind::kAvgPool2d,
                                 OpKind::kAvgPool2d, OpKind::kFlatten, OpKind::kLinear, OpKind::kCrossEntropyLoss}));
  const Layer& included = g->layers()[2];
  EXPECT_EQ(included.attributes.at("padding"), 1);
  EXPECT_EQ(included.attributes.at("count_include_pad"), 1);
  EXPECT_EQ(g->shape(2), (Shape{2, 4, 8, 8}));
  EXPECT_EQ(g->layers()[3].attributes.at("padding"), 0);
  EXPECT_EQ(g->shape(3), (Shape{2, 4, 4, 4}));
  EXPECT_EQ(g->layers()[4].attributes.at("padding"), 1);
  EXPECT_FALSE(g->layers()[4].attributes.count("count_include_pad"));
  EXPECT_EQ(g->shape(4), (Shape{2, 4, 2, 2}));
}

// An eval-mode export has its batch norm folded into the convolution (weights renamed
// onnx::Conv_N, used through Identity): refused with the fix, not imported wrong.
TEST(OnnxImport, EvalModeExportIsRefusedWithTheFix) {
  auto g = ImportOnnx("tests/graph/data/tiny_bn_eval.onnx");
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("torch.onnx.TrainingMode.TRAINING"), std::string::npos) << g.status().message();
}

TEST(OnnxImport, NotAModel) {
  EXPECT_EQ(ImportOnnx("tests/graph/data/missing.onnx").status().code(), ErrorCode::kNotFound);
  EXPECT_EQ(ImportOnnx("tests/graph/data/make_onnx.py").status().code(), ErrorCode::kInvalidArgument);
}

}  // namespace
}  // namespace edgecost::graph
