// The train use case: schedules refused before anything runs, run records kept
// whole or not at all, and the measured-in-step costs the solver can plan with.
#include "service/train_job.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <tuple>

#include <gmock/gmock.h>
#include <google/protobuf/util/json_util.h>
#include <gtest/gtest.h>

#include "costdb/costdb.h"
#include "profiler/profile.h"
#include "service/cost_tables.h"
#include "service/in_step.h"
#include "service/onnx_weights.h"
#include "service/profile_job.h"
#include "service/step_memory.h"
#include "service/trace.h"
#include "tests/service/trace_format.h"
#include "tests/temp_dir.h"

namespace edgecost::service {
namespace {

class TrainJobTest : public testing::TempDirTest {
 protected:
  std::string Db() const { return (dir_ / "edgecost.db").string(); }
  // The process's store at Db(), as a command or the daemon hands it to the services.
  costdb::Store& Store() {
    if (!store_) store_ = std::make_unique<costdb::Store>(Db(), costdb::OpenMode::kReadWrite);
    return *store_;
  }
  std::unique_ptr<costdb::Store> store_;
  std::string PagingDir() const { return (dir_ / "paging").string(); }

  // A schedule for the zoo's linear model from POET's a72 constants, exact derivation.
  v1::Schedule Solve(const std::string& strategy, uint64_t activation_budget_bytes, int batch_size = 2) {
    v1::ScheduleRequest request;
    request.set_model("linear");
    request.set_device("a72");
    request.set_cost_source("poet-flops");
    request.set_batch_size(static_cast<uint32_t>(batch_size));
    request.set_derivation("exact");
    request.set_activation_budget_bytes(activation_budget_bytes);
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
    options.database = &Store();
    options.graph.model_or_file = model;
    options.graph.batch_size = 2;
    options.steps = 3;
    options.threads = 1;
    options.paging_dir = PagingDir();
    return options;
  }

  // A profile of the zoo's linear model at one thread, noisy costs accepted: these tests are about
  // accounting, not about how quiet the machine is.
  ProfileJobOptions LinearProfile() {
    ProfileJobOptions profile;
    profile.database = &Store();
    profile.graph.model_or_file = "linear";
    profile.graph.batch_size = 2;
    profile.graph.derivation = graph::Derivation::kExact;
    profile.threads = 1;
    profile.paging_dir = PagingDir();
    profile.min_window_s = 0.002;
    profile.accept_noisy = true;
    profile.in_step = false;  // these tests train themselves: their runs store the in-step tables
    return profile;
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
  EXPECT_GE(run.peak_rss_bytes(), run.unbuilt_rss_bytes());
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
  schedule.mutable_request()->set_activation_budget_bytes(schedule.peak_ram_bytes() - 4);  // edited to a smaller budget
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
  ProfileJobOptions profile = LinearProfile();
  ASSERT_TRUE(RunProfileJob(profile, nullptr, nullptr, [](const std::string&) {}).ok());

  TrainJobOptions options = Options();  // the plain step, predicted from the measured table
  options.accept_noisy = true;          // about in-step costs, not about how quiet the machine is
  auto trained = Run(options);
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
  // Each node's time inside the steps, plus the same share of the step's time outside its nodes:
  // the median step's when the steps were quiet enough to leave the disturbed ones out, else (a
  // busy machine) a low percentile's, which only the table's note states.
  const v1::TrainRun& run = trained->run;
  std::vector<v1::NodeTime> nodes(run.nodes().begin(), run.nodes().end());
  const bool median = run.disturbed_steps() == 0 || run.median_steps() + run.disturbed_steps() <= run.steps() - 1;
  std::optional<double> overhead_s;
  if (median) overhead_s = InStepOverheadS(run.runtime_s(), run.paging_wait_s(), nodes);
  for (const v1::NodeTime& t : nodes) {
    const double cost_s = table->costs(static_cast<int>(t.node())).runtime_s();
    if (cost_s == 0) continue;  // a node whose share made it negative: clipped at 0
    if (!overhead_s) overhead_s = cost_s - t.runtime_s();
    EXPECT_NEAR(cost_s, t.runtime_s() + *overhead_s, 1e-12) << t.name();
  }

  v1::ScheduleRequest solve;
  solve.set_model("linear");
  solve.set_device("this");
  solve.set_cost_source(kMeasuredInStepSource);
  solve.set_batch_size(2);
  solve.set_activation_budget_bytes(1ull << 30);
  solve.set_runtime_budget_multiple(1.5);
  solve.set_time_limit_s(5);
  solve.set_compute_threads(1);
  auto solved = SolveRequest(&*db, solve);
  ASSERT_TRUE(solved.ok()) << solved.status().message();
  EXPECT_EQ(solved->table.cost_source(), kMeasuredInStepSource);
}

// What the scheduler did to each step, scripted: the run-queue wait of step k's threads.
class ScriptedWatch : public profiler::InterferenceWatch {
 public:
  explicit ScriptedWatch(std::vector<double> waits_s) : waits_s_(std::move(waits_s)) {}
  Status BeginWindow() override { return Status::Ok(); }
  Result<double> WaitSinceLastS() override { return 0.0; }
  Result<v1::Interference> EndWindow(double) override {
    v1::Interference out;
    out.set_watched(true);
    out.set_run_queue_wait_s(step_ < waits_s_.size() ? waits_s_[step_] : 0.0);
    ++step_;
    return out;
  }

