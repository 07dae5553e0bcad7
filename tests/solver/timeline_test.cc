// The predicted timeline, the plan in words and the picture, on schedules the
// solver finds for small problems: they agree with the simulator's replay.
#include "solver/timeline.h"

#include <algorithm>
#include <numeric>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "solver/explain.h"
#include "solver/simulator.h"
#include "solver/solve.h"
#include "solver/svg.h"
#include "tests/solver/test_problems.h"

namespace edgecost::solver {
namespace {

using ::testing::HasSubstr;
using testing::TrainingChain;

// Pages: the long-lived activation is expensive to recompute.
Problem PagingProblem() {
  Problem p = TrainingChain(3, 30);
  p.compute_j[0] = 5;
  p.page_in_j.assign(6, 0.1);
  p.page_out_j.assign(6, 0.1);
  p.page_in_s.assign(6, 0.25);
  p.page_out_s.assign(6, 0.5);
  return p;
}

// Recomputes: paging is dear and the first layer cheap.
Problem RecomputeProblem() {
  Problem p = TrainingChain(3, 30);
  p.compute_j[0] = 0.01;
  p.page_in_j.assign(6, 2.0);
  p.page_out_j.assign(6, 2.0);
  return p;
}

v1::Schedule Solved(const Problem& p) {
  auto s = Solve(p, {"optimal", 30, 1, false});
  EXPECT_TRUE(s.ok()) << s.status().message();
  EXPECT_EQ(s->status(), v1::Schedule::STATUS_OPTIMAL) << s->message();
  return *s;
}

void ExpectAgreesWithReplay(const Problem& p, const v1::Schedule& s, const Timeline& t) {
  const Replay replay = Simulate(p, s);
  ASSERT_TRUE(replay.valid) << replay.violation;
  EXPECT_EQ(t.peak_bytes, replay.peak_ram_bytes);
  EXPECT_EQ(t.budget_bytes, p.activation_budget_bytes);
  EXPECT_DOUBLE_EQ(t.runtime_s, replay.runtime_s);
  // Every step once, with the energy the replay counts.
  std::map<StepKind, int> counts;
  double energy_j = 0;
  for (const TimelineStep& step : t.steps) {
    ++counts[step.kind];
    energy_j += step.energy_j;
    EXPECT_GE(step.start_s, 0);
    EXPECT_GE(step.duration_s, 0);
  }
  EXPECT_EQ(counts[StepKind::kCompute], p.size());
  EXPECT_EQ(counts[StepKind::kRecompute], static_cast<int>(replay.recomputations));
  EXPECT_EQ(counts[StepKind::kPageOut], static_cast<int>(replay.page_outs));
  EXPECT_EQ(counts[StepKind::kPageIn], static_cast<int>(replay.page_ins));
  EXPECT_NEAR(energy_j, replay.energy.total_j(), 1e-9);
  // Computations never overlap: each starts when the one before ends.
  double compute_end_s = 0;
  for (const TimelineStep& step : t.steps) {
    if (step.kind != StepKind::kCompute && step.kind != StepKind::kRecompute) continue;
    EXPECT_DOUBLE_EQ(step.start_s, compute_end_s);
    compute_end_s = step.start_s + step.duration_s;
  }
  // Memory: in time order (every computation here takes time, so each change has its own moment), within the budget,
  // reaching the peak, ending at zero.
  ASSERT_FALSE(t.memory.empty());
  int64_t max_bytes = 0;
  for (size_t i = 0; i < t.memory.size(); ++i) {
    if (i > 0) {
      EXPECT_GE(t.memory[i].time_s, t.memory[i - 1].time_s);
    }
    EXPECT_LE(t.memory[i].bytes, p.activation_budget_bytes);
    max_bytes = std::max(max_bytes, t.memory[i].bytes);
  }
  EXPECT_EQ(max_bytes, t.peak_bytes);
  EXPECT_EQ(t.memory.back().bytes, 0);
  ASSERT_EQ(t.stage_start_s.size(), static_cast<size_t>(p.size()));
  EXPECT_TRUE(std::is_sorted(t.stage_start_s.begin(), t.stage_start_s.end()));
}

TEST(Timeline, PagingScheduleAgreesWithTheReplay) {
  const Problem p = PagingProblem();
  const v1::Schedule s = Solved(p);
  ASSERT_GT(s.page_outs(), 0u);
  auto t = PredictTimeline(p, s);
  ASSERT_TRUE(t.ok()) << t.status().message();
  ExpectAgreesWithReplay(p, s, *t);
  EXPECT_TRUE(t->paging_times_known);
  // Paging overlaps computation: it is not on the compute clock, and the storage queue never overlaps itself.
  double storage_free_s = 0;
  for (const TimelineStep& step : t->steps) {
    if (step.kind != StepKind::kPageIn && step.kind != StepKind::kPageOut) continue;
    EXPECT_DOUBLE_EQ(step.duration_s, step.kind == StepKind::kPageOut ? 0.5 : 0.25);
    EXPECT_GE(step.start_s, storage_free_s);
    EXPECT_GE(step.start_s, t->stage_start_s[static_cast<size_t>(step.stage)]);
    storage_free_s = step.start_s + step.duration_s;
  }
  EXPECT_DOUBLE_EQ(t->runtime_s, p.PlainRuntimeS());
  // The forward/backward boundary: node 3 is the first backward one, computed first in stage 3.
  EXPECT_EQ(t->first_backward_node, 3);
  auto first = std::find_if(t->steps.begin(), t->steps.end(),
                            [](const TimelineStep& step) { return step.kind == StepKind::kCompute && step.node == 3; });
  ASSERT_NE(first, t->steps.end());
  EXPECT_DOUBLE_EQ(t->backward_start_s, first->start_s);
}

TEST(Timeline, CountedPagingTimeIsOnTheComputeClock) {
  Problem p = PagingProblem();
  p.count_paging_time = true;
  const v1::Schedule s = Solved(p);
  auto t = PredictTimeline(p, s);
  ASSERT_TRUE(t.ok()) << t.status().message();
  EXPECT_DOUBLE_EQ(t->runtime_s, Simulate(p, s).runtime_s);
  EXPECT_GT(t->runtime_s, p.PlainRuntimeS());
}

TEST(Timeline, RecomputationAndAnInvalidScheduleRefused) {
  const Problem p = RecomputeProblem();
  v1::Schedule s = Solved(p);
  ASSERT_GT(s.recomputations(), 0u);
  auto t = PredictTimeline(p, s);
  ASSERT_TRUE(t.ok()) << t.status().message();
  ExpectAgreesWithReplay(p, s, *t);
  EXPECT_FALSE(t->paging_times_known);

  s.mutable_stages(2)->clear_compute();  // stage 2 no longer computes node 2
  auto broken = PredictTimeline(p, s);
  ASSERT_FALSE(broken.ok());
  EXPECT_THAT(broken.status().message(), HasSubstr("stage 2"));
}

TEST(PlanInWords, NamesWhatEachLayerDoesAndAddsUpToTheSchedule) {
  for (const Problem& p : {PagingProblem(), RecomputeProblem()}) {
    const v1::Schedule s = Solved(p);
    auto plan = ExplainPlan(p, s);
    ASSERT_TRUE(plan.ok()) << plan.status().message();
    double extra_j = 0;
    int recomputations = 0, page_outs = 0, page_ins = 0;
    for (const LayerPlan& layer : plan->layers) {
      extra_j += layer.extra_energy_j;
      recomputations += static_cast<int>(layer.recompute_stages.size());
      page_outs += static_cast<int>(layer.page_out_stages.size());
      page_ins += static_cast<int>(layer.page_in_stages.size());
      EXPECT_EQ(layer.name, p.names[static_cast<size_t>(layer.node)]);
    }
    EXPECT_EQ(recomputations, static_cast<int>(s.recomputations()));
    EXPECT_EQ(page_outs, static_cast<int>(s.page_outs()));
    EXPECT_EQ(page_ins, static_cast<int>(s.page_ins()));
    EXPECT_NEAR(plan->plain_energy_j + extra_j, s.energy().total_j(), 1e-9);
    EXPECT_NEAR(plan->energy_j, s.energy().total_j(), 1e-9);
    EXPECT_EQ(plan->plain_layers + static_cast<int>(plan->layers.size()), p.size());

    const std::string words = PlanInWords(*plan);
    EXPECT_THAT(words, HasSubstr("against the plain step"));
    for (const LayerPlan& layer : plan->layers) {
      EXPECT_THAT(words, HasSubstr(layer.name + "  node " + std::to_string(layer.node)));
      if (!layer.recompute_stages.empty()) {
        EXPECT_THAT(words, HasSubstr("recomputed"));
      }
      if (!layer.page_out_stages.empty()) {
        EXPECT_THAT(words, HasSubstr("paged out in stage"));
      }
      if (!layer.page_in_stages.empty()) {
        EXPECT_THAT(words, HasSubstr("read back in stage"));
      }
    }
  }
}

// The input computes nothing: read again from the batch, it is said so, not "recomputed ... +0 J".
TEST(PlanInWords, TheInputIsReadAgainNotRecomputed) {
  PlanExplanation plan;
  LayerPlan input;
  input.node = 0;
  input.name = "layer0_InputLayer";
  input.input = true;
  input.recompute_stages = {3, 5};
  LayerPlan conv;
  conv.node = 1;
  conv.name = "layer1_Conv2dLayer";
  conv.recompute_stages = {3};
  conv.extra_energy_j = 4.646e-05;
  conv.extra_runtime_s = 13.3e-6;
  plan.layers = {input, conv};
  const std::string words = PlanInWords(plan);
  EXPECT_THAT(words, HasSubstr("layer0_InputLayer   node 0 (forward): the input, read again from the batch 2 times "
                               "(stages 3, 5), not recomputed\n"));
  EXPECT_THAT(words, HasSubstr("node 1 (forward): recomputed once (stage 3): +46.5 uJ, +13.3 us\n"));

  // ExplainPlan marks the node that reads nothing as the input.
  const Problem p = PagingProblem();
  const auto explained = ExplainPlan(p, Solved(p));
  ASSERT_TRUE(explained.ok()) << explained.status().message();
  for (const LayerPlan& layer : explained->layers) EXPECT_EQ(layer.input, layer.node == 0 && p.preds[0].empty());
}

TEST(ScheduleSvg, DrawsTheRamCurveTheBudgetTheNamesAndTheBoundary) {
  Problem p = PagingProblem();
  p.names[1] = "conv<1>&relu";  // names from graph files are escaped
  const v1::Schedule s = Solved(p);
  const std::string svg = ScheduleToSvg(p, s).text();
  EXPECT_THAT(svg, HasSubstr("<polyline class=\"ram\""));
  EXPECT_THAT(svg, HasSubstr("class=\"budget\""));
  EXPECT_THAT(svg, HasSubstr("budget 30 B"));
  EXPECT_THAT(svg, HasSubstr("backward &#8594;"));
  EXPECT_THAT(svg, HasSubstr("conv&lt;1&gt;&amp;relu"));
  EXPECT_EQ(svg.find("conv<1>"), std::string::npos);
  for (int i = 0; i < p.size(); ++i) {
    if (i != 1) {
      EXPECT_THAT(svg, HasSubstr(">" + p.names[static_cast<size_t>(i)] + "</text>"));
    }
  }
  // As many cells as the plan has states: at least one per stage's own computation.
  size_t cells = 0;
  for (size_t at = svg.find("class=\"cell\""); at != std::string::npos; at = svg.find("class=\"cell\"", at + 1))
    ++cells;
  EXPECT_GE(cells, static_cast<size_t>(p.size()));
}

// The headline and the time axis in human units, saying plainly what the schedule is.
TEST(ScheduleSvg, SaysWhatTheScheduleIsInHumanUnits) {
  const Problem p = PagingProblem();
  v1::Schedule s = Solved(p);
  const std::string svg = ScheduleToSvg(p, s).text();
  EXPECT_THAT(svg, HasSubstr("Optimal schedule (proven): 10.2 J, peak 30 B of 30 B RAM"));
  EXPECT_THAT(svg, ::testing::ContainsRegex(R"(>[0-9.]+ (s|ms|us|ns)</text>)"));  // the time axis's end
  EXPECT_THAT(svg, HasSubstr("<title>A stage is"));
  s.set_status(v1::Schedule::STATUS_OPTIMAL);
  s.set_strategy("optimal");
  EXPECT_THAT(Headline(s), ::testing::StartsWith("Optimal schedule (proven): "));
  s.set_status(v1::Schedule::STATUS_FEASIBLE);
  EXPECT_THAT(Headline(s), ::testing::StartsWith("Best schedule found in the time limit (not proven optimal): "));
  s.set_strategy("sqrt");
  EXPECT_THAT(Headline(s), ::testing::StartsWith("sqrt schedule: "));
  s.set_energy_source(v1::ENERGY_SOURCE_ESTIMATED);
  EXPECT_THAT(Headline(s), HasSubstr(" ESTIMATED, peak "));
  s.set_peak_ram_bytes(4692992);
  s.set_activation_budget_bytes(4700000);
  EXPECT_THAT(Headline(s), ::testing::EndsWith("peak 4.69 MB of 4.70 MB RAM"));
}

}  // namespace
}  // namespace edgecost::solver
