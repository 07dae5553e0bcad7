// `edgecost serve` as users run it: a real process on a temporary Unix socket
// and a loopback port, called with curl, in JSON and protobuf.
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <string>
#include <thread>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "proto/edgecost.pb.h"
#include "tests/daemon/serve_process.h"

namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using namespace edgecost::test_support;

class DaemonTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = fs::temp_directory_path() / ("edgecost_daemon_test_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    std::ofstream(dir_ / "token") << "0123456789abcdef0123456789abcdef\n";
    port_ = 20000 + ::getpid() % 20000;
    WriteCpus("0-1");
    StartDaemon();
  }

  // Starts `edgecost serve` on the suite's socket, port and database, and waits until it answers.
  static void StartDaemon() {
    pid_ = SpawnServe({"--db", (dir_ / "costs.db").string(), "serve", "--socket", Socket(), "--tcp",
                       "127.0.0.1:" + std::to_string(port_), "--token-file", (dir_ / "token").string()},
                      Socket(), dir_ / "sys", dir_ / "serve.log");
  }

  // Polls GetJob until `done` holds for its answer.
  static std::string WaitForJob(const std::string& id, const std::function<bool(const std::string&)>& done) {
    return PollUntil([&] { return Call("JobService/GetJob", "{\"id\":\"" + id + "\"}"); }, done);
  }

  static void TearDownTestSuite() {
    StopProcess(pid_);
    fs::remove_all(dir_);
  }

  // The fake tree's online CPUs: part of the fingerprint.
  static void WriteCpus(const std::string& list) {
    fs::create_directories(dir_ / "sys/devices/system/cpu");
    std::ofstream(dir_ / "sys/devices/system/cpu/online") << list << "\n";
  }

  static std::string Socket() { return (dir_ / "edgecost.sock").string(); }

  static std::string Call(const std::string& method, const std::string& json) {
    return CallJson(Socket(), method, json);
  }

  static fs::path dir_;
  static int port_;
  static pid_t pid_;
};

fs::path DaemonTest::dir_;
int DaemonTest::port_ = 0;
pid_t DaemonTest::pid_ = 0;

TEST_F(DaemonTest, CostTableInJsonAndProtobuf) {
  const std::string json = Call("CostService/GetCostTable", R"({"model":"resnet18_cifar","device":"a72"})");
  EXPECT_THAT(json, HasSubstr("poet-flops"));
  EXPECT_THAT(json, ::testing::EndsWith(" 200"));

  edgecost::v1::GetCostTableRequest request;
  request.set_model("resnet18_cifar");
  request.set_device("a72");
  std::ofstream(dir_ / "request.bin", std::ios::binary) << request.SerializeAsString();
  Shell("curl -s --unix-socket " + Socket() + " -H 'Content-Type: application/protobuf' --data-binary @" +
        (dir_ / "request.bin").string() + " -o " + (dir_ / "table.bin").string() +
        " http://localhost/twirp/edgecost.v1.CostService/GetCostTable");
  std::ifstream in(dir_ / "table.bin", std::ios::binary);
  edgecost::v1::CostTable table;
  ASSERT_TRUE(table.ParseFromIstream(&in));
  EXPECT_EQ(table.costs_size(), 151);  // the exact derivation, the default
}

TEST_F(DaemonTest, ErrorsAreTwirpErrorsAndTheDaemonKeepsServing) {
  EXPECT_THAT(Call("CostService/NoSuchMethod", "{}"), HasSubstr("bad_route"));
  EXPECT_THAT(Call("CostService/GetCostTable", "{not json"), HasSubstr("malformed"));
  EXPECT_THAT(Call("CostService/GetDevice", "{}"), HasSubstr("invalid_argument"));
  EXPECT_THAT(Call("CostService/GetCostTable", R"({"model":"/etc/passwd.json"})"),
              HasSubstr("is a file name: name a model"));
  EXPECT_THAT(Call("SolverService/Solve", R"({"model":"resnet18_cifar","device":"a72"})"),
              HasSubstr("a budget is required"));
  // Found by the libFuzzer run: NaN decodes from JSON ("NaN") and protobuf alike.
  EXPECT_THAT(Call("SolverService/Solve",
                   R"({"model":"linear","device":"a72","activationBudgetBytes":"4000","runtimeBudgetMultiple":"NaN"})"),
              HasSubstr("must be a positive number"));
  EXPECT_THAT(
      Call("SolverService/Solve", R"({"model":"linear","device":"a72","activationBudgetBytes":"4000","threads":100000})"),
      HasSubstr("threads is at most"));
  // TCP needs the token.
  const std::string url = "http://127.0.0.1:" + std::to_string(port_) + "/twirp/edgecost.v1.CostService/ListModels";
  EXPECT_THAT(Shell("curl -s -H 'Content-Type: application/json' -d '{}' " + url), HasSubstr("unauthenticated"));
  EXPECT_THAT(Shell("curl -s -H 'Content-Type: application/json' -H 'Authorization: Bearer "
                    "0123456789abcdef0123456789abcdef' -d '{}' " +
                    url),
              HasSubstr("resnet18_cifar"));
  EXPECT_EQ(Shell("curl -s --unix-socket " + Socket() + " http://localhost/healthz"), "ok\n");
}

