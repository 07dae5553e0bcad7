// The services, the config and the cost-table cache in process: no
// transport, no daemon, a temporary database.
#include "daemon/services.h"

#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <future>
#include <set>
#include <sstream>
#include <thread>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include "costdb/costdb.h"
#include "daemon/config.h"
#include "daemon/cost_table_cache.h"
#include "daemon/events.h"
#include "daemon/jobs.h"
#include "proto/json.h"
#include "service/profile_job.h"

namespace edgecost::daemon {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

class ServicesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("edgecost_services_test_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string Db() const { return (dir_ / "costs.db").string(); }
  // A store of this process at `path`, as the daemon hands its services.
  costdb::Store& StoreAt(const std::string& path) {
    return *stores_.emplace_back(std::make_unique<costdb::Store>(path, costdb::OpenMode::kReadWrite));
  }

  std::vector<v1::Event> EventsSoFar() {
    std::promise<std::vector<v1::Event>> answered;
    events_.Watch(0, 0, [&](std::vector<v1::Event> e) { answered.set_value(std::move(e)); });
    return answered.get_future().get();
  }

  fs::path dir_;
  EventLog events_;
  std::vector<std::unique_ptr<costdb::Store>> stores_;
};

TEST_F(ServicesTest, CostServiceAnswersAndMarksOnlyAnalyticTablesForTheCache) {
  CostTableCache cache;
  CostService costs(StoreAt(Db()), &cache);
  v1::GetCostTableRequest request;
  request.set_model("linear");
  request.set_device("a72");
  auto table = costs.GetCostTable(request);
  ASSERT_TRUE(table.ok()) << table.status().message();
  EXPECT_EQ(table->cost_source(), "poet-flops");
  EXPECT_GT(table->costs_size(), 0);

  HttpRequest http{.method = "POST",
                   .target = CostTableCache::kRoute,
                   .content_type = "application/json",
                   .body = R"({"model":"linear","device":"a72"})"};
  const std::string key = CostTableCache::Key(http);
  ASSERT_FALSE(key.empty());
  cache.Offer(key, {200, "application/json", "encoded"});
  ASSERT_TRUE(cache.Find(key).has_value());
  EXPECT_EQ(cache.Find(key)->body, "encoded");

  // A request spelled differently is the same entry; one never marked analytic is not kept.
  http.body = R"({"device":"a72","model":"linear"})";
  EXPECT_EQ(CostTableCache::Key(http), key);
  http.body = R"({"model":"vgg16","device":"a72"})";
  cache.Offer(CostTableCache::Key(http), {200, "application/json", "never asked of the service"});
  EXPECT_FALSE(cache.Find(CostTableCache::Key(http)).has_value());
  http.target = "/twirp/edgecost.v1.CostService/ListModels";
  EXPECT_EQ(CostTableCache::Key(http), "");

  request.set_model("../costs.db");
  EXPECT_THAT(costs.GetCostTable(request).status().message(), HasSubstr("is a file name"));
  EXPECT_EQ(costs.GetDevice({}).status().code(), ErrorCode::kInvalidArgument);
  EXPECT_GT(costs.ListModels({})->models_size(), 5);
}

TEST_F(ServicesTest, SolverServiceStoresEmitsAndChecksWhatCrossesTheWire) {
  std::atomic<bool> stop{false};
  SolverService solver(StoreAt(Db()), events_, &stop);
  v1::ScheduleRequest request;
  request.set_model("linear");
  request.set_device("a72");
  request.set_activation_budget_bytes(4000);
  auto schedule = solver.Solve(request);
  ASSERT_TRUE(schedule.ok()) << schedule.status().message();
  ASSERT_GT(schedule->id(), 0u);
  const auto events = EventsSoFar();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].schedule_id(), schedule->id());

  v1::GetScheduleRequest get;
  get.set_id(schedule->id());
  EXPECT_EQ(solver.GetSchedule(get)->energy().total_j(), schedule->energy().total_j());
  get.set_id(UINT64_MAX);
  EXPECT_EQ(solver.GetSchedule(get).status().code(), ErrorCode::kNotFound);
  v1::ListSchedulesRequest list;
  list.set_model("linear");
  EXPECT_EQ(solver.ListSchedules(list)->schedules_size(), 1);

  v1::ScheduleRequest bad = request;
  bad.set_graph_file("/etc/passwd");
  EXPECT_THAT(solver.Solve(bad).status().message(), HasSubstr("graph_file is read by the local CLI only"));
  bad = request;
  bad.set_time_limit_s(SolverService::kMaxTimeLimitS + 1);
  EXPECT_EQ(solver.Solve(bad).status().code(), ErrorCode::kInvalidArgument);
  bad = request;
  bad.set_activation_budget_bytes(0);
  EXPECT_EQ(solver.Solve(bad).status().code(), ErrorCode::kInvalidArgument);
}

