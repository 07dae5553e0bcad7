// Every op kind's backward against a numerical gradient of its forward, on tiny
// shapes: d<dY, Y(X)>/dX by central differences must match BackwardInput, and
// likewise for the parameters and BackwardWeights.
#include "kernels/layers.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <random>

#include <gtest/gtest.h>

#include "graph/forward_graph.h"
#include "graph/layouts.h"

namespace edgecost::kernels {
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

// A 1x1 convolution on a map of a few pixels runs as one GEMM over the batch (FoldsBatchIntoOneGemm),
// with a bias and without.
TEST(LayerGradients, Conv2dOneByOneOnASmallMap) {
  CheckLayer({"conv2d", {{"kernel", 1}, {"stride", 1}, {"padding", 0}}, {{3, 5, 2, 2}}, {3, 4, 2, 2}});
  CheckLayer({"conv2d", {{"kernel", 1}, {"stride", 1}, {"padding", 0}, {"no_bias", 1}}, {{3, 5, 3, 3}}, {3, 6, 3, 3}});
}
// Inception's factorized convolutions: a 1x3 window padded on the width alone, and a 3x1 one.
TEST(LayerGradients, Conv2dRectangular) {
  CheckLayer({"conv2d",
              {{"kernel", 1}, {"kernel_w", 3}, {"stride", 1}, {"padding", 0}, {"padding_w", 1}},
              {{2, 3, 4, 5}},
              {2, 4, 4, 5}});
  CheckLayer({"conv2d",
              {{"kernel", 3}, {"kernel_w", 1}, {"stride", 2}, {"padding", 1}, {"padding_w", 0}},
              {{2, 3, 5, 4}},
              {2, 4, 3, 2}});
}

TEST(LayerGradients, Linear) { CheckLayer({"linear", {}, {{3, 6}}, {3, 4}}); }

TEST(LayerGradients, LinearRelu) { CheckLayer({"linear_relu", {}, {{3, 6}}, {3, 5}}); }

TEST(LayerGradients, QkvProjection) { CheckLayer({"qkv_projection", {}, {{4, 6}}, {12, 2, 2}}); }

// Batch norm's loops: over whole channels on small maps (3x3 here), one channel at a time on larger ones (5x5).
TEST(LayerGradients, BatchNorm2d) {
  for (const Dims& shape : {Dims{3, 2, 3, 3}, Dims{2, 2, 5, 5}}) CheckLayer({"batchnorm2d", {}, {shape}, shape});
}
TEST(LayerGradients, BatchNormRelu) {
  for (const Dims& shape : {Dims{3, 2, 3, 3}, Dims{2, 2, 5, 5}}) CheckLayer({"batchnorm2d_relu", {}, {shape}, shape});
}
TEST(LayerGradients, BatchNormSilu) {
  for (const Dims& shape : {Dims{3, 2, 3, 3}, Dims{2, 2, 5, 5}}) CheckLayer({"batchnorm2d_silu", {}, {shape}, shape});
}
TEST(LayerGradients, BatchNormHardSwish) {
  for (const Dims& shape : {Dims{3, 2, 3, 3}, Dims{2, 2, 5, 5}}) {
    CheckLayer({"batchnorm2d_hardswish", {}, {shape}, shape});
  }
}
TEST(LayerGradients, BatchNormRelu6) {
  for (const Dims& shape : {Dims{3, 2, 3, 3}, Dims{2, 2, 5, 5}}) CheckLayer({"batchnorm2d_relu6", {}, {shape}, shape});
}

TEST(LayerGradients, Relu) { CheckLayer({"relu", {}, {{2, 3, 4}}, {2, 3, 4}}); }

TEST(LayerGradients, MaxPool2d) {
  CheckLayer({"maxpool2d", {{"kernel", 3}, {"stride", 2}}, {{1, 2, 7, 7}}, {1, 2, 3, 3}});
}

TEST(LayerGradients, AvgPool2d) {
  CheckLayer({"avgpool2d", {{"kernel", 2}, {"stride", 1}}, {{1, 2, 3, 3}}, {1, 2, 2, 2}});
}

TEST(LayerGradients, AvgPool2dPadded) {
  CheckLayer({"avgpool2d", {{"kernel", 3}, {"stride", 2}, {"padding", 1}}, {{1, 2, 5, 5}}, {1, 2, 3, 3}});
}

TEST(LayerGradients, AvgPool2dPaddingCountedInTheMean) {
  CheckLayer({"avgpool2d",
              {{"kernel", 3}, {"stride", 2}, {"padding", 1}, {"count_include_pad", 1}},
              {{1, 2, 5, 5}},
              {1, 2, 3, 3}});
}

// A corner window of 3x3 at padding 1 holds 4 real elements: their sum over 9 when the padding counts
// (PyTorch's avg_pool2d default), over 4 when it does not.
TEST(AvgPool2d, CountIncludePadDividesByTheWholeWindow) {
  for (const bool include : {false, true}) {
    LayerSpec spec{"avgpool2d", {{"kernel", 3}, {"stride", 2}, {"padding", 1}}, {{1, 1, 4, 4}}, {1, 1, 2, 2}};
    if (include) spec.attributes["count_include_pad"] = 1;
    Backend backend;
    auto made = MakeLayer(backend, spec, 3);
    ASSERT_TRUE(made.ok()) << made.status().message();
    Layer& layer = **made;
    for (int64_t i = 0; i < 16; ++i) layer.inputs()[0].data[i] = static_cast<float>(i);
    layer.Forward();
    const float corner_sum = 0 + 1 + 4 + 5;
    EXPECT_FLOAT_EQ(layer.output().data[0], corner_sum / (include ? 9 : 4)) << "include " << include;
  }
}

TEST(LayerGradients, Flatten) { CheckLayer({"flatten", {}, {{2, 2, 2, 2}}, {2, 8}}); }

TEST(LayerGradients, Dropout) { CheckLayer({"dropout", {}, {{4, 8}}, {4, 8}}); }

TEST(LayerGradients, RowDropout) { CheckLayer({"dropout", {{"ratio_ppm", 300000}, {"rows", 1}}, {{4, 2, 3}}, {4, 2, 3}}); }

// Stochastic depth: each sample is kept whole (scaled by 1 / (1 - ratio)) or zeroed whole, drawn anew
// for each training step, and the same again for a step already drawn (a recomputation).
TEST(Dropout, RowsKeepOrDropEachSampleWhole) {
  Backend backend;
  auto made = MakeLayer(backend, {"dropout", {{"ratio_ppm", 500000}, {"rows", 1}}, {{64, 3, 2}}, {64, 3, 2}}, 5);
  ASSERT_TRUE(made.ok()) << made.status().message();
  Layer& layer = **made;
  std::fill(layer.inputs()[0].data.begin(), layer.inputs()[0].data.end(), 1.0f);
  std::vector<std::vector<float>> outputs;
  for (const uint64_t step : {1, 2, 1}) {
    layer.SetTrainingStep(step);
    layer.Forward();
    outputs.push_back(layer.output().data);
  }
  int kept = 0;
  for (int64_t r = 0; r < 64; ++r) {
    const float first = outputs[0][r * 6];
    EXPECT_TRUE(first == 0.0f || first == 2.0f) << first;
    for (int64_t k = 1; k < 6; ++k) EXPECT_EQ(outputs[0][r * 6 + k], first) << "row " << r;
    kept += first != 0.0f;
  }
  EXPECT_GT(kept, 16);
  EXPECT_LT(kept, 48);
  EXPECT_NE(outputs[0], outputs[1]) << "each step draws its own rows";
  EXPECT_EQ(outputs[0], outputs[2]) << "a step drawn again gives the same rows";
}

// Element dropout: each step draws its own mask, about a ratio of elements dropped, independent of
// the last step's; the backward pass and a recomputation use the forward's mask; a team of two
// threads draws one thread's mask.
TEST(Dropout, EachStepDrawsOneMaskForAllItsPasses) {
  const Dims shape = {2, 50000};   // several chunks of the parallel loop
  std::vector<float> masks[2][3];  // [threads - 1][draw]: step 7, step 8, step 7 again
  for (int threads : {1, 2}) {
    const TeamScope team(threads);
    Backend backend;
    auto made = MakeLayer(backend, {"dropout", {{"ratio_ppm", 100000}}, {shape}, shape}, 11);
    ASSERT_TRUE(made.ok()) << made.status().message();
    Layer& layer = **made;
    std::fill(layer.inputs()[0].data.begin(), layer.inputs()[0].data.end(), 1.0f);
    std::fill(layer.grad_output().data.begin(), layer.grad_output().data.end(), 1.0f);
    const uint64_t steps[] = {7, 8, 7};
    for (int draw = 0; draw < 3; ++draw) {
      layer.SetTrainingStep(steps[draw]);
      layer.Forward();
      layer.BackwardInput();
      EXPECT_EQ(layer.grad_inputs()[0].data, layer.output().data) << "dX = dY x the forward's mask";
      masks[threads - 1][draw] = layer.output().data;
    }
  }
  const std::vector<float>& mask = masks[0][0];
  const auto kept = static_cast<double>(std::count(mask.begin(), mask.end(), 1.0f / 0.9f));
  EXPECT_EQ(kept + static_cast<double>(std::count(mask.begin(), mask.end(), 0.0f)), mask.size());
  EXPECT_NEAR(kept / mask.size(), 0.9, 0.01);
  // Two independent masks agree where both keep or both drop: 0.9^2 + 0.1^2 of the elements.
  int64_t agree = 0;
  for (size_t i = 0; i < mask.size(); ++i) agree += mask[i] == masks[0][1][i];
  EXPECT_NEAR(static_cast<double>(agree) / mask.size(), 0.82, 0.01);
  EXPECT_EQ(masks[0][2], mask) << "a step drawn again gives the same mask";
  for (int draw = 0; draw < 3; ++draw) EXPECT_EQ(masks[1][draw], masks[0][draw]) << "draw " << draw;
}

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

// The op set of imported models (graph/onnx/).

TEST(LayerGradients, GroupedConv2d) {
  CheckLayer({"conv2d", {{"kernel", 3}, {"stride", 2}, {"padding", 1}, {"groups", 2}}, {{2, 4, 5, 5}}, {2, 6, 3, 3}});
}

TEST(LayerGradients, DepthwiseConv2dWithoutBias) {
  CheckLayer({"conv2d",
              {{"kernel", 3}, {"stride", 1}, {"padding", 1}, {"groups", 4}, {"no_bias", 1}},
              {{2, 4, 4, 4}},
              {2, 4, 4, 4}});
}

// Depthwise convolutions run on the blocked layouts oneDNN chooses, through staged copies: 18
// channels fill one block of 16 and part of a second, and stride 2 over an even size pads unevenly.
TEST(LayerGradients, DepthwiseConv2dStagedInBlockedLayouts) {
  CheckLayer({"conv2d", {{"kernel", 3}, {"stride", 2}, {"padding", 1}, {"groups", 18}}, {{2, 18, 6, 6}}, {2, 18, 3, 3}});
}

// Where oneDNN's JIT depthwise weight gradient does not apply (5x5 windows, maps smaller than the
// window: EfficientNet-B0's late blocks), the layer's own loop computes dW and db.
TEST(LayerGradients, DepthwiseConv2dOwnWeightGradient) {
  CheckLayer({"conv2d", {{"kernel", 5}, {"stride", 1}, {"padding", 2}, {"groups", 6}}, {{2, 6, 2, 2}}, {2, 6, 2, 2}});
  CheckLayer({"conv2d", {{"kernel", 5}, {"stride", 2}, {"padding", 2}, {"groups", 5}}, {{2, 5, 7, 6}}, {2, 5, 4, 3}});
}

TEST(LayerGradients, LinearOverTheLastAxis) {
  CheckLayer({"linear", {{"in_features", 6}, {"out_features", 4}}, {{2, 3, 6}}, {2, 3, 4}});
  CheckLayer({"linear", {{"in_features", 6}, {"out_features", 4}, {"no_bias", 1}}, {{2, 3, 6}}, {2, 3, 4}});
}

TEST(LayerGradients, MaxPool2dCeilMode) {
  CheckLayer({"maxpool2d", {{"kernel", 3}, {"stride", 2}, {"ceil_mode", 1}}, {{1, 2, 6, 6}}, {1, 2, 3, 3}});
}

TEST(LayerGradients, Elementwise) {
  for (const char* kind : {"relu6", "hardswish", "hardsigmoid", "sigmoid", "tanh", "gelu", "silu", "sqrt"}) {
    CheckLayer({kind, {}, {{2, 3, 4}}, {2, 3, 4}});
  }
  CheckLayer({"pow", {{"exponent", 2}}, {{2, 3, 4}}, {2, 3, 4}});
  CheckLayer({"pow", {{"exponent", 3}}, {{2, 3, 4}}, {2, 3, 4}});
  CheckLayer({"affine", {{"alpha_e6", -2500000}, {"beta_e6", 500000}}, {{2, 3, 4}}, {2, 3, 4}});
}

TEST(LayerGradients, BinaryOfTwoActivationsBroadcasts) {
  for (const char* kind : {"mul", "sub", "div", "add_broadcast"}) {
    CheckLayer({kind, {}, {{2, 3, 4, 4}, {2, 3, 1, 1}}, {2, 3, 4, 4}});  // squeeze-excite
    CheckLayer({kind, {}, {{2, 1, 4}, {2, 3, 4}}, {2, 3, 4}});           // the first operand broadcast
    CheckLayer({kind, {}, {{2, 3, 4}, {2, 3, 4}}, {2, 3, 4}});
  }
}

TEST(LayerGradients, BinaryWithAParameter) {
  for (const char* kind : {"mul", "sub", "div", "add_broadcast"}) {
    CheckLayer({kind, {{"param_rank", 1}}, {{2, 3, 4}}, {2, 3, 4}});
    CheckLayer({kind, {{"param_rank", 2}}, {{2, 3, 4}}, {2, 3, 4}});  // position embeddings
    // A 3x1x1 parameter over 2x3x2x2 (ConvNeXt's layer scale): bits 1 and 2 are broadcast.
    CheckLayer({kind, {{"param_rank", 3}, {"param_broadcast_axes", 0b110}}, {{2, 3, 2, 2}}, {2, 3, 2, 2}});
  }
}

TEST(LayerGradients, MatMul) {
  CheckLayer({"matmul", {}, {{2, 3, 4}, {2, 4, 5}}, {2, 3, 5}});
  CheckLayer({"matmul", {}, {{2, 2, 3, 4}, {2, 2, 4, 3}}, {2, 2, 3, 3}});  // attention, per head
  CheckLayer({"matmul", {}, {{2, 2, 3, 4}, {4, 5}}, {2, 2, 3, 5}});        // B broadcast over the batch
}

TEST(LayerGradients, Softmax) { CheckLayer({"softmax", {{"axis", 2}}, {{2, 3, 4}}, {2, 3, 4}}); }

TEST(LayerGradients, LayerNorm) { CheckLayer({"layernorm", {}, {{2, 3, 8}}, {2, 3, 8}}); }

TEST(LayerGradients, ReduceMean) {
  CheckLayer({"reduce_mean", {{"axes", 0b1100}, {"keepdims", 0}}, {{2, 3, 4, 4}}, {2, 3}});
  CheckLayer({"reduce_mean", {{"axes", 0b100}, {"keepdims", 1}}, {{2, 3, 4}}, {2, 3, 1}});
}

TEST(LayerGradients, Concat) { CheckLayer({"concat", {{"axis", 1}}, {{2, 3, 2}, {2, 1, 2}}, {2, 4, 2}}); }

TEST(LayerGradients, Transpose) {
  CheckLayer({"transpose", {{"perm", 213}}, {{2, 3, 4, 5}}, {2, 4, 3, 5}});  // 0 2 1 3
  CheckLayer({"transpose", {{"perm", 120}}, {{3, 4, 5}}, {4, 5, 3}});
}

TEST(LayerGradients, Reshape) { CheckLayer({"reshape", {}, {{2, 3, 4}}, {6, 4}}); }

// Swin's patch merging: every other row from 1 (x[:, 1::2]), the rest of dX zero.
TEST(LayerGradients, StridedSlice) {
  CheckLayer({"slice", {{"axis", 1}, {"start", 1}, {"end", 4}, {"step", 2}}, {{2, 5, 3}}, {2, 2, 3}});
  CheckLayer({"slice", {{"axis", 2}, {"start", 0}, {"end", 3}, {"step", 2}}, {{2, 3, 4, 2}}, {2, 3, 2, 2}});
}

// Swin's relative position bias over logits (windows x batch, heads, N, N) with N = 2 x 2 tokens: a
// 9 x 2 table gathered by the relative position index; several (i, j) share a row, so its gradient sums.
TEST(LayerGradients, RelativePositionBias) {
  CheckLayer({"add_broadcast", {{"relative_position_window", 2}}, {{3, 2, 4, 4}}, {3, 2, 4, 4}});
}

// The shifted-window mask is a constant: dX is dY, nothing is trained.
TEST(LayerGradients, ShiftedWindowMask) {
  CheckLayer({"add_broadcast",
              {{"shifted_window_side", 4}, {"shifted_window_size", 2}, {"shifted_window_shift", 1}},
              {{2, 4, 2, 4, 4}},
              {2, 4, 2, 4, 4}});
}

// The bias is the table's row for each token pair's offset, as torchvision gathers it.
TEST(WindowBias, RelativePositionBiasGathersTheTableByOffset) {
  Backend backend;
  auto made = MakeLayer(backend, {"add_broadcast", {{"relative_position_window", 2}}, {{1, 2, 4, 4}}, {1, 2, 4, 4}}, 3);
  ASSERT_TRUE(made.ok()) << made.status().message();
  Layer& layer = **made;
  ASSERT_EQ(layer.params().size(), 1u);
  Tensor& table = *layer.params()[0];
  ASSERT_EQ(table.dims, (Dims{9, 2}));
  for (int64_t i = 0; i < 18; ++i) table.data[i] = static_cast<float>(i);
  std::fill(layer.inputs()[0].data.begin(), layer.inputs()[0].data.end(), 0.0f);
  layer.Forward();
  // Token 0 is (0, 0), token 3 is (1, 1): offset (-1, -1) -> row (0 * 3 + 0); (3, 0): (1, 1) -> row 8.
  EXPECT_EQ(layer.output().data[0 * 4 + 3], table.data[0 * 2 + 0]);       // head 0, i 0, j 3
  EXPECT_EQ(layer.output().data[16 + 3 * 4 + 0], table.data[8 * 2 + 1]);  // head 1, i 3, j 0
  EXPECT_EQ(layer.output().data[5], table.data[4 * 2 + 0]);               // head 0, i 1, j 1: no offset
}

TEST(WindowBias, ShiftedWindowMaskSeparatesTheRolledRegions) {
  // A 4 x 4 map in windows of 2 rolled by 1: the last window holds tokens from four regions.
  const std::vector<float> mask = graph::ShiftedWindowMask(4, 2, 1);
  ASSERT_EQ(mask.size(), 4u * 4 * 4);
  for (int64_t i = 0; i < 4; ++i) {
    for (int64_t j = 0; j < 4; ++j) EXPECT_EQ(mask[i * 4 + j], 0.0f) << "window 0 is one region";
  }
  const float* last = mask.data() + 3 * 16;
  for (int64_t i = 0; i < 4; ++i) {
    for (int64_t j = 0; j < 4; ++j) EXPECT_EQ(last[i * 4 + j], i == j ? 0.0f : -100.0f);
  }
}

TEST(LayerGradients, Slice) {
  CheckLayer({"slice", {{"axis", 1}, {"start", 1}, {"end", 3}}, {{2, 4, 3}}, {2, 2, 3}});
  CheckLayer({"slice", {{"axis", 1}, {"start", 0}, {"end", 1}}, {{2, 4, 3}}, {2, 3}});  // Gather of index 0
}

TEST(LayerGradients, Embedding) { CheckLayer({"embedding", {{"vocabulary", 7}, {"dim", 3}}, {{2, 4}}, {2, 4, 3}}); }

// Backward through time: (time 4, batch 2, features 3) into 5 hidden units; every parameter of
// torch.nn's layout (weight_ih, weight_hh, bias_ih, bias_hh) against central differences.
// fill_bits 3323740160: -10000.0f (a finite fill, so that the objective stays finite).
TEST(LayerGradients, CausalMask) {
  CheckLayer({"causal_mask", {{"fill_bits", 3323740160}}, {{2, 2, 4, 4}}, {2, 2, 4, 4}});
}

TEST(CausalMask, KeepsThePastAndFillsTheFuture) {
  Backend backend;
  auto made = MakeLayer(backend, {"causal_mask", {{"fill_bits", 0xff800000}}, {{1, 3, 3}}, {1, 3, 3}}, 3);  // -inf
  ASSERT_TRUE(made.ok()) << made.status().message();
  Layer& layer = **made;
  layer.Forward();
  for (int r = 0; r < 3; ++r) {
    for (int c = 0; c < 3; ++c) {
      const float y = layer.output().data[r * 3 + c];
      if (c > r) {
        EXPECT_TRUE(std::isinf(y) && y < 0) << r << "," << c;
      } else {
        EXPECT_EQ(y, layer.inputs()[0].data[r * 3 + c]) << r << "," << c;
      }
    }
  }
}

TEST(LayerGradients, ResizeNearest) { CheckLayer({"resize", {{"linear", 0}}, {{2, 3, 3, 4}}, {2, 3, 6, 8}}); }
TEST(LayerGradients, ResizeBilinear) { CheckLayer({"resize", {{"linear", 1}}, {{2, 3, 3, 4}}, {2, 3, 6, 8}}); }

// F.interpolate(scale_factor=2) of one 2x2 plane: nearest repeats each value (floor(dst / 2)); bilinear
// with half-pixel centres gives the corners as they are and 3/4-1/4 blends between them.
TEST(Resize, MatchesPyTorchsInterpolation) {
  Backend backend;
  for (int linear : {0, 1}) {
    auto made = MakeLayer(backend, {"resize", {{"linear", linear}}, {{1, 1, 2, 2}}, {1, 1, 4, 4}}, 3);
    ASSERT_TRUE(made.ok()) << made.status().message();
    Layer& layer = **made;
    layer.inputs()[0].data = {1, 2, 3, 4};
    layer.Forward();
    const std::vector<float> expected =
        linear ? std::vector<float>{1, 1.25, 1.75, 2, 1.5, 1.75, 2.25, 2.5, 2.5, 2.75, 3.25, 3.5, 3, 3.25, 3.75, 4}
               : std::vector<float>{1, 1, 2, 2, 1, 1, 2, 2, 3, 3, 4, 4, 3, 3, 4, 4};
    for (size_t i = 0; i < expected.size(); ++i) EXPECT_FLOAT_EQ(layer.output().data[i], expected[i]) << linear << " " << i;
  }
}

TEST(LayerGradients, Lstm) { CheckLayer({"lstm", {{"hidden", 5}}, {{4, 2, 3}}, {4, 1, 2, 5}}); }
TEST(LayerGradients, Gru) { CheckLayer({"gru", {{"hidden", 5}}, {{4, 2, 3}}, {4, 1, 2, 5}}); }

// PyTorch's GRU, written out for one step from a zero state (h' = (1 - z) n, n = tanh(W_n x + b_in +
// r (b_hn))): the reset gate multiplies the recurrent bias (linear before reset), gates r z n.
TEST(Recurrent, GruFollowsPyTorchsEquations) {
  Backend backend;
  auto made = MakeLayer(backend, {"gru", {{"hidden", 2}}, {{1, 1, 3}}, {1, 1, 1, 2}}, 3);
  ASSERT_TRUE(made.ok()) << made.status().message();
  Layer& layer = **made;
  layer.Forward();
  const std::vector<float>& x = layer.inputs()[0].data;
  const std::vector<float>& w = layer.params()[0]->data;  // (3 * 2, 3): r, z, n
  const std::vector<float>& b_ih = layer.params()[2]->data;
  const std::vector<float>& b_hh = layer.params()[3]->data;
  auto gate = [&](int g, int h) {
    double s = b_ih[g * 2 + h];
    for (int i = 0; i < 3; ++i) s += w[(g * 2 + h) * 3 + i] * x[i];
    return s;
  };
  auto sigmoid = [](double v) { return 1 / (1 + std::exp(-v)); };
  for (int h = 0; h < 2; ++h) {
    const double r = sigmoid(gate(0, h) + b_hh[h]);
    const double z = sigmoid(gate(1, h) + b_hh[2 + h]);
    const double n = std::tanh(gate(2, h) + r * b_hh[4 + h]);
    EXPECT_NEAR(layer.output().data[h], (1 - z) * n, 1e-5) << "unit " << h;
  }
}

// Forward and backward of the new kernels give the same bits run to run (fixed thread count).
TEST(Layers, NewKernelsAreDeterministic) {
  const std::vector<LayerSpec> specs = {
      {"conv2d", {{"kernel", 3}, {"stride", 1}, {"padding", 1}, {"groups", 4}}, {{2, 4, 6, 6}}, {2, 4, 6, 6}},
      {"gelu", {}, {{4, 16}}, {4, 16}},
      {"mul", {}, {{2, 8, 4, 4}, {2, 8, 1, 1}}, {2, 8, 4, 4}},
      {"matmul", {}, {{2, 4, 8, 16}, {2, 4, 16, 8}}, {2, 4, 8, 8}},
      {"softmax", {{"axis", 1}}, {{8, 16}}, {8, 16}},
      {"layernorm", {}, {{2, 8, 16}}, {2, 8, 16}},
      {"reduce_mean", {{"axes", 0b1100}, {"keepdims", 0}}, {{2, 8, 4, 4}}, {2, 8}},
      {"embedding", {{"vocabulary", 50}, {"dim", 8}}, {{2, 6}}, {2, 6, 8}},
      {"lstm", {{"hidden", 8}}, {{5, 2, 4}}, {5, 1, 2, 8}},
      {"gru", {{"hidden", 8}}, {{5, 2, 4}}, {5, 1, 2, 8}},
  };
  for (const LayerSpec& spec : specs) {
    SCOPED_TRACE(spec.kind);
    Backend backend;
    std::vector<std::vector<float>> runs[2];
    for (auto& run : runs) {
      auto made = MakeLayer(backend, spec, 5);
      ASSERT_TRUE(made.ok()) << made.status().message();
      Layer& layer = **made;
      for (int repeat = 0; repeat < 2; ++repeat) {
        layer.Forward();
        layer.BackwardInput();
        if (layer.HasParameters()) layer.BackwardWeights();
      }
      run.push_back(layer.output().data);
      for (const Tensor& g : layer.grad_inputs()) run.push_back(g.data);
      for (const Tensor* g : layer.grad_params()) run.push_back(g->data);
    }
    EXPECT_EQ(runs[0], runs[1]);
  }
}

// The training executor binds activations to its own memory (Layer::Bind): the new kernels,
// the embedding's copy loops too, then read and write there.
TEST(Layers, NewKernelsFollowBind) {
  const std::vector<LayerSpec> specs = {
      {"embedding", {{"vocabulary", 50}, {"dim", 8}}, {{2, 6}}, {2, 6, 8}},
      {"slice", {{"axis", 1}, {"start", 1}, {"end", 3}}, {{2, 4, 3}}, {2, 2, 3}},
      {"concat", {{"axis", 1}}, {{2, 3, 2}, {2, 1, 2}}, {2, 4, 2}},
      {"transpose", {{"perm", 213}}, {{2, 3, 4, 5}}, {2, 4, 3, 5}},
      {"matmul", {}, {{2, 3, 4}, {2, 4, 5}}, {2, 3, 5}},
      {"mul", {}, {{2, 3, 4, 4}, {2, 3, 1, 1}}, {2, 3, 4, 4}},
      {"layernorm", {}, {{2, 3, 8}}, {2, 3, 8}},
      {"lstm", {{"hidden", 4}}, {{3, 2, 3}}, {3, 1, 2, 4}},
      {"gru", {{"hidden", 4}}, {{3, 2, 3}}, {3, 1, 2, 4}},
  };
  for (const LayerSpec& spec : specs) {
    SCOPED_TRACE(spec.kind);
    Backend backend;
    auto reference = MakeLayer(backend, spec, 5);
    auto bound = MakeLayer(backend, spec, 5);
    ASSERT_TRUE(reference.ok() && bound.ok());
    Layer& ref = **reference;
    Layer& layer = **bound;
    ref.Forward();
    ref.BackwardInput();
    // Copies of every activation in memory the layer does not own, then bound.
    std::vector<std::vector<float>> arena;
    auto bind = [&](Tensor& t) {
      arena.push_back(t.data);
      arena.back().push_back(0.0f);  // never empty, even for a bound scalar
      layer.Bind(t, arena.back().data());
      return arena.size() - 1;
    };
    std::vector<size_t> inputs, grad_inputs;
    for (Tensor& t : layer.inputs()) inputs.push_back(bind(t));
    for (Tensor& t : layer.grad_inputs()) grad_inputs.push_back(bind(t));
    const size_t output = bind(layer.output());
    const size_t grad_output = bind(layer.grad_output());
    (void)inputs;
    (void)grad_output;
    layer.Forward();
    layer.BackwardInput();
    EXPECT_EQ(std::vector<float>(arena[output].begin(), arena[output].end() - 1), ref.output().data);
    for (size_t k = 0; k < grad_inputs.size(); ++k) {
      EXPECT_EQ(std::vector<float>(arena[grad_inputs[k]].begin(), arena[grad_inputs[k]].end() - 1),
                ref.grad_inputs()[k].data);
    }
  }
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
  auto layer = MakeLayer(backend, {"ctc_loss", {}, {{1, 2}}, {1, 2}});
  ASSERT_FALSE(layer.ok());
  EXPECT_EQ(layer.status().code(), ErrorCode::kUnimplemented);
  EXPECT_NE(layer.status().message().find("ctc_loss"), std::string::npos);
}

TEST(Layers, MaxPoolingHasAWorkspace) {
  Backend backend;
  auto layer = MakeLayer(backend, {"maxpool2d", {{"kernel", 2}, {"stride", 2}}, {{1, 4, 8, 8}}, {1, 4, 4, 4}});
  ASSERT_TRUE(layer.ok());
  EXPECT_GT((*layer)->workspace_bytes(), 0u);
}

// The layers of a Backend share one scratchpad: its size is the largest need of one primitive, not
// the sum, and no layer counts it as its own. A layer built before the buffer grew (and moved)
// computes bit for bit what it computes on a Backend of its own.
TEST(Layers, LayersShareOneScratchpadTheSizeOfTheLargestNeed) {
  const std::map<std::string, int64_t> same = {{"kernel", 3}, {"stride", 1}, {"padding", 1}};
  const std::vector<LayerSpec> specs = {
      {"conv2d", same, {{1, 3, 8, 8}}, {1, 8, 8, 8}},  // the smallest first, so the buffer grows after it
      {"conv2d", same, {{2, 16, 16, 16}}, {2, 32, 16, 16}},
      {"conv2d", {{"kernel", 3}, {"stride", 2}, {"padding", 1}}, {{2, 32, 16, 16}}, {2, 64, 8, 8}},
      {"linear", {}, {{4, 64}}, {4, 32}},
  };
  Backend shared;
  std::vector<std::unique_ptr<Layer>> layers;
  uint64_t largest = 0, sum = 0;
  int needing = 0;
  for (const LayerSpec& spec : specs) {
    auto layer = MakeLayer(shared, spec, 5);
    ASSERT_TRUE(layer.ok()) << layer.status().message();
    largest = std::max(largest, (*layer)->scratchpad_bytes());
    sum += (*layer)->scratchpad_bytes();
    needing += (*layer)->scratchpad_bytes() > 0;
    layers.push_back(std::move(*layer));
  }
  if (largest == 0) GTEST_SKIP() << "oneDNN asks these kernels for no scratchpad on this CPU";
  EXPECT_EQ(shared.scratchpad_bytes(), largest);
  if (needing > 1) {
    EXPECT_LT(shared.scratchpad_bytes(), sum);
  }
  for (size_t i = 0; i < specs.size(); ++i) {
    SCOPED_TRACE(specs[i].kind + " " + std::to_string(i));
    Backend own;
    auto alone = MakeLayer(own, specs[i], 5);
    ASSERT_TRUE(alone.ok());
    uint64_t params = 0;
    for (Tensor* p : layers[i]->params()) params += p->bytes();
    for (Tensor* g : layers[i]->grad_params()) params += g->bytes();
    EXPECT_EQ(layers[i]->owned_bytes(), (*alone)->owned_bytes());
    EXPECT_LT(layers[i]->owned_bytes(), params + layers[i]->scratchpad_bytes() + 1) << "the scratchpad is not owned";
    for (Layer* layer : {layers[i].get(), alone->get()}) {
      layer->Forward();
      layer->BackwardInput();
      layer->BackwardWeights();
    }
    EXPECT_EQ(layers[i]->output().data, (*alone)->output().data);
    EXPECT_EQ(layers[i]->grad_inputs()[0].data, (*alone)->grad_inputs()[0].data);
    for (size_t k = 0; k < layers[i]->grad_params().size(); ++k) {
      EXPECT_EQ(layers[i]->grad_params()[k]->data, (*alone)->grad_params()[k]->data);
    }
  }
}

// A fused batch norm's results beside those of the batch norm then the activation, each as
// {y, dX, dgamma, dbeta}, and the fused layer's bias-only dbeta. Every scale is `gamma`.
struct FusedAndApart {
  std::vector<std::vector<float>> fused, apart;
  std::vector<float> fused_bias_only_dbeta;
};
FusedAndApart RunFusedAndApart(const std::string& fused_kind, const std::string& activation_kind, const Dims& shape,
                               float gamma) {
  Backend backend;
  auto fused = MakeLayer(backend, {fused_kind, {}, {shape}, shape}, 3);
  auto norm = MakeLayer(backend, {"batchnorm2d", {}, {shape}, shape}, 3);
  auto activation = MakeLayer(backend, {activation_kind, {}, {shape}, shape}, 3);
  if (!fused.ok() || !norm.ok() || !activation.ok()) {
    ADD_FAILURE() << "cannot make " << fused_kind << " or " << activation_kind;
    return {};
  }
  Layer &f = **fused, &bn = **norm, &act = **activation;
  for (Layer* layer : {&f, &bn}) std::fill(layer->params()[0]->data.begin(), layer->params()[0]->data.end(), gamma);
  bn.inputs()[0].data = f.inputs()[0].data;
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (float& g : f.grad_output().data) g = normal(rng);
  act.grad_output().data = f.grad_output().data;
  f.Forward();
  bn.Forward();
  act.inputs()[0].data = bn.output().data;
  act.Forward();
  f.BackwardInput();
  act.BackwardInput();
  bn.grad_output().data = act.grad_inputs()[0].data;
  bn.BackwardInput();
  FusedAndApart result{
      .fused = {f.output().data, f.grad_inputs()[0].data, f.grad_params()[0]->data, f.grad_params()[1]->data},
      .apart = {act.output().data, bn.grad_inputs()[0].data, bn.grad_params()[0]->data, bn.grad_params()[1]->data}};
  std::fill(f.grad_params()[1]->data.begin(), f.grad_params()[1]->data.end(), 0.0f);
  f.BackwardBias();
  result.fused_bias_only_dbeta = f.grad_params()[1]->data;
  return result;
}

const std::vector<Dims> kBothBatchNormLoops = {{4, 3, 5, 5}, {4, 3, 2, 2}};  // one channel at a time; lanes

// A batch norm with ReLU or ReLU6 fused computes what the batch norm then the activation compute,
// bit for bit: its output, dX, dgamma and dbeta, and the bias-only pass's dbeta. The scale is large
// enough that ReLU6's upper bound cuts too.
TEST(Layers, FusedBatchNormActivationIsBatchNormThenActivationBitForBit) {
  for (const auto& [fused_kind, activation_kind] :
       std::vector<std::pair<std::string, std::string>>{{"batchnorm2d_relu", "relu"}, {"batchnorm2d_relu6", "relu6"}}) {
    for (const Dims& shape : kBothBatchNormLoops) {
      SCOPED_TRACE(fused_kind + " on " + std::to_string(shape[2]) + "x" + std::to_string(shape[3]));
      const FusedAndApart run = RunFusedAndApart(fused_kind, activation_kind, shape, 8.0f);
      ASSERT_EQ(run.fused.size(), 4u);
      EXPECT_EQ(run.fused, run.apart);
      EXPECT_EQ(run.fused_bias_only_dbeta, run.apart[3]);
      if (activation_kind == "relu6") {
        EXPECT_GT(std::count(run.fused[0].begin(), run.fused[0].end(), 6.0f), 0);
      }
    }
  }
}

// With SiLU or HardSwish fused, to float rounding: SiLU's exp is a polynomial of its own, so that
// the loop vectorizes. The scale reaches the saturated ends of both.
TEST(Layers, FusedBatchNormSiluAndHardSwishAreBatchNormThenTheActivation) {
  for (const auto& [fused_kind, activation_kind] : std::vector<std::pair<std::string, std::string>>{
           {"batchnorm2d_silu", "silu"}, {"batchnorm2d_hardswish", "hardswish"}}) {
    for (const Dims& shape : kBothBatchNormLoops) {
      SCOPED_TRACE(fused_kind + " on " + std::to_string(shape[2]) + "x" + std::to_string(shape[3]));
      const FusedAndApart run = RunFusedAndApart(fused_kind, activation_kind, shape, 30.0f);
      ASSERT_EQ(run.fused.size(), 4u);
      for (size_t k = 0; k <= 4; ++k) {  // y, dX, dgamma, dbeta, then the bias-only dbeta
        const std::vector<float>& want = run.apart[std::min<size_t>(k, 3)];
        const std::vector<float>& got = k == 4 ? run.fused_bias_only_dbeta : run.fused[k];
        ASSERT_EQ(got.size(), want.size());
        for (size_t i = 0; i < got.size(); ++i) {
          EXPECT_NEAR(got[i], want[i], 1e-5f * std::max(1.0f, std::fabs(want[i]))) << "result " << k << ", value " << i;
        }
      }
    }
  }
}

// Batch norm's sums run in an order fixed by the shape: a team of two gives one thread's bits.
TEST(Layers, BatchNormGivesTheSameBitsOnOneThreadAndOnTwo) {
  for (const Dims& shape : {Dims{2, 600, 2, 2}, Dims{4, 6, 9, 9}}) {  // three blocks of lanes; six channels
    SCOPED_TRACE(std::to_string(shape[2]) + "x" + std::to_string(shape[3]));
    for (const char* kind : {"batchnorm2d_relu6", "batchnorm2d_silu", "batchnorm2d_hardswish"}) {
      SCOPED_TRACE(kind);
      std::vector<std::vector<float>> results[2];
      for (int threads : {1, 2}) {
        const TeamScope team(threads);
        Backend backend;
        auto made = MakeLayer(backend, {kind, {}, {shape}, shape}, 3);
        ASSERT_TRUE(made.ok());
        Layer& layer = **made;
        layer.Forward();
        layer.BackwardInput();
        results[threads - 1] = {layer.output().data, layer.grad_inputs()[0].data, layer.grad_params()[0]->data,
                                layer.grad_params()[1]->data};
      }
      EXPECT_EQ(results[0], results[1]);
    }
  }
}

// ---- Channels-last feature maps (graph/layouts.h) ------------------------------------------------

// t (dims N, C, H, W) with its elements moved between NCHW and NHWC order.
std::vector<float> Permuted(const Tensor& t, bool to_channels_last) {
  const int64_t n = t.dims[0], c = t.dims[1], hw = t.dims[2] * t.dims[3];
  std::vector<float> out(t.data.size());
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t k = 0; k < c; ++k) {
      for (int64_t p = 0; p < hw; ++p) {
        const int64_t nchw = (i * c + k) * hw + p, nhwc = (i * hw + p) * c + k;
        if (to_channels_last) {
          out[nhwc] = t.data[nchw];
        } else {
          out[nchw] = t.data[nhwc];
        }
      }
    }
  }
  return out;
}

