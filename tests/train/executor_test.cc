// The executor against the plain step: every schedule a strategy or a random mix
// of the heuristics' policies makes must give bit-identical parameter gradients,
// hold no more activation bytes than planned, and really page through files.
#include "train/executor.h"

#include <omp.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <random>

#include <gtest/gtest.h>

#include "graph/cost_source.h"
#include "graph/derive.h"
#include "graph/resolve.h"
#include "graph/zoo.h"
#include "kernels/layers.h"
#include "solver/heuristics.h"
#include "solver/plan.h"
#include "solver/problem.h"
#include "solver/simulator.h"
#include "solver/solve.h"
#include "tests/temp_dir.h"
#include "train/pager.h"

namespace edgecost::train {
namespace {

// Every op kind of a CNN: convolution, batch norm, ReLU, residual add, both poolings,
// flatten, linear with and without a fused ReLU, dropout and the loss.
graph::ForwardGraph TinyCnn() {
  graph::ForwardGraph g("tiny_cnn", 2);
  const int x = g.Input({2, 3, 8, 8});
  const int r1 = g.Relu(g.BatchNorm2d(g.Conv2d(x, 3, 4, 3, 1, 1)));
  const int c2 = g.Conv2d(r1, 4, 4, 3, 1, 1);
  const int a = g.Add(c2, r1);
  const int q = g.AvgPool2d(g.MaxPool2d(a, 2, 2), 2, 2);
  const int l1 = g.LinearRelu(g.Flatten(q), 16, 12);
  const int l2 = g.Linear(g.Dropout(l1), 12, 5);
  g.CrossEntropyLoss(l2, 5);
  return g;
}

// The attention op kinds: fused QKV projection, scores, context.
graph::ForwardGraph TinyAttention() {
  graph::ForwardGraph g("tiny_attention", 1);
  const int x = g.Input({8, 16});
  const int h = g.Linear(x, 16, 16);
  const int qkv = g.QkvProjection(h, 8, 16, 4, 2);
  const int context = g.AttentionContext(g.AttentionScores(qkv, 8, 4, 2), 8, 4, 2);
  const int projection = g.Linear(context, 8, 16);
  const int out = g.Linear(g.Add(h, projection), 16, 5);
  g.CrossEntropyLoss(out, 5);
  return g;
}

v1::TrainingGraph Exact(const graph::ForwardGraph& forward) {
  auto graph = graph::DeriveTrainingGraph(forward, graph::Derivation::kExact);
  EXPECT_TRUE(graph.ok()) << graph.status().message();
  return *graph;
}

Batch SyntheticBatch(const Executor& e, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  Batch batch;
  batch.inputs.resize(static_cast<size_t>(e.input_elements()));
  for (float& v : batch.inputs) v = normal(rng);
  std::uniform_int_distribution<int32_t> label(0, static_cast<int32_t>(e.classes()) - 1);
  for (int64_t r = 0; r < e.label_rows(); ++r) batch.labels.push_back(label(rng));
  return batch;
}

solver::Problem ProblemFor(const v1::TrainingGraph& graph, int64_t activation_budget_bytes, double runtime_multiple,
                           bool update_in_backward = false) {
  auto source = graph::MakePoetFlopsSource("a72");
  EXPECT_TRUE(source.ok());
  auto table = (*source)->CostTableFor(graph);
  EXPECT_TRUE(table.ok()) << table.status().message();
  v1::ScheduleRequest request;
  request.set_activation_budget_bytes(static_cast<uint64_t>(activation_budget_bytes));
  request.set_runtime_budget_multiple(runtime_multiple);
  request.set_update_in_backward(update_in_backward);
  auto problem = solver::ProblemFromCostTable(*table, request);
  EXPECT_TRUE(problem.ok()) << problem.status().message();
  return *problem;
}

class ExecutorTest : public testing::TempDirTest {
 protected:
  // One thread unless a test says otherwise: oneDNN's OpenMP threads spin, and a shared
  // machine makes two of them crawl. Bit-identity is claimed at a fixed thread count.
  void SetUp() override {
    TempDirTest::SetUp();
    omp_set_num_threads(1);
  }
  std::unique_ptr<Executor> Make(const v1::TrainingGraph& graph) {
    auto e = Executor::Create(graph, {.seed = 5, .paging_dir = (dir_ / "paging").string()});
    EXPECT_TRUE(e.ok()) << e.status().message();
    return e.ok() ? std::move(*e) : nullptr;
  }

