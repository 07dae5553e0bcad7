// Regression tests for attack passes that took the agent down with single
// requests, and for round two's (hostile ONNX files, numbers no device
// measures, imports). Each sends its reproduction to a real `edgecost serve`,
// then checks that the daemon still answers /healthz and a normal query, and
// that what it had stored is still there.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>
#include <iterator>
#include <fstream>
#include <future>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sqlite3.h>

#include "costdb/costdb.h"
#include "daemon/client.h"
#include "daemon/jobs.h"
#include "graph/cost_source.h"
#include "graph/resolve.h"
#include "profiler/profile.h"
#include "proto/edgecost.pb.h"
#include "proto/json.h"
#include "tests/daemon/serve_process.h"
#include "tests/hostile_onnx.h"
#include "tests/shell.h"

namespace edgecost {
namespace {

namespace fs = std::filesystem;
using ::testing::AllOf;
using ::testing::EndsWith;
using ::testing::HasSubstr;
using ::testing::Not;
using namespace test_support;
using testing::HostileOnnx;
using testing::kHostileOnnxModels;

const std::string kLongName(256, 'A');
// The methods that take a model, and the other fields each needs.
const std::vector<std::pair<std::string, std::string>> kModelMethods = {
    {"CostService/GetCostTable", R"(,"device":"a72")"},
    {"SolverService/Solve", R"(,"device":"a72","activationBudgetBytes":"4000")"},
    {"JobService/StartProfile", ""}};

class AttackTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = fs::temp_directory_path() / ("edgecost_attack_test_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    pid_ =
        SpawnServe({"--db", Db(), "serve", "--socket", Socket()}, Socket(), "/nonexistent-sysfs", dir_ / "serve.log");
    const std::string stored =
        CallJson(Socket(), "SolverService/Solve", R"({"model":"linear","device":"a72","activationBudgetBytes":"4000"})");
    ASSERT_THAT(stored, EndsWith(" 200"));
    baseline_id_ = stored.substr(stored.find("\"id\":\"") + 6);
    baseline_id_ = baseline_id_.substr(0, baseline_id_.find('"'));
    std::ifstream file("tests/graph/data/mlp.onnx", std::ios::binary);
    ASSERT_TRUE(AddModel("kept-mlp", std::string(std::istreambuf_iterator<char>(file), {})).ok());
  }
  static void TearDownTestSuite() {
    StopProcess(pid_);
    fs::remove_all(dir_);
  }
  static std::string Socket() { return (dir_ / "edgecost.sock").string(); }
  static std::string Db() { return (dir_ / "costs.db").string(); }

  static Status AddModel(const std::string& name, const std::string& bytes) {
    v1::AddModelRequest add;
    add.set_name(name);
    add.set_model(bytes);
    v1::AddModelResponse response;
    return daemon::CallRemote("unix:" + Socket(), "CostService/AddModel", add, response);
  }

  // The daemon lives, answers a normal query, and still has what it stored before the attack.
  static void ExpectStillServing() {
    ASSERT_EQ(::waitpid(pid_, nullptr, WNOHANG), 0) << "the daemon died; its log:\n"
                                                    << Shell("cat " + (dir_ / "serve.log").string());
    EXPECT_TRUE(Serving(Socket()));
    EXPECT_THAT(CallJson(Socket(), "CostService/GetCostTable", R"({"model":"linear","device":"a72"})"),
                EndsWith(" 200"));
    EXPECT_THAT(CallJson(Socket(), "SolverService/GetSchedule", R"({"id":")" + baseline_id_ + R"("})"),
                EndsWith(" 200"));
    v1::ListModelsResponse models;
    ASSERT_TRUE(daemon::CallRemote("unix:" + Socket(), "CostService/ListModels", v1::ListModelsRequest(), models).ok());
    EXPECT_TRUE(std::any_of(models.models().begin(), models.models().end(),
                            [](const v1::ModelInfo& m) { return m.name() == "kept-mlp" && m.stored(); }));
    for (const v1::ModelInfo& m : models.models()) EXPECT_THAT(m.name(), Not(HasSubstr("hostile"))) << "stored";
    EXPECT_THAT(CallJson(Socket(), "CostService/GetCostTable", R"({"model":"kept-mlp","device":"a72"})"),
                EndsWith(" 200"));
  }

