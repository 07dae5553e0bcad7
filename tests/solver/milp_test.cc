// The MILP's extra rows (the eviction bound's rows and the reach rows) are cuts:
// they may only remove fractional points. If one removed a schedule the
// simulator accepts, CBC could prove a bound above that schedule's energy and
// call a worse one optimal. So every valid schedule must satisfy every row,
// with the RAM budget at the schedule's own peak, where the cuts are tightest.
#include "solver/milp.h"

#include <algorithm>
#include <chrono>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "graph/cost_source.h"
#include "graph/resolve.h"
#include "solver/heuristics.h"
#include "solver/simulator.h"
#include "tests/solver/test_problems.h"

namespace edgecost::solver {
namespace {

Problem Zoo(std::string_view model) {
  graph::GraphSpec spec;
  spec.model_or_file = std::string(model);
  auto table = graph::LoadCostTable(spec, "a72", graph::kPoetFlopsSource);
  EXPECT_TRUE(table.ok()) << table.status().message();
  v1::ScheduleRequest request;
  request.set_activation_budget_bytes(1);
  request.set_runtime_budget_multiple(4);  // room for random schedules' recomputations
  auto p = ProblemFromCostTable(*table, request);
  EXPECT_TRUE(p.ok()) << p.status().message();
  return *p;
}

// Random policies for every node (from the first `kinds` of keep, page,
// recompute, recompute once) and paging holds; returns how many of the plans
// were the MILP's schedules and valid at their own peak, and fails on any cut
// such a plan breaks.
int CheckRandomSchedules(Problem p, int count, uint32_t seed, int kinds = 4) {
  std::vector<int> last_use(static_cast<size_t>(p.size()), 0);
  for (int v = 0; v < p.size(); ++v) {
    for (int u : p.preds[static_cast<size_t>(v)]) last_use[static_cast<size_t>(u)] = v;
  }
  std::mt19937 random(seed);
  int checked = 0;
  for (int k = 0; k < count; ++k) {
    std::vector<Policy> policies(static_cast<size_t>(p.size()));
    std::vector<int> hold(static_cast<size_t>(p.size()));
    for (int u = 0; u < p.size(); ++u) {
      static constexpr Policy kAll[] = {Policy::kKeep, Policy::kPage, Policy::kRecompute, Policy::kRecomputeOnce};
      policies[static_cast<size_t>(u)] = kAll[random() % kinds];
      hold[static_cast<size_t>(u)] = std::min(last_use[static_cast<size_t>(u)], u + 2 + static_cast<int>(random() % 8));
    }
    const Plan plan = BuildPlan(p, policies, hold);
    p.activation_budget_bytes = std::numeric_limits<int64_t>::max() / 4;
    const Replay unlimited = Simulate(p, plan);
    if (!unlimited.valid) continue;
    p.activation_budget_bytes = unlimited.peak_ram_bytes;
    if (!Simulate(p, plan).valid) continue;
    const BrokenRows broken = MilpRowsBrokenBy(p, plan);
    if (broken.model > 0) continue;  // not one of the MILP's schedules (kept past its last use, say)
    EXPECT_EQ(broken.cuts, 0) << "schedule " << k << " of seed " << seed << ", peak " << unlimited.peak_ram_bytes
                              << " B";
    ++checked;
  }
  return checked;
}

TEST(MilpCuts, KeepEveryValidScheduleOfTheZoo) {
  for (std::string_view model : {"linear", "vgg16_cifar", "resnet18_cifar"}) {
    SCOPED_TRACE(std::string(model));
    EXPECT_GE(CheckRandomSchedules(Zoo(model), 12, 7, 2), 6);
  }
}

TEST(MilpCuts, KeepEveryValidScheduleOfSmallGraphs) {
  // Branches and joins, where a recomputation needs inputs that may be let go too.
  const Problem diamond = testing::Graph(10,
                                         {{0, 1},
                                          {0, 2},
                                          {1, 3},
                                          {2, 3},
                                          {3, 4},
                                          {0, 5},
                                          {3, 5},
                                          {2, 6},
                                          {5, 6},
                                          {1, 7},
                                          {6, 7},
                                          {4, 8},
                                          {7, 8},
                                          {0, 9},
                                          {8, 9}},
                                         1000);
  EXPECT_GE(CheckRandomSchedules(diamond, 60, 3), 20);
  EXPECT_GE(CheckRandomSchedules(testing::TrainingChain(6, 1000), 60, 5), 20);
}

TEST(MilpCuts, KeepTheHeuristicsSchedules) {
  for (std::string_view model : {"vgg16_cifar", "resnet18_cifar"}) {
    Problem p = Zoo(model);
    p.activation_budget_bytes = std::numeric_limits<int64_t>::max() / 4;
    const int64_t peak = CheckpointAll(p).replay.peak_ram_bytes;
    for (int percent : {60, 80}) {
      p.activation_budget_bytes = peak / 100 * percent;
      SCOPED_TRACE(std::string(model) + " at " + std::to_string(percent) + "%");
      int checked = 0;
      // Half a second of the local search: whatever it reached must fit too.
      const double soon =
          std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count() + 0.5;
      for (const std::optional<Candidate>& c : {Greedy(p), GreedyWithExchanges(p, {}, {soon}), SqrtCheckpointing(p),
                                                Revolve(p), std::optional<Candidate>(PagingOnly(p))}) {
        if (!c || !c->replay.valid) continue;
        const BrokenRows broken = MilpRowsBrokenBy(p, c->plan);
        EXPECT_EQ(broken.model, 0);  // else CBC could not start from it
        EXPECT_EQ(broken.cuts, 0);
        ++checked;
      }
      EXPECT_GE(checked, 3);
    }
  }
}

}  // namespace
}  // namespace edgecost::solver