  // Runs `plan` and the plain step on the same batch and parameters; the gradients must match bit for bit.
  void ExpectSameGradients(Executor& e, const solver::Plan& plan, const std::vector<ParamGradient>& plain,
                           const std::string& what) {
    auto stats = e.Step(&plan);
    ASSERT_TRUE(stats.ok()) << what << ": " << stats.status().message();
    EXPECT_LE(stats->peak_activation_bytes, stats->planned_peak_bytes) << what;
    const std::vector<ParamGradient> got = e.Gradients();
    ASSERT_EQ(got.size(), plain.size());
    for (size_t i = 0; i < got.size(); ++i) {
      ASSERT_EQ(got[i].values.size(), plain[i].values.size());
      EXPECT_EQ(0, std::memcmp(got[i].values.data(), plain[i].values.data(), got[i].values.size() * sizeof(float)))
          << what << ": gradient of node " << got[i].node << " parameter " << got[i].index << " differs";
    }
    // Files of this run are removed only when the executor goes; none may be left half-written.
  }

  // The plain step's gradients and peak on `e`'s current batch.
  std::vector<ParamGradient> Plain(Executor& e, uint64_t* peak = nullptr) {
    auto stats = e.Step(nullptr);
    EXPECT_TRUE(stats.ok()) << stats.status().message();
    if (peak && stats.ok()) *peak = stats->peak_activation_bytes;
    return e.Gradients();
  }
};

TEST_F(ExecutorTest, RefusesPoetGraphs) {
  auto graph = graph::ZooTrainingGraph("linear", 2, graph::Derivation::kPoet);
  ASSERT_TRUE(graph.ok());
  auto e = Executor::Create(*graph, {});
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("exact"), std::string::npos) << e.status().message();
}

// Derivation lists exactly what graph/op_kinds.def says a backward pass reads or keeps: max
// pooling's backward lists X (PyTorch's kernel reads it) and dY, never Y, so a graph that lists Y
// for it is refused, and the solver never keeps an activation alive that no kernel reads.
TEST_F(ExecutorTest, ABackwardNodeListingWhatItsKernelDoesNotReadIsRefused) {
  for (const graph::ForwardGraph& forward : {TinyCnn(), TinyAttention()}) {
    auto graph = graph::DeriveTrainingGraph(forward, graph::Derivation::kExact);
    ASSERT_TRUE(graph.ok());
    ASSERT_TRUE(Executor::Create(*graph, {}).ok()) << forward.model();
  }
  auto graph = graph::DeriveTrainingGraph(TinyCnn(), graph::Derivation::kExact);
  ASSERT_TRUE(graph.ok());
  bool listed = false;
  for (v1::TrainingNode& node : *graph->mutable_nodes()) {
    if (node.phase() != v1::PHASE_BACKWARD || node.op_kind() != "maxpool2d") continue;
    ASSERT_EQ(node.inputs_size(), 2);  // X and dY
    node.add_inputs(static_cast<uint32_t>(node.forward_of()));  // Y
    listed = true;
  }
  ASSERT_TRUE(listed);
  auto refused = Executor::Create(*graph, {});
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("which graph/op_kinds.def does not list"), std::string::npos)
      << refused.status().message();
}

TEST_F(ExecutorTest, PlainStepPeakIsThePlannedPeakAndGradientsAreNotZero) {
  const v1::TrainingGraph graph = Exact(TinyCnn());
  auto e = Make(graph);
  ASSERT_TRUE(e);
  ASSERT_TRUE(e->SetBatch(SyntheticBatch(*e, 1)).ok());
  auto stats = e->Step(nullptr);
  ASSERT_TRUE(stats.ok()) << stats.status().message();
  // The plain step as the simulator replays checkpoint-all: the same peak, byte for byte.
  const solver::Problem problem = ProblemFor(graph, 1 << 30, 100);
  const solver::Replay replay = solver::Simulate(problem, solver::CheckpointAll(problem).plan);
  ASSERT_TRUE(replay.valid) << replay.violation;
  EXPECT_EQ(stats->planned_peak_bytes, static_cast<uint64_t>(replay.peak_ram_bytes));
  EXPECT_EQ(stats->peak_activation_bytes, stats->planned_peak_bytes);
  EXPECT_GT(stats->loss, 0);
  bool nonzero = false;
  for (const ParamGradient& g : e->Gradients()) {
    for (float v : g.values) nonzero = nonzero || v != 0.0f;
  }
  EXPECT_TRUE(nonzero);
  // Every weight and bias of the five layers with parameters trains (conv x2, bn, linear x2).
  EXPECT_EQ(e->Gradients().size(), 10u);
}