// --compare and --min-ram over RPC: the baselines beside the schedule, and the
// smallest budget searched when none is given, carried in the schedule's request.
TEST_F(ServicesTest, SolverServiceComparesAndFindsTheSmallestBudget) {
  std::atomic<bool> stop{false};
  SolverService solver(StoreAt(Db()), events_, &stop);
  v1::ScheduleRequest request;
  request.set_model("linear");
  request.set_device("a72");
  request.set_activation_budget_bytes(5000);
  request.set_runtime_budget_multiple(2);
  request.set_time_limit_s(2);
  request.set_compare(true);
  auto compared = solver.Solve(request);
  ASSERT_TRUE(compared.ok()) << compared.status().message();
  ASSERT_EQ(compared->compared_size(), 5);  // checkpoint-all, paging-only, sqrt, revolve, greedy
  for (const v1::Schedule& baseline : compared->compared()) {
    if (baseline.stages_size() > 0) {
      EXPECT_GE(baseline.energy().total_j(), compared->energy().total_j() - 1e-12) << baseline.strategy();
    }
  }

  request.set_compare(false);
  request.set_activation_budget_bytes(0);
  request.set_min_ram(true);
  auto smallest = solver.Solve(request);
  ASSERT_TRUE(smallest.ok()) << smallest.status().message();
  EXPECT_GT(smallest->min_feasible_ram_bytes(), 0u);
  EXPECT_EQ(smallest->request().activation_budget_bytes(), smallest->min_feasible_ram_bytes());
  EXPECT_LE(smallest->peak_ram_bytes(), smallest->min_feasible_ram_bytes());
  EXPECT_LE(smallest->min_feasible_ram_bytes(), compared->compared(1).peak_ram_bytes());  // paging-only's peak
}

TEST_F(ServicesTest, JobServiceListsTheNewestAndRefusesWhatCannotRun) {
  JobManager manager(StoreAt(Db()), "", events_);
  ASSERT_TRUE(manager.Open().ok());
  JobService jobs(manager, events_);
  v1::StartProfileRequest profile;
  profile.set_model("/dev/zero");
  EXPECT_EQ(jobs.StartProfile(profile).status().code(), ErrorCode::kInvalidArgument);
  profile.set_model("not_in_the_zoo");
  EXPECT_THAT(jobs.StartProfile(profile).status().message(), HasSubstr("the zoo has"));
  EXPECT_EQ(jobs.ListJobs({})->jobs_size(), 0);
  v1::GetJobRequest get;
  get.set_id(1);
  EXPECT_EQ(jobs.GetJob(get).status().code(), ErrorCode::kNotFound);
  manager.Shutdown();
}

