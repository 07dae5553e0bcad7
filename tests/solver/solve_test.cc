// The solver against exhaustive enumeration on small graphs, its switches, and
// POET's README instance.
#include "solver/solve.h"

#include <atomic>
#include <chrono>
#include <cmath>
#include <limits>
#include <optional>
#include <thread>

#include <gtest/gtest.h>

#include "graph/graph_io.h"
#include "solver/bound.h"
#include "solver/heuristics.h"
#include "solver/simulator.h"
#include "tests/solver/test_problems.h"
#include "tests/test_paths.h"

namespace edgecost::solver {
namespace {

using testing::Graph;
using testing::TrainingChain;

// The cheapest valid plan, by exhaustive search over every stage's choices:
// which earlier nodes to recompute, page in and page out, and which outputs to
// keep for the next stage. Branches are cut only where no completion can be
// valid (the simulator rejects a stage already taken) or cheaper than the best
// plan found (every later stage computes its node at least). What is on storage
// is the union of the page-outs so far: keeping a copy there is free. +inf if
// no plan is valid.
class Enumerator {
 public:
  explicit Enumerator(const Problem& p) : p_(p), n_(p.size()), plan_(n_) {}

  double Best() {
    Stage(0);
    return best_;
  }

 private:
  static std::vector<int> Members(const std::vector<char>& row, int below) {
    std::vector<int> out;
    for (int i = 0; i < below; ++i) {
      if (row[static_cast<size_t>(i)]) out.push_back(i);
    }
    return out;
  }

  template <typename F>
  static void Subsets(const std::vector<int>& items, F&& visit) {
    for (uint32_t mask = 0; mask < (1u << items.size()); ++mask) {
      std::vector<int> chosen;
      for (size_t b = 0; b < items.size(); ++b) {
        if (mask >> b & 1) chosen.push_back(items[b]);
      }
      visit(chosen);
    }
  }

  void Stage(int t) {
    std::vector<int> earlier;
    for (int i = 0; i < t; ++i) earlier.push_back(i);
    const auto recomputable = p_.allow_remat ? earlier : std::vector<int>{};
    const auto pageable_out = p_.allow_paging ? Members(plan_.resident[t], t) : std::vector<int>{};
    const auto pageable_in = p_.allow_paging ? Members(plan_.stored[t], t) : std::vector<int>{};
    Subsets(recomputable, [&](const std::vector<int>& recompute) {
      Subsets(pageable_out, [&](const std::vector<int>& out) {
        Subsets(pageable_in, [&](const std::vector<int>& in) { Choose(t, recompute, out, in); });
      });
    });
  }

  void Choose(int t, const std::vector<int>& recompute, const std::vector<int>& out, const std::vector<int>& in) {
    auto& c = plan_.compute[t];
    std::fill(c.begin(), c.end(), 0);
    c[t] = 1;
    for (int i : recompute) c[i] = 1;
    std::fill(plan_.page_out[t].begin(), plan_.page_out[t].end(), 0);
    std::fill(plan_.page_in[t].begin(), plan_.page_in[t].end(), 0);
    for (int i : out) plan_.page_out[t][i] = 1;
    for (int i : in) plan_.page_in[t][i] = 1;
    if (t + 1 == n_) {
      const Replay r = Simulate(p_, plan_);
      if (r.valid) best_ = std::min(best_, r.energy.total_j());
      return;
    }
    std::vector<int> keepable;
    for (int i = 0; i <= t; ++i) {
      if (plan_.resident[t][i] || c[i] || plan_.page_in[t][i]) keepable.push_back(i);
    }
    for (int i = 0; i < n_; ++i) plan_.stored[t + 1][i] = plan_.stored[t][i] || plan_.page_out[t][i];
    Subsets(keepable, [&](const std::vector<int>& keep) {
      auto& s = plan_.resident[t + 1];
      std::fill(s.begin(), s.end(), 0);
      for (int i : keep) s[i] = 1;
      // Stage t + 1 is still empty, so the replay stops there at the latest.
      const Replay r = Simulate(p_, plan_);
      if (r.violation_stage <= t) return;
      const auto& e = r.energy;
      double bound_j = e.compute_j() + e.recompute_j() + e.page_in_j() + e.page_out_j();
      double runtime_s = r.runtime_s;
      for (int j = t + 1; j < n_; ++j) {
        bound_j += p_.compute_j[static_cast<size_t>(j)];
        runtime_s += p_.runtime_s[static_cast<size_t>(j)];
      }
      if (bound_j >= best_ || runtime_s > p_.runtime_budget_s) return;
      Stage(t + 1);
      plan_.compute[t + 1].assign(static_cast<size_t>(n_), 0);  // Stage(t + 1) filled it
    });
  }