TEST_F(ExecutorTest, LossFallsOnAFixedBatch) {
  // Two zoo models, and a residual CNN that PyTorch exported to ONNX (tests/graph/data/make_onnx.py).
  for (const char* model : {"linear", "resnet18_cifar", "tests/graph/data/small_resnet.onnx"}) {
    SCOPED_TRACE(model);
    auto graph = graph::LoadTrainingGraph({model, 2, graph::Derivation::kExact, {}});
    ASSERT_TRUE(graph.ok()) << graph.status().message();
    auto e = Make(*graph);
    ASSERT_TRUE(e);
    ASSERT_TRUE(e->SetBatch(SyntheticBatch(*e, 2)).ok());
    double first = 0, last = 0;
    for (int step = 0; step < 50; ++step) {
      auto stats = e->Step(nullptr);
      ASSERT_TRUE(stats.ok()) << stats.status().message();
      ASSERT_TRUE(std::isfinite(stats->loss));
      if (step == 0) first = stats->loss;
      last = stats->loss;
      e->Update(0.05);
    }
    EXPECT_LT(last, 0.5 * first) << "first " << first << ", last " << last;
  }
}

TEST_F(ExecutorTest, EveryStrategyGivesThePlainGradients) {
  for (const int threads : {1, 2})
    for (const graph::ForwardGraph& forward : {TinyCnn(), TinyAttention()}) {
      SCOPED_TRACE(forward.model() + " on " + std::to_string(threads) + " threads");
      omp_set_num_threads(threads);
      const v1::TrainingGraph graph = Exact(forward);
      auto e = Make(graph);
      ASSERT_TRUE(e);
      ASSERT_TRUE(e->SetBatch(SyntheticBatch(*e, 3)).ok());
      uint64_t plain_peak = 0;
      const std::vector<ParamGradient> plain = Plain(*e, &plain_peak);
      const solver::Problem loose = ProblemFor(graph, static_cast<int64_t>(plain_peak), 100);
      const int64_t floor = solver::MemoryLowerBound(loose);
      for (const char* strategy : {"optimal", "sqrt", "revolve", "paging-only", "checkpoint-all"}) {
        SCOPED_TRACE(strategy);
        // A budget between the least any schedule needs and the plain peak.
        const solver::Problem problem = ProblemFor(graph, (floor + static_cast<int64_t>(plain_peak)) / 2, 100);
        auto schedule = solver::Solve(problem, {.strategy = strategy, .time_limit_s = 5, .search_min_ram = false});
        if (!schedule.ok() || schedule->stages_size() == 0) continue;  // a baseline that cannot meet the budget
        const solver::Plan plan = solver::PlanFromStages(*schedule, problem.size());
        ExpectSameGradients(*e, plan, plain, strategy);
        auto stats = e->Step(&plan);
        ASSERT_TRUE(stats.ok());
        EXPECT_EQ(stats->planned_peak_bytes, schedule->peak_ram_bytes())
            << "the executor plans as the simulator replays";
        EXPECT_LE(stats->peak_activation_bytes, schedule->activation_budget_bytes());
        EXPECT_EQ(stats->page_outs, schedule->page_outs());
        EXPECT_EQ(stats->page_ins, schedule->page_ins());
        EXPECT_EQ(stats->recomputations, schedule->recomputations());
      }
    }
}

