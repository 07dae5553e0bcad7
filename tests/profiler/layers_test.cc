// Every op kind's backward against a numerical gradient of its forward, on tiny
// shapes: d<dY, Y(X)>/dX by central differences must match BackwardInput, and
// likewise for the parameters and BackwardWeights.
#include "profiler/layers.h"

#include <cmath>
#include <random>

#include <gtest/gtest.h>

namespace edgecost::profiler {
namespace {

double Objective(Layer& layer) {
  layer.Forward();
  double f = 0;
  for (int64_t i = 0; i < layer.output().size(); ++i) {
    f += static_cast<double>(layer.output().data[i]) * layer.grad_output().data[i];
  }
  return f;
}

// Checks up to `samples` entries of `analytic` against central differences of `value`.
void ExpectGradient(Layer& layer, Tensor& value, const Tensor& analytic, const std::string& what) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<int64_t> pick(0, value.size() - 1);
  constexpr float kStep = 1e-2f;
  for (int sample = 0; sample < 12; ++sample) {
    const int64_t i = pick(rng);
    const float saved = value.data[i];
    value.data[i] = saved + kStep;
    const double plus = Objective(layer);
    value.data[i] = saved - kStep;
    const double minus = Objective(layer);
    value.data[i] = saved;
    const double numeric = (plus - minus) / (2 * kStep);
    const double got = analytic.data[i];
    EXPECT_NEAR(got, numeric, 2e-2 * std::max(1.0, std::fabs(numeric))) << what << " element " << i;
  }
}

void CheckLayer(const LayerSpec& spec, bool unit_grad_output = false) {
  SCOPED_TRACE(spec.kind);
  Backend backend;
  auto made = MakeLayer(backend, spec, 3);
  ASSERT_TRUE(made.ok()) << made.status().message();
  Layer& layer = **made;
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (float& g : layer.grad_output().data) g = unit_grad_output ? 1.0f : normal(rng);

  layer.Forward();
  layer.BackwardInput();
  std::vector<Tensor> analytic_inputs = layer.grad_inputs();
  std::vector<Tensor> analytic_params;
  if (layer.HasParameters()) {
    layer.BackwardWeights();
    for (Tensor* g : layer.grad_params()) analytic_params.push_back(*g);
  }
  for (size_t k = 0; k < layer.inputs().size(); ++k) {
    ExpectGradient(layer, layer.inputs()[k], analytic_inputs[k], "input " + std::to_string(k));
  }
  for (size_t k = 0; k < analytic_params.size(); ++k) {
    ExpectGradient(layer, *layer.params()[k], analytic_params[k], "parameter " + std::to_string(k));
  }
}

TEST(LayerGradients, Conv2d) {
  CheckLayer({"conv2d", {{"kernel", 3}, {"stride", 2}, {"padding", 1}}, {{2, 3, 5, 5}}, {2, 4, 3, 3}});
}

TEST(LayerGradients, Linear) { CheckLayer({"linear", {}, {{3, 6}}, {3, 4}}); }

TEST(LayerGradients, LinearRelu) { CheckLayer({"linear_relu", {}, {{3, 6}}, {3, 5}}); }

TEST(LayerGradients, QkvProjection) { CheckLayer({"qkv_projection", {}, {{4, 6}}, {12, 2, 2}}); }

TEST(LayerGradients, BatchNorm2d) { CheckLayer({"batchnorm2d", {}, {{3, 2, 3, 3}}, {3, 2, 3, 3}}); }

TEST(LayerGradients, Relu) { CheckLayer({"relu", {}, {{2, 3, 4}}, {2, 3, 4}}); }

TEST(LayerGradients, MaxPool2d) {
  CheckLayer({"maxpool2d", {{"kernel", 3}, {"stride", 2}}, {{1, 2, 7, 7}}, {1, 2, 3, 3}});
}

TEST(LayerGradients, AvgPool2d) {
  CheckLayer({"avgpool2d", {{"kernel", 2}, {"stride", 1}}, {{1, 2, 3, 3}}, {1, 2, 2, 2}});
}

TEST(LayerGradients, Flatten) { CheckLayer({"flatten", {}, {{2, 2, 2, 2}}, {2, 8}}); }

TEST(LayerGradients, Dropout) { CheckLayer({"dropout", {}, {{4, 8}}, {4, 8}}); }

TEST(LayerGradients, AddSameShapes) { CheckLayer({"add", {}, {{2, 6}, {2, 6}}, {2, 6}}); }

TEST(LayerGradients, AddSmallerIntoLarger) { CheckLayer({"add", {}, {{1, 8, 2, 2}, {1, 2, 2, 2}}, {1, 8, 2, 2}}); }

TEST(LayerGradients, AttentionScores) {
  CheckLayer({"attention_scores", {{"seq_len", 4}, {"head_dim", 3}, {"heads", 2}}, {{12, 3, 2}}, {4, 4, 2}});
}

TEST(LayerGradients, AttentionContext) {
  CheckLayer({"attention_context", {{"seq_len", 4}, {"head_dim", 3}, {"heads", 2}}, {{4, 4, 2}}, {4, 6}});
}

TEST(LayerGradients, CrossEntropyLoss) {
  CheckLayer({"cross_entropy_loss", {{"classes", 5}}, {{3, 5}}, {5}}, /*unit_grad_output=*/true);
}

TEST(Layers, GradSumAddsItsParts) {
  Backend backend;
  auto sum = MakeGradSum(backend, {2, 3}, 3);
  ASSERT_TRUE(sum.ok()) << sum.status().message();
  (*sum)->Forward();
  for (int64_t i = 0; i < 6; ++i) {
    const float expected = (*sum)->inputs()[0].data[i] + (*sum)->inputs()[1].data[i] + (*sum)->inputs()[2].data[i];
    EXPECT_FLOAT_EQ((*sum)->output().data[i], expected);
  }
}

TEST(Layers, UnknownKindIsNamed) {
  Backend backend;
  auto layer = MakeLayer(backend, {"lstm", {}, {{1, 2}}, {1, 2}});
  ASSERT_FALSE(layer.ok());
  EXPECT_EQ(layer.status().code(), ErrorCode::kUnimplemented);
  EXPECT_NE(layer.status().message().find("lstm"), std::string::npos);
}

TEST(Layers, MaxPoolingHasAWorkspace) {
  Backend backend;
  auto layer = MakeLayer(backend, {"maxpool2d", {{"kernel", 2}, {"stride", 2}}, {{1, 4, 8, 8}}, {1, 4, 4, 4}});
  ASSERT_TRUE(layer.ok());
  EXPECT_GT((*layer)->workspace_bytes(), 0u);
}

}  // namespace
}  // namespace edgecost::profiler