  const Problem& p_;
  const int n_;
  Plan plan_;
  double best_ = std::numeric_limits<double>::infinity();
};

double BruteForce(const Problem& p) { return Enumerator(p).Best(); }

void ExpectMatchesBruteForce(Problem p, const std::string& name) {
  SCOPED_TRACE(name + ", budget " + std::to_string(p.activation_budget_bytes));
  const double best = BruteForce(p);
  // The eviction bound: never above the optimum, never below the floor.
  const double bound_j = EvictionLowerBoundJ(p);
  EXPECT_GE(bound_j, p.FloorJ());
  // Solved in integers: at least the LP's bound, and still never above the optimum.
  const double integer_bound_j = EvictionLowerBoundJ(p, 10);
  EXPECT_GE(integer_bound_j, bound_j * (1 - 1e-9));
  if (!std::isinf(best)) {
    EXPECT_LE(bound_j, best * (1 + 1e-9));
    EXPECT_LE(integer_bound_j, best * (1 + 1e-9));
  }
  auto schedule = Solve(p, {"optimal", 30, 1, false});
  ASSERT_TRUE(schedule.ok()) << schedule.status().message();
  if (std::isinf(best)) {
    EXPECT_TRUE(schedule->status() == v1::Schedule::STATUS_INFEASIBLE) << schedule->message();
    return;
  }
  ASSERT_EQ(schedule->status(), v1::Schedule::STATUS_OPTIMAL) << schedule->message();
  EXPECT_NEAR(schedule->energy().total_j(), best, 1e-9);
  EXPECT_TRUE(Simulate(p, *schedule).valid);
}

TEST(SolveAgainstEnumeration, ChainsWithRecomputation) {
  for (int forward : {2, 3}) {  // 4 and 6 nodes
    Problem base = TrainingChain(forward, 0);
    base.allow_paging = false;
    for (int64_t budget : {10, 20, 30, 40, 60}) {
      Problem p = base;
      p.activation_budget_bytes = budget;
      ExpectMatchesBruteForce(p, "chain of " + std::to_string(2 * forward));
    }
  }
}

TEST(SolveAgainstEnumeration, DiamondAndSkipConnection) {
  const std::vector<std::pair<std::string, Problem>> graphs = {
      {"diamond", Graph(4, {{0, 1}, {0, 2}, {1, 3}, {2, 3}}, 0)},
      {"skip", Graph(5, {{0, 1}, {1, 2}, {2, 3}, {3, 4}, {0, 4}, {1, 3}}, 0)},
  };
  for (const auto& [name, graph] : graphs) {
    for (int64_t budget : {20, 30, 40}) {
      Problem p = graph;
      p.allow_paging = false;
      p.activation_budget_bytes = budget;
      ExpectMatchesBruteForce(p, name);
    }
  }
}

TEST(SolveAgainstEnumeration, PagingWithAndWithoutRecomputation) {
  for (int forward : {2, 3}) {
    for (bool remat : {false, true}) {
      if (forward == 3 && remat) continue;  // some 20 s of enumeration
      Problem p = TrainingChain(forward, 0);
      p.allow_remat = remat;
      for (int64_t budget : {20, 30, 40}) {
        p.activation_budget_bytes = budget;
        ExpectMatchesBruteForce(
            p, "chain of " + std::to_string(2 * forward) + (remat ? ", paging and recomputation" : ", paging only"));
      }
    }
  }
}

TEST(Solve, PagesWhenRecomputingCostsMoreAndRecomputesWhenPagingDoes) {
  Problem p = TrainingChain(3, 30);
  p.compute_j[0] = 5;  // the long-lived activation is expensive to recompute
  p.page_in_j.assign(6, 0.1);
  p.page_out_j.assign(6, 0.1);
  auto paged = Solve(p, {"optimal", 30, 1, false});
  ASSERT_TRUE(paged.ok());
  ASSERT_EQ(paged->status(), v1::Schedule::STATUS_OPTIMAL) << paged->message();
  EXPECT_GT(paged->page_outs(), 0u);
  EXPECT_EQ(paged->recomputations(), 0u);

  p.compute_j[0] = 0.01;
  p.page_in_j.assign(6, 2.0);
  p.page_out_j.assign(6, 2.0);
  auto recomputed = Solve(p, {"optimal", 30, 1, false});
  ASSERT_TRUE(recomputed.ok());
  ASSERT_EQ(recomputed->status(), v1::Schedule::STATUS_OPTIMAL) << recomputed->message();
  EXPECT_GT(recomputed->recomputations(), 0u);
  EXPECT_EQ(recomputed->page_outs(), 0u);
}

// Greedy lets go first of the tensor with the most bytes per joule; here that
// one holds twice the excess, and no single move undoes it. An exchange (keep
// it, page a smaller one instead) does, and reaches the optimum.
TEST(Greedy, ExchangesTradeOneTensorsMemoryForAnothers) {
  Problem p = TrainingChain(4, 1000);  // long-lived: 0, 1, 2, read again by 7, 6, 5
  p.allow_remat = false;
  p.ram_bytes = {20, 10, 10, 10, 1, 1, 1, 1};
  p.page_in_j = {0.35, 0.2, 0.2, 0.2, 0.2, 0.2, 0.2, 0.2};
  p.page_out_j = p.page_in_j;  // paging 0: 20 B for 0.7 J; paging 1 or 2: 10 B for 0.4 J
  const int64_t all_kept = CheckpointAll(p).replay.peak_ram_bytes;
  p.activation_budget_bytes = all_kept - 10;

  const std::optional<Candidate> greedy = Greedy(p);
  ASSERT_TRUE(greedy && greedy->replay.valid);
  const std::optional<Candidate> exchanged = GreedyWithExchanges(p, {}, {});
  ASSERT_TRUE(exchanged);
  ASSERT_TRUE(exchanged->replay.valid) << exchanged->replay.violation;
  EXPECT_LT(exchanged->replay.energy.total_j(), greedy->replay.energy.total_j() - 0.2);
  const auto optimal = Solve(p, {"optimal", 30, 1, false});
  ASSERT_TRUE(optimal.ok());
  ASSERT_EQ(optimal->status(), v1::Schedule::STATUS_OPTIMAL);
  EXPECT_NEAR(exchanged->replay.energy.total_j(), optimal->energy().total_j(), 1e-9);
  // Past its deadline it is greedy.
  const std::optional<Candidate> late = GreedyWithExchanges(p, {}, {0});
  ASSERT_TRUE(late);
  EXPECT_EQ(late->replay.energy.total_j(), greedy->replay.energy.total_j());
}

TEST(Solve, SwitchesAreHonoured) {
  Problem p = TrainingChain(3, 30);
  p.allow_paging = false;
  auto no_paging = Solve(p, {"optimal", 30, 1, false});
  ASSERT_TRUE(no_paging.ok());
  EXPECT_EQ(no_paging->page_outs() + no_paging->page_ins(), 0u);
  p.allow_paging = true;
  p.allow_remat = false;
  auto no_remat = Solve(p, {"optimal", 30, 1, false});
  ASSERT_TRUE(no_remat.ok());
  EXPECT_EQ(no_remat->recomputations(), 0u);
  p.allow_paging = false;
  auto neither = Solve(p, {"optimal", 30, 1, true});
  ASSERT_TRUE(neither.ok());
  EXPECT_EQ(neither->status(), v1::Schedule::STATUS_INFEASIBLE);
}

TEST(Solve, TooSmallABudgetIsInfeasibleWithTheSmallestThatWorks) {
  Problem p = TrainingChain(3, 15);  // a backward node with its two inputs needs 30 B
  auto schedule = Solve(p, {"optimal", 30, 1, true});
  ASSERT_TRUE(schedule.ok());
  EXPECT_EQ(schedule->status(), v1::Schedule::STATUS_INFEASIBLE);
  EXPECT_NE(schedule->message().find("30 B"), std::string::npos) << schedule->message();
  EXPECT_GE(schedule->min_feasible_ram_bytes(), 30u);
}

// No heuristic meets the budget: the smallest budget they meet is said through progress first,
// before the MILP's search, and is the one the schedule reports at the end.
TEST(Solve, TheSmallestFeasibleBudgetIsSaidBeforeTheMilpSearches) {
  Problem p = TrainingChain(3, 30);
  p.allow_paging = false;
  p.allow_remat = false;
  SolveOptions options{"optimal", 30, 1, true};
  std::vector<Progress> seen;
  options.on_progress = [&seen](const Progress& progress) { seen.push_back(progress); };
  auto schedule = Solve(p, options);
  ASSERT_TRUE(schedule.ok()) << schedule.status().message();
  ASSERT_FALSE(seen.empty());
  EXPECT_GT(seen.front().min_feasible_ram_bytes, 30);
  EXPECT_EQ(seen.front().min_feasible_ram_bytes, static_cast<int64_t>(schedule->min_feasible_ram_bytes()));
}

TEST(Solve, BaselinesReplayAndCostAtLeastTheOptimum) {
  Problem p = TrainingChain(4, 40);
  auto optimal = Solve(p, {"optimal", 30, 1, false});
  ASSERT_TRUE(optimal.ok());
  ASSERT_EQ(optimal->status(), v1::Schedule::STATUS_OPTIMAL) << optimal->message();
  int with_schedule = 0;
  for (Strategy baseline : kBaselines) {
    const std::string strategy(StrategyName(baseline));
    auto s = Solve(p, {strategy, 30, 1, false});
    ASSERT_TRUE(s.ok()) << strategy;
    if (s->stages_size() == 0) {  // a baseline that finds nothing says why
      EXPECT_EQ(s->status(), v1::Schedule::STATUS_NO_SOLUTION) << strategy;
      EXPECT_NE(s->message().find("does not meet these budgets"), std::string::npos)
          << strategy << ": " << s->message();
      continue;
    }
    ++with_schedule;
    EXPECT_TRUE(Simulate(p, *s).valid) << strategy;
    EXPECT_GE(s->energy().total_j(), optimal->energy().total_j() - 1e-9) << strategy;
  }
  EXPECT_GE(with_schedule, 2) << "the comparison needs baselines that find schedules at this budget";
}

TEST(Solve, PoetReadmeInstance) {
  auto table = graph::ReadCostTableFile(edgecost::testing::PoetInstance("resnet18_cifar", "a72"));
  ASSERT_TRUE(table.ok()) << table.status().message();
  v1::ScheduleRequest request;
  request.set_activation_budget_bytes(3000000);
  request.set_runtime_budget_multiple(7.6);
  auto p = ProblemFromCostTable(*table, request);
  ASSERT_TRUE(p.ok());
  auto schedule = Solve(*p, {"optimal", 30, 1, false});
  ASSERT_TRUE(schedule.ok());
  EXPECT_EQ(schedule->status(), v1::Schedule::STATUS_OPTIMAL);
  EXPECT_NEAR(schedule->energy().total_j(), 7.889510, 5e-7);
  EXPECT_LE(schedule->peak_ram_bytes(), 3000000u);
}

TEST(Problem, RuntimeBudgetsMustBePositiveNumbers) {
  auto table = graph::ReadCostTableFile(edgecost::testing::PoetInstance("resnet18_cifar", "a72"));
  ASSERT_TRUE(table.ok()) << table.status().message();
  for (double bad : {0.0, -1.0, std::nan(""), std::numeric_limits<double>::infinity()}) {
    v1::ScheduleRequest request;
    request.set_activation_budget_bytes(3000000);
    request.set_runtime_budget_multiple(bad);
    EXPECT_EQ(ProblemFromCostTable(*table, request).status().code(), ErrorCode::kInvalidArgument) << bad;
    request.set_runtime_budget_s(bad);
    EXPECT_EQ(ProblemFromCostTable(*table, request).status().code(), ErrorCode::kInvalidArgument) << bad;
  }
}

// A stop (the daemon's shutdown) ends a long search with the best valid
// schedule so far: set before the solve, and set while it searches.
TEST(Solve, AStopEndsTheSearchWithAValidSchedule) {
  auto table = graph::ReadCostTableFile(edgecost::testing::PoetInstance("resnet18_cifar", "a72"));
  ASSERT_TRUE(table.ok()) << table.status().message();
  v1::ScheduleRequest request;
  request.set_activation_budget_bytes(1500000);  // far from provable: a 55% gap after 60 s
  request.set_runtime_budget_multiple(1.5);
  auto p = ProblemFromCostTable(*table, request);
  ASSERT_TRUE(p.ok());
  for (int delay_ms : {0, 300}) {
    std::atomic<bool> stop{delay_ms == 0};
    SolveOptions options{"optimal", 600, 1, false};
    options.stop = &stop;
    std::thread stopper([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
      stop = true;
    });
    auto schedule = Solve(*p, options);  // returns once stopped, long before 600 s
    stopper.join();
    ASSERT_TRUE(schedule.ok()) << schedule.status().message();
    EXPECT_EQ(schedule->status(), v1::Schedule::STATUS_FEASIBLE) << schedule->message();
    EXPECT_TRUE(Simulate(*p, *schedule).valid);
  }
}

}  // namespace
}  // namespace edgecost::solver

