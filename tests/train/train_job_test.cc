// The train use case: schedules refused before anything runs, run records kept
// whole or not at all, and the measured-in-step costs the solver can plan with.
#include "service/train_job.h"

#include <filesystem>
#include <fstream>

#include <gmock/gmock.h>
#include <google/protobuf/util/json_util.h>
#include <gtest/gtest.h>

#include "costdb/costdb.h"
#include "profiler/profile.h"
#include "service/cost_tables.h"
#include "service/profile_job.h"
#include "service/trace.h"
#include "tests/service/trace_format.h"
#include "tests/temp_dir.h"

namespace edgecost::service {
namespace {

class TrainJobTest : public testing::TempDirTest {
 protected:
  std::string Db() const { return (dir_ / "edgecost.db").string(); }
  std::string PagingDir() const { return (dir_ / "paging").string(); }

  // A schedule for the zoo's linear model from POET's a72 constants, exact derivation.
  v1::Schedule Solve(const std::string& strategy, uint64_t ram_budget_bytes, int batch_size = 2) {
    v1::ScheduleRequest request;
    request.set_model("linear");
    request.set_device("a72");
    request.set_cost_source("poet-flops");
    request.set_batch_size(static_cast<uint32_t>(batch_size));
    request.set_derivation("exact");
    request.set_ram_budget_bytes(ram_budget_bytes);
    request.set_runtime_budget_multiple(100);
    request.set_strategy(strategy);
    request.set_time_limit_s(5);
    auto solved = SolveRequest(nullptr, request, false);
    EXPECT_TRUE(solved.ok()) << solved.status().message();
    return solved.ok() ? solved->schedule : v1::Schedule();
  }

  std::string Write(const v1::Schedule& schedule, const std::string& name) {
    std::string json;
    EXPECT_TRUE(google::protobuf::util::MessageToJsonString(schedule, &json).ok());
    const std::string path = (dir_ / name).string();
    std::ofstream(path) << json;
    return path;
  }

  TrainJobOptions Options(const std::string& model = "linear") {
    TrainJobOptions options;
    options.db_path = Db();
    options.graph.model_or_file = model;
    options.graph.batch_size = 2;
    options.steps = 3;
    options.threads = 1;
    options.paging_dir = PagingDir();
    return options;
  }

  Result<TrainJobResult> Run(const TrainJobOptions& options) {
    return RunTrainJob(options, nullptr, nullptr, [](const std::string&) {});
  }

  size_t StoredRuns() {
    auto db = costdb::CostDb::Open(Db());
    EXPECT_TRUE(db.ok());
    auto runs = db->ListTrainRuns();
    EXPECT_TRUE(runs.ok());
    return runs.ok() ? runs->size() : 0;
  }