// Batch norm's running statistics count each step's batch once, however often a schedule
// recomputes the layer: after a step under a recomputing schedule they are the plain step's, bit
// for bit. Evaluate changes neither them nor the gradients, and gives the same figures twice.
TEST_F(ExecutorTest, RunningStatisticsCountEachBatchOnceAndEvaluateChangesNothing) {
  const v1::TrainingGraph graph = Exact(TinyCnn());
  auto plain = Make(graph), scheduled = Make(graph);
  ASSERT_TRUE(plain && scheduled);
  const Batch batch = SyntheticBatch(*plain, 3);
  ASSERT_TRUE(plain->SetBatch(batch).ok());
  ASSERT_TRUE(scheduled->SetBatch(batch).ok());
  uint64_t plain_peak = 0;
  const std::vector<ParamGradient> gradients = Plain(*plain, &plain_peak);
  const solver::Problem loose = ProblemFor(graph, static_cast<int64_t>(plain_peak), 100);
  const solver::Problem problem =
      ProblemFor(graph, (solver::MemoryLowerBound(loose) + static_cast<int64_t>(plain_peak)) / 2, 100);
  std::optional<solver::Plan> recomputing;
  for (const char* strategy : {"sqrt", "revolve", "optimal"}) {
    auto schedule = solver::Solve(problem, {.strategy = strategy, .time_limit_s = 5, .search_min_ram = false});
    if (schedule.ok() && schedule->stages_size() > 0 && schedule->recomputations() > 0) {
      recomputing = solver::PlanFromStages(*schedule, problem.size());
      break;
    }
  }
  ASSERT_TRUE(recomputing) << "no strategy recomputes under the budget";
  const solver::Plan& plan = *recomputing;
  auto stats = scheduled->Step(&plan);
  ASSERT_TRUE(stats.ok()) << stats.status().message();
  ASSERT_GT(stats->recomputations, 0u) << "the test needs a schedule that recomputes";
  int batch_norms = 0;
  for (int v = 0; v < graph.nodes_size(); ++v) {
    kernels::Tensor* mean = plain->RunningStat(v, 0);
    if (!mean) continue;
    ++batch_norms;
    for (int i : {0, 1}) {
      const std::vector<float>& a = plain->RunningStat(v, i)->data;
      const std::vector<float>& b = scheduled->RunningStat(v, i)->data;
      EXPECT_EQ(a, b) << "node " << v << " running statistic " << i;
    }
    EXPECT_EQ(*plain->BatchesTracked(v), 1);
    EXPECT_EQ(*scheduled->BatchesTracked(v), 1);
    EXPECT_NE(mean->data, std::vector<float>(mean->data.size(), 0.0f)) << "the batch moved the running mean";
  }
  EXPECT_EQ(batch_norms, 1);

  std::vector<std::vector<float>> stats_before;
  for (int v = 0; v < graph.nodes_size(); ++v) {
    if (plain->RunningStat(v, 0)) stats_before.push_back(plain->RunningStat(v, 0)->data);
  }
  auto first = plain->Evaluate(batch, 2), second = plain->Evaluate(batch, 2);
  ASSERT_TRUE(first.ok() && second.ok()) << first.status().message();
  EXPECT_EQ(first->rows, 2);
  EXPECT_LE(first->correct, 2);
  EXPECT_GT(first->loss_sum, 0);
  EXPECT_EQ(first->loss_sum, second->loss_sum) << "no dropout in inference";
  auto one_row = plain->Evaluate(batch, 1);
  ASSERT_TRUE(one_row.ok());
  EXPECT_LT(one_row->loss_sum, first->loss_sum);
  EXPECT_FALSE(plain->Evaluate(batch, 3).ok()) << "more rows than the batch";
  const std::vector<ParamGradient> after = plain->Gradients();
  for (size_t i = 0; i < after.size(); ++i) EXPECT_EQ(after[i].values, gradients[i].values);
  for (int v = 0, k = 0; v < graph.nodes_size(); ++v) {
    if (plain->RunningStat(v, 0)) {
      EXPECT_EQ(plain->RunningStat(v, 0)->data, stats_before[static_cast<size_t>(k++)]);
    }
  }
  // And a step after an evaluation still gives the same gradients.
  ExpectSameGradients(*plain, plan, gradients, "a schedule after Evaluate");
}

