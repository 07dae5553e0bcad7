// Regression tests for listing being cheap, against a real `edgecost serve`:
// a large stored model is listed (ListModels, GET /) from the summary stored
// when it was added, cost tables read from the database are kept only while
// nothing they depend on changed (here: another process's write), finished jobs
// beyond the bound in memory are still answered from the database, and a
// poisoned train job's page files are gone once the daemon serves.
#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "costdb/costdb.h"
#include "proto/edgecost.pb.h"
#include "proto/json.h"
#include "bench/daemon_bench.h"  // OnnxChain
#include "tests/daemon/serve_process.h"

namespace edgecost {
namespace {

namespace fs = std::filesystem;
using ::testing::EndsWith;
using ::testing::HasSubstr;
using ::testing::Not;
using namespace test_support;


// Runs `sql` on a connection of this process: another writer than the daemon.
void ExecSql(const std::string& db, const std::string& sql) {
  sqlite3* raw = nullptr;
  ASSERT_EQ(sqlite3_open(db.c_str(), &raw), SQLITE_OK);
  sqlite3_busy_timeout(raw, 5000);
  char* error = nullptr;
  EXPECT_EQ(sqlite3_exec(raw, sql.c_str(), nullptr, nullptr, &error), SQLITE_OK) << (error ? error : "");
  sqlite3_free(error);
  sqlite3_close(raw);
}

class ListingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("edgecost_listing_test_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    if (pid_ > 0) StopProcess(pid_);
    fs::remove_all(dir_);
  }
  std::string Db() const { return (dir_ / "costs.db").string(); }
  std::string Socket() const { return (dir_ / "edgecost.sock").string(); }
  void Serve(const std::vector<std::string>& more = {}) {
    std::vector<std::string> args{"--db", Db(), "serve", "--socket", Socket()};
    args.insert(args.end(), more.begin(), more.end());
    pid_ = SpawnServe(args, Socket(), "/nonexistent-sysfs", dir_ / "serve.log");
    ASSERT_TRUE(Serving(Socket())) << Shell("cat " + (dir_ / "serve.log").string());
  }
  // A call whose body is in a file (too long for a command line); returns "<body> <http status>".
  std::string CallWithFile(const std::string& method, const std::string& json) {
    const fs::path body = dir_ / "body.json";
    std::ofstream(body) << json;
    return Shell("curl -s -w ' %{http_code}' --unix-socket " + Socket() + " -H 'Content-Type: application/json' -d @" +
                 body.string() + " http://localhost/twirp/edgecost.v1." + method);
  }
  // The body of a "<body> <http status>" answer.
  static std::string Body(const std::string& answer) { return answer.substr(0, answer.rfind(' ')); }