TEST_F(DaemonTest, SolveStoresTheScheduleForLater) {
  const std::string solved =
      Call("SolverService/Solve",
           R"({"model":"resnet18_cifar","device":"a72","derivation":"poet","activationBudgetBytes":"3000000",)"
           R"("runtimeBudgetMultiple":7.6})");
  EXPECT_THAT(solved, HasSubstr("STATUS_OPTIMAL"));
  EXPECT_THAT(solved, HasSubstr("7.88951"));
  EXPECT_THAT(Call("SolverService/ListSchedules", R"({"model":"resnet18_cifar"})"), HasSubstr("STATUS_OPTIMAL"));
  EXPECT_THAT(Call("SolverService/GetSchedule", R"({"id":"1"})"), HasSubstr("\"stages\""));
  EXPECT_THAT(Call("SolverService/GetSchedule", R"({"id":"99"})"), HasSubstr("not_found"));
  const std::string metrics = Shell("curl -s --unix-socket " + Socket() + " http://localhost/metrics");
  EXPECT_THAT(metrics, HasSubstr("edgecost_requests_total{route=\"/twirp/edgecost.v1.SolverService/Solve\"}"));
  EXPECT_THAT(metrics, HasSubstr("# TYPE edgecost_probe_power_watts gauge"));
}