void ExpectSame(const Tensor& nchw, const Tensor& other, const std::string& what) {
  const std::vector<float> got = other.channels_last ? Permuted(other, false) : other.data;
  ASSERT_EQ(got.size(), nchw.data.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], nchw.data[i], 1e-4 * std::max(1.0f, std::fabs(nchw.data[i]))) << what << " element " << i;
  }
}

// The layer `spec` with channels-last tensors (its attributes nhwc_inputs and nhwc_output) computes
// what the same layer on NCHW does: the same output, input gradients and parameter gradients, each
// pass run on inputs, dY and parameters that are the NCHW layer's, moved to their layout.
void ExpectSameAsNchw(const LayerSpec& spec) {
  SCOPED_TRACE(spec.kind);
  LayerSpec plain = spec;
  plain.attributes.erase(graph::kChannelsLastInputsAttribute);
  plain.attributes.erase(graph::kChannelsLastOutputAttribute);
  Backend backend;
  auto a = MakeLayer(backend, plain, 3);
  auto b = MakeLayer(backend, spec, 3);
  ASSERT_TRUE(a.ok()) << a.status().message();
  ASSERT_TRUE(b.ok()) << b.status().message();
  Layer& nchw = **a;
  Layer& other = **b;
  const auto copy = [](const Tensor& from, Tensor& to) {
    to.data = to.channels_last ? Permuted(from, true) : from.data;
  };
  for (size_t k = 0; k < nchw.inputs().size(); ++k) copy(nchw.inputs()[k], other.inputs()[k]);
  copy(nchw.grad_output(), other.grad_output());
  for (size_t k = 0; k < nchw.params().size(); ++k) other.params()[k]->data = nchw.params()[k]->data;
  for (Layer* layer : {&nchw, &other}) {
    layer->Forward();
    layer->BackwardInput();
  }
  ExpectSame(nchw.output(), other.output(), "output");
  for (size_t k = 0; k < nchw.inputs().size(); ++k) {
    ExpectSame(nchw.grad_inputs()[k], other.grad_inputs()[k], "input gradient " + std::to_string(k));
  }
  if (!nchw.HasParameters()) return;
  for (Layer* layer : {&nchw, &other}) layer->BackwardWeights();
  for (size_t k = 0; k < nchw.params().size(); ++k) {
    ExpectSame(*nchw.grad_params()[k], *other.grad_params()[k], "parameter gradient " + std::to_string(k));
  }
  for (Layer* layer : {&nchw, &other}) {  // the bias-only pass
    for (Tensor* g : layer->grad_params()) std::fill(g->data.begin(), g->data.end(), 0.0f);
    layer->BackwardBias();
  }
  ExpectSame(*nchw.grad_params().back(), *other.grad_params().back(), "bias-only gradient");
}