// A graph stored as a record serves its own costs by name; jobs that need ops to run refuse it.
TEST_F(ServicesTest, AStoredGraphServesItsOwnCostsAndJobsRefuseIt) {
  // A file of its own: the services keep a connection per thread and path, which an earlier test's
  // (removed) database would still hold.
  const std::string db = (dir_ / "records.db").string();
  CostTableCache cache;
  CostService costs(StoreAt(db), &cache);
  v1::AddModelRequest add;
  add.set_name("chain");
  add.set_model(R"({"directed": true, "graph": {"name": "chain"}, "nodes": [{"id": 0, "cost_cpu": 1.0,
    "cost_ram": 100}, {"id": 1, "cost_cpu": 2.0, "cost_ram": 50, "backward": true}],
    "links": [{"source": 0, "target": 1}]})");
  auto added = costs.AddModel(add);
  ASSERT_TRUE(added.ok()) << added.status().message();
  EXPECT_EQ(added->model().kind(), "node-link");
  v1::GetCostTableRequest request;
  request.set_model("chain");
  auto table = costs.GetCostTable(request);
  ASSERT_TRUE(table.ok()) << table.status().message();
  EXPECT_EQ(table->graph().model(), "chain");
  EXPECT_THAT(table->cost_source(), HasSubstr("networkx"));

  add.set_model(R"({"directed": true, "nodes": [{"id": 0, "cost_cpu": 3.0, "cost_ram": 100}, {"id": 1,
    "cost_cpu": 2.0, "cost_ram": 50, "backward": true}], "links": [{"source": 0, "target": 1}]})");
  EXPECT_EQ(costs.AddModel(add).status().code(), ErrorCode::kAlreadyExists);  // another model, no replace
  add.set_name("../etc/passwd");
  EXPECT_THAT(costs.AddModel(add).status().message(), HasSubstr("is a file name"));

  JobManager manager(StoreAt(db), "", events_);
  ASSERT_TRUE(manager.Open().ok());
  JobService jobs(manager, events_);
  v1::StartProfileRequest profile;
  profile.set_model("chain");
  EXPECT_THAT(jobs.StartProfile(profile).status().message(), HasSubstr("its own costs"));
  manager.Shutdown();
}

// StartProfile with calibrate fits the counter energy model against the
// measured source, as the local `profile --calibrate` does: here a fake hwmon
// meter (3 W, always) that the daemon's probes config points at.
TEST_F(ServicesTest, AProfileJobCalibratesAgainstTheMeterWhenAsked) {
  fs::create_directories(dir_ / "sys/class/hwmon/hwmon0");
  std::ofstream(dir_ / "sys/class/hwmon/hwmon0/name") << "fakemeter\n";
  std::ofstream(dir_ / "sys/class/hwmon/hwmon0/power1_input") << "3000000\n";
  const std::string config = (dir_ / "edgecost.toml").string();
  std::ofstream(config) << "[probes]\nsysfs_root = \"" << (dir_ / "sys").string() << "\"\n";
  JobManager manager(StoreAt(Db()), config, events_);
  ASSERT_TRUE(manager.Open().ok());
  JobService jobs(manager, events_);
  v1::StartProfileRequest profile;
  profile.set_model("linear");
  profile.set_threads(1);
  profile.set_accept_noisy(true);
  profile.set_calibrate(true);
  auto job = jobs.StartProfile(profile);
  ASSERT_TRUE(job.ok()) << job.status().message();
  Result<v1::Job> now = manager.Get(job->id());
  while (now.ok() && (now->state() == v1::Job::STATE_QUEUED || now->state() == v1::Job::STATE_RUNNING)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    now = manager.Get(job->id());
  }
  manager.Shutdown();
  ASSERT_TRUE(now.ok()) << now.status().message();
  if (now->message().find("no performance counter can be opened") != std::string::npos) {
    GTEST_SKIP() << "perf_event_open counts nothing here: " << now->message();
  }
  ASSERT_EQ(now->state(), v1::Job::STATE_SUCCEEDED) << now->message();
  ASSERT_TRUE(now->has_profile());
  EXPECT_TRUE(now->profile().energy_measured());
  const v1::EnergyCalibration& fitted = now->profile().calibration();
  EXPECT_EQ(fitted.probe(), "hwmon fakemeter (hwmon0)");
  EXPECT_GT(fitted.samples(), 0u);
  EXPECT_GT(fitted.idle_power_w(), 0);
  // Stored for the fingerprint, as the local command stores it.
  auto db = costdb::CostDb::Open(Db(), costdb::OpenMode::kReadOnly);
  ASSERT_TRUE(db.ok());
  auto stored = db->LatestCalibration(now->profile().fingerprint_hash());
  ASSERT_TRUE(stored.ok()) << stored.status().message();
  ASSERT_TRUE(stored->has_value());
  EXPECT_EQ((*stored)->probe(), fitted.probe());
}