TEST_F(ExecutorTest, FiftyRandomHeuristicSchedulesGiveThePlainGradients) {
  std::mt19937 rng(17);
  int checked = 0, paged = 0, recomputed = 0;
  for (const graph::ForwardGraph& forward : {TinyCnn(), TinyAttention()}) {
    const v1::TrainingGraph graph = Exact(forward);
    auto e = Make(graph);
    ASSERT_TRUE(e);
    ASSERT_TRUE(e->SetBatch(SyntheticBatch(*e, 4)).ok());
    const std::vector<ParamGradient> plain = Plain(*e);
    const solver::Problem problem = ProblemFor(graph, int64_t{1} << 40, 1000);
    std::uniform_int_distribution<int> policy(0, 3);
    for (int i = 0; i < 25; ++i) {
      std::vector<solver::Policy> policies(static_cast<size_t>(problem.size()));
      for (auto& p : policies) p = static_cast<solver::Policy>(policy(rng));
      const solver::Plan plan = solver::BuildPlan(problem, policies);
      const solver::Replay replay = solver::Simulate(problem, plan);
      ASSERT_TRUE(replay.valid) << replay.violation;
      // The arena lays every buffer out before the step (and refuses one over a live one while it runs).
      const ArenaLayout layout = LayOut(e->node_bytes(), e->preds(), plan);
      EXPECT_EQ(layout.peak_bytes, static_cast<uint64_t>(replay.peak_ram_bytes));
      EXPECT_GE(layout.region_bytes, layout.peak_bytes);
      ExpectSameGradients(*e, plan, plain, forward.model() + " random schedule " + std::to_string(i));
      auto stats = e->Step(&plan);
      ASSERT_TRUE(stats.ok());
      EXPECT_EQ(stats->planned_peak_bytes, static_cast<uint64_t>(replay.peak_ram_bytes));
      paged += stats->page_ins > 0;
      recomputed += stats->recomputations > 0;
      ++checked;
    }
  }
  EXPECT_EQ(checked, 50);
  EXPECT_GT(paged, 10);
  EXPECT_GT(recomputed, 10);
}

// Updates as gradients arrive: each layer updated after its last backward node, under the plain
// step, every strategy and random heuristic schedules solved for it, gives the parameters of the
// step followed by the update, bit for bit, for every optimizer and sparse update; weight
// gradients then live in the arena, so the executor's own gradient buffers shrink to what batch
// norm's dX pass writes.
TEST_F(ExecutorTest, UpdatesInTheBackwardPassGiveTheWeightsOfTheUpdateAfterTheStep) {
  std::mt19937 rng(23);
  const std::vector<OptimizerOptions> optimizers = {
      {.kind = OptimizerKind::kSgd, .momentum = 0.9}, {.kind = OptimizerKind::kAdam}, {.kind = OptimizerKind::kAdamW}};
  int plans = 0, reshaped = 0;  // graphs checked; steps that recomputed or paged
  for (const graph::ForwardGraph& forward : {TinyCnn(), TinyAttention()})
    for (const char* trainable : {"all", "bias", "last:1"}) {
      SCOPED_TRACE(forward.model() + " --trainable " + trainable);
      auto parsed = graph::Trainable::Parse(trainable);
      ASSERT_TRUE(parsed.ok());
      auto derived = graph::DeriveTrainingGraph(forward, graph::Derivation::kExact, *parsed);
      ASSERT_TRUE(derived.ok()) << derived.status().message();
      const v1::TrainingGraph& graph = *derived;
      const OptimizerOptions& optimizer = optimizers[static_cast<size_t>(plans % 3)];
      auto after = Make(graph);
      auto in_backward =
          Executor::Create(graph, {.seed = 5, .paging_dir = (dir_ / "paging").string(), .update_in_backward = true});
      ASSERT_TRUE(after && in_backward.ok()) << in_backward.status().message();
      Executor& e = **in_backward;
      ASSERT_TRUE(after->SetOptimizer(optimizer).ok() && e.SetOptimizer(optimizer).ok());
      EXPECT_LT(e.grad_param_bytes(), after->grad_param_bytes());
      EXPECT_FALSE(e.Step(nullptr).ok()) << "a step without its update would lose the gradients it frees";
      // Plans: the plain step, then schedules of every strategy and random policies, one per step.
      const solver::Problem problem = ProblemFor(graph, int64_t{1} << 40, 1000, true);
      const int64_t plain_peak = solver::Simulate(problem, solver::PlanFromStages(*solver::Solve(
                                     problem, {.strategy = "checkpoint-all", .search_min_ram = false}), problem.size()))
                                     .peak_ram_bytes;
      // Strategies under a budget between the least any schedule needs and the plain peak.
      const solver::Problem tight =
          ProblemFor(graph, (solver::MemoryLowerBound(problem) + plain_peak) / 2, 1000, true);
      std::vector<std::optional<solver::Plan>> steps = {std::nullopt};
      for (const char* strategy : {"optimal", "sqrt", "revolve", "paging-only"}) {
        auto schedule = solver::Solve(tight, {.strategy = strategy, .time_limit_s = 5, .search_min_ram = false});
        if (schedule.ok() && schedule->stages_size() > 0) steps.push_back(solver::PlanFromStages(*schedule, problem.size()));
      }
      std::uniform_int_distribution<int> policy(0, 3);
      for (int i = 0; i < 4; ++i) {
        std::vector<solver::Policy> policies(static_cast<size_t>(problem.size()));
        for (auto& p : policies) p = static_cast<solver::Policy>(policy(rng));
        const solver::Plan plan = solver::BuildPlan(problem, policies);
        ASSERT_TRUE(solver::Simulate(problem, plan).valid);
        steps.push_back(plan);
      }
      for (size_t k = 0; k < steps.size(); ++k) {
        const Batch batch = SyntheticBatch(e, static_cast<uint32_t>(40 + k));
        ASSERT_TRUE(after->SetBatch(batch).ok() && e.SetBatch(batch).ok());
        const solver::Plan* plan = steps[k] ? &*steps[k] : nullptr;
        auto reference = after->TrainStep(nullptr, 0.05);
        auto stats = e.TrainStep(plan, 0.05);
        ASSERT_TRUE(reference.ok() && stats.ok()) << stats.status().message();
        EXPECT_EQ(stats->loss, reference->loss);
        EXPECT_LE(stats->peak_activation_bytes, stats->planned_peak_bytes);
        reshaped += stats->recomputations + stats->page_ins > 0;
        for (const ParamGradient& g : after->Gradients()) {
          const std::vector<float>* want = after->Parameter(g.node, g.index);
          const std::vector<float>* got = e.Parameter(g.node, g.index);
          ASSERT_TRUE(want && got && want->size() == got->size());
          EXPECT_EQ(0, std::memcmp(want->data(), got->data(), want->size() * sizeof(float)))
              << "step " << k << ": node " << g.node << " parameter " << g.index << " differs";
        }
      }
      EXPECT_EQ(e.updates(), after->updates());
      ++plans;
    }
  EXPECT_EQ(plans, 6);
  EXPECT_GT(reshaped, 12);
}