LayerSpec ChannelsLast(LayerSpec spec, int64_t inputs = 1, int64_t output = 1) {
  if (inputs) spec.attributes[graph::kChannelsLastInputsAttribute] = inputs;
  if (output) spec.attributes[graph::kChannelsLastOutputAttribute] = output;
  return spec;
}

TEST(ChannelsLast, ConvolutionsMatchNchw) {
  // Depthwise, 18 channels (a block of 16 and part of one), stride 2.
  ExpectSameAsNchw(ChannelsLast(
      {"conv2d", {{"kernel", 3}, {"stride", 2}, {"padding", 1}, {"groups", 18}}, {{2, 18, 6, 6}}, {2, 18, 3, 3}}));
  // Depthwise 5x5 on a 2x2 map: the layer's own weight gradient.
  ExpectSameAsNchw(ChannelsLast(
      {"conv2d", {{"kernel", 5}, {"stride", 1}, {"padding", 2}, {"groups", 6}}, {{2, 6, 2, 2}}, {2, 6, 2, 2}}));
  // 1x1: one matmul over the pixels, with a bias; then with a plain input or a plain output staged.
  const LayerSpec pointwise{"conv2d", {{"kernel", 1}, {"stride", 1}, {"padding", 0}}, {{2, 8, 3, 3}}, {2, 12, 3, 3}};
  ExpectSameAsNchw(ChannelsLast(pointwise));
  ExpectSameAsNchw(ChannelsLast(pointwise, 0, 1));
  ExpectSameAsNchw(ChannelsLast(pointwise, 1, 0));
  // A dense 3x3 with its input channels-last and its output NCHW.
  ExpectSameAsNchw(ChannelsLast(
      {"conv2d", {{"kernel", 3}, {"stride", 1}, {"padding", 1}, {"no_bias", 1}}, {{2, 5, 4, 4}}, {2, 7, 4, 4}}, 1, 0));
}

