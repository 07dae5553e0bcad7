// The two rules that make "optimal" trustworthy next to the baselines, swept
// over the zoo, every preset with compute costs, the three modes (recompute
// only, page only, both) and RAM budgets from 20% to 100% of the checkpoint-all
// peak:
//  - "optimal" never returns a schedule worse than the best baseline or the
//    greedy heuristic, and never "no schedule" when one of them found one;
//  - the smallest RAM budget the search reports is never above the peak of any
//    schedule any of them finds.
// The MILP gets almost no time here: what is checked is that its answer starts
// from every heuristic, which needs no search to prove.
#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <string>

#include <gtest/gtest.h>

#include "graph/cost_source.h"
#include "graph/resolve.h"
#include "graph/zoo.h"
#include "solver/bound.h"
#include "solver/heuristics.h"
#include "solver/simulator.h"
#include "solver/solve.h"

namespace edgecost::solver {
namespace {

bool HasSchedule(const v1::Schedule& s) {
  return s.status() == v1::Schedule::STATUS_OPTIMAL || s.status() == v1::Schedule::STATUS_FEASIBLE;
}

struct Mode {
  const char* name;
  bool paging;
  bool remat;
};
constexpr Mode kModes[] = {{"recompute only", false, true}, {"page only", true, false}, {"both", true, true}};

Problem Load(std::string_view model, std::string_view preset) {
  graph::GraphSpec spec;
  spec.model_or_file = std::string(model);
  auto table = graph::LoadCostTable(spec, preset, graph::kPoetFlopsSource);
  EXPECT_TRUE(table.ok()) << table.status().message();
  v1::ScheduleRequest request;
  request.set_activation_budget_bytes(1);
  request.set_runtime_budget_multiple(1.5);
  auto p = ProblemFromCostTable(*table, request);
  EXPECT_TRUE(p.ok()) << p.status().message();
  return *p;
}

void Sweep(std::string_view model, std::string_view preset, int step_percent) {
  const Problem base = Load(model, preset);
  Problem all = base;
  all.activation_budget_bytes = std::numeric_limits<int64_t>::max() / 4;
  const int64_t peak = CheckpointAll(all).replay.peak_ram_bytes;
  ASSERT_GT(peak, 0);
  for (const Mode& mode : kModes) {
    Problem p = base;
    p.allow_paging = mode.paging;
    p.allow_remat = mode.remat;
    int64_t smallest_peak = std::numeric_limits<int64_t>::max();
    for (int percent = 20; percent <= 100; percent += step_percent) {
      p.activation_budget_bytes = peak / 100 * percent;
      SCOPED_TRACE(std::string(model) + "/" + std::string(preset) + ", " + mode.name + ", " + std::to_string(percent) +
                   "% of the checkpoint-all peak");
      double best_j = std::numeric_limits<double>::infinity();
      std::string best_by;
      for (Strategy kind : kBaselinesAndGreedy) {
        if (kind == Strategy::kPagingOnly && !p.allow_paging) continue;
        auto s = Solve(p, {std::string(StrategyName(kind)), 60, 1, false});
        ASSERT_TRUE(s.ok()) << s.status().message();
        if (!HasSchedule(*s)) continue;
        ASSERT_TRUE(Simulate(p, *s).valid) << StrategyName(kind);
        smallest_peak = std::min<int64_t>(smallest_peak, static_cast<int64_t>(s->peak_ram_bytes()));
        if (s->energy().total_j() < best_j) {
          best_j = s->energy().total_j();
          best_by = StrategyName(kind);
        }
      }
      // A tiny time limit: the heuristics run whole, the MILP barely starts.
      auto optimal = Solve(p, {"optimal", 0.01, 1, false});
      ASSERT_TRUE(optimal.ok()) << optimal.status().message();
      if (std::isinf(best_j)) continue;
      ASSERT_TRUE(HasSchedule(*optimal)) << best_by << " found a schedule; optimal says: " << optimal->message();
      EXPECT_TRUE(Simulate(p, *optimal).valid);
      EXPECT_LE(optimal->energy().total_j(), best_j * (1 + 1e-12)) << "worse than " << best_by;
      // Every bound stays below every schedule: the eviction bound, and what optimal reports.
      EXPECT_LE(EvictionLowerBoundJ(p), optimal->energy().total_j() * (1 + 1e-12));
      EXPECT_LE(EvictionLowerBoundJ(p, 0.1), optimal->energy().total_j() * (1 + 1e-12));  // in integers
      EXPECT_LE(optimal->lower_bound_j(), optimal->energy().total_j() * (1 + 1e-12));
      smallest_peak = std::min<int64_t>(smallest_peak, static_cast<int64_t>(optimal->peak_ram_bytes()));
    }
    SCOPED_TRACE(std::string(model) + "/" + std::string(preset) + ", " + mode.name);
    auto min_ram = MinFeasibleRam(p);
    if (smallest_peak == std::numeric_limits<int64_t>::max()) continue;
    ASSERT_TRUE(min_ram.ok()) << min_ram.status().message();
    EXPECT_LE(*min_ram, smallest_peak);
    p.activation_budget_bytes = *min_ram;  // and a schedule exists there
    auto at_min = Solve(p, {"optimal", 0.01, 1, false});
    ASSERT_TRUE(at_min.ok());
    EXPECT_TRUE(HasSchedule(*at_min)) << at_min->message();
  }
}

// Where the budget forces letting go of memory, the eviction bound proves
// energy above the floor at once, and a solve with no time for its MILP reports it.
TEST(EvictionBound, ProvesMoreThanTheFloorBeforeAnyMilp) {
  Problem p = Load("resnet18_cifar", "a72");
  Problem all = p;
  all.activation_budget_bytes = std::numeric_limits<int64_t>::max() / 4;
  const int64_t peak = CheckpointAll(all).replay.peak_ram_bytes;
  p.activation_budget_bytes = peak / 2;
  const double bound_j = EvictionLowerBoundJ(p);
  EXPECT_GT(bound_j, p.FloorJ() * (1 + 1e-6));
  auto s = Solve(p, {"optimal", 0.01, 1, false});
  ASSERT_TRUE(s.ok()) << s.status().message();
  ASSERT_TRUE(HasSchedule(*s)) << s->message();
  EXPECT_GE(s->lower_bound_j(), bound_j * (1 - 1e-12));
  EXPECT_LE(bound_j, s->energy().total_j());
  EXPECT_LT(s->gap(), 1.0);  // the floor alone would leave all of the energy above it unproven

  // With every tensor allowed to stay, nothing must go: the floor.
  EXPECT_DOUBLE_EQ(EvictionLowerBoundJ(all), all.FloorJ());
}

// Exchanges and kicks start from greedy's schedule: never worse, always valid,
// and from a fixed seed, so the same problem gives the same schedule.
TEST(GreedyWithExchanges, NeverWorseThanGreedyAndRepeatable) {
  int solved = 0;
  for (const char* model : {"linear", "vgg16_cifar"}) {
    Problem p = Load(model, "a72");
    Problem all = p;
    all.activation_budget_bytes = std::numeric_limits<int64_t>::max() / 4;
    const int64_t peak = CheckpointAll(all).replay.peak_ram_bytes;
    for (int percent : {60, 75, 90}) {
      SCOPED_TRACE(std::string(model) + " at " + std::to_string(percent) + "% of the checkpoint-all peak");
      p.activation_budget_bytes = peak / 100 * percent;
      const double forever = std::numeric_limits<double>::infinity();
      const std::optional<Candidate> greedy = Greedy(p);
      if (!greedy) {  // below what greedy reaches: so is where it starts
        EXPECT_FALSE(GreedyWithExchanges(p, {}, {forever}));
        continue;
      }
      const std::optional<Candidate> first = GreedyWithExchanges(p, {}, {forever});
      const std::optional<Candidate> second = GreedyWithExchanges(p, {}, {forever});
      ASSERT_TRUE(first && second);
      ++solved;
      EXPECT_TRUE(Simulate(p, first->plan).valid) << Simulate(p, first->plan).violation;
      EXPECT_LE(first->replay.energy.total_j(), greedy->replay.energy.total_j());
      EXPECT_TRUE(first->plan.compute == second->plan.compute && first->plan.resident == second->plan.resident &&
                  first->plan.page_in == second->plan.page_in && first->plan.page_out == second->plan.page_out);
    }
  }
  EXPECT_EQ(solved, 6);  // every budget has a schedule: the rules above were checked
}

class BaselineSweep : public ::testing::TestWithParam<std::string> {};

// Every preset with compute costs; budgets in 10% steps for the small graphs,
// 20% for the CIFAR ones, and the four largest (a second or more of heuristics
// per budget) on a72 alone in 20% steps.
TEST_P(BaselineSweep, OptimalIsNeverWorseAndMinRamNeverAbove) {
  const bool large =
      GetParam() == "resnet50" || GetParam() == "bert" || GetParam() == "resnet18" || GetParam() == "vgg16";
  for (const graph::BoardPreset& preset : graph::BoardPresets()) {
    if (!preset.flops_per_s || !preset.flops_per_j) continue;  // paging constants only
    if (large && preset.name != "a72") continue;
    Sweep(GetParam(), preset.name, large || GetParam().find("cifar") != std::string::npos ? 20 : 10);
  }
}

std::vector<std::string> ZooNames() {
  std::vector<std::string> names;
  for (const graph::ZooModel& model : graph::ZooModels()) names.emplace_back(model.name);
  return names;
}

INSTANTIATE_TEST_SUITE_P(Zoo, BaselineSweep, ::testing::ValuesIn(ZooNames()),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

}  // namespace
}  // namespace edgecost::solver
