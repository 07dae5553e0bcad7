// Chrome traces of stored schedules and of real profile runs (oneDNN kernels
// measured into a real cost database), checked against the format.
#include "service/trace.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "graph/derive.h"
#include "graph/resolve.h"
#include "profiler/power_model.h"
#include "profiler/profile.h"
#include "service/cost_tables.h"
#include "solver/solve.h"
#include "tests/service/trace_format.h"
#include "tests/temp_dir.h"

namespace edgecost::service {
namespace {

using ::testing::HasSubstr;

class TraceTest : public edgecost::testing::TempDirTest {
 protected:
  void SetUp() override {
    TempDirTest::SetUp();
    auto db = costdb::CostDb::Open((dir_ / "costs.db").string());
    ASSERT_TRUE(db.ok()) << db.status().message();
    db_.emplace(std::move(db).value());
  }
  void TearDown() override {
    db_.reset();
    TempDirTest::TearDown();
  }

  // Solves and stores a schedule for a zoo model on a preset; returns its id.
  int64_t StoreSchedule(const std::string& model, uint64_t activation_budget_bytes, double runtime_multiple) {
    v1::ScheduleRequest request;
    request.set_model(model);
    request.set_device("a72");
    request.set_activation_budget_bytes(activation_budget_bytes);
    request.set_runtime_budget_multiple(runtime_multiple);
    request.set_time_limit_s(20);
    auto solved = SolveRequest(&*db_, request, /*store=*/true);
    EXPECT_TRUE(solved.ok()) << solved.status().message();
    return solved.ok() ? solved->schedule_id : 0;
  }