  static fs::path dir_;
  static pid_t pid_;
  static std::string baseline_id_;
};

fs::path AttackTest::dir_;
pid_t AttackTest::pid_ = 0;
std::string AttackTest::baseline_id_;

TEST_F(AttackTest, ALongModelNameIsRefusedByEveryMethod) {
  for (const auto& [method, fields] : kModelMethods) {
    const std::string answer = CallJson(Socket(), method, R"({"model":")" + kLongName + "\"" + fields + "}");
    EXPECT_THAT(answer, HasSubstr("at most 128 characters")) << method;
    EXPECT_THAT(answer, EndsWith(" 400")) << method;
  }
  EXPECT_THAT(CallJson(Socket(), "JobService/ListJobs", "{}"), Not(HasSubstr(kLongName)));
  ExpectStillServing();
}

TEST_F(AttackTest, ASolveNamingAGraphFileIsRefused) {
  const std::string answer = CallJson(
      Socket(), "SolverService/Solve",
      R"({"model":"linear","device":"a72","activationBudgetBytes":"100000","runtimeBudgetMultiple":2,"graphFile":"foo"})");
  EXPECT_THAT(answer, HasSubstr("graph_file is read by the local CLI only"));
  EXPECT_THAT(answer, EndsWith(" 400"));
  ExpectStillServing();
}

// One rule for every method: a model is a name, looked up and never opened.
TEST_F(AttackTest, ModelsThatAreFilesAreNeverOpened) {
  for (const char* model : {"/etc/shadow", "/dev/zero", "../costs.db", "costs.db/", "graph.json", "model.onnx",
                            ".hidden", "with space", "nul\\u0000byte"}) {
    for (const auto& [method, fields] : kModelMethods) {
      const std::string answer = CallJson(Socket(), method, std::string(R"({"model":")") + model + "\"" + fields + "}");
      EXPECT_THAT(answer, EndsWith(" 400")) << method << " " << model;
      EXPECT_THAT(answer, Not(HasSubstr("last read"))) << method << " " << model;
    }
  }
  EXPECT_THAT(CallJson(Socket(), "JobService/ListJobs", "{}"), Not(HasSubstr("shadow")));
  ExpectStillServing();
}

TEST_F(AttackTest, NumbersOutOfRangeAreRefused) {
  EXPECT_THAT(CallJson(Socket(), "JobService/StartProfile", R"({"model":"linear","threads":4000000000})"),
              EndsWith(" 400"));
  EXPECT_THAT(CallJson(Socket(), "JobService/StartProfile", R"({"model":"no_such_model"})"), EndsWith(" 404"));
  EXPECT_THAT(
      CallJson(Socket(), "CostService/GetCostTable", R"({"model":"resnet50","device":"a72","batchSize":4000000000})"),
      EndsWith(" 400"));
  EXPECT_THAT(CallJson(Socket(), "SolverService/GetSchedule", R"({"id":"18446744073709551615"})"), EndsWith(" 404"));
  EXPECT_THAT(CallJson(Socket(), "JobService/WatchEvents", R"({"afterSequence":"18446744073709551615","waitS":-1})"),
              EndsWith(" 200"));
  ExpectStillServing();
}

TEST_F(AttackTest, ASecondDaemonOnTheSameDatabaseIsRefused) {
  const std::string second = Shell(std::string(EDGECOST_BIN) + " --db " + Db() + " serve --socket " +
                                   (dir_ / "second.sock").string() + " 2>&1; echo exit=$?");
  EXPECT_THAT(second, HasSubstr("another edgecost daemon (pid " + std::to_string(pid_) + ")"));
  EXPECT_THAT(second, EndsWith("exit=1\n"));
  ExpectStillServing();
}