TEST_F(ServicesTest, ListDevicesNamesEveryPresetBeforeAnyIsStored) {
  CostTableCache cache;
  CostService costs(StoreAt(Db()), &cache);
  auto devices = costs.ListDevices({});
  ASSERT_TRUE(devices.ok()) << devices.status().message();
  std::set<std::string> names;
  for (const v1::Device& d : devices->devices()) {
    EXPECT_EQ(d.kind(), v1::Device::KIND_PRESET);
    names.insert(d.name());
  }
  EXPECT_EQ(names, (std::set<std::string>{"a72", "a72nocache", "jetsontx2", "m0", "m4"}));
}

// As the README says: measured devices first, then the presets, whatever their names sort as.
TEST_F(ServicesTest, ListDevicesNamesMeasuredDevicesBeforeThePresets) {
  // A file of its own: the services keep a connection per thread and path, and an earlier test's
  // connection to costs.db would read the database that test removed.
  const std::string path = (dir_ / "devices.db").string();
  {
    auto db = costdb::CostDb::Open(path);
    ASSERT_TRUE(db.ok()) << db.status().message();
    v1::Device preset;
    preset.set_name("a72");
    preset.set_kind(v1::Device::KIND_PRESET);
    preset.mutable_fingerprint()->set_board_preset("a72");
    preset.mutable_fingerprint()->set_hash("preset:a72");
    v1::Device board;
    board.set_name("zz-board");
    board.set_kind(v1::Device::KIND_MEASURED);
    board.mutable_fingerprint()->set_cpu_model("test cpu");
    board.mutable_fingerprint()->set_hash("0123456789abcdef");
    ASSERT_TRUE(db->UpsertDevice(preset).ok());
    ASSERT_TRUE(db->UpsertDevice(board).ok());
  }
  CostTableCache cache;
  CostService costs(StoreAt(path), &cache);
  auto devices = costs.ListDevices({});
  ASSERT_TRUE(devices.ok()) << devices.status().message();
  std::string names;
  for (const v1::Device& d : devices->devices()) names += d.name() + " ";
  ASSERT_EQ(devices->devices_size(), 6) << names;
  EXPECT_EQ(devices->devices(0).name(), "zz-board");
  for (int i = 1; i < devices->devices_size(); ++i) {
    EXPECT_EQ(devices->devices(i).kind(), v1::Device::KIND_PRESET) << devices->devices(i).name();
  }
}

TEST_F(ServicesTest, AJobThatCannotBeStoredIsLoggedAndStillAnswered) {
  std::ostringstream log;
  auto previous = spdlog::default_logger();
  spdlog::set_default_logger(
      std::make_shared<spdlog::logger>("capture", std::make_shared<spdlog::sinks::ostream_sink_mt>(log)));
  {
    JobManager manager(StoreAt(Db()), "", events_);
    ASSERT_TRUE(manager.Open().ok());
    sqlite3* raw = nullptr;  // another connection takes the jobs table away: every PutJob fails from now on
    ASSERT_EQ(sqlite3_open(Db().c_str(), &raw), SQLITE_OK);
    ASSERT_EQ(sqlite3_exec(raw, "DROP TABLE jobs", nullptr, nullptr, nullptr), SQLITE_OK);
    sqlite3_close(raw);

    auto job = manager.StartRegeneration("test");
    ASSERT_TRUE(job.ok()) << job.status().message();
    Result<v1::Job> now = manager.Get(job->id());
    for (int i = 0; i < 2000 && now.ok() && now->state() != v1::Job::STATE_SUCCEEDED; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      now = manager.Get(job->id());
    }
    ASSERT_TRUE(now.ok());
    EXPECT_EQ(now->state(), v1::Job::STATE_SUCCEEDED);
    EXPECT_TRUE(now->has_regenerate());  // a structured result, not only a message
    EXPECT_EQ(now->regenerate().failed(), 0u);
    manager.Shutdown();
  }
  spdlog::set_default_logger(previous);
  EXPECT_THAT(log.str(), HasSubstr("event=job_not_stored"));
  EXPECT_THAT(log.str(), HasSubstr("no such table"));
}