  std::optional<costdb::CostDb> db_;
};

TEST_F(TraceTest, AStoredScheduleIsATimelineOnTracksWithRamAsACounter) {
  // 3.5 kB is under the 7.4 kB plain peak of linear on a72: the schedule recomputes and pages.
  const int64_t id = StoreSchedule("linear", 3500, 1.3);
  ASSERT_GT(id, 0);
  auto view = LoadStoredSchedule(*db_, id);
  ASSERT_TRUE(view.ok()) << view.status().message();
  ASSERT_TRUE(view->replay.valid) << view->replay.violation;
  const v1::Schedule& s = view->schedule;
  ASSERT_GT(s.recomputations() + s.page_outs(), 0u) << "the budget should force recomputation or paging";

  v1::GetTraceRequest request;
  request.set_schedule_id(static_cast<uint64_t>(id));
  auto trace = GetTrace(*db_, request);
  ASSERT_TRUE(trace.ok()) << trace.status().message();
  edgecost::testing::TraceStats stats;
  EXPECT_EQ(edgecost::testing::CheckChromeTrace(trace->trace_json(), &stats), "");
  EXPECT_EQ(stats.slices_by_category["compute"], view->problem.size());
  EXPECT_EQ(stats.slices_by_category["stage"], view->problem.size());
  EXPECT_EQ(stats.slices_by_category["recompute"], static_cast<int>(s.recomputations()));
  // a72 has paging constants: page-outs and page-ins are slices with durations.
  EXPECT_EQ(stats.slices_by_category["page-out"], static_cast<int>(s.page_outs()));
  EXPECT_EQ(stats.slices_by_category["page-in"], static_cast<int>(s.page_ins()));
  EXPECT_GT(stats.counters, view->problem.size());
  EXPECT_GT(stats.metadata, 5);
  EXPECT_THAT(trace->title(), HasSubstr("schedule #" + std::to_string(id)));

  // The peak of the RAM counter is the schedule's peak, and the budget is beside it.
  const auto json = nlohmann::json::parse(trace->trace_json());
  int64_t peak = 0;
  for (const auto& e : json["traceEvents"]) {
    if (e["ph"] == "C") {
      peak = std::max<int64_t>(peak, e["args"]["in_use_bytes"].get<int64_t>());
      EXPECT_EQ(e["args"]["budget_bytes"].get<uint64_t>(), s.activation_budget_bytes());
    }
  }
  EXPECT_EQ(static_cast<uint64_t>(peak), s.peak_ram_bytes());
}

TEST_F(TraceTest, WithoutPagingTimesPagingIsMarkedNotGivenAMadeUpDuration) {
  v1::ScheduleRequest r;
  r.set_model("linear");
  r.set_device("a72");
  auto table = CostTableForRequest(nullptr, r);
  ASSERT_TRUE(table.ok());
  table->clear_paging();
  r.set_activation_budget_bytes(3500);
  r.set_runtime_budget_multiple(1.0);
  auto problem = solver::ProblemFromCostTable(*table, r);
  ASSERT_TRUE(problem.ok());
  auto s = solver::Solve(*problem, {"paging-only", 20, 1, false});  // pages whatever the optimum does
  ASSERT_TRUE(s.ok());
  ASSERT_GT(s->page_outs(), 0u);
  auto trace = ScheduleTrace(*problem, *s, "no paging times");
  ASSERT_TRUE(trace.ok()) << trace.status().message();
  edgecost::testing::TraceStats stats;
  EXPECT_EQ(edgecost::testing::CheckChromeTrace(trace->trace_json(), &stats), "");
  EXPECT_EQ(stats.slices_by_category["page-out"], 0);
  EXPECT_EQ(stats.marks_by_category["page-out"], static_cast<int>(s->page_outs()));
  EXPECT_THAT(trace->trace_json(), HasSubstr("the cost table has no paging times"));
}

TEST_F(TraceTest, AProfileRunHasEveryOpWithItsMeasuredRepetitions) {
  v1::Device device;
  device.set_name("test-device");
  device.set_kind(v1::Device::KIND_MEASURED);
  device.mutable_fingerprint()->set_hash("fp");
  ASSERT_TRUE(db_->UpsertDevice(device).ok());
  auto graph = graph::ZooTrainingGraph("linear", 1, graph::Derivation::kExact);
  ASSERT_TRUE(graph.ok());
  auto run = db_->BeginRun("fp", profiler::kMeasuredSource);
  ASSERT_TRUE(run.ok());
  kernels::Backend backend;
  profiler::EstimatedMeter meter{probes::EstimateModel{}};
  profiler::ProfileOptions options;
  options.threads = 1;
  options.measure.min_window_s = 0.002;
  options.measure.warmup_runs = 1;
  options.measure.min_repetitions = 3;
  auto summary = profiler::ProfileGraph(*db_, backend, *graph, "fp", *run, &meter, options);
  ASSERT_TRUE(summary.ok()) << summary.status().message();
  ASSERT_TRUE(db_->FinishRun(*run, costdb::RunStatus::kComplete).ok());

  auto ops = db_->ListRunOpCosts(*run);
  ASSERT_TRUE(ops.ok());
  ASSERT_EQ(static_cast<int>(ops->size()), summary->measured);
  int repetitions = 0;
  for (const v1::OpCost& op : *ops) {
    ASSERT_GT(op.repetitions_size(), 0);
    // Every timed repetition, disturbed ones included; a wall-clock runtime summarises the undisturbed
    // ones, a thread-CPU one all of them (a wait for a CPU adds no CPU time).
    uint32_t clean = 0;
    for (const v1::Repetition& r : op.repetitions()) clean += r.disturbed() ? 0 : 1;
    const bool cpu_time = op.runtime().clock() == profiler::kThreadCpuClock;
    if (op.repetitions_size() < static_cast<int>(profiler::kMaxKeptRepetitions)) {
      EXPECT_EQ(cpu_time ? static_cast<uint32_t>(op.repetitions_size()) : clean, op.runtime().repetitions());
    }
    EXPECT_GT(op.window_start_unix_s(), 1.7e9);  // a wall time, not a clock offset
    for (int i = 1; i < op.repetitions_size(); ++i) {
      EXPECT_GE(op.repetitions(i).start_s(), op.repetitions(i - 1).start_s() + op.repetitions(i - 1).runtime_s());
    }
    repetitions += op.repetitions_size();
  }
  auto runs = ListRuns(*db_);
  ASSERT_TRUE(runs.ok());
  ASSERT_EQ(runs->runs_size(), 1);
  EXPECT_EQ(runs->runs(0).status(), "complete");
  EXPECT_EQ(static_cast<int>(runs->runs(0).ops()), summary->measured);

  v1::GetTraceRequest request;
  request.set_run_id(static_cast<uint64_t>(*run));
  auto trace = GetTrace(*db_, request);
  ASSERT_TRUE(trace.ok()) << trace.status().message();
  edgecost::testing::TraceStats stats;
  EXPECT_EQ(edgecost::testing::CheckChromeTrace(trace->trace_json(), &stats), "");
  EXPECT_EQ(stats.slices_by_category["op"], summary->measured);
  EXPECT_EQ(stats.slices_by_category["repetition"] + stats.slices_by_category["disturbed repetition"], repetitions);
}

TEST_F(TraceTest, AskingForNothingOrForWhatIsNotThereSaysWhatToDo) {
  EXPECT_THAT(GetTrace(*db_, {}).status().message(), HasSubstr("schedule_id, run_id or train_run_id"));
  v1::GetTraceRequest request;
  request.set_schedule_id(42);
  EXPECT_EQ(GetTrace(*db_, request).status().code(), ErrorCode::kNotFound);
  request.set_run_id(7);
  EXPECT_EQ(GetTrace(*db_, request).status().code(), ErrorCode::kNotFound);
  request.set_run_id(uint64_t{1} << 63);
  EXPECT_EQ(GetTrace(*db_, request).status().code(), ErrorCode::kInvalidArgument);
}

}  // namespace
}  // namespace edgecost::service
