// The backward dependency rules of each op kind (graph/derive.h), on small graphs.
#include "graph/derive.h"

#include <algorithm>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "graph/layouts.h"
#include "graph/zoo.h"

namespace edgecost::graph {
namespace {

const v1::TrainingNode* Find(const v1::TrainingGraph& graph, const std::string& name) {
  for (const v1::TrainingNode& node : graph.nodes()) {
    if (node.name() == name) return &node;
  }
  return nullptr;
}

std::vector<uint32_t> Inputs(const v1::TrainingNode& node) { return {node.inputs().begin(), node.inputs().end()}; }

int BackwardCount(const v1::TrainingGraph& graph) {
  return static_cast<int>(std::count_if(graph.nodes().begin(), graph.nodes().end(),
                                        [](const auto& n) { return n.phase() == v1::PHASE_BACKWARD; }));
}

// input -> conv -> relu -> flatten -> linear -> loss
ForwardGraph SmallCnn() {
  ForwardGraph g("small_cnn", 1);
  int x = g.Input({1, 3, 4, 4});
  x = g.Relu(g.Conv2d(x, 3, 2, 3, 1, 1));
  x = g.Linear(g.Flatten(x), 32, 5);
  g.CrossEntropyLoss(x, 5);
  return g;
}

TEST(ExactDerivation, ConvReluLinearReadWhatTheirBackwardNeeds) {
  const auto graph = DeriveTrainingGraph(SmallCnn(), Derivation::kExact);
  ASSERT_TRUE(graph.ok()) << graph.status().message();
  ASSERT_EQ(graph->nodes_size(), 11);

  const auto* loss_grad = Find(*graph, "layer5_CrossEntropyLoss.grad");
  ASSERT_TRUE(loss_grad);
  EXPECT_EQ(Inputs(*loss_grad), (std::vector<uint32_t>{4}));  // logits only
  const uint32_t d_logits = loss_grad->index();

  const auto* linear_dw = Find(*graph, "layer4_LinearLayer.grad_weight");
  ASSERT_TRUE(linear_dw);
  EXPECT_EQ(Inputs(*linear_dw), (std::vector<uint32_t>{3, d_logits}));  // X and dY
  EXPECT_EQ(linear_dw->output_bytes(), 0u);                             // lives with the parameters

  const auto* linear_dx = Find(*graph, "layer4_LinearLayer.grad_input");
  ASSERT_TRUE(linear_dx);
  EXPECT_EQ(Inputs(*linear_dx), (std::vector<uint32_t>{d_logits}));  // dY (and W, not an activation)
  EXPECT_EQ(linear_dx->output_bytes(), 32u * 4);

  // Flatten's backward is a view: ReLU's backward reads the linear layer's dX directly.
  const auto* relu_grad = Find(*graph, "layer2_ReLULayer.grad");
  ASSERT_TRUE(relu_grad);
  EXPECT_EQ(Inputs(*relu_grad), (std::vector<uint32_t>{2, linear_dx->index()}));  // Y and dY
  EXPECT_EQ(Find(*graph, "layer3_FlattenLayer.grad"), nullptr);

  const auto* conv_dw = Find(*graph, "layer1_Conv2dLayer.grad_weight");
  ASSERT_TRUE(conv_dw);
  EXPECT_EQ(Inputs(*conv_dw), (std::vector<uint32_t>{0, relu_grad->index()}));
  // The input image needs no gradient.
  EXPECT_EQ(Find(*graph, "layer1_Conv2dLayer.grad_input"), nullptr);
}

// input -> depthwise conv -> batch norm + ReLU6 -> 1x1 conv -> add (of the two) -> global average
// pool -> flatten -> linear -> loss
ForwardGraph SmallMobileNet(bool grouped) {
  ForwardGraph g("small_mobilenet", 2);
  const int x = g.Input({2, 8, 4, 4});
  const int dw = g.Conv2d(x, 8, 8, 3, 1, 1, grouped ? 8 : 1, false);
  const int bn = g.BatchNorm2d(dw);
  g.FuseActivationIntoBatchNorm(bn, OpKind::kRelu6);
  const int pw = g.Conv2d(bn, 8, 8, 1, 1, 0, 1, false);
  const int pooled = g.AvgPool2d(g.Add(pw, bn), 4, 4);
  g.CrossEntropyLoss(g.Linear(g.Flatten(pooled), 8, 3), 3);
  return g;
}

TEST(ChannelsLast, FeatureMapsOfAModelWithGroupedConvolutionsAreChannelsLast) {
  const std::vector<bool> nhwc = ChannelsLastOutputs(SmallMobileNet(true));
  // input, depthwise, batch norm, 1x1, add, pool, flatten, linear, loss
  EXPECT_EQ(nhwc, (std::vector<bool>{false, true, true, true, true, true, false, false, false}));
  const auto graph = DeriveTrainingGraph(SmallMobileNet(true), Derivation::kExact);
  ASSERT_TRUE(graph.ok()) << graph.status().message();
  const auto attributes = [&](int node) { return graph->nodes(node).attributes(); };
  EXPECT_FALSE(attributes(1).contains(kChannelsLastInputsAttribute));  // reads the NCHW input
  EXPECT_EQ(attributes(1).at(kChannelsLastOutputAttribute), 1);
  EXPECT_EQ(attributes(4).at(kChannelsLastInputsAttribute), 0b11);  // the add, both inputs
  // The pool's 1x1 output is the same bytes in either layout: flatten reads it as NCHW.
  EXPECT_EQ(attributes(5).at(kChannelsLastOutputAttribute), 1);
  EXPECT_TRUE(attributes(6).empty());
}

TEST(ChannelsLast, SqueezeExciteScalesAChannelsLastMap) {
  ForwardGraph g("squeeze_excite", 2);
  const int x = g.Input({2, 4, 4, 4});
  const int act = g.Unary(OpKind::kSilu, g.Conv2d(x, 4, 4, 3, 1, 1, 4, false));
  const int scale = g.Unary(OpKind::kSigmoid, g.Conv2d(g.AvgPool2d(act, 4, 4), 4, 4, 1, 1, 0));
  const int scaled = g.Binary(OpKind::kMul, act, scale);
  g.CrossEntropyLoss(g.Linear(g.Flatten(g.AvgPool2d(g.Conv2d(scaled, 4, 4, 1, 1, 0), 4, 4)), 4, 2), 2);
  const std::vector<bool> nhwc = ChannelsLastOutputs(g);
  EXPECT_TRUE(nhwc[static_cast<size_t>(act)]);
  EXPECT_TRUE(nhwc[static_cast<size_t>(scaled)]);
}

TEST(ChannelsLast, AModelWithoutGroupedConvolutionsKeepsNchw) {
  const std::vector<bool> nhwc = ChannelsLastOutputs(SmallMobileNet(false));
  EXPECT_EQ(std::count(nhwc.begin(), nhwc.end(), true), 0);
}

TEST(ChannelsLast, AMapAKernelTakesAsNchwAloneKeepsNchwWithTheMapsSharingItsLayout) {
  ForwardGraph g("squeeze_excite", 2);
  const int x = g.Input({2, 4, 4, 4});
  const int dw = g.Conv2d(x, 4, 4, 3, 1, 1, 4, false);
  const int act = g.Unary(OpKind::kSilu, dw);
  const int scaled = g.Binary(OpKind::kSub, act, g.AvgPool2d(act, 4, 4));  // Sub takes NCHW alone
  const int pw = g.Conv2d(scaled, 4, 4, 1, 1, 0, 1, false);
  const int out = g.Unary(OpKind::kRelu6, pw);
  g.CrossEntropyLoss(g.Linear(g.Flatten(g.AvgPool2d(out, 4, 4)), 4, 2), 2);
  const std::vector<bool> nhwc = ChannelsLastOutputs(g);
  EXPECT_FALSE(nhwc[static_cast<size_t>(act)]);  // Sub reads it
  EXPECT_FALSE(nhwc[static_cast<size_t>(dw)]);   // SiLU shares its layout
  EXPECT_TRUE(nhwc[static_cast<size_t>(pw)]);
  EXPECT_TRUE(nhwc[static_cast<size_t>(out)]);
}

TEST(ExactDerivation, AddPassesGradientsAndFanOutIsSummed) {
  ForwardGraph g("skip", 1);
  int x = g.Input({1, 4});
  int a = g.Relu(g.Linear(x, 4, 4));           // 1, 2
  int b = g.Linear(a, 4, 4);                   // 3
  int sum = g.Add(a, b);                       // 4
  g.CrossEntropyLoss(g.Linear(sum, 4, 2), 2);  // 5, 6
  const auto graph = DeriveTrainingGraph(g, Derivation::kExact);
  ASSERT_TRUE(graph.ok());

  // No node for add's backward: its dY feeds both branches.
  const auto* d_sum = Find(*graph, "layer5_LinearLayer.grad_input");
  ASSERT_TRUE(d_sum);
  EXPECT_EQ(Find(*graph, "layer4_SkipAddLayer.grad"), nullptr);
  const auto* b_dw = Find(*graph, "layer3_LinearLayer.grad_weight");
  ASSERT_TRUE(b_dw);
  EXPECT_EQ(Inputs(*b_dw), (std::vector<uint32_t>{2, d_sum->index()}));

  // ReLU's output feeds add and b: its gradient is the sum of both contributions.
  const auto* b_dx = Find(*graph, "layer3_LinearLayer.grad_input");
  const auto* grad_sum = Find(*graph, "layer2_ReLULayer.grad_sum");
  ASSERT_TRUE(b_dx && grad_sum);
  std::vector<uint32_t> parts = Inputs(*grad_sum);
  std::sort(parts.begin(), parts.end());
  EXPECT_EQ(parts, (std::vector<uint32_t>{d_sum->index(), b_dx->index()}));
  EXPECT_EQ(Inputs(*Find(*graph, "layer2_ReLULayer.grad")), (std::vector<uint32_t>{2, grad_sum->index()}));
}

TEST(ExactDerivation, NormalizationAndPoolingRules) {
  ForwardGraph g("pools", 1);
  int x = g.Input({1, 2, 4, 4});
  int conv = g.Conv2d(x, 2, 2, 1, 1, 0);  // 1: gives the rest something to train
  int bn = g.BatchNorm2d(conv);           // 2
  int max = g.MaxPool2d(bn, 2, 2);        // 3
  int avg = g.AvgPool2d(max, 2, 1);       // 4
  g.CrossEntropyLoss(g.Linear(g.Flatten(avg), 2, 2), 2);
  const auto graph = DeriveTrainingGraph(g, Derivation::kExact);
  ASSERT_TRUE(graph.ok());
  const auto* avg_grad = Find(*graph, "layer4_AvgPool2d.grad");
  const auto* max_grad = Find(*graph, "layer3_MaxPool2d.grad");
  const auto* bn_grad = Find(*graph, "layer2_BatchNorm2d.grad");
  ASSERT_TRUE(avg_grad && max_grad && bn_grad);
  EXPECT_EQ(avg_grad->inputs_size(), 1);                                        // dY only
  EXPECT_EQ(Inputs(*max_grad), (std::vector<uint32_t>{2, avg_grad->index()}));  // X (PyTorch's argmax) and dY
  EXPECT_EQ(Inputs(*bn_grad), (std::vector<uint32_t>{1, max_grad->index()}));   // X (statistics) and dY
  EXPECT_EQ(bn_grad->output_bytes(), 2u * 4 * 4 * 4);
}

// An attention block of the imported op set: layernorm, linear over 3 axes, matmul of two
// activations, softmax, a squeeze-excite style product, GELU, a mean and a head.
ForwardGraph SmallAttention() {
  ForwardGraph g("attention", 2);
  int ids = g.Input({2, 4});                                                              // 0
  int x = g.Embedding(ids, 10, 8);                                                        // 1
  x = g.BinaryParam(OpKind::kAddBroadcast, x, {4, 8});                                    // 2: position embeddings
  x = g.LayerNorm(x);                                                                     // 3
  int q = g.LinearNd(x, 8, 8, true);                                                      // 4
  int k = g.Transpose(g.LinearNd(x, 8, 8, true), {0, 2, 1});                              // 5, 6
  int s = g.Softmax(g.MatMul(q, k), -1);                                                  // 7, 8
  int y = g.Unary(OpKind::kGelu, g.Binary(OpKind::kMul, s, g.ReduceMean(s, {2}, true)));  // 9, 10, 11
  g.CrossEntropyLoss(g.LinearNd(g.ReduceMean(y, {1}, false), 4, 3, true), 3);             // 12, 13, 14
  return g;
}

TEST(ExactDerivation, ImportedOpSetReadsWhatItsBackwardNeeds) {
  const ForwardGraph g = SmallAttention();
  EXPECT_EQ(g.shape(8), (Shape{2, 4, 4}));
  const auto graph = DeriveTrainingGraph(g, Derivation::kExact);
  ASSERT_TRUE(graph.ok()) << graph.status().message();
  const auto* gelu = Find(*graph, "layer11_GELULayer.grad");
  const auto* mul = Find(*graph, "layer10_MulLayer.grad");
  const auto* mean = Find(*graph, "layer9_ReduceMeanLayer.grad");
  const auto* softmax_sum = Find(*graph, "layer8_SoftmaxLayer.grad_sum");
  const auto* softmax = Find(*graph, "layer8_SoftmaxLayer.grad");
  const auto* matmul = Find(*graph, "layer7_MatMulLayer.grad");
  const auto* transpose = Find(*graph, "layer6_TransposeLayer.grad");
  ASSERT_TRUE(gelu && mul && mean && softmax_sum && softmax && matmul && transpose);
  EXPECT_EQ(Inputs(*gelu)[0], 10u);                                               // X (the derivative of erf at X)
  EXPECT_EQ(Inputs(*mul), (std::vector<uint32_t>{8, 9, gelu->index()}));          // A, B, dY
  EXPECT_EQ(mul->output_bytes(), 4u * (2 * 4 * 4 + 2 * 4 * 1));                   // dA and dB
  EXPECT_EQ(Inputs(*mean), (std::vector<uint32_t>{mul->index()}));                // dY only
  EXPECT_EQ(Inputs(*softmax), (std::vector<uint32_t>{8, softmax_sum->index()}));  // Y, dY
  EXPECT_EQ(Inputs(*matmul), (std::vector<uint32_t>{4, 6, softmax->index()}));
  EXPECT_EQ(Inputs(*transpose), (std::vector<uint32_t>{matmul->index()}));
  // The layer norm, as batch norm, reads X and dY; the embedding has no input gradient.
  const auto* norm = Find(*graph, "layer3_LayerNorm.grad");
  ASSERT_TRUE(norm);
  EXPECT_EQ(Inputs(*norm)[0], 2u);
  EXPECT_TRUE(Find(*graph, "layer2_AddLayer.grad_bias"));
  const auto* table = Find(*graph, "layer1_EmbeddingLayer.grad_weight");
  ASSERT_TRUE(table);
  EXPECT_EQ(Inputs(*table)[0], 0u);  // the ids
  EXPECT_FALSE(Find(*graph, "layer1_EmbeddingLayer.grad_input"));
  EXPECT_FALSE(Find(*graph, "layer1_EmbeddingLayer.grad"));

  // Bias-only training: the shifts of layernorm and the position add, no table gradient.
  const auto bias = DeriveTrainingGraph(g, Derivation::kExact, *Trainable::Parse("bias"));
  ASSERT_TRUE(bias.ok());
  EXPECT_FALSE(Find(*bias, "layer1_EmbeddingLayer.grad_weight"));
  EXPECT_TRUE(Find(*bias, "layer2_AddLayer.grad_bias"));
  EXPECT_FALSE(Find(*bias, "layer4_LinearLayer.grad_weight"));
  EXPECT_TRUE(Find(*bias, "layer4_LinearLayer.grad_bias"));
}

TEST(ExactDerivation, LastKTrainsOnlyTheTopLayers) {
  const auto graph = DeriveTrainingGraph(SmallCnn(), Derivation::kExact, *Trainable::Parse("last:1"));
  ASSERT_TRUE(graph.ok());
  // Loss gradient and the last linear layer's weight gradient; nothing propagates below it.
  EXPECT_EQ(BackwardCount(*graph), 2);
  EXPECT_TRUE(Find(*graph, "layer4_LinearLayer.grad_weight"));
  EXPECT_FALSE(Find(*graph, "layer4_LinearLayer.grad_input"));
  EXPECT_EQ(graph->trainable(), "last:1");
}

// A sparse layer update: the named layers train (by node name or by module, with the modules
// inside it); gradients flow down to the lowest of them and no further.
TEST(ExactDerivation, NamedLayersTrainAndGradientsStopBelowTheLowest) {
  const auto first = DeriveTrainingGraph(SmallCnn(), Derivation::kExact, *Trainable::Parse("layers:layer1"));
  ASSERT_TRUE(first.ok()) << first.status().message();
  EXPECT_TRUE(Find(*first, "layer1_Conv2dLayer.grad_weight"));
  EXPECT_FALSE(Find(*first, "layer1_Conv2dLayer.grad_input"));  // nothing below it trains
  EXPECT_FALSE(Find(*first, "layer4_LinearLayer.grad_weight"));
  EXPECT_TRUE(Find(*first, "layer4_LinearLayer.grad_input"));  // on the way down to layer1
  EXPECT_EQ(first->trainable(), "layers:layer1");

  ForwardGraph named = SmallCnn();
  named.SetModule(1, "features.0");
  named.SetModule(4, "classifier.1");
  const auto classifier = DeriveTrainingGraph(named, Derivation::kExact, *Trainable::Parse("layers:classifier"));
  ASSERT_TRUE(classifier.ok()) << classifier.status().message();
  EXPECT_TRUE(Find(*classifier, "layer4_LinearLayer.grad_weight"));
  EXPECT_FALSE(Find(*classifier, "layer4_LinearLayer.grad_input"));
  EXPECT_FALSE(Find(*classifier, "layer1_Conv2dLayer.grad_weight"));

  // "feature" is not a module: names are whole components, never prefixes of one.
  const auto unknown = DeriveTrainingGraph(named, Derivation::kExact, *Trainable::Parse("layers:feature"));
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.status().message().find("'feature' names no layer with parameters"), std::string::npos);
  EXPECT_NE(unknown.status().message().find("features.0, classifier.1"), std::string::npos)
      << unknown.status().message();
}

TEST(ExactDerivation, BiasOnlyDropsWeightGradients) {
  const auto graph = DeriveTrainingGraph(SmallCnn(), Derivation::kExact, *Trainable::Parse("bias"));
  ASSERT_TRUE(graph.ok());
  EXPECT_FALSE(Find(*graph, "layer4_LinearLayer.grad_weight"));
  const auto* bias = Find(*graph, "layer4_LinearLayer.grad_bias");
  ASSERT_TRUE(bias);
  EXPECT_EQ(bias->inputs_size(), 1);  // dY only: no need to keep X
  EXPECT_TRUE(Find(*graph, "layer1_Conv2dLayer.grad_bias"));
  EXPECT_TRUE(Find(*graph, "layer2_ReLULayer.grad"));  // gradients still flow to the conv bias
}

TEST(PoetDerivation, OneGradientPerLayerReadingOutputNextAndPrevious) {
  const auto graph = DeriveTrainingGraph(SmallCnn(), Derivation::kPoet);
  ASSERT_TRUE(graph.ok());
  ASSERT_EQ(graph->nodes_size(), 6 + 5);
  // First gradient: GradientLayer(L4, [L5], L5) reads the linear output and the loss twice.
  EXPECT_EQ(Inputs(graph->nodes(6)), (std::vector<uint32_t>{4, 5, 5}));
  EXPECT_EQ(graph->nodes(6).output_bytes(), 5u * 4);  // the loss's shape
  EXPECT_EQ(Inputs(graph->nodes(10)), (std::vector<uint32_t>{0, 1, 9}));
  EXPECT_EQ(graph->nodes(10).flops(), 0.0);  // twice the input layer's zero FLOPs
  // last:1 stops the chain below the last linear layer.
  const auto last = DeriveTrainingGraph(SmallCnn(), Derivation::kPoet, *Trainable::Parse("last:1"));
  EXPECT_EQ(BackwardCount(*last), 1);
}

TEST(Derivation, EveryZooGraphIsTopologicallyOrdered) {
  for (const ZooModel& model : ZooModels()) {
    for (Derivation derivation : {Derivation::kPoet, Derivation::kExact}) {
      for (const char* trainable : {"all", "last:2", "bias"}) {
        const auto graph = ZooTrainingGraph(model.name, 1, derivation, *Trainable::Parse(trainable));
        ASSERT_TRUE(graph.ok()) << model.name;
        for (const v1::TrainingNode& node : graph->nodes()) {
          for (uint32_t input : node.inputs()) ASSERT_LT(input, node.index()) << model.name << " " << node.name();
        }
        EXPECT_GT(BackwardCount(*graph), 0) << model.name << " " << trainable;
      }
    }
  }
}

TEST(Trainable, NamedLayersHaveOneSpelling) {
  EXPECT_EQ(Trainable::Parse("layers:features.12,classifier,classifier")->ToString(), "layers:classifier,features.12");
  for (const char* bad : {"layers:", "layers:a,,b", "layers:a,", "layers:a b"}) EXPECT_FALSE(Trainable::Parse(bad).ok()) << bad;
}

TEST(Trainable, ParsesAndRejects) {
  EXPECT_EQ(Trainable::Parse("last:3")->last_k, 3);
  EXPECT_FALSE(Trainable::Parse("last:0").ok());
  EXPECT_FALSE(Trainable::Parse("last:x").ok());
  EXPECT_FALSE(Trainable::Parse("some").ok());
  EXPECT_FALSE(ParseDerivation("checkmate").ok());
}

}  // namespace
}  // namespace edgecost::graph