// Runs `sql` on its own connection, as another process would.
void ExecSql(const std::string& db, const std::string& sql) {
  sqlite3* raw = nullptr;
  ASSERT_EQ(sqlite3_open(db.c_str(), &raw), SQLITE_OK);
  char* error = nullptr;
  EXPECT_EQ(sqlite3_exec(raw, sql.c_str(), nullptr, nullptr, &error), SQLITE_OK) << (error ? error : "");
  sqlite3_free(error);
  sqlite3_close(raw);
}

const v1::ModelInfo* Listed(const v1::ListModelsResponse& response, const std::string& name) {
  for (const v1::ModelInfo& info : response.models()) {
    if (info.name() == name) return &info;
  }
  return nullptr;
}

constexpr char kNodeLinkChain[] = R"({"directed": true, "graph": {"name": "chain"}, "nodes": [{"id": 0,
  "cost_cpu": 1.0, "cost_ram": 100}, {"id": 1, "cost_cpu": 2.0, "cost_ram": 50, "backward": true}],
  "links": [{"source": 0, "target": 1}]})";

// ListModels shows a stored model from the summary stored when it was added: its bytes are not
// read again (here they no longer even decode). A record from before summaries is described once.
TEST_F(ServicesTest, ListModelsReadsTheSummaryStoredWithTheModelNotItsBytes) {
  const std::string db = (dir_ / "summaries.db").string();
  CostService costs(StoreAt(db), nullptr);
  v1::AddModelRequest add;
  add.set_name("chain");
  add.set_model(kNodeLinkChain);
  auto added = costs.AddModel(add);
  ASSERT_TRUE(added.ok()) << added.status().message();
  ASSERT_GT(added->model().training_nodes(), 0u);
  add.set_name("older");
  ASSERT_TRUE(costs.AddModel(add).ok());

  ExecSql(db, "UPDATE model_records SET bytes = x'00ff' WHERE name = 'chain'");  // would not import
  ExecSql(db, "UPDATE model_records SET summary = NULL WHERE name = 'older'");   // as schema 6 left it
  auto listed = costs.ListModels({});
  ASSERT_TRUE(listed.ok()) << listed.status().message();
  const v1::ModelInfo* chain = Listed(*listed, "chain");
  ASSERT_NE(chain, nullptr);
  EXPECT_EQ(chain->error(), "");
  EXPECT_EQ(chain->training_nodes(), added->model().training_nodes());
  EXPECT_EQ(chain->forward_nodes(), added->model().forward_nodes());
  EXPECT_EQ(chain->content_hash(), added->model().content_hash());
  const v1::ModelInfo* older = Listed(*listed, "older");
  ASSERT_NE(older, nullptr);
  EXPECT_EQ(older->training_nodes(), added->model().training_nodes());
  auto stored = costdb::CostDb::Open(db, costdb::OpenMode::kReadOnly);
  ASSERT_TRUE(stored.ok());
  auto record = stored->GetModelRecord("older");
  ASSERT_TRUE(record.ok() && record->has_value());
  ASSERT_TRUE((*record)->summary.has_value()) << "described once, then stored";
  EXPECT_EQ((*record)->summary->training_nodes(), added->model().training_nodes());

  // A record from before summaries whose bytes do not read is listed with the reason, not an error.
  ExecSql(db, "UPDATE model_records SET summary = NULL WHERE name = 'chain'");
  listed = costs.ListModels({});
  ASSERT_TRUE(listed.ok()) << listed.status().message();
  EXPECT_NE(Listed(*listed, "chain")->error(), "");
}