  bool PagingFilesLeft() {
    if (!std::filesystem::exists(PagingDir())) return false;
    return !std::filesystem::is_empty(PagingDir());
  }
};

TEST_F(TrainJobTest, AScheduleRunsAndItsRecordHoldsPredictionsNextToMeasurements) {
  const v1::Schedule schedule = Solve("paging-only", 1ull << 30);
  ASSERT_GT(schedule.page_outs(), 0u);
  TrainJobOptions options = Options();
  options.schedule_file = Write(schedule, "s.json");
  options.verify = true;
  auto result = Run(options);
  ASSERT_TRUE(result.ok()) << result.status().message();
  const v1::TrainRun& run = result->run;
  EXPECT_EQ(run.strategy(), "paging-only");
  EXPECT_EQ(run.cost_source(), "poet-flops");
  EXPECT_EQ(run.step_stats_size(), 3);
  EXPECT_EQ(run.predicted_peak_bytes(), schedule.peak_ram_bytes());
  EXPECT_LE(run.peak_activation_bytes(), run.predicted_peak_bytes());
  EXPECT_EQ(run.page_outs(), schedule.page_outs());
  EXPECT_GT(run.paged_out_bytes(), 0u);
  EXPECT_GT(run.predicted_paging_s(), 0);
  EXPECT_GT(run.runtime_s(), 0);
  EXPECT_GT(run.nodes_size(), 0);
  ASSERT_TRUE(run.has_verify());
  EXPECT_TRUE(run.verify().identical()) << run.verify().where();
  EXPECT_EQ(run.energy_source(), v1::ENERGY_SOURCE_ESTIMATED);  // no sensor in a test
  // The process's memory: filled, in order, and the model's prediction holds every fixed part and
  // the schedule's peak (RSS itself is noisy: no figure is asserted).
  EXPECT_GT(run.unbuilt_rss_bytes(), 0u);
  EXPECT_GT(run.baseline_rss_bytes(), 0u);
  EXPECT_GE(run.peak_rss_bytes(), run.baseline_rss_bytes());
  EXPECT_GE(run.baseline_rss_bytes(), run.unbuilt_rss_bytes());  // the executor's buffers are resident
  EXPECT_GT(run.layer_state_bytes(), 0u);
  EXPECT_GE(run.predicted_process_bytes(), run.predicted_peak_bytes() + run.layer_state_bytes());
  EXPECT_GT(result->run_id, 0);
  EXPECT_EQ(StoredRuns(), 1u);
  EXPECT_FALSE(PagingFilesLeft());

  // The record keeps the last step as it ran: a trace of the run, as `edgecost trace --train-run` writes it.
  auto db = costdb::CostDb::Open(Db(), costdb::OpenMode::kReadOnly);
  ASSERT_TRUE(db.ok());
  v1::GetTraceRequest request;
  request.set_train_run_id(static_cast<uint64_t>(result->run_id));
  auto trace = GetTrace(*db, request);
  ASSERT_TRUE(trace.ok()) << trace.status().message();
  edgecost::testing::TraceStats stats;
  EXPECT_EQ(edgecost::testing::CheckChromeTrace(trace->trace_json(), &stats), "");
  EXPECT_EQ(stats.slices_by_category["page-out"], static_cast<int>(schedule.page_outs()));
  EXPECT_EQ(stats.slices_by_category["update"], 1);
  int computed = 0;
  for (const v1::NodeTime& node : run.nodes()) computed += static_cast<int>(node.executions());
  EXPECT_EQ(stats.slices_by_category["compute"] + stats.slices_by_category["recompute"], computed);
  EXPECT_NE(trace->title().find("training run " + std::to_string(result->run_id)), std::string::npos);
  request.set_train_run_id(static_cast<uint64_t>(result->run_id) + 1);
  EXPECT_EQ(GetTrace(*db, request).status().code(), ErrorCode::kNotFound);
}

TEST_F(TrainJobTest, AScheduleOverItsBudgetIsRefusedBeforeAnythingRuns) {
  v1::Schedule schedule = Solve("checkpoint-all", 1ull << 30);
  ASSERT_GT(schedule.peak_ram_bytes(), 0u);
  schedule.mutable_request()->set_ram_budget_bytes(schedule.peak_ram_bytes() - 4);  // edited to a smaller budget
  TrainJobOptions options = Options();
  options.schedule_file = Write(schedule, "tampered.json");
  auto result = Run(options);
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), ErrorCode::kFailedPrecondition);
  EXPECT_NE(result.status().message().find("refused before running anything: stage "), std::string::npos)
      << result.status().message();
  EXPECT_EQ(StoredRuns(), 0u);
  EXPECT_FALSE(PagingFilesLeft());
}

TEST_F(TrainJobTest, AScheduleOfAnotherModelOrAStaleGraphIsRefused) {
  const v1::Schedule schedule = Solve("checkpoint-all", 1ull << 30);
  TrainJobOptions other = Options("resnet18_cifar");
  other.schedule_file = Write(schedule, "s.json");
  auto refused = Run(other);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("for model 'linear'"), std::string::npos) << refused.status().message();

  // The same model at another batch size: the nodes' bytes differ from the schedule's.
  const v1::Schedule batch4 = Solve("checkpoint-all", 1ull << 30, 4);
  TrainJobOptions stale = Options();
  stale.schedule_file = Write(batch4, "batch4.json");
  auto refused_stale = Run(stale);
  ASSERT_FALSE(refused_stale.ok());
  EXPECT_NE(refused_stale.status().message().find("differs from the schedule's"), std::string::npos)
      << refused_stale.status().message();

  // A stage edited to read a node nobody computed.
  v1::Schedule edited = schedule;
  edited.mutable_stages(5)->clear_keep();
  TrainJobOptions bad = Options();
  bad.schedule_file = Write(edited, "edited.json");
  auto refused_edit = Run(bad);
  ASSERT_FALSE(refused_edit.ok());
  EXPECT_NE(refused_edit.status().message().find("stage 6"), std::string::npos) << refused_edit.status().message();
  EXPECT_EQ(StoredRuns(), 0u);
}

