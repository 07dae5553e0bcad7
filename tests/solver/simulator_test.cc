// The simulator on hand-made schedules: valid ones, and each kind of violation.
#include "solver/simulator.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "solver/heuristics.h"
#include "tests/solver/test_problems.h"

namespace edgecost::solver {
namespace {

using testing::Graph;
using ::testing::HasSubstr;

// 0 -> 1 -> 2 -> 3, and 0 -> 3 (a skip connection).
Problem Skip(int64_t budget) { return Graph(4, {{0, 1}, {1, 2}, {2, 3}, {0, 3}}, budget); }

// Each node computed in its own stage, nothing kept: the bare frame of a plan.
Plan EachOnce(int n) {
  Plan plan(n);
  for (int t = 0; t < n; ++t) plan.compute[t][t] = 1;
  return plan;
}

TEST(Simulator, AcceptsCheckpointAllAndCountsEverything) {
  const Problem p = Skip(100);
  Plan plan = EachOnce(4);
  plan.resident[1][0] = plan.resident[2][0] = plan.resident[3][0] = 1;
  plan.resident[2][1] = 1;
  plan.resident[3][2] = 1;
  const Replay r = Simulate(p, plan);
  ASSERT_TRUE(r.valid) << r.violation;
  EXPECT_DOUBLE_EQ(r.energy.total_j(), 4.0);
  EXPECT_DOUBLE_EQ(r.energy.compute_j(), 4.0);
  EXPECT_EQ(r.recomputations, 0u);
  // Stage 3 starts with 0 and 2 resident (20 B) and adds 3: 30 B.
  EXPECT_EQ(r.peak_ram_bytes, 30);
  EXPECT_DOUBLE_EQ(r.runtime_s, 4.0);
}

TEST(Simulator, RecomputationInsteadOfKeeping) {
  const Problem p = Skip(100);
  Plan plan = EachOnce(4);
  plan.resident[1][0] = plan.resident[2][0] = plan.resident[3][0] = 1;
  plan.resident[2][1] = 1;
  // Node 2 is not kept for stage 3: recompute it there from 1... which is not resident either.
  plan.compute[3][1] = plan.compute[3][2] = 1;
  const Replay r = Simulate(p, plan);
  ASSERT_TRUE(r.valid) << r.violation;
  EXPECT_EQ(r.recomputations, 2u);
  EXPECT_DOUBLE_EQ(r.energy.recompute_j(), 2.0);
}

TEST(Simulator, MissingInputIsNamed) {
  const Problem p = Skip(100);
  Plan plan = EachOnce(4);
  plan.resident[1][0] = plan.resident[2][0] = 1;  // 0 dropped before stage 3, which needs it
  plan.resident[2][1] = plan.resident[3][2] = 1;
  const Replay r = Simulate(p, plan);
  ASSERT_FALSE(r.valid);
  EXPECT_EQ(r.violation_stage, 3);
  EXPECT_EQ(r.violation_node, 3);
  EXPECT_THAT(r.violation, HasSubstr("input node 0 (n0) is neither resident nor computed earlier"));
}

TEST(Simulator, MemoryOverTheBudget) {
  const Problem p = Skip(25);
  Plan plan = EachOnce(4);
  plan.resident[1][0] = plan.resident[2][0] = plan.resident[3][0] = 1;
  plan.resident[2][1] = plan.resident[3][2] = 1;
  const Replay r = Simulate(p, plan);
  ASSERT_FALSE(r.valid);
  EXPECT_EQ(r.violation_stage, 2);
  EXPECT_THAT(r.violation, HasSubstr("over the budget of 25 B"));
}

TEST(Simulator, PagingPreconditions) {
  const Problem p = Skip(100);
  Plan plan = EachOnce(4);
  plan.resident[1][0] = 1;
  plan.page_in[2][0] = 1;  // never paged out
  plan.resident[2][1] = plan.resident[3][2] = plan.resident[3][0] = 1;
  EXPECT_THAT(Simulate(p, plan).violation, HasSubstr("paged in but not on storage"));

  Plan out = EachOnce(4);
  out.page_out[2][0] = 1;  // 0 is not resident at stage 2
  out.resident[1][0] = 1;
  EXPECT_THAT(Simulate(p, out).violation, HasSubstr("paged out but not resident"));

  // Page 0 out in stage 1 and back in during stage 2: valid, and stage 2 holds only 1 and 2.
  Plan good = EachOnce(4);
  good.resident[1][0] = 1;
  good.page_out[1][0] = 1;
  good.stored[2][0] = good.stored[3][0] = 1;
  good.page_in[2][0] = 1;
  good.resident[3][0] = 1;
  good.resident[2][1] = good.resident[3][2] = 1;
  const Replay r = Simulate(p, good);
  ASSERT_TRUE(r.valid) << r.violation;
  EXPECT_EQ(r.page_outs, 1u);
  EXPECT_EQ(r.page_ins, 1u);
  EXPECT_DOUBLE_EQ(r.energy.total_j(), 4.6);
}

TEST(Simulator, StructuralViolations) {
  const Problem p = Skip(100);
  Plan missing = CheckpointAll(p).plan;
  ASSERT_TRUE(Simulate(p, missing).valid);
  missing.compute[2][2] = 0;
  EXPECT_THAT(Simulate(p, missing).violation, HasSubstr("must compute node 2"));

  Plan early = CheckpointAll(p).plan;
  early.compute[1][3] = 1;
  EXPECT_THAT(Simulate(p, early).violation, HasSubstr("computed before its own stage"));

  Plan ghost = EachOnce(4);
  ghost.resident[2][1] = 1;
  ghost.resident[3][1] = 1;
  ghost.resident[2][0] = 1;  // not resident at stage 1, not computed in stage 1: cannot appear
  EXPECT_THAT(Simulate(p, ghost).violation, HasSubstr("kept for the next stage but neither"));

  Problem slow = Skip(100);
  slow.runtime_budget_s = 4.5;
  Plan recompute = EachOnce(4);
  recompute.resident[1][0] = recompute.resident[2][0] = recompute.resident[3][0] = 1;
  recompute.resident[2][1] = 1;
  recompute.compute[3][1] = recompute.compute[3][2] = 1;
  EXPECT_THAT(Simulate(slow, recompute).violation, HasSubstr("exceeds the budget"));

  Problem no_remat = Skip(100);
  no_remat.allow_remat = false;
  EXPECT_THAT(Simulate(no_remat, recompute).violation, HasSubstr("recomputation is disabled"));
}

TEST(Simulator, ScheduleMessagesAreCheckedForShape) {
  const Problem p = Skip(100);
  v1::Schedule schedule;
  EXPECT_THAT(Simulate(p, schedule).violation, HasSubstr("0 stages for 4 nodes"));
  PlanToStages(CheckpointAll(p).plan, schedule);
  EXPECT_TRUE(Simulate(p, schedule).valid);
  schedule.mutable_stages(1)->add_compute(9);
  EXPECT_THAT(Simulate(p, schedule).violation, HasSubstr("node 9 does not exist"));
}

}  // namespace
}  // namespace edgecost::solver
