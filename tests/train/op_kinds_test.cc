// Every op kind the profiler has, trained by the executor: a small graph per kind in which the
// kind's gradient flows to trainable layers below it. For each: the gradients are right (a
// directional finite difference of the executor's own loss, per trained parameter), and every
// schedule (optimal, sqrt, revolve, paging-only, random mixes of the heuristics' policies at random
// budgets) gives the plain step's gradients bit for bit at the same thread count.
#include <omp.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <random>

#include <gtest/gtest.h>

#include "graph/cost_source.h"
#include "graph/derive.h"
#include "solver/heuristics.h"
#include "solver/plan.h"
#include "solver/problem.h"
#include "solver/simulator.h"
#include "solver/solve.h"
#include "tests/temp_dir.h"
#include "train/executor.h"

namespace edgecost::train {
namespace {

using graph::ForwardGraph;
using graph::OpKind;

struct KindGraph {
  std::string name;
  std::function<ForwardGraph()> build;
  graph::Trainable trainable = {};
};

// x (2, 6) -> linear -> `op` -> linear -> loss: the op's gradient reaches the first linear layer.
KindGraph UnaryGraph(OpKind kind, std::map<std::string, int64_t> attributes = {}) {
  return {std::string(graph::OpKindName(kind)), [=] {
            ForwardGraph g(std::string(graph::OpKindName(kind)), 2);
            const int h = g.Linear(g.Input({2, 6}), 6, 8);
            const int y = g.Unary(kind, h, attributes);
            g.CrossEntropyLoss(g.Linear(y, 8, 4), 4);
            return g;
          }};
}

// x (2, 6) -> linear -> dropout at a ratio of one half -> linear -> loss.
KindGraph DropoutGraph() {
  return {"dropout", [] {
            ForwardGraph g("dropout", 2);
            const int h = g.Linear(g.Input({2, 6}), 6, 8);
            g.CrossEntropyLoss(g.Linear(g.Dropout(h, 0.5), 8, 4), 4);
            return g;
          }};
}

// Two activations, each from a linear layer of its own, combined by `kind`. `b_features` 1
// broadcasts the second operand over the first's last axis; `positive` keeps it in [1, 2] (a divisor).
KindGraph BinaryGraph(OpKind kind, int64_t b_features, bool positive) {
  const std::string name = std::string(graph::OpKindName(kind)) + (b_features == 1 ? "_broadcast" : "");
  return {name, [=] {
            ForwardGraph g(name, 2);
            const int x = g.Input({2, 6});
            const int a = g.Linear(x, 6, 8);
            int b = g.Linear(x, 6, b_features);
            if (positive)
              b = g.Unary(OpKind::kAffine, g.Unary(OpKind::kSigmoid, b), {{"alpha_e6", 1000000}, {"beta_e6", 1000000}});
            g.CrossEntropyLoss(g.Linear(g.Binary(kind, a, b), 8, 4), 4);
            return g;
          }};
}

// An activation and a trainable parameter.
KindGraph BinaryParamGraph(OpKind kind) {
  const std::string name = std::string(graph::OpKindName(kind)) + "_param";
  return {name, [=] {
            ForwardGraph g(name, 2);
            const int h = g.Linear(g.Input({2, 6}), 6, 8);
            g.CrossEntropyLoss(g.Linear(g.BinaryParam(kind, h, {8}), 8, 4), 4);
            return g;
          }};
}

std::vector<KindGraph> KindGraphs() {
  std::vector<KindGraph> graphs;
  for (OpKind kind : {OpKind::kRelu6, OpKind::kHardSwish, OpKind::kHardSigmoid, OpKind::kSigmoid, OpKind::kTanh,
                      OpKind::kGelu, OpKind::kSilu}) {
    graphs.push_back(UnaryGraph(kind));
  }
  graphs.push_back(UnaryGraph(OpKind::kPow, {{"exponent", 3}}));
  // Dropout at half: the mask of a step is drawn once, so a finite difference (plain steps without an
  // update in between) and every recomputing schedule see the same one.
  graphs.push_back(DropoutGraph());
  graphs.push_back(UnaryGraph(OpKind::kAffine, {{"alpha_e6", -1500000}, {"beta_e6", 250000}}));
  graphs.push_back({"sqrt", [] {  // of x^2 + 1: positive
                      ForwardGraph g("sqrt", 2);
                      const int h = g.Linear(g.Input({2, 6}), 6, 8);
                      const int p = g.Unary(OpKind::kAffine, g.Unary(OpKind::kPow, h, {{"exponent", 2}}),
                                            {{"alpha_e6", 1000000}, {"beta_e6", 1000000}});
                      g.CrossEntropyLoss(g.Linear(g.Unary(OpKind::kSqrt, p), 8, 4), 4);
                      return g;
                    }});
  for (OpKind kind : {OpKind::kMul, OpKind::kSub, OpKind::kAddBroadcast}) {
    graphs.push_back(BinaryGraph(kind, 8, false));
    graphs.push_back(BinaryGraph(kind, 1, false));
    graphs.push_back(BinaryParamGraph(kind));
  }
  graphs.push_back(BinaryGraph(OpKind::kDiv, 8, true));
  graphs.push_back(BinaryGraph(OpKind::kDiv, 1, true));
  graphs.push_back(BinaryParamGraph(OpKind::kDiv));
  graphs.push_back({"matmul_transpose_softmax_reduce_mean", [] {
                      ForwardGraph g("attention_like", 2);
                      const int x = g.Input({2, 4, 6});
                      const int q = g.LinearNd(x, 6, 8, true);
                      const int k = g.Transpose(g.LinearNd(x, 6, 8, false), {0, 2, 1});
                      const int s = g.Softmax(g.MatMul(q, k), 2);
                      const int v = g.LinearNd(x, 6, 5, true);
                      const int c = g.MatMul(s, v);  // (2, 4, 5)
                      g.CrossEntropyLoss(g.Linear(g.ReduceMean(c, {1}, false), 5, 3), 3);
                      return g;
                    }});
  graphs.push_back({"matmul_broadcast", [] {  // a (4, 8) weight-like activation shared over the batch
                      ForwardGraph g("matmul_broadcast", 2);
                      const int x = g.Input({2, 4, 6});
                      const int a = g.LinearNd(x, 6, 8, true);
                      const int b = g.Slice(g.LinearNd(x, 6, 3, true), 0, 0, 1, true);  // (4, 3)
                      const int m = g.MatMul(g.Transpose(a, {0, 2, 1}), b);             // (2, 8, 3)
                      g.CrossEntropyLoss(g.Linear(g.Reshape(m, {2, 24}), 24, 3), 3);
                      return g;
                    }});
  graphs.push_back({"layernorm", [] {
                      ForwardGraph g("layernorm", 2);
                      const int h = g.LinearNd(g.Input({2, 4, 6}), 6, 8, true);
                      const int n = g.LayerNorm(h);
                      g.CrossEntropyLoss(g.Linear(g.Reshape(n, {2, 32}), 32, 4), 4);
                      return g;
                    }});
  graphs.push_back({"layernorm_on_input", [] {  // its parameters train, its input has no gradient
                      ForwardGraph g("layernorm_on_input", 2);
                      const int n = g.LayerNorm(g.Input({2, 4, 6}));
                      g.CrossEntropyLoss(g.Linear(g.Reshape(n, {2, 24}), 24, 4), 4);
                      return g;
                    }});
  graphs.push_back({"concat_slice_reshape", [] {
                      ForwardGraph g("concat", 2);
                      const int x = g.Input({2, 3, 4, 4});
                      const int a = g.Conv2d(x, 3, 4, 3, 1, 1);
                      const int b = g.Conv2d(x, 3, 2, 1, 1, 0);
                      const int c = g.Concat({a, x, b}, 1);  // x needs no gradient: its part is not kept
                      const int s = g.Slice(c, 1, 2, 8);     // channels 2..7
                      g.CrossEntropyLoss(g.Linear(g.Reshape(s, {2, 96}), 96, 4), 4);
                      return g;
                    }});
  graphs.push_back({"depthwise_conv_batchnorm", [] {
                      ForwardGraph g("depthwise", 2);
                      const int x = g.Input({2, 4, 6, 6});
                      const int d = g.Conv2d(x, 4, 4, 3, 1, 1, 4, false);
                      const int r = g.Unary(OpKind::kRelu6, g.BatchNorm2d(d));
                      const int p = g.Conv2d(r, 4, 6, 1, 1, 0);
                      g.CrossEntropyLoss(g.Linear(g.Flatten(g.ReduceMean(p, {2, 3}, true)), 6, 4), 4);
                      return g;
                    }});
  // Average pooling whose padding counts in the mean (Inception, DenseNet's exports), below a
  // convolution so that its gradient trains something.
  // A per-channel scale (ConvNeXt's layer scale, C x 1 x 1) on a convolution: the parameter is
  // broadcast over the spatial axes inside its own shape, its gradient summed over them.
  graphs.push_back({"layer_scale", [] {
                      ForwardGraph g("layer_scale", 2);
                      const int c = g.Conv2d(g.Input({2, 3, 4, 4}), 3, 4, 3, 1, 1);
                      const int s = g.BinaryParam(OpKind::kMul, c, {4, 1, 1});
                      g.CrossEntropyLoss(g.Linear(g.Flatten(s), 64, 4), 4);
                      return g;
                    }});
  // Inception's factorized 1x3 then 3x1 convolutions, each padded along its window's long axis.
  graphs.push_back({"conv2d_rectangular", [] {
                      ForwardGraph g("conv2d_rectangular", 2);
                      const int x = g.Input({2, 3, 5, 4});
                      const int a = g.Conv2d(x, 3, 4, graph::Hw{1, 3}, 1, graph::Hw{0, 1});
                      const int b = g.Conv2d(g.Relu(a), 4, 4, graph::Hw{3, 1}, 1, graph::Hw{1, 0});
                      g.CrossEntropyLoss(g.Linear(g.Flatten(b), 80, 4), 4);
                      return g;
                    }});
  graphs.push_back({"avgpool2d_count_include_pad", [] {
                      ForwardGraph g("avgpool_include_pad", 2);
                      const int c = g.Conv2d(g.Input({2, 3, 6, 6}), 3, 4, 3, 1, 1);
                      const int p = g.AvgPool2d(c, 3, 2, 1, /*count_include_pad=*/true);  // (2, 4, 3, 3)
                      g.CrossEntropyLoss(g.Linear(g.Flatten(p), 36, 4), 4);
                      return g;
                    }});
  // Swin's window attention: logits (batch x windows, heads, N, N) from a linear layer, the relative
  // position bias (a gathered table), the shifted-window mask, softmax; then patch merging's strided slice.
  graphs.push_back({"window_attention", [] {
                      ForwardGraph g("window_attention", 2);
                      const int x = g.LinearNd(g.Input({2, 4, 2, 4, 3}), 3, 4, true);  // (batch, windows, heads, N, N)
                      const int masked = g.ShiftedWindowMask(x, 4, 2, 1);
                      const int logits = g.Reshape(masked, {8, 2, 4, 4});
                      const int biased = g.RelativePositionBias(logits, 2);
                      const int s = g.StridedSlice(g.Softmax(biased, 3), 2, 1, 4, 2);  // (8, 2, 2, 4)
                      g.CrossEntropyLoss(g.Linear(g.Reshape(s, {2, 64}), 64, 3), 3);
                      return g;
                    }});
  graphs.push_back({"embedding", [] {
                      ForwardGraph g("embedding", 2);
                      const int e = g.Embedding(g.Input({2, 5}), 11, 6);  // (2, 5, 6)
                      const int h = g.BinaryParam(OpKind::kAddBroadcast, e, {5, 6});
                      g.CrossEntropyLoss(g.Linear(g.Slice(g.LayerNorm(h), 1, 0, 1, true), 6, 3), 3);
                      return g;
                    }});
  // Gradients that meet: h feeds a product directly and through a sigmoid (SiLU written out),
  // a product's operand is a residual add (a view: both of its inputs get that part), and a
  // concat of two views of one tensor gives it two parts of one gradient node.
  graphs.push_back({"gradients_that_meet", [] {
                      ForwardGraph g("meet", 2);
                      const int x = g.Input({2, 6});
                      const int h = g.Linear(x, 6, 8);
                      const int silu = g.Binary(OpKind::kMul, h, g.Unary(OpKind::kSigmoid, h));
                      const int k = g.Linear(x, 6, 8);
                      const int m = g.Binary(OpKind::kMul, g.Add(silu, k), g.Unary(OpKind::kTanh, k));
                      const int c = g.Concat({g.Add(m, h), g.Add(m, k)}, 1);
                      g.CrossEntropyLoss(g.Linear(c, 16, 4), 4);
                      return g;
                    }});
  // One node read twice (or more) by an op of several inputs gets a gradient from each reading, which
  // the executor adds in a fixed order (AlexNet's 6x6 adaptive pooling of a 1x1 map concatenates the
  // one cell six times): a concat, a square written as a product, a matrix product of a tensor with itself.
  graphs.push_back({"concat_one_node_several_times", [] {
                      ForwardGraph g("concat_repeated", 2);
                      const int x = g.Input({2, 6});
                      const int h = g.Linear(x, 6, 8);
                      const int k = g.Linear(x, 6, 4);
                      const int c = g.Concat({h, k, h, h}, 1);  // (2, 28): h three times
                      g.CrossEntropyLoss(g.Linear(c, 28, 4), 4);
                      return g;
                    }});
  graphs.push_back({"mul_square", [] {
                      ForwardGraph g("mul_square", 2);
                      const int h = g.Linear(g.Input({2, 6}), 6, 8);
                      g.CrossEntropyLoss(g.Linear(g.Binary(OpKind::kMul, h, h), 8, 4), 4);
                      return g;
                    }});
  graphs.push_back({"matmul_square", [] {
                      ForwardGraph g("matmul_square", 2);
                      const int a = g.LinearNd(g.Input({2, 4, 6}), 6, 4, true);  // (2, 4, 4)
                      const int m = g.MatMul(a, a);
                      g.CrossEntropyLoss(g.Linear(g.Reshape(m, {2, 16}), 16, 3), 3);
                      return g;
                    }});
  // Bias-only training: a batch norm or layer norm whose input needs no gradient gives dbeta alone
  // (a sum of dY); the convolution without bias below it is frozen.
  for (const KindGraph& g : std::vector<KindGraph>(graphs)) {
    if (g.name == "depthwise_conv_batchnorm" || g.name == "layernorm_on_input") {
      graphs.push_back({g.name + "_bias_only", g.build, {graph::Trainable::Mode::kBias, 0}});
    }
  }
  return graphs;
}

void PrintTo(const KindGraph& g, std::ostream* out) { *out << g.name; }

v1::TrainingGraph Exact(const ForwardGraph& forward, const graph::Trainable& trainable = {}) {
  auto graph = graph::DeriveTrainingGraph(forward, graph::Derivation::kExact, trainable);
  EXPECT_TRUE(graph.ok()) << graph.status().message();
  return graph.ok() ? *graph : v1::TrainingGraph();
}

Batch MakeBatch(const Executor& e, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int64_t> id(0, std::max<int64_t>(1, e.input_id_limit()) - 1);
  Batch batch;
  batch.inputs.resize(static_cast<size_t>(e.input_elements()));
  for (float& v : batch.inputs) v = e.input_id_limit() > 0 ? static_cast<float>(id(rng)) : normal(rng);
  std::uniform_int_distribution<int32_t> label(0, static_cast<int32_t>(e.classes()) - 1);
  for (int64_t r = 0; r < e.label_rows(); ++r) batch.labels.push_back(label(rng));
  return batch;
}

solver::Problem ProblemFor(const v1::TrainingGraph& graph, int64_t activation_budget_bytes) {
  auto source = graph::MakePoetFlopsSource("a72");
  EXPECT_TRUE(source.ok());
  auto table = (*source)->CostTableFor(graph);
  EXPECT_TRUE(table.ok()) << table.status().message();
  v1::ScheduleRequest request;
  request.set_activation_budget_bytes(static_cast<uint64_t>(activation_budget_bytes));
  request.set_runtime_budget_multiple(1000);
  auto problem = solver::ProblemFromCostTable(*table, request);
  EXPECT_TRUE(problem.ok()) << problem.status().message();
  return *problem;
}

class OpKindsTest : public testing::TempDirTest, public ::testing::WithParamInterface<KindGraph> {
 protected:
  void SetUp() override {
    TempDirTest::SetUp();
    omp_set_num_threads(1);
  }
  std::unique_ptr<Executor> Make(const v1::TrainingGraph& graph) {
    auto e = Executor::Create(graph, {.seed = 7, .paging_dir = (dir_ / "paging").string()});
    EXPECT_TRUE(e.ok()) << e.status().message();
    return e.ok() ? std::move(*e) : nullptr;
  }
};

// The loss of the plain step (forward, backward) on the executor's current parameters.
double Loss(Executor& e) {
  auto stats = e.Step(nullptr);
  EXPECT_TRUE(stats.ok()) << stats.status().message();
  return stats.ok() ? stats->loss : NAN;
}

TEST_P(OpKindsTest, GradientsMatchFiniteDifferences) {
  const v1::TrainingGraph graph = Exact(GetParam().build(), GetParam().trainable);
  auto e = Make(graph);
  ASSERT_TRUE(e);
  ASSERT_TRUE(e->SetBatch(MakeBatch(*e, 3)).ok());
  ASSERT_TRUE(e->Step(nullptr).ok());
  const std::vector<ParamGradient> gradients = e->Gradients();
  ASSERT_FALSE(gradients.empty());
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const double rows = static_cast<double>(e->label_rows());  // Step's loss is the mean; gradients are of the sum
  for (const ParamGradient& g : gradients) {
    SCOPED_TRACE("node " + std::to_string(g.node) + " ('" + graph.nodes(g.node).name() + "') parameter " +
                 std::to_string(g.index));
    std::vector<float>* p = e->Parameter(g.node, g.index);
    ASSERT_NE(p, nullptr);
    const std::vector<float> saved = *p;
    std::vector<float> direction(p->size());
    double analytic = 0, norm = 0;
    for (size_t i = 0; i < direction.size(); ++i) {
      direction[i] = normal(rng);
      analytic += static_cast<double>(direction[i]) * g.values[i];
      norm += static_cast<double>(direction[i]) * direction[i];
    }
    // A step of 1e-2 in parameter norm: large against float rounding, small against curvature.
    const float h = static_cast<float>(1e-2 / std::sqrt(norm));
    for (size_t i = 0; i < p->size(); ++i) (*p)[i] = saved[i] + h * direction[i];
    const double up = Loss(*e);
    for (size_t i = 0; i < p->size(); ++i) (*p)[i] = saved[i] - h * direction[i];
    const double down = Loss(*e);
    *p = saved;
    const double numeric = (up - down) * rows / (2.0 * h);
    EXPECT_NEAR(analytic, numeric, 0.02 * std::fabs(numeric) + 2e-3 * std::sqrt(norm))
        << "analytic " << analytic << ", numeric " << numeric;
  }
}

TEST_P(OpKindsTest, EveryScheduleGivesThePlainGradientsBitForBit) {
  const v1::TrainingGraph graph = Exact(GetParam().build(), GetParam().trainable);
  // The schedules: each strategy at a random budget between the least any schedule needs and the
  // plain peak, and random mixes of the heuristics' policies (keep, page, recompute), replayed valid.
  const solver::Problem loose = ProblemFor(graph, int64_t{1} << 40);
  const solver::Replay plain_replay = solver::Simulate(loose, solver::CheckpointAll(loose).plan);
  ASSERT_TRUE(plain_replay.valid) << plain_replay.violation;
  std::mt19937 rng(23);
  std::uniform_int_distribution<int64_t> budget(solver::MemoryLowerBound(loose), plain_replay.peak_ram_bytes);
  std::vector<std::pair<std::string, solver::Plan>> plans;
  for (const char* strategy : {"optimal", "sqrt", "revolve", "paging-only"}) {
    const solver::Problem problem = ProblemFor(graph, budget(rng));
    auto schedule = solver::Solve(problem, {.strategy = strategy, .time_limit_s = 1, .search_min_ram = false});
    if (!schedule.ok() || schedule->stages_size() == 0) continue;  // a baseline that cannot meet the budget
    plans.push_back({strategy, solver::PlanFromStages(*schedule, problem.size())});
  }
  std::uniform_int_distribution<int> policy(0, 3);
  int recomputed = 0, paged = 0;
  for (int i = 0; i < 6; ++i) {
    std::vector<solver::Policy> policies(static_cast<size_t>(loose.size()));
    for (auto& p : policies) p = static_cast<solver::Policy>(policy(rng));
    const solver::Plan plan = solver::BuildPlan(loose, policies);
    const solver::Replay replay = solver::Simulate(loose, plan);
    ASSERT_TRUE(replay.valid) << replay.violation;
    recomputed += replay.recomputations > 0;
    paged += replay.page_ins > 0;
    plans.push_back({"random schedule " + std::to_string(i), plan});
  }
  EXPECT_GT(recomputed + paged, 0) << "no schedule recomputes or pages";

  for (const int threads : {1, 2}) {
    SCOPED_TRACE(std::to_string(threads) + " threads");
    omp_set_num_threads(threads);
    auto e = Make(graph);
    ASSERT_TRUE(e);
    ASSERT_TRUE(e->SetBatch(MakeBatch(*e, 5)).ok());
    auto plain_stats = e->Step(nullptr);
    ASSERT_TRUE(plain_stats.ok()) << plain_stats.status().message();
    EXPECT_EQ(plain_stats->peak_activation_bytes, static_cast<uint64_t>(plain_replay.peak_ram_bytes));
    const std::vector<ParamGradient> plain = e->Gradients();
    for (const auto& [what, plan] : plans) {
      auto stats = e->Step(&plan);
      ASSERT_TRUE(stats.ok()) << what << ": " << stats.status().message();
      EXPECT_LE(stats->peak_activation_bytes, stats->planned_peak_bytes) << what;
      const std::vector<ParamGradient> got = e->Gradients();
      ASSERT_EQ(got.size(), plain.size());
      for (size_t i = 0; i < got.size(); ++i) {
        EXPECT_EQ(0, std::memcmp(got[i].values.data(), plain[i].values.data(), got[i].values.size() * sizeof(float)))
            << what << ": gradient of node " << got[i].node << " parameter " << got[i].index << " differs";
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Kinds, OpKindsTest, ::testing::ValuesIn(KindGraphs()),
                         [](const ::testing::TestParamInfo<KindGraph>& info) { return info.param.name; });

// x * x, whose two gradients (dY x, from each reading) the executor adds, gives the gradient of x^2
// written as a power (2 x dY) on the same parameters, to float rounding.
TEST(OpKindsRepeatedInput, AProductOfATensorWithItselfGivesTheSquaresGradient) {
  const auto build = [](bool product) {
    ForwardGraph g(product ? "mul_square" : "pow_square", 2);
    const int h = g.Linear(g.Input({2, 6}), 6, 8);
    const int y = product ? g.Binary(OpKind::kMul, h, h) : g.Unary(OpKind::kPow, h, {{"exponent", 2}});
    g.CrossEntropyLoss(g.Linear(y, 8, 4), 4);
    return g;
  };
  auto product = Executor::Create(Exact(build(true)), {.seed = 7});
  auto power = Executor::Create(Exact(build(false)), {.seed = 8});
  ASSERT_TRUE(product.ok()) << product.status().message();
  ASSERT_TRUE(power.ok()) << power.status().message();
  for (const ParamGradient& g : (*product)->Gradients()) {  // the same parameters in both
    std::vector<float>* from = (*product)->Parameter(g.node, g.index);
    std::vector<float>* to = (*power)->Parameter(g.node, g.index);
    ASSERT_NE(from, nullptr);
    ASSERT_NE(to, nullptr);
    ASSERT_EQ(from->size(), to->size());
    *to = *from;
  }
  const Batch batch = MakeBatch(**product, 3);
  ASSERT_TRUE((*product)->SetBatch(batch).ok());
  ASSERT_TRUE((*power)->SetBatch(batch).ok());
  auto a = (*product)->Step(nullptr);
  auto b = (*power)->Step(nullptr);
  ASSERT_TRUE(a.ok()) << a.status().message();
  ASSERT_TRUE(b.ok()) << b.status().message();
  EXPECT_NEAR(a->loss, b->loss, 1e-5 * std::fabs(b->loss));
  const std::vector<ParamGradient> got = (*product)->Gradients(), want = (*power)->Gradients();
  ASSERT_EQ(got.size(), want.size());
  ASSERT_FALSE(got.empty());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(got[i].values.size(), want[i].values.size());
    double scale = 0;
    for (float v : want[i].values) scale = std::max(scale, static_cast<double>(std::fabs(v)));
    ASSERT_GT(scale, 0);
    for (size_t k = 0; k < got[i].values.size(); ++k) {
      EXPECT_NEAR(got[i].values[k], want[i].values[k], 1e-5 * scale)
          << "gradient of node " << got[i].node << " parameter " << got[i].index << " at " << k;
    }
  }
}

// A dropout mask belongs to a training step: plain steps without an update in between (the same
// step under other schedules, a finite difference) see the same one, the next step a new one, and
// an executor with the same seed draws the same masks.
TEST(Dropout, DrawsANewMaskEachTrainingStepFromTheSeed) {
  const v1::TrainingGraph graph = Exact(DropoutGraph().build());
  const auto losses = [&](uint32_t seed) {
    auto e = Executor::Create(graph, {.seed = seed});
    EXPECT_TRUE(e.ok()) << e.status().message();
    EXPECT_TRUE((*e)->SetBatch(MakeBatch(**e, 3)).ok());
    std::vector<double> out;
    for (int step = 0; step < 3; ++step) {
      out.push_back(Loss(**e));
      EXPECT_EQ(Loss(**e), out.back()) << "step " << step << " drew a second mask";
      (*e)->Update(0.0);  // the parameters stay: only the mask can change the loss
    }
    return out;
  };
  const std::vector<double> first = losses(7);
  EXPECT_NE(first[0], first[1]);
  EXPECT_NE(first[1], first[2]);
  EXPECT_EQ(losses(7), first);
  EXPECT_NE(losses(8), first);
}

}  // namespace
}  // namespace edgecost::train