TEST(ChannelsLast, SparseUpdateOfAConvolutionMatchesNchw) {
  ExpectSameAsNchw(ChannelsLast({"conv2d",
                                 {{"kernel", 3}, {"stride", 1}, {"padding", 1}, {"groups", 1}, {"update_channels", 3}},
                                 {{2, 4, 4, 4}},
                                 {2, 8, 4, 4}}));
}

TEST(ChannelsLast, BatchNormsMatchNchw) {
  for (const char* kind :
       {"batchnorm2d", "batchnorm2d_relu", "batchnorm2d_relu6", "batchnorm2d_silu", "batchnorm2d_hardswish"}) {
    ExpectSameAsNchw(ChannelsLast({kind, {}, {{2, 20, 5, 5}}, {2, 20, 5, 5}}));
    ExpectSameAsNchw(ChannelsLast({kind, {}, {{3, 24, 2, 2}}, {3, 24, 2, 2}}));  // NCHW's lanes on small maps
  }
  // Enough rows for several chunks of the sums, summed in a fixed order.
  ExpectSameAsNchw(ChannelsLast({"batchnorm2d_relu6", {}, {{2, 8, 32, 40}}, {2, 8, 32, 40}}));
}

TEST(ChannelsLast, ElementwisePoolingAndAddMatchNchw) {
  for (const char* kind : {"relu", "relu6", "hardswish", "sigmoid", "silu"}) {
    ExpectSameAsNchw(ChannelsLast({kind, {}, {{2, 3, 4, 4}}, {2, 3, 4, 4}}));
  }
  ExpectSameAsNchw(
      ChannelsLast({"maxpool2d", {{"kernel", 3}, {"stride", 2}, {"padding", 1}}, {{2, 5, 6, 6}}, {2, 5, 3, 3}}));
  ExpectSameAsNchw(ChannelsLast({"avgpool2d", {{"kernel", 4}, {"stride", 4}}, {{2, 5, 4, 4}}, {2, 5, 1, 1}}));
  ExpectSameAsNchw(ChannelsLast({"add", {}, {{2, 3, 4, 4}, {2, 3, 4, 4}}, {2, 3, 4, 4}}, 0b11, 1));
  // Squeeze-excite's product by a scale per channel and image, and a product of two maps.
  ExpectSameAsNchw(ChannelsLast({"mul", {}, {{2, 5, 3, 3}, {2, 5, 1, 1}}, {2, 5, 3, 3}}, 0b11, 1));
  ExpectSameAsNchw(ChannelsLast({"mul", {}, {{2, 5, 3, 3}, {2, 5, 3, 3}}, {2, 5, 3, 3}}, 0b11, 1));
  ExpectSameAsNchw(ChannelsLast({"mul", {}, {{2, 5, 1, 1}, {2, 5, 3, 3}}, {2, 5, 3, 3}}, 0b11, 1));  // the scale first
}

