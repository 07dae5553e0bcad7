// Costs no measurement gives (zero, all equal, negative) slipped past the checks
// where they enter: every heuristic and every strategy still returns, within
// its deadline or at its stop flag. A search that accepted equal energies once
// went round in circles for 11 minutes on one negative cost; a hang here ends
// in the test's timeout, not in a timed assertion. And the checks themselves:
// ProblemFromCostTable refuses what the searches must never see.
#include <atomic>
#include <cmath>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "graph/cost_source.h"
#include "graph/resolve.h"
#include "solver/heuristics.h"
#include "solver/simulator.h"
#include "solver/solve.h"

namespace edgecost::solver {
namespace {

using ::testing::HasSubstr;

v1::CostTable Table() {
  graph::GraphSpec spec;
  spec.model_or_file = "resnet18_cifar";
  auto table = graph::LoadCostTable(spec, "a72", graph::kPoetFlopsSource);
  EXPECT_TRUE(table.ok()) << table.status().message();
  return *table;
}

v1::ScheduleRequest Request(uint64_t activation_budget_bytes) {
  v1::ScheduleRequest request;
  request.set_activation_budget_bytes(activation_budget_bytes);
  request.set_runtime_budget_multiple(1.5);
  return request;
}

// resnet18_cifar on a72 at half its plain peak, where every search has work to do.
Problem Base() {
  auto p = ProblemFromCostTable(Table(), Request(1));
  EXPECT_TRUE(p.ok()) << p.status().message();
  Problem all = *p;
  all.activation_budget_bytes = int64_t{1} << 50;
  p->activation_budget_bytes = CheckpointAll(all).replay.peak_ram_bytes / 2;
  return *p;
}

struct Adversary {
  std::string name;
  std::function<void(Problem&)> poison;
};

const std::vector<Adversary>& Adversaries() {
  static const std::vector<Adversary> adversaries = {
      {"zero costs",
       [](Problem& p) {
         for (auto* costs : {&p.compute_j, &p.page_in_j, &p.page_out_j, &p.runtime_s}) costs->assign(costs->size(), 0);
       }},
      {"equal costs",
       [](Problem& p) {
         for (auto* costs : {&p.compute_j, &p.page_in_j, &p.page_out_j}) costs->assign(costs->size(), 1e-3);
       }},
      {"one negative compute", [](Problem& p) { p.compute_j[3] = -5; }},
      {"negative paging",
       [](Problem& p) {
         p.page_in_j.assign(p.page_in_j.size(), -1e-3);
         p.page_out_j.assign(p.page_out_j.size(), -1e-3);
       }},
      {"all negative",
       [](Problem& p) {
         for (double& j : p.compute_j) j = -std::abs(j) - 1e-6;
       }},
  };
  return adversaries;
}

TEST(Adversarial, EveryHeuristicReturnsByItsDeadline) {
  for (const Adversary& adversary : Adversaries()) {
    SCOPED_TRACE(adversary.name);
    Problem p = Base();
    adversary.poison(p);
    const Deadline soon{SteadyNowS() + 0.5};
    // What a search cut short returns is its plan with that plan's own replay, not a stale one.
    for (const std::optional<Candidate>& c :
         {Greedy(p, soon), GreedyWithExchanges(p, soon, soon), std::optional<Candidate>(CheckpointAll(p)),
          std::optional<Candidate>(PagingOnly(p)), SqrtCheckpointing(p), Revolve(p)}) {
      if (!c) continue;
      const Replay again = Simulate(p, c->plan);
      EXPECT_EQ(again.valid, c->replay.valid);
      EXPECT_EQ(again.peak_ram_bytes, c->replay.peak_ram_bytes);
    }
    EXPECT_TRUE(MinFeasibleRam(p, soon).ok());
  }
}

TEST(Adversarial, EveryStrategyReturnsWithinItsTimeLimit) {
  for (const Adversary& adversary : Adversaries()) {
    for (Strategy strategy : kStrategies) {
      SCOPED_TRACE(adversary.name + ", " + std::string(StrategyName(strategy)));
      Problem p = Base();
      adversary.poison(p);
      SolveOptions options;
      options.strategy = std::string(StrategyName(strategy));
      options.time_limit_s = 1;
      const auto schedule = Solve(p, options);
      ASSERT_TRUE(schedule.ok()) << schedule.status().message();
      const bool has_schedule = schedule->status() == v1::Schedule::STATUS_OPTIMAL ||
                                schedule->status() == v1::Schedule::STATUS_FEASIBLE;
      if (has_schedule) {
        EXPECT_TRUE(Simulate(p, *schedule).valid);
      }
    }
  }
}

// At shutdown the daemon sets the stop flag: every search gives up at once.
TEST(Adversarial, AStopFlagEndsEverySearch) {
  const std::atomic<bool> stop{true};
  for (const Adversary& adversary : Adversaries()) {
    SCOPED_TRACE(adversary.name);
    Problem p = Base();
    adversary.poison(p);
    const Deadline stopped{std::numeric_limits<double>::infinity(), &stop};
    EXPECT_TRUE(stopped.Passed());
    (void)Greedy(p, stopped);
    (void)GreedyWithExchanges(p, stopped, stopped);
    (void)MinFeasibleRam(p, stopped);
    SolveOptions options;
    options.time_limit_s = 3600;
    options.stop = &stop;
    EXPECT_TRUE(Solve(p, options).ok());
  }
}

TEST(Adversarial, CheaperIsStrictAtZeroAndBelow) {
  EXPECT_FALSE(Cheaper(0, 0));
  EXPECT_FALSE(Cheaper(-5, -5));
  EXPECT_TRUE(Cheaper(-6, -5));
  EXPECT_FALSE(Cheaper(1, 1 + 1e-15));
  EXPECT_TRUE(Cheaper(0.9, 1));
}

// The searches never see such costs: the problem is refused where it is built.
TEST(Adversarial, ProblemFromCostTableRefusesWhatNoDeviceMeasures) {
  const v1::CostTable good = Table();
  ASSERT_TRUE(ProblemFromCostTable(good, Request(1000000)).ok());
  struct Edit {
    std::string field;
    std::function<void(v1::CostTable&)> apply;
  };
  const std::vector<Edit> edits = {
      {"compute_j", [](v1::CostTable& t) { t.mutable_costs(3)->set_compute_j(-5); }},
      {"runtime_s", [](v1::CostTable& t) { t.mutable_costs(3)->set_runtime_s(std::nan("")); }},
      {"page_in_j", [](v1::CostTable& t) { t.mutable_costs(3)->set_page_in_j(std::numeric_limits<double>::infinity()); }},
      {"ram_bytes", [](v1::CostTable& t) { t.mutable_costs(3)->set_ram_bytes(uint64_t{1} << 63); }},
      {"page_out_power_w", [](v1::CostTable& t) { t.mutable_paging()->set_page_out_power_w(-1); }},
  };
  for (const Edit& edit : edits) {
    v1::CostTable table = good;
    edit.apply(table);
    const auto p = ProblemFromCostTable(table, Request(1000000));
    ASSERT_FALSE(p.ok()) << edit.field;
    EXPECT_THAT(p.status().message(), HasSubstr(edit.field));
  }
  // 2^63 B and more once wrapped to a negative budget.
  for (uint64_t budget : {uint64_t{1} << 63, std::numeric_limits<uint64_t>::max(), (uint64_t{1} << 62) + 1}) {
    const auto p = ProblemFromCostTable(good, Request(budget));
    ASSERT_FALSE(p.ok()) << budget;
    EXPECT_THAT(p.status().message(), HasSubstr("above the largest budget"));
  }
  v1::ScheduleRequest request = Request(1000000);
  request.set_process_ram_budget_bytes(uint64_t{1} << 63);
  EXPECT_FALSE(ProblemFromCostTable(good, request).ok());
}

}  // namespace
}  // namespace edgecost::solver