TEST_F(DaemonTest, ProfileJobRunsOffTheIoThreadsAndReportsEvents) {
  const std::string started = Call("JobService/StartProfile", R"({"model":"linear","threads":1,"accept_noisy":true})");
  ASSERT_THAT(started, HasSubstr("STATE_QUEUED"));
  // Queries stay answered while the job runs.
  EXPECT_THAT(Call("CostService/ListModels", "{}"), HasSubstr("resnet18_cifar"));
  std::string job;
  for (int i = 0; i < 600; ++i) {  // a bound, not a timing assertion: linear takes seconds
    job = Call("JobService/GetJob", R"({"id":"1"})");
    if (job.find("STATE_SUCCEEDED") != std::string::npos || job.find("STATE_FAILED") != std::string::npos) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_THAT(job, HasSubstr("STATE_SUCCEEDED"));
  EXPECT_THAT(Call("JobService/ListJobs", "{}"), HasSubstr("profile"));
  const std::string events = Call("JobService/WatchEvents", R"({"afterSequence":"0","waitS":1})");
  EXPECT_THAT(events, HasSubstr("STATE_RUNNING"));
  EXPECT_THAT(events, HasSubstr("STATE_SUCCEEDED"));
  EXPECT_THAT(Call("CostService/GetCostTable", R"({"model":"linear","device":"this"})"), HasSubstr("measured"));
  EXPECT_THAT(Call("JobService/CancelJob", R"({"id":"42"})"), HasSubstr("not_found"));
  EXPECT_THAT(Call("JobService/StartProfile", "{}"), HasSubstr("model is required"));
}

TEST_F(DaemonTest, ChangedHardwareAndSighupRegenerateStoredSchedules) {
  Call("SolverService/Solve", R"({"model":"linear","device":"a72","activationBudgetBytes":"4000","runtimeBudgetMultiple":2})");
  // The sequence of the newest event in a WatchEvents answer: `"sequence":"N"`.
  auto last_sequence = [](const std::string& answer, const std::string& otherwise) {
    const size_t at = answer.rfind("\"sequence\":\"");
    return at == std::string::npos ? otherwise : answer.substr(at + 12, answer.find('"', at + 12) - at - 12);
  };
  std::string after = last_sequence(Call("JobService/WatchEvents", R"({"afterSequence":"0"})"), "0");

  WriteCpus("0");
  ::kill(pid_, SIGHUP);
  std::string events;  // everything after the SIGHUP, followed as a client would (bounded)
  for (int i = 0; i < 600 && events.find("schedules regenerated") == std::string::npos; ++i) {
    const std::string answer = Call("JobService/WatchEvents", "{\"afterSequence\":\"" + after + "\",\"waitS\":1}");
    events += answer;
    after = last_sequence(answer, after);
  }
  EXPECT_THAT(events, HasSubstr("hardware of"));
  EXPECT_THAT(events, HasSubstr("queued: profile linear"));  // measured on the old hardware by an earlier test
  EXPECT_THAT(events, HasSubstr("regenerated for linear"));
  EXPECT_THAT(Call("SolverService/ListSchedules", R"({"model":"linear"})"), HasSubstr("\"superseded\":true"));
  EXPECT_THAT(Call("CostService/ListDevices", "{}"), HasSubstr("\"onlineCores\":1"));
}

TEST_F(DaemonTest, CommandsRunAgainstTheDaemonWithRemote) {
  const std::string bin = EDGECOST_BIN;
  const std::string costs =
      Shell(bin + " --remote unix:" + Socket() + " costs resnet18_cifar --platform a72 --summary");
  EXPECT_THAT(costs, HasSubstr("151"));
  const std::string solved =
      Shell(bin + " --remote unix:" + Socket() +
            " solve --model resnet18_cifar --platform a72 --activation-budget 3MB --runtime-budget 7.6x");
  EXPECT_THAT(solved, HasSubstr("optimal (proven)"));
  EXPECT_THAT(solved, HasSubstr("in the daemon's database"));
  const std::string tcp = "http://127.0.0.1:" + std::to_string(port_);
  EXPECT_THAT(Shell(bin + " --remote " + tcp + " costs linear --summary"), HasSubstr("EDGECOST_TOKEN"));
  EXPECT_THAT(
      Shell("EDGECOST_TOKEN=0123456789abcdef0123456789abcdef " + bin + " --remote " + tcp + " costs linear --summary"),
      HasSubstr("linear"));
  EXPECT_THAT(Shell(bin + " --remote unix:/nonexistent.sock costs linear"), HasSubstr("cannot reach the daemon"));
  EXPECT_THAT(Shell(bin + " --remote unix:" + Socket() + " profile --model linear --threads 1 --accept-noisy"),
              HasSubstr("succeeded: cost table"));
}

TEST_F(DaemonTest, StoppedOrKilledDuringAJobRestartsAndResumesIt) {
  const std::string started =
      Call("JobService/StartProfile", R"({"model":"resnet18_cifar","threads":1,"accept_noisy":true})");
  const size_t at = started.find("\"id\":\"");
  ASSERT_NE(at, std::string::npos) << started;
  const std::string id = started.substr(at + 6, started.find('"', at + 6) - at - 6);
  const std::string running = WaitForJob(id, [](const std::string& job) {
    return job.find("\"progress\"") != std::string::npos || job.find("STATE_FAILED") != std::string::npos;
  });
  ASSERT_THAT(running, HasSubstr("STATE_RUNNING"));

  // SIGTERM: the job stops at its next op and is stored to resume; the process exits cleanly.
  const int status = StopProcess(pid_, SIGTERM);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  std::ifstream log(dir_ / "serve.log");
  const std::string logged((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
  EXPECT_THAT(logged, HasSubstr("resumes at the next start"));
  StartDaemon();
  const std::string resumed = WaitForJob(id, [](const std::string& job) {
    return job.find("STATE_RUNNING") != std::string::npos || job.find("STATE_FAILED") != std::string::npos;
  });
  ASSERT_THAT(resumed, HasSubstr("STATE_RUNNING"));

  StopProcess(pid_, SIGKILL);  // mid-profile, with no chance to store anything

  StartDaemon();
  const std::string info = Shell(std::string(EDGECOST_BIN) + " --db " + (dir_ / "costs.db").string() + " db info");
  EXPECT_THAT(info, HasSubstr("op_costs"));  // the database opens and answers
  // The job outlived the process: it is queued again, measures what is missing and completes.
  EXPECT_THAT(Call("JobService/ListJobs", "{}"), HasSubstr("\"id\":\"" + id + "\""));
  const std::string finished = WaitForJob(id, [](const std::string& job) {
    return job.find("STATE_SUCCEEDED") != std::string::npos || job.find("STATE_FAILED") != std::string::npos;
  });
  EXPECT_THAT(finished, HasSubstr("STATE_SUCCEEDED"));
  EXPECT_THAT(Call("CostService/GetCostTable", R"({"model":"resnet18_cifar","device":"this"})"), HasSubstr("measured"));
}

}  // namespace

namespace {

TEST(DaemonConfig, TheShippedConfigChecksOut) {
  const std::string output =
      Shell(std::string(EDGECOST_BIN) + " serve --config packaging/edgecost.toml --check-config");
  EXPECT_THAT(output, HasSubstr("config ok"));
  // It says which database it will use, and why.
  EXPECT_THAT(output, HasSubstr("database       /var/lib/edgecost/edgecost.db (from [database] path in "
                                "packaging/edgecost.toml"));
  const std::string overridden =
      Shell(std::string(EDGECOST_BIN) + " serve --config packaging/edgecost.toml --db /tmp/x/y.db --check-config");
  EXPECT_THAT(overridden, HasSubstr("database       /tmp/x/y.db (from --db"));
  const std::string bad =
      Shell(std::string(EDGECOST_BIN) + " serve --config packaging/edgecost.service --check-config");
  EXPECT_THAT(bad, HasSubstr("edgecost.service"));
}

}  // namespace