TEST_F(TrainJobTest, InStepTimesBecomeACostTableTheSolverPlansWith) {
  ProfileJobOptions profile;
  profile.db_path = Db();
  profile.graph.model_or_file = "linear";
  profile.graph.batch_size = 2;
  profile.graph.derivation = graph::Derivation::kExact;
  profile.threads = 1;
  profile.paging_dir = PagingDir();
  profile.min_window_s = 0.002;
  profile.accept_noisy = true;  // about in-step costs, not about how quiet the machine is
  ASSERT_TRUE(RunProfileJob(profile, nullptr, nullptr, [](const std::string&) {}).ok());

  auto trained = Run(Options());  // the plain step, predicted from the measured table
  ASSERT_TRUE(trained.ok()) << trained.status().message();
  EXPECT_EQ(trained->run.cost_source(), "measured");
  EXPECT_EQ(trained->run.strategy(), "plain");
  EXPECT_GT(trained->run.predicted_runtime_s(), 0);
  ASSERT_GT(trained->in_step_table_id, 0);

  auto db = costdb::CostDb::Open(Db());
  ASSERT_TRUE(db.ok());
  v1::GetCostTableRequest request;
  request.set_model("linear");
  request.set_cost_source(kMeasuredInStepSource);
  request.set_batch_size(2);
  request.set_threads(1);  // the run's: this device's default, all its cores, may be more
  auto table = ResolveCostTable(&*db, request);
  ASSERT_TRUE(table.ok()) << table.status().message();
  EXPECT_EQ(table->cost_source(), kMeasuredInStepSource);
  for (const v1::NodeTime& t : trained->run.nodes()) {
    EXPECT_EQ(table->costs(static_cast<int>(t.node())).runtime_s(), t.runtime_s());
  }

  v1::ScheduleRequest solve;
  solve.set_model("linear");
  solve.set_device("this");
  solve.set_cost_source(kMeasuredInStepSource);
  solve.set_batch_size(2);
  solve.set_ram_budget_bytes(1ull << 30);
  solve.set_runtime_budget_multiple(1.5);
  solve.set_time_limit_s(5);
  solve.set_compute_threads(1);
  auto solved = SolveRequest(&*db, solve);
  ASSERT_TRUE(solved.ok()) << solved.status().message();
  EXPECT_EQ(solved->table.cost_source(), kMeasuredInStepSource);
}

// Issue 27: a run at a thread count nobody profiled predicts from another count's table, and says
// so loudly; its in-step table is kept at its own count, beside the other count's.
TEST_F(TrainJobTest, ARunAtAnUnprofiledThreadCountSaysItsPredictionsAreAnotherCounts) {
  ProfileJobOptions profile;
  profile.db_path = Db();
  profile.graph.model_or_file = "linear";
  profile.graph.batch_size = 2;
  profile.graph.derivation = graph::Derivation::kExact;
  profile.threads = 1;
  profile.paging_dir = PagingDir();
  profile.min_window_s = 0.002;
  profile.accept_noisy = true;
  ASSERT_TRUE(RunProfileJob(profile, nullptr, nullptr, [](const std::string&) {}).ok());

  TrainJobOptions options = Options();
  options.threads = 2;
  auto trained = Run(options);
  ASSERT_TRUE(trained.ok()) << trained.status().message();
  EXPECT_GT(trained->run.predicted_runtime_s(), 0);
  std::string notes;
  for (const std::string& note : trained->notes) notes += note + "\n";
  EXPECT_THAT(notes, ::testing::HasSubstr("THREAD MISMATCH: this run uses 2 threads"));
  EXPECT_THAT(notes, ::testing::HasSubstr("stored: 1 thread"));
  EXPECT_THAT(notes, ::testing::HasSubstr("--threads 2"));

  ASSERT_TRUE(Run(Options()).ok());  // and at 1 thread: the profiled count's own in-step table
  auto db = costdb::CostDb::Open(Db());
  ASSERT_TRUE(db.ok());
  auto counts = db->CostTableThreads({"linear", profiler::ThisDeviceName(), kMeasuredInStepSource, 2, "exact", "all"});
  ASSERT_TRUE(counts.ok()) << counts.status().message();
  EXPECT_EQ(*counts, (std::vector<uint32_t>{1, 2}));
}

}  // namespace
}  // namespace edgecost::service