// A sparse tensor update (--trainable layers:NAME:SHARE): the weights pass computes the gradients
// of the first output channels alone, the same values as those rows of the whole layer's gradient;
// the update changes those rows and leaves the others as they were; the gradient and the optimizer
// state hold that share.
TEST_F(ExecutorTest, ASparseTensorUpdateTrainsTheFirstOutputChannelsAlone) {
  const graph::ForwardGraph forward = TinyCnn();
  // layer4 is the second convolution (4 -> 4 channels, with bias), layer9 the linear layer with a
  // fused ReLU (16 -> 12), layer11 the last linear layer (12 -> 5).
  auto whole_trainable = graph::Trainable::Parse("layers:layer4,layer9,layer11");
  auto share_trainable = graph::Trainable::Parse("layers:layer4:0.5,layer9:0.5,layer11:0.4");
  ASSERT_TRUE(whole_trainable.ok() && share_trainable.ok());
  auto whole_graph = graph::DeriveTrainingGraph(forward, graph::Derivation::kExact, *whole_trainable);
  auto share_graph = graph::DeriveTrainingGraph(forward, graph::Derivation::kExact, *share_trainable);
  ASSERT_TRUE(whole_graph.ok() && share_graph.ok()) << share_graph.status().message();
  EXPECT_EQ(share_graph->nodes(4).attributes().at("update_channels"), 2);
  EXPECT_EQ(share_graph->nodes(9).attributes().at("update_channels"), 6);
  EXPECT_EQ(share_graph->nodes(11).attributes().at("update_channels"), 2);  // ceil(0.4 x 5)
  auto whole = Make(*whole_graph), share = Make(*share_graph);
  ASSERT_TRUE(whole && share);
  const OptimizerOptions adamw{.kind = OptimizerKind::kAdamW};
  ASSERT_TRUE(whole->SetOptimizer(adamw).ok() && share->SetOptimizer(adamw).ok());
  EXPECT_LT(share->grad_param_bytes(), whole->grad_param_bytes());
  EXPECT_LT(share->optimizer_state_bytes(), whole->optimizer_state_bytes());
  const Batch batch = SyntheticBatch(*whole, 9);
  ASSERT_TRUE(whole->SetBatch(batch).ok() && share->SetBatch(batch).ok());
  ASSERT_TRUE(whole->Step(nullptr).ok());
  const std::vector<float> before = *share->Parameter(4, 0);
  ASSERT_TRUE(share->TrainStep(nullptr, 0.01).ok());
  const std::vector<ParamGradient> full = whole->Gradients(), part = share->Gradients();
  ASSERT_EQ(full.size(), part.size());
  for (size_t i = 0; i < full.size(); ++i) {
    SCOPED_TRACE("node " + std::to_string(full[i].node) + " parameter " + std::to_string(full[i].index));
    ASSERT_LT(part[i].values.size(), full[i].values.size());
    for (size_t k = 0; k < part[i].values.size(); ++k) {
      EXPECT_NEAR(part[i].values[k], full[i].values[k], 1e-5f * (1 + std::abs(full[i].values[k])));
    }
  }
  const std::vector<float>& after = *share->Parameter(4, 0);
  const size_t updated = 2 * 4 * 3 * 3;  // two output channels of 4 x 3 x 3 weights
  for (size_t k = 0; k < after.size(); ++k) {
    if (k < updated) {
      EXPECT_NE(after[k], before[k]) << k;
    } else {
      EXPECT_EQ(after[k], before[k]) << k;
    }
  }
  // What a share cannot update: a batch norm.
  auto refused = graph::DeriveTrainingGraph(forward, graph::Derivation::kExact,
                                            *graph::Trainable::Parse("layers:layer2:0.5"));
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("is batchnorm2d"), std::string::npos) << refused.status().message();
  EXPECT_FALSE(graph::Trainable::Parse("layers:layer4:0").ok());
  EXPECT_FALSE(graph::Trainable::Parse("layers:layer4:x").ok());
  EXPECT_EQ(graph::Trainable::Parse("layers:layer4:1")->ToString(), "layers:layer4");
}