// Tables read from the database (a stored model's, measured ones) are kept under the costs version
// they were read at; analytic ones whatever the version; nothing beyond the bounds.
TEST_F(ServicesTest, TheCacheKeepsTablesReadFromTheDatabaseOnlyUnderTheirVersion) {
  const std::string db = (dir_ / "versions.db").string();
  CostTableCache cache;
  CostService costs(StoreAt(db), &cache);
  v1::AddModelRequest add;
  add.set_name("chain");
  add.set_model(kNodeLinkChain);
  ASSERT_TRUE(costs.AddModel(add).ok());
  auto before = costs.CostsVersion();
  ASSERT_TRUE(before.ok()) << before.status().message();

  v1::GetCostTableRequest stored;
  stored.set_model("chain");
  ASSERT_TRUE(costs.GetCostTable(stored).ok());
  HttpRequest http{.method = "POST",
                   .target = CostTableCache::kRoute,
                   .content_type = "application/json",
                   .body = R"({"model":"chain"})"};
  const std::string key = CostTableCache::Key(http);
  cache.Offer(key, {200, "application/json", "chain's table"});  // analytic only: not kept
  EXPECT_FALSE(cache.Find(key).has_value());
  cache.Offer(key, {200, "application/json", "chain's table"}, *before);
  ASSERT_TRUE(cache.Find(key, *before).has_value());
  EXPECT_EQ(cache.Find(key, *before)->body, "chain's table");
  EXPECT_FALSE(cache.Find(key).has_value()) << "not an analytic table";

  // Another connection replaces the model: the version moves, and the table is not served again.
  ExecSql(db, "UPDATE model_records SET content_hash = 'other' WHERE name = 'chain'");
  auto after = costs.CostsVersion();
  ASSERT_TRUE(after.ok());
  ASSERT_GT(*after, *before);
  EXPECT_FALSE(cache.Find(key, *after).has_value());
  EXPECT_FALSE(cache.Find(key, *before).has_value()) << "dropped once a later version was seen";
  cache.Offer(key, {200, "application/json", "read before the write"}, *before);
  cache.Offer("application/json\nanother", {200, "application/json", "newer"}, *after);
  cache.Offer(key, {200, "application/json", "read before the write"}, *before);  // stale: refused
  EXPECT_FALSE(cache.Find(key, *before).has_value());
  EXPECT_EQ(cache.Find("application/json\nanother", *after)->body, "newer");
  cache.Offer(key, {404, "application/json", "not found"}, *after);
  EXPECT_FALSE(cache.Find(key, *after).has_value());

  // An analytic table is kept whatever the version, and found without one.
  v1::GetCostTableRequest analytic;
  analytic.set_model("linear");
  analytic.set_device("a72");
  ASSERT_TRUE(costs.GetCostTable(analytic).ok());
  http.body = R"({"model":"linear","device":"a72"})";
  const std::string analytic_key = CostTableCache::Key(http);
  cache.Offer(analytic_key, {200, "application/json", "linear"}, *after);
  EXPECT_EQ(cache.Find(analytic_key)->body, "linear");
  EXPECT_EQ(cache.Find(analytic_key, *after + 5)->body, "linear");

  // A body beyond the bound is not kept.
  cache.Offer("application/json\nhuge", {200, "application/json", std::string(CostTableCache::kMaxBodyBytes, 'x')},
              *after);
  EXPECT_FALSE(cache.Find("application/json\nhuge", *after).has_value());
}

