// One name per meaning (issue 45): renamed JSON fields still read, percent activation budgets, a
// missing table that names the ones stored, a budget shown as given, and a step-time plot that an
// outlier does not flatten.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "costdb/costdb.h"
#include "graph/cost_source.h"
#include "graph/resolve.h"
#include "profiler/profile.h"
#include "proto/json.h"
#include "service/cost_tables.h"
#include "service/train_plot.h"
#include "service/words.h"
#include "solver/problem.h"
#include "solver/solve.h"
#include "tests/service/measured_tables.h"

namespace edgecost::service {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TEST(DeprecatedJsonNames, AreReadAsTheirNewFields) {
  v1::ScheduleRequest request;
  ASSERT_TRUE(proto::FromJson(R"({"model":"linear","ramBudgetBytes":"4000","threads":3})", &request).ok());
  EXPECT_EQ(request.activation_budget_bytes(), 4000u);
  EXPECT_EQ(request.solver_threads(), 3u);
  ASSERT_TRUE(proto::FromJson(R"({"model":"linear","deviceRamBytes":"60000000"})", &request).ok());
  EXPECT_EQ(request.process_ram_budget_bytes(), 60000000u);
  EXPECT_EQ(request.activation_budget_bytes(), 0u);

  // Nested: a schedule file written before the rename.
  v1::Schedule schedule;
  ASSERT_TRUE(proto::FromJson(R"({"ramBudgetBytes":"7","request":{"ramBudgetBytes":"9"}})", &schedule).ok());
  EXPECT_EQ(schedule.activation_budget_bytes(), 7u);
  EXPECT_EQ(schedule.request().activation_budget_bytes(), 9u);

  v1::StartTrainRequest train;
  ASSERT_TRUE(proto::FromJson(R"({"model":"linear","deviceRamBytes":"5","threads":1})", &train).ok());
  EXPECT_EQ(train.process_ram_budget_bytes(), 5u);
  EXPECT_EQ(train.threads(), 1u);  // a train's threads are the compute threads: not renamed

  const Status both = proto::FromJson(R"({"ramBudgetBytes":"1","activationBudgetBytes":"2"})", &request);
  EXPECT_EQ(both.code(), ErrorCode::kInvalidArgument);
  EXPECT_THAT(both.message(), HasSubstr("activationBudgetBytes or its deprecated name ramBudgetBytes"));
  // Elsewhere "threads" is the compute threads, as it always was.
  v1::GetCostTableRequest table;
  ASSERT_TRUE(proto::FromJson(R"({"model":"linear","threads":2})", &table).ok());
  EXPECT_EQ(table.threads(), 2u);
}

TEST(BudgetAsGiven, SaysWhichBudgetInTheUsersUnits) {
  v1::ScheduleRequest request;
  request.set_process_ram_budget_bytes(60'000'000);
  request.set_activation_budget_bytes(19'500'000);  // derived from it
  EXPECT_EQ(BudgetAsGiven(request), "RAM 60.0 MB");
  request.clear_process_ram_budget_bytes();
  request.set_activation_budget_percent(50);
  EXPECT_EQ(BudgetAsGiven(request), "activations 50%");
  request.clear_activation_budget_percent();
  EXPECT_EQ(BudgetAsGiven(request), "activations 19.5 MB");
  EXPECT_EQ(BudgetAsGiven(v1::ScheduleRequest()), "-");
}

class StoredTables : public MeasuredTablesTest {
 protected:
  v1::ScheduleRequest Request() const {
    v1::ScheduleRequest request;
    request.set_model("linear");
    request.set_device("board");
    request.set_cost_source(profiler::kMeasuredSource);
    request.set_runtime_budget_multiple(2);
    request.set_time_limit_s(5);
    return request;
  }
};

// After `profile --batch-size 16`, asking at batch 1 names the table at 16 and the command that shows it.
TEST_F(StoredTables, AMissingBatchSizeNamesTheStoredOnesAndTheirCommand) {
  Store("board", 2, 16);
  v1::GetCostTableRequest request;
  request.set_model("linear");
  request.set_device("board");
  auto missing = ResolveCostTable(&*db_, request);
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(missing.status().message(), HasSubstr("batch size 16 at 2 threads"));
  EXPECT_THAT(missing.status().message(),
              HasSubstr("`edgecost costs linear --device board --batch-size 16 --threads 2`"));
  request.set_batch_size(16);
  EXPECT_TRUE(ResolveCostTable(&*db_, request).ok());
}

TEST_F(StoredTables, APercentActivationBudgetIsAShareOfThePlainPeak) {
  Store("board", 1);
  v1::ScheduleRequest request = Request();
  request.set_activation_budget_percent(60);
  auto solved = SolveRequest(&*db_, request, /*store=*/false);
  ASSERT_TRUE(solved.ok()) << solved.status().message();
  // The plain step's peak: checkpoint-all with room for everything.
  v1::ScheduleRequest plain = Request();
  plain.set_activation_budget_bytes(uint64_t{1} << 40);
  plain.set_strategy("checkpoint-all");
  auto all = SolveRequest(&*db_, plain, /*store=*/false);
  ASSERT_TRUE(all.ok()) << all.status().message();
  const auto peak = static_cast<double>(all->schedule.peak_ram_bytes());
  EXPECT_EQ(solved->schedule.request().activation_budget_bytes(), static_cast<uint64_t>(peak * 60 / 100));
  EXPECT_EQ(solved->schedule.request().activation_budget_percent(), 60);
  EXPECT_EQ(BudgetAsGiven(solved->schedule.request()), "activations 60%");

  request.set_activation_budget_bytes(1000);  // two budgets: refused
  auto both = SolveRequest(&*db_, request, /*store=*/false);
  EXPECT_EQ(both.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_THAT(both.status().message(), HasSubstr("give one budget"));
}

v1::TrainRun RunWithSteps(const std::vector<double>& step_s) {
  v1::TrainRun run;
  run.set_model("linear");
  run.set_steps(static_cast<uint32_t>(step_s.size()));
  run.set_cost_source("measured");
  run.set_predicted_runtime_s(0.040);
  for (double s : step_s) {
    v1::TrainStep* step = run.add_step_stats();
    step->set_runtime_s(s);
    step->set_loss(1);
  }
  return run;
}

// One 8.26 s step among 40 ms ones: the axis stays at the bulk, the outlier is marked at its edge.
TEST(TrainRunPlot, AnOutlierIsMarkedNotAllowedToSetTheAxis) {
  const std::string svg =
      TrainRunSvg(RunWithSteps({0.041, 0.039, 8.26, 0.040, 0.042, 0.041, 0.038, 0.040})).text();
  EXPECT_THAT(svg, HasSubstr("class=\"outlier\""));
  EXPECT_THAT(svg, HasSubstr("1 step off the axis"));
  EXPECT_THAT(svg, HasSubstr("up to 8.26 s"));
  EXPECT_THAT(svg, HasSubstr("class=\"axis-high\""));
  EXPECT_THAT(svg, Not(HasSubstr(">8.26 s</text>")));  // not the axis's top label

  const std::string even = TrainRunSvg(RunWithSteps({0.041, 0.039, 0.060, 0.040})).text();
  EXPECT_THAT(even, Not(HasSubstr("class=\"outlier\"")));
}

}  // namespace
}  // namespace edgecost::service