  fs::path dir_;
  pid_t pid_ = -1;
};

TEST_F(ListingTest, AStoredChainIsListedFromItsSummaryWhateverItsBytesHoldNow) {
  Serve();
  constexpr int kNodes = 3000;
  v1::AddModelRequest add;
  add.set_name("chain");
  add.set_model(daemon::OnnxChain(kNodes));
  const std::string added = CallWithFile("CostService/AddModel", *proto::ToJson(add));
  ASSERT_THAT(added, EndsWith(" 200")) << added.substr(0, 500);
  v1::AddModelResponse response;
  ASSERT_TRUE(proto::FromJson(Body(added), &response).ok());
  const uint32_t training_nodes = response.model().training_nodes();
  ASSERT_GT(response.model().forward_nodes(), static_cast<uint32_t>(kNodes));
  // Read from the database (a stored model), so kept under the costs version.
  const std::string table = R"({"model":"chain","device":"a72"})";
  ASSERT_THAT(CallJson(Socket(), "CostService/GetCostTable", table), EndsWith(" 200"));
  ASSERT_THAT(CallJson(Socket(), "CostService/GetCostTable", table), EndsWith(" 200"));

  // Another process damages the stored bytes: listing does not read them, a cost table does.
  ExecSql(Db(), "UPDATE model_records SET bytes = x'0a01ff' WHERE name = 'chain'");
  for (int i = 0; i < 2; ++i) {
    const std::string listed = CallJson(Socket(), "CostService/ListModels", "{}");
    ASSERT_THAT(listed, EndsWith(" 200"));
    v1::ListModelsResponse models;
    ASSERT_TRUE(proto::FromJson(Body(listed), &models).ok());
    const v1::ModelInfo* chain = nullptr;
    for (const v1::ModelInfo& info : models.models()) chain = info.name() == "chain" ? &info : chain;
    ASSERT_NE(chain, nullptr);
    EXPECT_EQ(chain->error(), "");
    EXPECT_EQ(chain->training_nodes(), training_nodes);
    EXPECT_EQ(chain->forward_nodes(), response.model().forward_nodes());
  }
  const std::string page = Shell("curl -s -w ' %{http_code}' --unix-socket " + Socket() + " http://localhost/");
  EXPECT_THAT(page, EndsWith(" 200"));
  EXPECT_THAT(page, HasSubstr("<th scope=\"row\">chain</th><td>" + std::to_string(response.model().forward_nodes()) +
                              "</td><td>" + std::to_string(training_nodes) + "</td>"));
  // The kept table is not served after the write: it is read again, and the bytes no longer import.
  EXPECT_THAT(CallJson(Socket(), "CostService/GetCostTable", table), Not(EndsWith(" 200")));
  EXPECT_THAT(Shell("curl -s --unix-socket " + Socket() + " http://localhost/healthz"), "ok\n");
}

// A measured table is kept while the database's costs stay, and read again once a profile (here
// another process) stores an op cost for the fingerprint.
TEST_F(ListingTest, AMeasuredTableIsAnsweredAgainAfterNewOpCostsAreStored) {
  Serve();
  std::string fingerprint;
  {
    auto db = costdb::CostDb::Open(Db());
    ASSERT_TRUE(db.ok());
    auto devices = db->ListDevices();
    ASSERT_TRUE(devices.ok());
    ASSERT_EQ(devices->size(), 1u);  // this device, recorded at start
    const v1::Device device = (*devices)[0];
    fingerprint = device.fingerprint().hash();
    const std::string preset = CallJson(Socket(), "CostService/GetCostTable", R"({"model":"linear","device":"a72"})");
    ASSERT_THAT(preset, EndsWith(" 200"));
    v1::CostTable measured;
    ASSERT_TRUE(proto::FromJson(Body(preset), &measured).ok());
    measured.set_device(device.name());
    measured.set_fingerprint_hash(fingerprint);
    measured.set_cost_source("measured");
    measured.set_threads(1);
    measured.clear_memory();
    for (v1::NodeCost& cost : *measured.mutable_costs()) {
      cost.set_op_key("op-" + std::to_string(cost.node()));
      v1::OpCost op;
      op.mutable_signature()->set_key(cost.op_key());
      op.mutable_runtime()->set_median_s(cost.runtime_s());
      ASSERT_TRUE(db->PutOpCost(fingerprint, 0, op).ok());
    }
    ASSERT_TRUE(db->PutCostTable(measured).ok());
  }
  const std::string request = R"({"model":"linear","device":"this","threads":1})";
  const std::string first = CallJson(Socket(), "CostService/GetCostTable", request);
  ASSERT_THAT(first, EndsWith(" 200"));
  EXPECT_EQ(CallJson(Socket(), "CostService/GetCostTable", request), first);
  EXPECT_THAT(first, Not(HasSubstr("\"medianS\":0.123")));

  // A profile measures op-0 again: the answer carries the new runtime statistics.
  {
    auto db = costdb::CostDb::Open(Db());
    ASSERT_TRUE(db.ok());
    v1::OpCost op;
    op.mutable_signature()->set_key("op-0");
    op.mutable_runtime()->set_median_s(0.123);
    ASSERT_TRUE(db->PutOpCost(fingerprint, 0, op).ok());
  }
  const std::string second = CallJson(Socket(), "CostService/GetCostTable", request);
  ASSERT_THAT(second, EndsWith(" 200"));
  EXPECT_THAT(second, HasSubstr("\"medianS\":0.123"));
}

// Jobs beyond the bound in memory (limits.finished_jobs_in_memory) are answered from the database.
TEST_F(ListingTest, FinishedJobsBeyondTheBoundAreAnsweredFromTheDatabase) {
  {
    auto db = costdb::CostDb::Open(Db());
    ASSERT_TRUE(db.ok());
    for (uint64_t id = 1; id <= 5; ++id) {
      costdb::StoredJob job;
      job.job.set_id(id);
      job.job.set_kind("regenerate");
      job.job.set_state(v1::Job::STATE_SUCCEEDED);
      job.job.set_message("regenerated " + std::to_string(id));
      ASSERT_TRUE(db->PutJob(job).ok());
    }
  }
  std::ofstream(dir_ / "edgecost.toml") << "[limits]\nfinished_jobs_in_memory = 2\n";
  Serve({"--config", (dir_ / "edgecost.toml").string()});
  EXPECT_THAT(CallJson(Socket(), "JobService/GetJob", R"({"id":"1"})"), HasSubstr("regenerated 1"));
  const std::string listed = CallJson(Socket(), "JobService/ListJobs", "{}");
  ASSERT_THAT(listed, EndsWith(" 200"));
  v1::ListJobsResponse jobs;
  ASSERT_TRUE(proto::FromJson(Body(listed), &jobs).ok());
  ASSERT_EQ(jobs.jobs_size(), 5);
  EXPECT_EQ(jobs.jobs(0).message(), "regenerated 1");
  EXPECT_THAT(Shell("curl -s --unix-socket " + Socket() + " http://localhost/metrics"),
              HasSubstr("edgecost_jobs{state=\"STATE_SUCCEEDED\"} 5"));
  EXPECT_THAT(Shell("curl -s --unix-socket " + Socket() + " http://localhost/"), HasSubstr("regenerated 1"));
}

// A train job the daemon died in twice: its page files are removed as it is poisoned.
TEST_F(ListingTest, APoisonedTrainJobLeavesNoPageFiles) {
  const pid_t dead = ::fork();  // a pid that no longer runs, as a killed daemon's
  if (dead == 0) ::_exit(0);
  ::waitpid(dead, nullptr, 0);
  const fs::path page = dir_ / "paging" / ("edgecost-train-" + std::to_string(dead) + "-7.page");
  fs::create_directories(page.parent_path());
  std::ofstream(page) << "activations";
  {
    auto db = costdb::CostDb::Open(Db());
    ASSERT_TRUE(db.ok());
    costdb::StoredJob job;
    job.job.set_id(1);
    job.job.set_kind("train");
    job.job.set_state(v1::Job::STATE_RUNNING);
    job.job.set_crashes(1);
    job.job.mutable_train_request()->set_model("linear");
    job.job.mutable_train_request()->set_steps(1);
    ASSERT_TRUE(db->PutJob(job).ok());
  }
  Serve();
  EXPECT_THAT(CallJson(Socket(), "JobService/GetJob", R"({"id":"1"})"), HasSubstr("poisoned"));
  EXPECT_FALSE(fs::exists(page));
}

}  // namespace
}  // namespace edgecost