// A model name resolves to the zoo even when a file of that name is in the daemon's working directory.
TEST_F(AttackTest, AFileNamedLikeAModelIsNotRead) {
  std::ofstream("linear") << "not a graph\n";
  EXPECT_THAT(CallJson(Socket(), "CostService/GetCostTable", R"({"model":"linear","device":"a72"})"), EndsWith(" 200"));
  fs::remove("linear");
  ExpectStillServing();
}

// --- Round two: ONNX files that crash ONNX's shape inference, over AddModel and the CLI ---

TEST_F(AttackTest, TheReproductionsAreRefusedAndTheDaemonLives) {
  const Status gathernd = AddModel("hostile-gathernd", HostileOnnx("hostile_gathernd"));
  EXPECT_EQ(gathernd.code(), ErrorCode::kInvalidArgument) << gathernd.message();
  EXPECT_THAT(gathernd.message(), HasSubstr("GatherND: node 0"));
  ExpectStillServing();
  const Status gemm = AddModel("hostile-gemm", HostileOnnx("hostile_gemm_opset6"));
  EXPECT_EQ(gemm.code(), ErrorCode::kInvalidArgument) << gemm.message();
  EXPECT_THAT(gemm.message(), HasSubstr("uses opset 6; the importer reads opsets 9 to 17"));
  ExpectStillServing();
}

// Past the op and opset checks, ONNX's inference still crashes on this one: in the import's child.
TEST_F(AttackTest, ACrashInTheImporterIsOneErrorForTheRequest) {
  for (int attempt = 0; attempt < 3; ++attempt) {
    const Status s = AddModel("hostile-maxpool", HostileOnnx("hostile_maxpool_stride0"));
    EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument) << s.message();
    EXPECT_THAT(s.message(), HasSubstr("the ONNX importer crashed (SIGFPE) on this file"));
    ExpectStillServing();
  }
  // The same over JSON, as curl sends it.
  const fs::path file = dir_ / "maxpool.onnx";
  std::ofstream(file, std::ios::binary) << HostileOnnx("hostile_maxpool_stride0");
  const std::string json =
      CallJson(Socket(), "CostService/AddModel",
               R"({"name":"hostile-maxpool","model":")" + Shell("base64 -w0 " + file.string()) + R"("})");
  EXPECT_THAT(json, HasSubstr("invalid_argument"));
  ExpectStillServing();
}

// `edgecost models add` and `edgecost graph` run the same import: exit 1 with the error.
TEST_F(AttackTest, TheCliExitsWithTheError) {
  for (const std::string& name : kHostileOnnxModels) {
    const fs::path file = dir_ / (name + ".onnx");
    std::ofstream(file, std::ios::binary) << HostileOnnx(name);
    const std::string db = "EDGECOST_DB='" + (dir_ / "cli.db").string() + "' ";
    const testing::CommandResult add =
        testing::RunShell(db + EDGECOST_BIN + " models add " + file.string() + " --name " + name);
    EXPECT_EQ(add.exit_code, 1) << name << ": " << add.output;
    EXPECT_THAT(add.output, HasSubstr("model '" + name + "'")) << name;
    const testing::CommandResult graph = testing::RunShell(db + EDGECOST_BIN + " graph " + file.string());
    EXPECT_EQ(graph.exit_code, 1) << name << ": " << graph.output;
    EXPECT_THAT(graph.output, HasSubstr(file.string())) << name;
    if (name == "hostile_maxpool_stride0") {
      EXPECT_THAT(add.output, HasSubstr(": the ONNX importer crashed (SIGFPE) on this file\n"));
      EXPECT_THAT(graph.output, HasSubstr(": the ONNX importer crashed (SIGFPE) on this file\n"));
    }
  }
}