namespace edgecost::solver {
namespace {

// The time limit covers the whole solve: heuristics, building the model, the
// root LP (which alone runs for minutes on this graph) and the search. The
// solver promises limit + max(1 s, 5%); checked with room to spare for a
// loaded machine, as a ratio to the limit.
TEST(Solve, KeepsItsTimeLimitOnALargeGraph) {
  auto table = graph::ReadCostTableFile(edgecost::testing::PoetInstance("resnet50", "a72"));
  ASSERT_TRUE(table.ok()) << table.status().message();
  uint64_t activations = 0;
  for (const auto& cost : table->costs()) activations += cost.ram_bytes();
  v1::ScheduleRequest request;
  request.set_activation_budget_bytes(activations * 4 / 10);
  request.set_runtime_budget_multiple(1.5);
  auto p = ProblemFromCostTable(*table, request);
  ASSERT_TRUE(p.ok());
  const double limit_s = 3;
  const auto start = std::chrono::steady_clock::now();
  auto schedule = Solve(*p, {"optimal", limit_s, 1, true});
  const double elapsed_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_TRUE(schedule.ok()) << schedule.status().message();
  EXPECT_LT(elapsed_s, 2 * limit_s) << schedule->message();
  EXPECT_TRUE(schedule->status() == v1::Schedule::STATUS_FEASIBLE ||
              schedule->status() == v1::Schedule::STATUS_NO_SOLUTION)
      << schedule->message();  // nothing is proven in 3 s here
}

}  // namespace
}  // namespace edgecost::solver