// A schedule solved with every update after the step keeps no weight gradient for the layer's
// update: the step stops with an error before it updates anything.
TEST_F(ExecutorTest, AScheduleNotSolvedForUpdatesInTheBackwardPassIsRefused) {
  const v1::TrainingGraph graph = Exact(TinyCnn());
  auto e = Executor::Create(graph, {.seed = 5, .update_in_backward = true});
  ASSERT_TRUE(e.ok());
  ASSERT_TRUE((*e)->SetBatch(SyntheticBatch(**e, 3)).ok());
  const solver::Problem problem = ProblemFor(graph, int64_t{1} << 40, 1000);
  auto schedule = solver::Solve(problem, {.strategy = "checkpoint-all", .search_min_ram = false});
  ASSERT_TRUE(schedule.ok());
  const std::vector<float> before = *(*e)->Parameter(1, 0);
  const solver::Plan plan = solver::PlanFromStages(*schedule, problem.size());
  auto stats = (*e)->TrainStep(&plan, 0.05);
  ASSERT_FALSE(stats.ok());
  EXPECT_NE(stats.status().message().find("--update-in-backward"), std::string::npos) << stats.status().message();
  EXPECT_EQ(*(*e)->Parameter(1, 0), before);
}

// Laid out largest first, the arena's region stays close to the planned peak: what the
// process holds for activations is what the solver budgeted, not several times it.
TEST_F(ExecutorTest, ArenaRegionIsThePlannedPeakWithLittleFragmentation) {
  for (const char* name : {"resnet18_cifar", "linear", "vgg16_cifar"}) {
    auto forward = graph::BuildZooModel(name, 2);
    ASSERT_TRUE(forward.ok()) << name;
    const v1::TrainingGraph graph = Exact(*forward);
    const int n = graph.nodes_size();
    std::vector<int64_t> bytes(static_cast<size_t>(n));
    std::vector<std::vector<int>> preds(static_cast<size_t>(n));
    for (int v = 0; v < n; ++v) {
      bytes[static_cast<size_t>(v)] = static_cast<int64_t>(graph.nodes(v).output_bytes());
      for (uint32_t u : graph.nodes(v).inputs()) {
        auto& p = preds[static_cast<size_t>(v)];
        if (std::find(p.begin(), p.end(), static_cast<int>(u)) == p.end()) p.push_back(static_cast<int>(u));
      }
    }
    const ArenaLayout plain = LayOut(bytes, preds, PlainPlan(preds));
    const solver::Problem problem = ProblemFor(graph, int64_t{1} << 40, 1000);
    auto sqrt = solver::Solve(problem, {.strategy = "sqrt"});
    ASSERT_TRUE(sqrt.ok()) << sqrt.status().message();
    const solver::Plan checkpoints = solver::PlanFromStages(*sqrt, n);
    for (const ArenaLayout& layout : {plain, LayOut(bytes, preds, checkpoints)}) {
      EXPECT_GE(layout.region_bytes, layout.peak_bytes) << name;
      EXPECT_LE(static_cast<double>(layout.region_bytes), 1.1 * static_cast<double>(layout.peak_bytes) + 4096)
          << name << ": region " << layout.region_bytes << " B for a peak of " << layout.peak_bytes << " B";
      for (int v = 0; v < n; ++v) {  // every execution of a node has its place
        if (bytes[static_cast<size_t>(v)] > 0) {
          EXPECT_FALSE(layout.offsets[static_cast<size_t>(v)].empty()) << name;
        }
      }
    }
  }
}