// --- Round two: numbers no device measures, and imports ---

// An export of the measured device "board": linear's a72 costs as if measured there.
std::string BoardExportFile(const fs::path& dir, const std::string& name, const std::string& device,
                            const std::function<void(v1::CostExport&)>& poison = {}) {
  v1::CostExport exported;
  exported.mutable_device()->set_name(device);
  exported.mutable_device()->set_kind(v1::Device::KIND_MEASURED);
  exported.mutable_device()->mutable_fingerprint()->set_hash("fp-" + device);
  graph::GraphSpec spec;
  spec.model_or_file = "linear";
  auto table = graph::LoadCostTable(spec, "a72", graph::kPoetFlopsSource);
  EXPECT_TRUE(table.ok()) << table.status().message();
  table->set_device(device);
  table->set_fingerprint_hash("fp-" + device);
  table->set_cost_source("measured");
  *exported.add_cost_tables() = *table;
  *exported.add_cost_tables() = *table;  // a second model's, as far as the import can tell
  exported.mutable_cost_tables(1)->mutable_graph()->set_model("linear_copy");
  if (poison) poison(exported);
  const std::string path = (dir / name).string();
  std::ofstream(path) << *proto::ToJson(exported);
  return path;
}

// A RAM budget of 2^63 B or more once wrapped to a negative budget, and was stored.
TEST_F(AttackTest, ABudgetAbove2To62IsRefusedAndNothingStored) {
  const std::string before = CallJson(Socket(), "SolverService/ListSchedules", "{}");
  for (const char* budget : {"9223372036854775808", "18446744073709551615", "4611686018427387905"}) {
    const std::string answer =
        CallJson(Socket(), "SolverService/Solve",
                 std::string(R"({"model":"linear","device":"a72","runtimeBudgetMultiple":2,"activationBudgetBytes":")") +
                     budget + "\"}");
    EXPECT_THAT(answer, HasSubstr("above the largest budget")) << budget;
    EXPECT_THAT(answer, EndsWith(" 400")) << budget;
  }
  EXPECT_EQ(CallJson(Socket(), "SolverService/ListSchedules", "{}"), before);
  ExpectStillServing();
}

// A truncated export, one with a NaN or a negative cost in its second table,
// and one named like this host: each refused whole, nothing of it stored.
TEST_F(AttackTest, ImportsAreCheckedWholeAndAllOrNothing) {
  const std::string cli = std::string(EDGECOST_BIN) + " --db " + Db() + " ";
  const std::string devices = CallJson(Socket(), "CostService/ListDevices", "{}");
  const std::string good = BoardExportFile(dir_, "good.json", "board");
  std::ifstream in(good);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::ofstream(dir_ / "truncated.json") << text.substr(0, text.size() * 3 / 4);
  const std::vector<std::pair<std::string, std::string>> refused = {
      {(dir_ / "truncated.json").string(), "is not an edgecost.v1.CostExport"},
      {BoardExportFile(dir_, "nan.json", "board",
                       [](v1::CostExport& e) { e.mutable_cost_tables(1)->mutable_costs(2)->set_runtime_s(NAN); }),
       "'runtime_s' is nan"},
      {BoardExportFile(dir_, "negative.json", "board",
                       [](v1::CostExport& e) { e.mutable_cost_tables(1)->mutable_costs(2)->set_compute_j(-5); }),
       "'compute_j' is -5"},
      {BoardExportFile(dir_, "host.json", profiler::ThisDeviceName()), "has the name of this host"},
  };
  for (const auto& [file, why] : refused) {
    EXPECT_THAT(Shell(cli + "db import " + file + " 2>&1; echo exit=$?"), AllOf(HasSubstr(why), EndsWith("exit=1\n")))
        << file;
    EXPECT_EQ(CallJson(Socket(), "CostService/ListDevices", "{}"), devices) << file;
  }
  ExpectStillServing();
}