TEST(ChannelsLast, ANumericalGradientAgreesInTheLayout) {
  CheckLayer(ChannelsLast({"batchnorm2d_silu", {}, {{2, 6, 3, 3}}, {2, 6, 3, 3}}));
  CheckLayer(ChannelsLast({"conv2d", {{"kernel", 1}, {"stride", 1}, {"padding", 0}}, {{2, 4, 3, 3}}, {2, 5, 3, 3}}));
}

TEST(ChannelsLast, KindsThatTakeNchwAloneRefuseIt) {
  Backend backend;
  const auto refused = [&](const LayerSpec& spec, const std::string& why) {
    auto made = MakeLayer(backend, spec);
    ASSERT_FALSE(made.ok()) << spec.kind;
    EXPECT_NE(made.status().message().find(why), std::string::npos) << made.status().message();
  };
  refused(ChannelsLast({"flatten", {}, {{2, 2, 2, 2}}, {2, 8}}, 1, 0), "NCHW alone");
  refused(ChannelsLast({"mul", {}, {{2, 1, 3, 3}, {2, 5, 3, 3}}, {2, 5, 3, 3}}, 0b11, 1), "NCHW alone");
  refused(ChannelsLast({"relu", {}, {{2, 3, 4, 4}}, {2, 3, 4, 4}}, 1, 0), "alike");
  refused(ChannelsLast({"relu", {}, {{2, 3}}, {2, 3}}), "not 4-D");
  refused(ChannelsLast({"relu", {}, {{2, 3, 4, 4}}, {2, 3, 4, 4}}, 0b10, 1), "does not have");
}

}  // namespace
}  // namespace edgecost::kernels