TEST_F(ExecutorTest, PagingWritesRealFilesAndRemovesThem) {
  const v1::TrainingGraph graph = Exact(TinyCnn());
  const solver::Problem problem = ProblemFor(graph, int64_t{1} << 40, 1000);
  const solver::Plan plan = solver::PagingOnly(problem).plan;
  {
    auto e = Make(graph);
    ASSERT_TRUE(e);
    ASSERT_TRUE(e->SetBatch(SyntheticBatch(*e, 5)).ok());
    auto stats = e->Step(&plan);
    ASSERT_TRUE(stats.ok()) << stats.status().message();
    EXPECT_GT(stats->page_outs, 0u);
    EXPECT_GT(stats->paged_out_bytes, 0u);
    EXPECT_EQ(stats->paged_in_bytes > 0, stats->page_ins > 0);
    int files = 0;
    for (const auto& entry : std::filesystem::directory_iterator(dir_ / "paging")) files += entry.is_regular_file();
    EXPECT_GT(files, 0) << "the paged tensors are files while the executor lives";
  }
  EXPECT_TRUE(std::filesystem::is_empty(dir_ / "paging"));
}

TEST_F(ExecutorTest, StartRemovesPagingFilesOfDeadProcessesOnly) {
  const std::filesystem::path dir = dir_ / "paging";
  std::filesystem::create_directories(dir);
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  ASSERT_GT(child, 0);
  ::waitpid(child, nullptr, 0);  // a process that no longer runs, as after kill -9
  const std::filesystem::path dead = dir / ("edgecost-train-" + std::to_string(child) + "-3.page");
  const std::filesystem::path alive = dir / ("edgecost-train-" + std::to_string(::getppid()) + "-3.page");
  const std::filesystem::path other = dir / "notes.txt";
  for (const auto& path : {dead, alive, other}) std::ofstream(path) << "x";
  Arena arena(4);
  auto pager = Pager::Start(dir.string(), arena, 0);
  ASSERT_TRUE(pager.ok());
  EXPECT_FALSE(std::filesystem::exists(dead));
  EXPECT_TRUE(std::filesystem::exists(alive));
  EXPECT_TRUE(std::filesystem::exists(other));
}

TEST_F(ExecutorTest, AFullPagingDeviceFailsTheStepWithoutLeavingFiles) {
  const v1::TrainingGraph graph = Exact(TinyCnn());
  const solver::Problem problem = ProblemFor(graph, int64_t{1} << 40, 1000);
  const solver::Plan plan = solver::PagingOnly(problem).plan;
  auto e = Make(graph);
  ASSERT_TRUE(e);
  ASSERT_TRUE(e->SetBatch(SyntheticBatch(*e, 6)).ok());
  // Writes beyond 1 KiB fail with EFBIG, as a full device fails them with ENOSPC.
  struct rlimit saved {};
  ASSERT_EQ(0, ::getrlimit(RLIMIT_FSIZE, &saved));
  ::signal(SIGXFSZ, SIG_IGN);
  struct rlimit small = saved;
  small.rlim_cur = 1024;
  ASSERT_EQ(0, ::setrlimit(RLIMIT_FSIZE, &small));
  auto stats = e->Step(&plan);
  ASSERT_EQ(0, ::setrlimit(RLIMIT_FSIZE, &saved));
  ::signal(SIGXFSZ, SIG_DFL);
  ASSERT_FALSE(stats.ok());
  EXPECT_EQ(stats.status().code(), ErrorCode::kResourceExhausted) << stats.status().message();
  EXPECT_NE(stats.status().message().find("paging"), std::string::npos) << stats.status().message();
  // The executor is usable again: the plain step runs.
  EXPECT_TRUE(e->Step(nullptr).ok());
  e.reset();
  EXPECT_TRUE(std::filesystem::is_empty(dir_ / "paging"));
}

}  // namespace
}  // namespace edgecost::train