// One negative cost in a stored table (slipped past the checks, as an older
// edgecost could store it) made a solve run for 11 minutes and SIGTERM wait
// for it. Now the table is refused at once, and the daemon stops when told.
TEST(NegativeCosts, ASolveOnThemEndsAndTheDaemonStillStops) {
  const fs::path dir = fs::temp_directory_path() / ("edgecost_negative_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string db = (dir / "costs.db").string(), socket = (dir / "edgecost.sock").string();
  ASSERT_THAT(Shell(std::string(EDGECOST_BIN) + " --db " + db + " db import " +
                    BoardExportFile(dir, "board.json", "board") + " 2>&1; echo exit=$?"),
              EndsWith("exit=0\n"));
  sqlite3* raw = nullptr;
  ASSERT_EQ(sqlite3_open(db.c_str(), &raw), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(raw, "UPDATE node_costs SET compute_j = -5 WHERE node = 3", nullptr, nullptr, nullptr),
            SQLITE_OK);
  sqlite3_close(raw);
  const pid_t pid = SpawnServe({"--db", db, "serve", "--socket", socket}, socket, "/nonexistent-sysfs", dir / "serve.log");
  for (const char* strategy : {"optimal", "greedy"}) {
    const std::string answer = CallJson(socket, "SolverService/Solve",
                                        std::string(R"({"model":"linear","device":"board","activationBudgetBytes":"4000",)") +
                                            R"("runtimeBudgetMultiple":2,"timeLimitS":5,"strategy":")" + strategy +
                                            "\"}");
    EXPECT_THAT(answer, HasSubstr("'compute_j' is -5")) << strategy;
    EXPECT_THAT(answer, EndsWith(" 400")) << strategy;
  }
  EXPECT_TRUE(Serving(socket));
  const int status = StopProcess(pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << Shell("cat " + (dir / "serve.log").string());
  fs::remove_all(dir);
}

// Jobs stored by an older daemon, or left running by a crash, are loaded
// without running what today's rules refuse or what crashed the daemon twice.
TEST(JobsAtStart, RefusedAndPoisonedJobsFailWithTheirReasonAndAnEvent) {
  const fs::path dir = fs::temp_directory_path() / ("edgecost_jobs_start_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  const std::string db_path = (dir / "costs.db").string();
  {
    auto db = costdb::CostDb::Open(db_path);
    ASSERT_TRUE(db.ok()) << db.status().message();
    costdb::StoredJob refused;  // queued by a daemon that let any name through
    refused.job.set_id(1);
    refused.job.set_kind("profile");
    refused.job.set_state(v1::Job::STATE_QUEUED);
    refused.profile_request.set_model(kLongName);
    costdb::StoredJob poisoned;  // running when the daemon died, for the second time
    poisoned.job.set_id(2);
    poisoned.job.set_kind("regenerate");
    poisoned.job.set_state(v1::Job::STATE_RUNNING);
    poisoned.job.set_crashes(1);
    costdb::StoredJob resumed;  // running when the daemon died, the first time
    resumed.job.set_id(3);
    resumed.job.set_kind("regenerate");
    resumed.job.set_state(v1::Job::STATE_RUNNING);
    for (const auto& job : {refused, poisoned, resumed}) ASSERT_TRUE(db->PutJob(job).ok());
  }
  {
    daemon::EventLog events;
    costdb::Store store(db_path, costdb::OpenMode::kReadWrite);
    daemon::JobManager jobs(store, "", events);
    ASSERT_TRUE(jobs.Open().ok());
    const auto first = jobs.Get(1), second = jobs.Get(2);
    EXPECT_EQ(first->state(), v1::Job::STATE_FAILED);
    EXPECT_THAT(first->message(), HasSubstr("not run: a model name has at most 128 characters"));
    EXPECT_EQ(second->state(), v1::Job::STATE_FAILED);
    EXPECT_EQ(second->crashes(), 2u);
    EXPECT_THAT(second->message(), HasSubstr("poisoned"));
    std::promise<std::vector<v1::Event>> answered;
    events.Watch(0, 0, [&](std::vector<v1::Event> e) { answered.set_value(std::move(e)); });
    const std::vector<v1::Event> seen = answered.get_future().get();
    EXPECT_TRUE(std::any_of(seen.begin(), seen.end(), [](const v1::Event& e) {
      return e.job().id() == 2 && e.message().find("poisoned") != std::string::npos;
    }));
    const auto third = PollUntil([&] { return v1::Job::State_Name(jobs.Get(3)->state()); },
                                 [](const std::string& state) { return state == "STATE_SUCCEEDED"; });
    EXPECT_EQ(third, "STATE_SUCCEEDED");
    EXPECT_EQ(jobs.Get(3)->crashes(), 1u);
  }
  auto db = costdb::CostDb::Open(db_path);  // what the next start will see
  auto stored = db->ListJobs();
  ASSERT_TRUE(stored.ok());
  ASSERT_EQ(stored->size(), 3u);
  EXPECT_EQ((*stored)[1].job.state(), v1::Job::STATE_FAILED);
  fs::remove_all(dir);
}

// The whole loop with a real daemon: a profile killed twice with kill -9 is
// not run a third time, the daemon serves, and `edgecost jobs` clears it once
// the daemon is stopped (and refuses while it serves).
TEST(CrashLoopGuard, AJobThatKilledTheDaemonTwiceIsPoisoned) {
  const fs::path dir = fs::temp_directory_path() / ("edgecost_crash_loop_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string db = (dir / "costs.db").string(), socket = (dir / "edgecost.sock").string();
  const std::string cli = std::string(EDGECOST_BIN) + " --db " + db + " ";
  auto serve = [&] {
    return SpawnServe({"--db", db, "serve", "--socket", socket}, socket, "/nonexistent-sysfs", dir / "serve.log");
  };
  auto job_state = [&] { return CallJson(socket, "JobService/GetJob", R"({"id":"1"})"); };
  auto wait_running = [&] {
    return PollUntil(job_state, [](const std::string& a) { return a.find("STATE_RUNNING") != std::string::npos; });
  };

  pid_t pid = serve();
  ASSERT_THAT(CallJson(socket, "JobService/StartProfile", R"({"model":"resnet18_cifar","threads":1,"force":true})"),
              EndsWith(" 200"));
  ASSERT_THAT(wait_running(), HasSubstr("STATE_RUNNING"));
  StopProcess(pid, SIGKILL);
  pid = serve();  // the first crash: run again
  ASSERT_THAT(wait_running(), HasSubstr("\"crashes\":1"));
  StopProcess(pid, SIGKILL);
  pid = serve();  // the second: poisoned
  const std::string poisoned = job_state();
  EXPECT_THAT(poisoned, HasSubstr("STATE_FAILED"));
  EXPECT_THAT(poisoned, HasSubstr("poisoned"));
  EXPECT_THAT(CallJson(socket, "JobService/WatchEvents", "{}"), HasSubstr("poisoned"));
  EXPECT_THAT(CallJson(socket, "CostService/GetCostTable", R"({"model":"linear","device":"a72"})"), EndsWith(" 200"));

  EXPECT_THAT(Shell(cli + "jobs forget 1 2>&1; echo exit=$?"), HasSubstr("a daemon (pid " + std::to_string(pid) + ")"));
  EXPECT_THAT(Shell(std::string(EDGECOST_BIN) + " --remote unix:" + socket + " jobs"), HasSubstr("poisoned"));
  StopProcess(pid);
  EXPECT_THAT(Shell(cli + "jobs list"), HasSubstr("failed"));
  EXPECT_THAT(Shell(cli + "jobs forget 1; echo exit=$?"), HasSubstr("1 job forgotten\nexit=0"));
  EXPECT_THAT(Shell(cli + "jobs"), HasSubstr("no jobs"));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace edgecost