// Finished jobs beyond the bound leave memory and are read from the database: GetJob, CancelJob,
// ListJobs and the gauge still see every one.
TEST_F(ServicesTest, FinishedJobsBeyondTheBoundAreReadFromTheDatabase) {
  const std::string db = (dir_ / "jobs.db").string();
  {
    auto stored = costdb::CostDb::Open(db);
    ASSERT_TRUE(stored.ok());
    for (uint64_t id = 1; id <= 5; ++id) {
      costdb::StoredJob job;
      job.job.set_id(id);
      job.job.set_kind("regenerate");
      job.job.set_state(v1::Job::STATE_SUCCEEDED);
      job.job.set_message("done " + std::to_string(id));
      ASSERT_TRUE(stored->PutJob(job).ok());
    }
  }
  JobManager manager(StoreAt(db), "", events_, /*finished_in_memory=*/2);
  ASSERT_TRUE(manager.Open().ok());
  JobService jobs(manager, events_);
  v1::GetJobRequest get;
  get.set_id(1);
  auto first = jobs.GetJob(get);
  ASSERT_TRUE(first.ok()) << first.status().message();
  EXPECT_EQ(first->message(), "done 1");
  get.set_id(99);
  EXPECT_EQ(jobs.GetJob(get).status().code(), ErrorCode::kNotFound);
  v1::CancelJobRequest cancel;
  cancel.set_id(2);
  EXPECT_EQ(jobs.CancelJob(cancel)->state(), v1::Job::STATE_SUCCEEDED);  // finished: stays as it is

  v1::ListJobsRequest list;
  auto all = jobs.ListJobs(list);
  ASSERT_TRUE(all.ok()) << all.status().message();
  ASSERT_EQ(all->jobs_size(), 5);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(all->jobs(i).id(), static_cast<uint64_t>(i + 1));  // oldest first
  list.set_limit(3);
  all = jobs.ListJobs(list);
  ASSERT_EQ(all->jobs_size(), 3);
  EXPECT_EQ(all->jobs(0).id(), 3u);
  list.set_limit(JobService::kMaxListedJobs + 1);
  EXPECT_EQ(jobs.ListJobs(list).status().code(), ErrorCode::kInvalidArgument);

  // Jobs that finish now push older ones out of memory; every one is still there.
  for (int i = 0; i < 3; ++i) {
    auto job = manager.StartRegeneration("test");
    ASSERT_TRUE(job.ok()) << job.status().message();
    Result<v1::Job> now = manager.Get(job->id());
    for (int j = 0; j < 2000 && now.ok() && now->state() != v1::Job::STATE_SUCCEEDED; ++j) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      now = manager.Get(job->id());
    }
    ASSERT_TRUE(now.ok());
    EXPECT_EQ(now->state(), v1::Job::STATE_SUCCEEDED);
  }
  list.set_limit(0);
  all = jobs.ListJobs(list);
  ASSERT_EQ(all->jobs_size(), 8);
  EXPECT_EQ(all->jobs(7).id(), 8u);
  EXPECT_EQ(all->jobs(7).state(), v1::Job::STATE_SUCCEEDED);
  get.set_id(6);
  EXPECT_EQ(jobs.GetJob(get)->state(), v1::Job::STATE_SUCCEEDED);
  EXPECT_EQ(manager.CountByState()["STATE_SUCCEEDED"], 8);
  manager.Shutdown();
}

// A train job the daemon died in twice is poisoned, and the page files the dead run left are
// removed then, not at some later run's start; other files stay.
TEST_F(ServicesTest, APoisonedTrainJobsPageFilesAreRemovedWhenItIsPoisoned) {
  const std::string db = (dir_ / "poisoned.db").string();
  const pid_t dead = ::fork();  // a pid that no longer runs
  if (dead == 0) ::_exit(0);
  ::waitpid(dead, nullptr, 0);
  const fs::path paging = service::DefaultPagingDir(db);
  fs::create_directories(paging);
  const std::vector<fs::path> left = {
      paging / ("edgecost-train-" + std::to_string(dead) + "-3.page"),
      paging / ("edgecost-train-" + std::to_string(::getpid()) + "-4.page")};  // a restarted daemon's own pid
  for (const fs::path& file : left) std::ofstream(file) << "activations";
  std::ofstream(paging / "notes.txt") << "not a page file";
  {
    auto stored = costdb::CostDb::Open(db);
    ASSERT_TRUE(stored.ok());
    costdb::StoredJob job;
    job.job.set_id(1);
    job.job.set_kind("train");
    job.job.set_state(v1::Job::STATE_RUNNING);  // the daemon died in it, for the second time
    job.job.set_crashes(1);
    job.job.mutable_train_request()->set_model("linear");
    job.job.mutable_train_request()->set_steps(1);
    ASSERT_TRUE(stored->PutJob(job).ok());
  }
  JobManager manager(StoreAt(db), "", events_);
  ASSERT_TRUE(manager.Open().ok());
  auto poisoned = manager.Get(1);
  ASSERT_TRUE(poisoned.ok());
  EXPECT_EQ(poisoned->state(), v1::Job::STATE_FAILED);
  EXPECT_THAT(poisoned->message(), HasSubstr("poisoned"));
  for (const fs::path& file : left) EXPECT_FALSE(fs::exists(file)) << file;
  EXPECT_TRUE(fs::exists(paging / "notes.txt"));
  manager.Shutdown();
}