 private:
  std::vector<double> waits_s_;
  size_t step_ = 0;
};

TEST(JudgeStep, TheProfilersSignalsDisturbAStep) {
  v1::Interference quiet;
  quiet.set_watched(true);
  EXPECT_TRUE(JudgeStep(quiet, 0.01, 0.01, false).clean);

  v1::Interference waited = quiet;
  waited.set_run_queue_wait_s(0.0001);  // 1% of a 10 ms step: under the profiler's 2%
  EXPECT_TRUE(JudgeStep(waited, 0.01, 0.01, false).clean);
  waited.set_run_queue_wait_s(0.004);
  const profiler::Verdict verdict = JudgeStep(waited, 0.01, 0.01, false);
  EXPECT_FALSE(verdict.clean);
  EXPECT_EQ(verdict.reason, "its threads waited 4.00 ms for a CPU (40% of the step): another task ran on its cores");

  v1::Interference stolen = quiet;
  stolen.set_steal_fraction(0.05);
  EXPECT_THAT(JudgeStep(stolen, 0.01, 0.01, true).reason, ::testing::HasSubstr("took 5% of the CPUs (steal time)"));

  v1::Interference unwatched;  // no schedstat: a preemption is all there is
  unwatched.set_involuntary_switches(2);
  EXPECT_THAT(JudgeStep(unwatched, 0.01, 0.01, false).reason, ::testing::HasSubstr("preempted 2 times"));

  // Other tasks on the CPUs disturb a team, over a window long enough for /proc/stat's ticks; not one thread.
  v1::Interference shared = quiet;
  shared.set_other_cpu_cores(1.5);
  EXPECT_FALSE(JudgeStep(shared, 0.2, 0.2, false).clean);
  EXPECT_TRUE(JudgeStep(shared, 0.2, 0.2, true).clean);
  EXPECT_TRUE(JudgeStep(shared, 0.002, 0.002, false).clean);
}

TEST(SelectSteps, TheMedianLeavesDisturbedStepsOutWhenEnoughAreClean) {
  StepSelection none = SelectSteps({false, false, false});
  EXPECT_EQ(none.median_of, (std::vector<size_t>{0, 1, 2}));
  EXPECT_FALSE(none.run_disturbed);
  EXPECT_FALSE(none.undisturbed_only);

  StepSelection few = SelectSteps({false, true, false, false, true});
  EXPECT_EQ(few.median_of, (std::vector<size_t>{0, 2, 3}));
  EXPECT_EQ(few.disturbed_steps, 2u);
  EXPECT_TRUE(few.undisturbed_only);
  EXPECT_FALSE(few.run_disturbed);

  // Most disturbed: the run is; with 3 clean steps the median is still theirs.
  StepSelection most = SelectSteps({true, false, true, false, true, false, true});
  EXPECT_TRUE(most.run_disturbed);
  EXPECT_EQ(most.median_of, (std::vector<size_t>{1, 3, 5}));

  // Too few clean steps to stand alone: the median is of all, and says so through undisturbed_only.
  StepSelection all = SelectSteps({true, true, false, true});
  EXPECT_TRUE(all.run_disturbed);
  EXPECT_FALSE(all.undisturbed_only);
  EXPECT_EQ(all.median_of.size(), 4u);
  // Half is not most; one step alone decides.
  EXPECT_FALSE(SelectSteps({true, false}).run_disturbed);
  EXPECT_TRUE(SelectSteps({true}).run_disturbed);
}

// A run on a busy machine (scripted: the threads of most steps waited for a
// CPU) is stored marked, with a warning, and leaves no measured-in-step costs
// unless accepted as noisy; a few disturbed steps are left out of the median.
TEST_F(TrainJobTest, ARunOnABusyMachineIsMarkedAndItsInStepCostsAreNotStored) {
  ProfileJobOptions profile = LinearProfile();
  ASSERT_TRUE(RunProfileJob(profile, nullptr, nullptr, [](const std::string&) {}).ok());

  // Steps 2..5: the first warms up; 3 of the 4 after it waited 1 s for a CPU each.
  ScriptedWatch busy({0, 1.0, 0, 1.0, 1.0});
  TrainJobOptions options = Options();
  options.steps = 5;
  options.watch = &busy;
  auto noisy = Run(options);
  ASSERT_TRUE(noisy.ok()) << noisy.status().message();
  const v1::TrainRun& run = noisy->run;
  EXPECT_TRUE(run.disturbed());
  EXPECT_EQ(run.disturbed_steps(), 3u);
  EXPECT_EQ(run.median_steps(), 4u);  // one clean step is too few to stand alone
  EXPECT_THAT(run.disturbance(), ::testing::HasSubstr("3 of 4 steps after the first were disturbed (step 2: its "
                                                      "threads waited 1.00 s for a CPU"));
  EXPECT_TRUE(run.step_stats(1).disturbed());
  EXPECT_FALSE(run.step_stats(2).disturbed());
  EXPECT_DOUBLE_EQ(run.step_stats(3).interference().run_queue_wait_s(), 1.0);
  EXPECT_GT(noisy->run_id, 0);  // the record is kept, marked
  EXPECT_EQ(noisy->in_step_table_id, 0);
  EXPECT_THAT(noisy->notes, ::testing::Contains(::testing::HasSubstr("no measured-in-step costs: most steps were "
                                                                     "disturbed (--accept-noisy stores them)")));
  EXPECT_THAT(DisturbedRunWarning(run, false),
              ::testing::HasSubstr("no measured-in-step costs are stored from it (--accept-noisy stores them)"));
  EXPECT_EQ(DisturbedRunWarning(v1::TrainRun(), false), "");
  auto db = costdb::CostDb::Open(Db(), costdb::OpenMode::kReadOnly);
  ASSERT_TRUE(db.ok());
  auto stored = db->GetTrainRun(noisy->run_id);
  ASSERT_TRUE(stored.ok());
  EXPECT_TRUE(stored->disturbed());
  EXPECT_EQ(stored->disturbance(), run.disturbance());

  ScriptedWatch again({0, 1.0, 0, 1.0, 1.0});
  options.watch = &again;
  options.accept_noisy = true;
  auto accepted = Run(options);
  ASSERT_TRUE(accepted.ok()) << accepted.status().message();
  EXPECT_TRUE(accepted->run.disturbed());
  EXPECT_GT(accepted->in_step_table_id, 0);

  // One disturbed step of 6: the run is not disturbed, and its median is of the 5 others.
  ScriptedWatch once({0, 0, 0, 1.0, 0, 0, 0});
  options.steps = 7;
  options.watch = &once;
  options.accept_noisy = false;
  auto quiet = Run(options);
  ASSERT_TRUE(quiet.ok()) << quiet.status().message();
  EXPECT_FALSE(quiet->run.disturbed());
  EXPECT_EQ(quiet->run.disturbed_steps(), 1u);
  EXPECT_EQ(quiet->run.median_steps(), 5u);
  EXPECT_GT(quiet->in_step_table_id, 0);
  EXPECT_THAT(quiet->notes, ::testing::Contains(::testing::HasSubstr("the step time is the median of the 5 "
                                                                     "undisturbed ones")));
}

// Energy that sums (issue 27): a fake hwmon board whose rails draw a known,
// constant power (VDD_IN 4 W with VDD_CPU 1.5 W inside it, VDD_DDR 0.5 W beside
// it: 4.5 W in all) profiles and trains the zoo's linear model. Every op's
// energy over its runtime, and the step's energy over the step's time, must be
// that power: then the per-op energies of the step's nodes add up to the step's
// energy exactly as their times add up to its time, whatever the times were.
// Times themselves are not asserted.
TEST_F(TrainJobTest, PerOpEnergiesAddUpToTheStepsMeasuredEnergy) {
  constexpr double kPowerW = 4.5;  // the top-level rails; VDD_CPU is inside VDD_IN, not added
  const std::filesystem::path chip = dir_ / "sys/class/hwmon/hwmon0";
  std::filesystem::create_directories(chip);
  std::ofstream(chip / "name") << "fakeboard\n";
  for (const auto& [n, label, microwatts] : std::vector<std::tuple<int, std::string, long>>{
           {1, "VDD_IN", 4000000}, {2, "VDD_CPU", 1500000}, {3, "VDD_DDR", 500000}}) {
    std::ofstream(chip / ("power" + std::to_string(n) + "_input")) << microwatts << "\n";
    std::ofstream(chip / ("power" + std::to_string(n) + "_label")) << label << "\n";
  }
  const std::string config = (dir_ / "probes.toml").string();
  std::ofstream(config) << "[probes]\nsysfs_root = \"" << (dir_ / "sys").string()
                        << "\"\nnested_rails = { VDD_CPU = \"VDD_IN\" }\n";

  ProfileJobOptions profile = LinearProfile();
  profile.probes_config = config;
  auto profiled = RunProfileJob(profile, nullptr, nullptr, [](const std::string&) {});
  ASSERT_TRUE(profiled.ok()) << profiled.status().message();
  ASSERT_TRUE(profiled->energy_measured) << profiled->energy_source;

  TrainJobOptions options = Options();
  options.steps = 4;
  options.probes_config = config;
  options.accept_noisy = true;
  auto trained = Run(options);
  ASSERT_TRUE(trained.ok()) << trained.status().message();
  const v1::TrainRun& run = trained->run;
  EXPECT_EQ(run.energy_source(), v1::ENERGY_SOURCE_INTEGRATED);
  EXPECT_THAT(run.energy_probe(), ::testing::HasSubstr("fakeboard"));
  ASSERT_GT(run.runtime_s(), 0);
  // The step: the meter's power times the step's time (a sampled meter at constant power integrates exactly).
  EXPECT_NEAR(run.energy_j() / run.runtime_s(), kPowerW, 0.01 * kPowerW);

  auto db = costdb::CostDb::Open(Db());
  ASSERT_TRUE(db.ok());
  for (const std::string source : {profiler::kMeasuredSource, kMeasuredInStepSource}) {
    SCOPED_TRACE(source);
    v1::GetCostTableRequest request;
    request.set_model("linear");
    request.set_device("this");
    request.set_cost_source(source);
    request.set_batch_size(2);
    request.set_derivation("exact");
    request.set_threads(1);  // the profile's and the run's
    auto table = ResolveCostTable(&*db, request);
    ASSERT_TRUE(table.ok()) << table.status().message();
    double sum_j = 0, sum_s = 0;
    for (const v1::NodeCost& c : table->costs()) {
      if (c.runtime_s() <= 0) continue;  // a node with no kernel of its own (the data)
      // Each op: the same power, once per rail (not 6 W: the nested rail is not added again).
      EXPECT_NEAR(c.compute_j() / c.runtime_s(), kPowerW, 0.01 * kPowerW) << "node " << c.node();
      // A measured op's rails add up to it: the top-level ones, the nested one apart (the in-step
      // table is stored without rails).
      if (source == profiler::kMeasuredSource) {
        double top_j = 0;
        for (const v1::DomainEnergy& d : c.domains()) {
          if (d.inside().empty()) top_j += d.energy_j();
        }
        ASSERT_EQ(c.domains_size(), 3) << "node " << c.node();
        EXPECT_NEAR(top_j, c.compute_j(), 1e-6 * c.compute_j()) << "node " << c.node();
      }
      sum_j += c.compute_j();
      sum_s += c.runtime_s();
    }
    ASSERT_GT(sum_s, 0);
    // Sum over nodes against the step: the same joules per second, within 5%. The in-step
    // table's nodes take sum_s of the step's run.runtime_s(); their energies take as much of its energy.
    EXPECT_NEAR((sum_j / sum_s) / (run.energy_j() / run.runtime_s()), 1.0, 0.05);
    if (source == kMeasuredInStepSource) {
      EXPECT_NEAR(sum_j, run.energy_j() * sum_s / run.runtime_s(), 0.05 * sum_j);
    } else {
      EXPECT_NEAR(run.predicted_energy_j(), sum_j, 1e-9 * sum_j);  // the prediction is the table's sum
    }
  }
}

// Issue 27: a run at a thread count nobody profiled predicts from another count's table, and says
// so loudly; its in-step table is kept at its own count, beside the other count's.
TEST_F(TrainJobTest, ARunAtAnUnprofiledThreadCountSaysItsPredictionsAreAnotherCounts) {
  ProfileJobOptions profile = LinearProfile();
  ASSERT_TRUE(RunProfileJob(profile, nullptr, nullptr, [](const std::string&) {}).ok());

  TrainJobOptions options = Options();
  options.threads = 2;
  options.accept_noisy = true;  // two threads on a shared machine are often disturbed: keep its in-step table anyway
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

// Issue 39: --ram-budget is the training process's peak RSS. A run measures the rest of its process
// (everything but the step's tensors); the next run predicts its peak from that one, and a solve
// takes it off the budget with the other fixed parts, so the activations get what is left, the
// arena's layout included.
TEST_F(TrainJobTest, AProcessBudgetTakesTheRestAnEarlierRunMeasuredOff) {
  ProfileJobOptions profile = LinearProfile();
  ASSERT_TRUE(RunProfileJob(profile, nullptr, nullptr, [](const std::string&) {}).ok());

  auto first = Run(Options());
  ASSERT_TRUE(first.ok()) << first.status().message();
  const v1::TrainRun& measured = first->run;
  EXPECT_GT(measured.arena_bytes(), 0u);
  EXPECT_GE(measured.arena_bytes(), measured.predicted_peak_bytes());  // the region holds the planned peak
  ASSERT_TRUE(measured.peak_reset_at_start()) << "this kernel cannot reset VmHWM (Linux 4.0+)";
  const uint64_t tensors = measured.predicted_process_bytes() - measured.predicted_process_rest_bytes();
  EXPECT_EQ(measured.process_rest_bytes(), measured.peak_rss_bytes() - tensors);  // the binary at least: never 0
  EXPECT_EQ(measured.process_rest_from_run(), 0u);  // nothing earlier: said in the notes
  auto second = Run(Options());
  ASSERT_TRUE(second.ok()) << second.status().message();
  EXPECT_EQ(second->run.process_rest_from_run(), static_cast<uint64_t>(first->run_id));
  EXPECT_EQ(second->run.predicted_process_rest_bytes(), measured.process_rest_bytes());
  EXPECT_EQ(second->run.predicted_process_bytes(), tensors + measured.process_rest_bytes());

  auto db = costdb::CostDb::Open(Db());
  ASSERT_TRUE(db.ok());
  v1::ScheduleRequest request;
  request.set_model("linear");
  request.set_device("this");
  request.set_cost_source("measured");
  request.set_batch_size(2);
  request.set_derivation("exact");
  request.set_compute_threads(1);
  request.set_runtime_budget_multiple(100);
  request.set_time_limit_s(5);
  // The plain step's whole process as the latest run measured it: the solve takes its rest off.
  request.set_process_ram_budget_bytes(tensors + second->run.process_rest_bytes());
  auto solved = SolveRequest(&*db, request, false);
  ASSERT_TRUE(solved.ok()) << solved.status().message();
  const v1::StepMemory& memory = solved->schedule.memory();
  EXPECT_EQ(memory.process_rest_from_run(), static_cast<uint64_t>(second->run_id));
  EXPECT_EQ(memory.process_rest_bytes(), second->run.process_rest_bytes());
  EXPECT_EQ(memory.fixed_bytes(), memory.param_bytes() + memory.gradient_bytes() + memory.optimizer_bytes() +
                                      memory.workspace_bytes() + memory.process_rest_bytes());
  EXPECT_LE(solved->schedule.request().activation_budget_bytes(), request.process_ram_budget_bytes() - memory.fixed_bytes());
  EXPECT_LE(solved->schedule.peak_ram_bytes(), solved->schedule.request().activation_budget_bytes());
  EXPECT_LE(memory.fixed_bytes() + ArenaRegionBytes(solved->table.graph(), solved->schedule),
            request.process_ram_budget_bytes());  // the arena's layout within the process budget too
}

// Issue 29: the optimizer's state is one tensor per trained parameter with momentum and two with
// Adam; it is in the run record, in the predicted process memory and in the step's fixed bytes a
// whole-process budget takes off, and a frozen parameter keeps none.
TEST_F(TrainJobTest, OptimizerStateCountsInTheRunAndInTheStepsMemory) {
  auto sgd = Run(Options());
  ASSERT_TRUE(sgd.ok()) << sgd.status().message();
  EXPECT_EQ(sgd->run.optimizer_state_bytes(), 0u);
  EXPECT_EQ(sgd->run.optimizer().kind(), "sgd");

  TrainJobOptions options = Options();
  options.optimizer.set_kind("adam");
  options.lr_schedule.set_kind("cosine");
  options.lr_schedule.set_warmup_steps(1);
  auto adam = Run(options);
  ASSERT_TRUE(adam.ok()) << adam.status().message();
  auto graph = graph::LoadTrainingGraph({"linear", 2, graph::Derivation::kExact, {}});
  ASSERT_TRUE(graph.ok()) << graph.status().message();
  const v1::StepMemory memory = StepMemoryOf(*graph, {.optimizer_state_tensors = 2});
  ASSERT_TRUE(memory.executor_known()) << memory.note();
  EXPECT_EQ(memory.optimizer_bytes(), 2 * memory.param_bytes());  // every parameter trains
  EXPECT_EQ(memory.fixed_bytes(), StepMemoryOf(*graph).fixed_bytes() + memory.optimizer_bytes());
  EXPECT_EQ(adam->run.optimizer_state_bytes(), memory.optimizer_bytes());
  EXPECT_EQ(adam->run.predicted_process_bytes() - adam->run.predicted_process_rest_bytes(),
            sgd->run.predicted_process_bytes() - sgd->run.predicted_process_rest_bytes() + memory.optimizer_bytes());
  // The record says what ran, PyTorch's defaults resolved.
  EXPECT_EQ(adam->run.optimizer().kind(), "adam");
  EXPECT_EQ(adam->run.optimizer().beta2(), 0.999);
  EXPECT_EQ(adam->run.optimizer().weight_decay(), 0.0);
  EXPECT_EQ(adam->run.lr_schedule().t_max(), 2u);  // the steps after warm-up
  EXPECT_THAT(DescribeTraining(adam->run), ::testing::HasSubstr("cosine to 0 over 2 steps after 1 linear warm-up"));

  // Biases alone train: their state only.
  auto bias = graph::LoadTrainingGraph({"linear", 2, graph::Derivation::kExact, *graph::Trainable::Parse("bias")});
  ASSERT_TRUE(bias.ok()) << bias.status().message();
  const v1::StepMemory bias_memory = StepMemoryOf(*bias, {.optimizer_state_tensors = 1});
  EXPECT_GT(bias_memory.optimizer_bytes(), 0u);
  EXPECT_LT(bias_memory.optimizer_bytes(), memory.optimizer_bytes() / 2 / 10);

  options.optimizer.set_kind("rmsprop");
  auto refused = Run(options);
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(refused.status().message(), ::testing::HasSubstr("--optimizer must be sgd, adam or adamw"));
  options.optimizer.set_kind("sgd");
  options.lr_schedule.set_kind("step");
  refused = Run(options);
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(refused.status().message(), ::testing::HasSubstr("--lr-step-size"));
}

// Issue 27: the step's time outside its nodes (binding, arena, dispatch) is spread over every node
// execution alike, so a recomputed node pays it again; paging waits are not part of it.
TEST(InStepOverhead, IsTheStepOutsideItsNodesPerExecution) {
  std::vector<v1::NodeTime> nodes(3);
  nodes[0].set_runtime_s(1.0);
  nodes[0].set_executions(1);
  nodes[1].set_runtime_s(2.0);
  nodes[1].set_executions(2);  // recomputed once
  nodes[2].set_runtime_s(0.5);
  nodes[2].set_executions(1);
  // nodes: 1 + 4 + 0.5 = 5.5 s over 4 executions; the step 8 s, 0.5 s of which waited for paging.
  EXPECT_DOUBLE_EQ(InStepOverheadS(8.0, 0.5, nodes), 2.0 / 4);
  EXPECT_DOUBLE_EQ(InStepOverheadS(5.5, 0.0, nodes), 0.0);
  EXPECT_DOUBLE_EQ(InStepOverheadS(1.0, 0.0, {}), 0.0);
}

// Issue 27: `profile --in-step` runs real plain steps after the isolated ops and stores the
// measured-in-step table, whose costs add up to the run's own median step (an accounting
// identity, not a timing assertion); the default cost source `auto` then takes it at its thread
// count and says so, and takes the measured table at a count without one.
TEST_F(TrainJobTest, InStepProfilingStoresATableThatAddsUpToTheStepAndAutoPrefersIt) {
  ProfileJobOptions profile = LinearProfile();
  ASSERT_TRUE(RunProfileJob(profile, nullptr, nullptr, [](const std::string&) {}).ok());

  InStepProfileOptions in_step;
  in_step.database = &Store();
  in_step.graph = profile.graph;
  in_step.threads = 1;
  in_step.steps = 4;
  in_step.paging_dir = PagingDir();
  auto profiled = RunInStepProfile(in_step, nullptr, [](const std::string&) {});
  ASSERT_TRUE(profiled.ok()) << profiled.status().message();
  EXPECT_EQ(profiled->run.cost_source(), profiler::kMeasuredSource);
  EXPECT_EQ(profiled->run.strategy(), "plain");
  ASSERT_GT(profiled->in_step_table_id, 0);

  auto db = costdb::CostDb::Open(Db());
  ASSERT_TRUE(db.ok());
  auto stored = db->GetCostTableById(profiled->in_step_table_id);
  ASSERT_TRUE(stored.ok()) << stored.status().message();
  EXPECT_EQ(stored->cost_source(), kMeasuredInStepSource);
  EXPECT_EQ(stored->threads(), 1u);
  EXPECT_THAT(stored->note(), ::testing::HasSubstr("outside its nodes"));
  EXPECT_THAT(stored->note(), ::testing::HasSubstr("per execution"));
  double sum_s = 0;
  for (const v1::NodeCost& c : stored->costs()) {
    EXPECT_GE(c.runtime_s(), 0);
    sum_s += c.runtime_s();
  }
  ASSERT_GT(profiled->run.runtime_s(), 0);
  // The identity is with the median step when the steps were quiet enough to leave the disturbed
  // ones out; on a busy machine the table is a low percentile of every step, said in its note.
  const v1::TrainRun& run = profiled->run;
  if (run.disturbed_steps() == 0 || run.median_steps() + run.disturbed_steps() <= run.steps() - 1) {
    EXPECT_NEAR(sum_s, run.runtime_s(), 0.01 * run.runtime_s());
  } else {
    EXPECT_THAT(stored->note(), ::testing::HasSubstr("th percentile over all"));
  }

  // In-step profiling needs the exact derivation (real gradients).
  InStepProfileOptions poet = in_step;
  poet.graph.derivation = graph::Derivation::kPoet;
  EXPECT_FALSE(RunInStepProfile(poet, nullptr, [](const std::string&) {}).ok());

  // `auto`, the default: at 1 thread the in-step table, said; the prediction is its sum.
  TrainJobOptions options = Options();
  ASSERT_EQ(options.cost_source, kAutoCostSource);
  options.store = false;
  auto trained = Run(options);
  ASSERT_TRUE(trained.ok()) << trained.status().message();
  EXPECT_EQ(trained->run.cost_source(), kMeasuredInStepSource);
  EXPECT_THAT(trained->notes, ::testing::Contains(::testing::HasSubstr("cost source auto: measured-in-step")));
  EXPECT_NEAR(trained->run.predicted_runtime_s(), sum_s, 1e-9 * sum_s);

  v1::GetCostTableRequest request;
  request.set_model("linear");
  request.set_device("this");
  request.set_cost_source(kAutoCostSource);
  request.set_batch_size(2);
  request.set_threads(1);
  auto table = ResolveCostTable(&*db, request);
  ASSERT_TRUE(table.ok()) << table.status().message();
  EXPECT_EQ(table->cost_source(), kMeasuredInStepSource);
  EXPECT_THAT(table->note(), ::testing::StartsWith("cost source auto: measured-in-step"));

  // A solve with `auto` stores what it chose, so that it is solved again on the same source.
  v1::ScheduleRequest solve;
  solve.set_model("linear");
  solve.set_device("this");
  solve.set_cost_source(kAutoCostSource);
  solve.set_batch_size(2);
  solve.set_activation_budget_bytes(1ull << 30);
  solve.set_runtime_budget_multiple(1.5);
  solve.set_time_limit_s(5);
  solve.set_compute_threads(1);
  auto solved = SolveRequest(&*db, solve);
  ASSERT_TRUE(solved.ok()) << solved.status().message();
  EXPECT_EQ(solved->table.cost_source(), kMeasuredInStepSource);
  EXPECT_EQ(solved->schedule.request().cost_source(), kMeasuredInStepSource);

  // At 2 threads no in-step table exists: `auto` falls back to measured and says why (whose
  // table is at 1 thread only, so that is refused as a measured request is).
  request.set_threads(2);
  std::string why;
  auto source = AutoCostSource(*db, {"linear", profiler::ThisDeviceName(), "", 2, "exact", "all"}, 2, &why);
  ASSERT_TRUE(source.ok()) << source.status().message();
  EXPECT_EQ(*source, profiler::kMeasuredSource);
  EXPECT_THAT(why, ::testing::HasSubstr("no measured-in-step table of linear at 2 threads"));
  auto at_two = ResolveCostTable(&*db, request);  // measured, whose table is at 1 thread only: refused, naming it
  ASSERT_FALSE(at_two.ok());
  EXPECT_THAT(at_two.status().message(), ::testing::HasSubstr("no measured cost table of linear at 2 threads"));
}

// A user's data set: --epochs runs whole passes over its training records, the held-out part is
// evaluated after each, and the run record keeps the figures; bias-only fine-tuning works with it.
TEST_F(TrainJobTest, EpochsOverADataSetReportHeldOutLossAndAccuracy) {
  constexpr int64_t kRecords = 26, kFeatures = 784;
  std::vector<float> x(static_cast<size_t>(kRecords * kFeatures), 0.0f), y;
  for (int64_t i = 0; i < kRecords; ++i) {
    y.push_back(static_cast<float>(i % 10));
    for (int64_t f = 0; f < 50; ++f) x[static_cast<size_t>(i * kFeatures + (i % 10) * 50 + f)] = 1.0f;
  }
  auto npz = NpzBytes({{"x", {kRecords, kFeatures}, x}, {"y", {kRecords}, y}});
  ASSERT_TRUE(npz.ok());
  const std::string path = (dir_ / "set.npz").string();
  std::ofstream(path, std::ios::binary) << *npz;

  for (const char* trainable : {"all", "bias", "last:2", "layers:layer3,layer9"}) {
    SCOPED_TRACE(trainable);
    TrainJobOptions options = Options();
    options.graph.trainable = *graph::Trainable::Parse(trainable);
    options.data_file = path;
    options.epochs = 3;
    options.val_split = 0.2;
    options.lr = 0.5;
    options.store = false;
    auto result = Run(options);
    ASSERT_TRUE(result.ok()) << result.status().message();
    const v1::TrainRun& run = result->run;
    EXPECT_EQ(run.held_out_records(), 5u);    // every fifth of 26
    EXPECT_EQ(run.batches_per_epoch(), 10u);  // 21 records in batches of 2
    EXPECT_EQ(run.dropped_per_epoch(), 1u);
    EXPECT_EQ(run.steps(), 30u);
    ASSERT_EQ(run.epochs_size(), 3);
    for (int e = 0; e < 3; ++e) {
      const v1::EpochStats& epoch = run.epochs(e);
      EXPECT_EQ(epoch.epoch(), static_cast<uint32_t>(e + 1));
      EXPECT_EQ(epoch.steps(), 10u);
      double mean = 0;
      for (int s = 0; s < 10; ++s) mean += run.step_stats(e * 10 + s).loss() / 10;
      EXPECT_NEAR(epoch.train_loss(), mean, 1e-12);
      EXPECT_GT(epoch.held_out_loss(), 0);
      const double correct = epoch.held_out_accuracy() * 5;
      EXPECT_NEAR(correct, std::round(correct), 1e-9) << "a whole number of the 5 records";
      EXPECT_LE(epoch.held_out_accuracy(), 1.0);
    }
    EXPECT_THAT(::testing::PrintToString(result->notes), ::testing::HasSubstr("drop_last"));
  }

  TrainJobOptions bad = Options();
  bad.epochs = 2;
  EXPECT_THAT(Run(bad).status().message(), ::testing::HasSubstr("need a data set"));
  auto narrow = NpzBytes({{"x", {4, 100}, std::vector<float>(400)}, {"y", {4}, std::vector<float>(4)}});
  ASSERT_TRUE(narrow.ok());
  std::ofstream((dir_ / "narrow.npz").string(), std::ios::binary) << *narrow;
  bad = Options();
  bad.data_file = (dir_ / "narrow.npz").string();
  EXPECT_THAT(Run(bad).status().message(), ::testing::HasSubstr("the model takes N x 784"));
}

}  // namespace
}  // namespace edgecost::service
