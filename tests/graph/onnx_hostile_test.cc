// Hostile ONNX files: refused by the op and opset checks before ONNX's shape inference
// sees them, and where that inference crashes, the crash stays in the import's child.
#include <fstream>
#include <sstream>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <onnx/shape_inference/implementation.h>

#include "base/isolated.h"
#include "graph/onnx/import.h"
#include "tests/hostile_onnx.h"

namespace edgecost::graph {
namespace {

using ::testing::HasSubstr;
using testing::HostileOnnx;
using testing::HostileOnnxModel;
using testing::kHostileOnnxModels;
using ::testing::Not;

onnx::ModelProto ReadModel(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream bytes;
  bytes << in.rdbuf();
  onnx::ModelProto model;
  EXPECT_TRUE(model.ParseFromString(bytes.str())) << path;
  return model;
}

Result<ForwardGraph> Import(const onnx::ModelProto& model) {
  return ImportOnnxBytes(model.SerializeAsString(), "model.onnx", "model");
}

void SetOpset(onnx::ModelProto& model, int64_t version) {
  for (onnx::OperatorSetIdProto& o : *model.mutable_opset_import()) {
    if (o.domain().empty()) o.set_version(version);
  }
}

// What took the agent down: ONNX's own shape inference dies on both files. Isolated, the
// caller gets an error and lives (on an ONNX that no longer crashes there is nothing to show).
TEST(HostileOnnx, TheReproductionsCrashOnnxOnlyInTheChild) {
  for (const std::string& name : kHostileOnnxModels) {
    onnx::ModelProto model = HostileOnnxModel(name);
    ASSERT_GT(model.graph().node_size(), 0) << name;
    auto result = RunIsolated([&]() -> Result<std::string> {
      onnx::shape_inference::InferShapes(model, onnx::OpSchemaRegistry::Instance(),
                                         onnx::ShapeInferenceOptions(false, 0, true));
      return std::string("inferred");
    });
    if (result.ok()) {
      ADD_FAILURE() << "ONNX's shape inference no longer crashes on " << name << "; keep the test's other checks";
      continue;
    }
    EXPECT_EQ(result.status().code(), ErrorCode::kInternal) << name;
    EXPECT_EQ(result.status().message(), name == "hostile_maxpool_stride0" ? "crashed (SIGFPE)" : "crashed (SIGSEGV)")
        << name;
  }
}

TEST(HostileOnnx, TheReproductionsAreRefusedBeforeInference) {
  auto gathernd = ImportOnnxBytes(HostileOnnx("hostile_gathernd"), "gathernd.onnx", "gathernd");
  ASSERT_FALSE(gathernd.ok());
  EXPECT_EQ(gathernd.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_THAT(gathernd.status().message(), HasSubstr("gathernd.onnx: 1 unsupported op kind(s)"));
  EXPECT_THAT(gathernd.status().message(), HasSubstr("GatherND: node 0"));
  auto gemm = ImportOnnxBytes(HostileOnnx("hostile_gemm_opset6"), "gemm.onnx", "gemm");
  ASSERT_FALSE(gemm.ok());
  EXPECT_EQ(gemm.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(gemm.status().message(),
            "gemm.onnx uses opset 6; the importer reads opsets 9 to 17: export it with "
            "torch.onnx.export(..., opset_version=13)");
}

// Supported ops at a supported opset still reach ONNX's inference; where it crashes, the import's
// child dies and the caller gets one line that blames the file.
TEST(HostileOnnx, ACrashPastTheChecksIsAnErrorForTheFile) {
  auto g = ImportOnnxBytes(HostileOnnx("hostile_maxpool_stride0"), "maxpool.onnx", "maxpool");
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(g.status().message(), "maxpool.onnx: the ONNX importer crashed (SIGFPE) on this file");
}

TEST(HostileOnnx, OpsetsOutsideWhatTorchExportsAreRefused) {
  onnx::ModelProto model = ReadModel("tests/graph/data/mlp.onnx");
  ASSERT_TRUE(Import(model).ok()) << Import(model).status().message();
  for (int64_t opset : {1, 8, 18, 21, 1000000}) {
    SetOpset(model, opset);
    auto g = Import(model);
    ASSERT_FALSE(g.ok()) << opset;
    EXPECT_EQ(g.status().code(), ErrorCode::kInvalidArgument);
    EXPECT_THAT(g.status().message(),
                HasSubstr("uses opset " + std::to_string(opset) + "; the importer reads opsets 9 to 17"));
  }
  for (int64_t opset : {9, 17}) {  // Gemm and Relu mean the same there
    SetOpset(model, opset);
    auto g = Import(model);
    EXPECT_TRUE(g.ok()) << opset << ": " << g.status().message();
  }
  model.clear_opset_import();
  auto none = Import(model);
  ASSERT_FALSE(none.ok());
  EXPECT_THAT(none.status().message(), HasSubstr("declares no opset of the default ONNX domain"));
}

TEST(HostileOnnx, OpsOfOtherDomainsAndSubgraphsAreRefused) {
  onnx::ModelProto model = ReadModel("tests/graph/data/mlp.onnx");
  onnx::ModelProto custom = model;
  custom.mutable_graph()->mutable_node(1)->set_domain("com.microsoft");
  auto g = Import(custom);
  ASSERT_FALSE(g.ok());
  EXPECT_THAT(g.status().message(), HasSubstr("com.microsoft." + model.graph().node(1).op_type() + ": node 1"));
  EXPECT_THAT(g.status().message(), HasSubstr("ops of domain 'com.microsoft' are not supported"));

  onnx::ModelProto subgraph = model;
  onnx::AttributeProto& a = *subgraph.mutable_graph()->mutable_node(1)->add_attribute();
  a.set_name("body");
  a.set_type(onnx::AttributeProto::GRAPH);
  *a.mutable_g() = model.graph();
  g = Import(subgraph);
  ASSERT_FALSE(g.ok());
  EXPECT_THAT(g.status().message(), HasSubstr("attribute 'body' is a subgraph"));
}

// The import runs in a child; what comes back is the graph, layer for layer.
TEST(HostileOnnx, AnIsolatedImportReturnsTheWholeGraph) {
  auto g = ImportOnnx("tests/graph/data/small_resnet.onnx", 4);
  ASSERT_TRUE(g.ok()) << g.status().message();
  EXPECT_EQ(g->model(), "small_resnet");
  EXPECT_EQ(g->batch_size(), 4);
  ASSERT_GT(g->size(), 5);
  EXPECT_EQ(g->layers()[1].kind, OpKind::kConv2d);
  EXPECT_EQ(g->shape(1), (Shape{4, 8, 16, 16}));
  EXPECT_GT(g->layers()[1].flops, 0);
  EXPECT_EQ(g->layers()[1].param_count, 3 * 8 * 9 + 8);
  EXPECT_EQ(g->layers()[2].kind, OpKind::kBatchNormRelu);  // the ReLU fused into its batch norm
  EXPECT_EQ(g->layers()[3].attributes.at("padding"), 1);
  EXPECT_EQ(g->layers()[6].inputs, (std::vector<int>{3, 5}));
  EXPECT_EQ(g->layers().back().kind, OpKind::kCrossEntropyLoss);
}

// FromLayers checks what a child sends as the builders check what they append.
TEST(HostileOnnx, LayersFromElsewhereAreChecked) {
  EXPECT_TRUE(ForwardGraph::FromLayers("m", 1,
                                       {{.kind = OpKind::kInput, .output_shape = {1, 4}},
                                        {.kind = OpKind::kRelu, .inputs = {0}, .output_shape = {1, 4}}})
                  .ok());
  EXPECT_FALSE(ForwardGraph::FromLayers("m", 1, {{.kind = OpKind::kRelu, .inputs = {0}, .output_shape = {1, 4}}}).ok());
  EXPECT_FALSE(ForwardGraph::FromLayers("m", 1, {{.kind = OpKind::kInput, .output_shape = {-1, 4}}}).ok());
  EXPECT_FALSE(ForwardGraph::FromLayers("m", 1, {{.kind = static_cast<OpKind>(1000), .output_shape = {1}}}).ok());
  EXPECT_FALSE(ForwardGraph::FromLayers(
                   "m", 1, {{.kind = OpKind::kInput, .output_shape = {1}, .param_count = 1, .bias_count = 2}})
                   .ok());
}


// One node on a float input x of shape {2, 6} at opset 13, its output y the model's.
onnx::ModelProto OneNode(const std::string& op, const std::vector<std::string>& inputs, int64_t axis = -100) {
  onnx::ModelProto model;
  model.set_ir_version(8);
  model.add_opset_import()->set_version(13);
  onnx::GraphProto& graph = *model.mutable_graph();
  onnx::ValueInfoProto& x = *graph.add_input();
  x.set_name("x");
  x.mutable_type()->mutable_tensor_type()->set_elem_type(onnx::TensorProto::FLOAT);
  for (int64_t d : {2, 6}) x.mutable_type()->mutable_tensor_type()->mutable_shape()->add_dim()->set_dim_value(d);
  onnx::NodeProto& node = *graph.add_node();
  node.set_op_type(op);
  for (const std::string& input : inputs) node.add_input(input);
  node.add_output("y");
  if (axis != -100) {
    onnx::AttributeProto& attribute = *node.add_attribute();
    attribute.set_name("axis");
    attribute.set_type(onnx::AttributeProto::INT);
    attribute.set_i(axis);
  }
  graph.add_output()->set_name("y");
  return model;
}

// Nodes missing an input the op needs, or naming an axis the input does not have, are refused with
// a reason (they read past the end of the inputs or the shape once, with a garbage or crashing
// import). ONNX's own inference refuses a Reshape without its shape first.
TEST(HostileOnnx, MissingInputsAndAxesBeyondTheRankAreRefusedWithAReason) {
  const std::vector<std::pair<onnx::ModelProto, std::string>> cases = {
      {OneNode("Flatten", {"x"}, 5), "axis 5 is outside the input's 2 dimensions"},
      {OneNode("Slice", {"x"}), "needs starts and ends"},
      {OneNode("Conv", {"x"}), "needs an activation and a weight"}};
  for (const auto& [model, reason] : cases) {
    for (int attempt = 0; attempt < 3; ++attempt) {  // the same answer every time
      const Result<ForwardGraph> imported = Import(model);
      ASSERT_FALSE(imported.ok()) << reason;
      EXPECT_THAT(imported.status().message(), HasSubstr(reason));
    }
  }
}

}  // namespace
}  // namespace edgecost::graph