TEST(ProtoJson, ZeroValuesArePrintedAndUnknownFieldsNameTheValidOnes) {
  v1::TrainingNode node;  // index 0
  EXPECT_THAT(*proto::ToJson(node), HasSubstr("\"index\":0"));
  v1::GetCostTableRequest request;
  const Status unknown = proto::FromJson(R"({"model":"linear","modle":"x"})", &request);
  EXPECT_EQ(unknown.code(), ErrorCode::kInvalidArgument);
  EXPECT_THAT(unknown.message(), HasSubstr("modle"));
  EXPECT_THAT(unknown.message(), HasSubstr("GetCostTableRequest has: model, device, costSource"));
}

TEST(DaemonConfig, ValuesAreCheckedWhereTheyEnter) {
  EXPECT_EQ(*ParseSocketMode("0660"), 0660u);
  EXPECT_EQ(*ParseSocketMode("600"), 0600u);
  for (const char* bad : {"", "066O", "rw-rw----", "0999", "17777", "-1"}) {
    EXPECT_FALSE(ParseSocketMode(bad).ok()) << bad;  // a typo once meant mode 0
  }
  DaemonConfig config;
  ASSERT_TRUE(ParseTcpAddress("0.0.0.0:8080", config).ok());
  EXPECT_EQ(config.tcp_host, "0.0.0.0");
  EXPECT_EQ(config.tcp_port, 8080);
  ASSERT_TRUE(ParseTcpAddress("0", config).ok());
  EXPECT_EQ(config.tcp_port, 0);
  for (const char* bad : {"abc", "host:", "70000", "127.0.0.1:80x", "-5"}) {  // "abc" once meant a random port
    EXPECT_THAT(ParseTcpAddress(bad, config).message(), HasSubstr("0 (any free port) to 65535")) << bad;
  }

  const fs::path file = fs::temp_directory_path() / ("edgecost_config_" + std::to_string(::getpid()) + ".toml");
  for (const auto& [text, error] : std::vector<std::pair<std::string, std::string>>{
           {"[server]\nsocket_mode = \"0o660\"\n", "server.socket_mode"},
           {"[server]\ntcp_port = 80.5\n", "server.tcp_port must be a whole number"},
           {"[limits]\nmax_connections = 0\n", "limits.max_connections must be a whole number from 1"},
           {"[limits]\nread_timeout_s = -1\n", "limits.read_timeout_s must be a number of at least"},
           {"[limits]\nfinished_jobs_in_memory = -1\n", "limits.finished_jobs_in_memory must be a whole number"},
           {"[server]\nsocket = 3\n", "server.socket must be a string"},
           {"[server]\nno_such_key = 1\n", "server.no_such_key is not a key"},
           {"[nosuch]\n", "unknown section [nosuch]"}}) {
    std::ofstream(file) << text;
    DaemonConfig loaded;
    EXPECT_THAT(LoadConfigFile(file.string(), loaded).message(), HasSubstr(error)) << text;
  }
  std::ofstream(file) << "[server]\nsocket_mode = \"0600\"\ntcp_port = 9000\n[limits]\nmax_connections = 64\n"
                         "finished_jobs_in_memory = 10\n";
  DaemonConfig loaded;
  EXPECT_EQ(loaded.finished_jobs_in_memory, kDefaultFinishedJobsInMemory);
  ASSERT_TRUE(LoadConfigFile(file.string(), loaded).ok());
  EXPECT_EQ(loaded.socket_mode, 0600u);
  EXPECT_EQ(loaded.tcp_port, 9000);
  EXPECT_EQ(loaded.limits.max_connections, 64);
  EXPECT_EQ(loaded.finished_jobs_in_memory, 10u);
  fs::remove(file);
}

}  // namespace
}  // namespace edgecost::daemon
