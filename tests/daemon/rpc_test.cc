// Every RPC method through the C++ client in protobuf (and curl in JSON where
// daemon_test.cc does not), many clients while a profile runs, the socket's
// mode and group, and solves on their own bounded pool, answered at shutdown.
#include <grp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "daemon/client.h"
#include "proto/edgecost.pb.h"
#include "tests/daemon/serve_process.h"

namespace edgecost {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using namespace test_support;

// A group for the socket other than our own primary one where that is allowed
// (root: any group; others: a supplementary group), so that the chown shows.
std::string SocketGroup() {
  if (::geteuid() == 0) {
    for (const char* name : {"daemon", "nogroup", "users"}) {
      if (::getgrnam(name)) return name;
    }
  }
  std::vector<gid_t> groups(static_cast<size_t>(std::max(0, ::getgroups(0, nullptr))));
  groups.resize(static_cast<size_t>(std::max(0, ::getgroups(static_cast<int>(groups.size()), groups.data()))));
  for (gid_t gid : groups) {
    if (gid == ::getegid()) continue;
    if (const group* g = ::getgrgid(gid)) return g->gr_name;
  }
  return ::getgrgid(::getegid())->gr_name;
}

class RpcTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = fs::temp_directory_path() / ("edgecost_rpc_test_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "sys/devices/system/cpu");
    std::ofstream(dir_ / "sys/devices/system/cpu/online") << "0-1\n";
    std::ofstream(dir_ / "serve.toml") << "[server]\nsocket_group = \"" << SocketGroup() << "\"\n";
    pid_ = SpawnServe({"--db", (dir_ / "costs.db").string(), "serve", "--config", (dir_ / "serve.toml").string(),
                       "--socket", Socket()},
                      Socket(), dir_ / "sys", dir_ / "serve.log");
  }
  static void TearDownTestSuite() {
    StopProcess(pid_);
    fs::remove_all(dir_);
  }

  static std::string Socket() { return (dir_ / "edgecost.sock").string(); }

  // One call through the client of `--remote`, in protobuf.
  template <typename Response, typename Request>
  static Response Remote(const std::string& method, const Request& request, Status* status = nullptr) {
    Response response;
    const Status s = daemon::CallRemote("unix:" + Socket(), method, request, response);
    if (status) {
      *status = s;
    } else {
      EXPECT_TRUE(s.ok()) << method << ": " << s.message();
    }
    return response;
  }

  static v1::Job WaitForJob(uint64_t id, const std::function<bool(const v1::Job&)>& done) {
    v1::GetJobRequest get;
    get.set_id(id);
    v1::Job job;
    PollUntil(
        [&] {
          job = Remote<v1::Job>("JobService/GetJob", get);
          return v1::Job::State_Name(job.state());
        },
        [&](const std::string&) { return done(job); });
    return job;
  }

  static fs::path dir_;
  static pid_t pid_;
};

fs::path RpcTest::dir_;
pid_t RpcTest::pid_ = 0;

bool Finished(const v1::Job& job) {
  return job.state() == v1::Job::STATE_SUCCEEDED || job.state() == v1::Job::STATE_FAILED ||
         job.state() == v1::Job::STATE_CANCELLED;
}

TEST_F(RpcTest, EveryMethodInProtobuf) {
  const auto models = Remote<v1::ListModelsResponse>("CostService/ListModels", v1::ListModelsRequest());
  EXPECT_TRUE(std::any_of(models.models().begin(), models.models().end(),
                          [](const v1::ModelInfo& m) { return m.name() == "resnet18_cifar"; }));

  // The daemon records this device at start.
  const auto devices = Remote<v1::ListDevicesResponse>("CostService/ListDevices", v1::ListDevicesRequest());
  ASSERT_GE(devices.devices_size(), 1);
  const v1::Device& here = devices.devices(0);
  v1::GetDeviceRequest get_device;
  get_device.set_name(here.name());
  EXPECT_EQ(Remote<v1::Device>("CostService/GetDevice", get_device).fingerprint().hash(), here.fingerprint().hash());

  v1::GetCostTableRequest table_request;
  table_request.set_model("resnet18_cifar");
  table_request.set_device("a72");
  EXPECT_EQ(Remote<v1::CostTable>("CostService/GetCostTable", table_request).costs_size(), 151);

  // Two profiles: the second waits behind the first and is cancelled before it starts.
  v1::StartProfileRequest profile;
  profile.set_model("linear");
  profile.set_threads(1);
  profile.set_accept_noisy(true);  // this test is about jobs, not about how quiet the machine is
  const auto first = Remote<v1::Job>("JobService/StartProfile", profile);
  const auto second = Remote<v1::Job>("JobService/StartProfile", profile);
  EXPECT_EQ(second.state(), v1::Job::STATE_QUEUED);
  v1::CancelJobRequest cancel;
  cancel.set_id(second.id());
  EXPECT_EQ(Remote<v1::Job>("JobService/CancelJob", cancel).state(), v1::Job::STATE_CANCELLED);
  EXPECT_EQ(WaitForJob(first.id(), Finished).state(), v1::Job::STATE_SUCCEEDED);
  const auto jobs = Remote<v1::ListJobsResponse>("JobService/ListJobs", v1::ListJobsRequest());
  EXPECT_GE(jobs.jobs_size(), 2);
  v1::ListJobsRequest newest;
  newest.set_limit(1);
  const auto last = Remote<v1::ListJobsResponse>("JobService/ListJobs", newest);
  ASSERT_EQ(last.jobs_size(), 1);
  EXPECT_EQ(last.jobs(0).id(), second.id());

  // The profile measured paging on this device.
  v1::GetPagingCostsRequest paging_request;
  paging_request.set_device(here.name());
  EXPECT_GT(Remote<v1::PagingCost>("CostService/GetPagingCosts", paging_request).page_in_throughput_bytes_per_s(), 0);

  v1::ScheduleRequest solve;
  solve.set_model("linear");
  solve.set_device("a72");
  solve.set_activation_budget_bytes(4000);
  solve.set_runtime_budget_multiple(2);
  const auto schedule = Remote<v1::Schedule>("SolverService/Solve", solve);
  ASSERT_GT(schedule.id(), 0u);
  v1::GetScheduleRequest get_schedule;
  get_schedule.set_id(schedule.id());
  EXPECT_EQ(Remote<v1::Schedule>("SolverService/GetSchedule", get_schedule).energy().total_j(),
            schedule.energy().total_j());
  v1::ListSchedulesRequest list_schedules;
  list_schedules.set_model("linear");
  const auto listed = Remote<v1::ListSchedulesResponse>("SolverService/ListSchedules", list_schedules);
  EXPECT_TRUE(std::any_of(listed.schedules().begin(), listed.schedules().end(),
                          [&](const v1::ScheduleSummary& s) { return s.id() == schedule.id(); }));

  v1::WatchEventsRequest watch;  // everything so far, without waiting
  const auto events = Remote<v1::WatchEventsResponse>("JobService/WatchEvents", watch);
  ASSERT_GT(events.events_size(), 0);
  v1::WatchEventsRequest not_a_time;  // nothing newer, and a NaN wait: answered at once, empty
  not_a_time.set_after_sequence(events.events(events.events_size() - 1).sequence());
  not_a_time.set_wait_s(std::nan(""));
  EXPECT_EQ(Remote<v1::WatchEventsResponse>("JobService/WatchEvents", not_a_time).events_size(), 0);
  EXPECT_TRUE(std::any_of(events.events().begin(), events.events().end(), [&](const v1::Event& e) {
    return e.kind() == "schedule" && e.schedule_id() == schedule.id();
  }));

  // The JSON calls daemon_test.cc makes only with bad input, here with good input.
  EXPECT_THAT(CallJson(Socket(), "CostService/GetDevice", "{\"name\":\"" + here.name() + "\"}"),
              HasSubstr(here.fingerprint().hash()));
  EXPECT_THAT(CallJson(Socket(), "CostService/GetPagingCosts", "{\"device\":\"" + here.name() + "\"}"),
              ::testing::EndsWith(" 200"));
  // A protobuf body that does not decode.
  EXPECT_THAT(Shell("curl -s -w ' %{http_code}' --unix-socket " + Socket() +
                    " -H 'Content-Type: application/protobuf' --data-binary 'not a protobuf' "
                    "http://localhost/twirp/edgecost.v1.CostService/GetCostTable"),
              HasSubstr("malformed"));
}

// Models as records over RPC: a model added by its bytes is then named like a zoo
// model by GetCostTable, Solve, StartProfile (with a batch size) and StartTrain.
TEST_F(RpcTest, AModelAddedOverRpcIsSolvedProfiledAndTrainedByName) {
  std::ifstream file("tests/graph/data/mlp.onnx", std::ios::binary);
  const std::string onnx((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  ASSERT_GT(onnx.size(), 100u);
  v1::AddModelRequest add;
  add.set_name("rpc-mlp");
  add.set_model(onnx);
  const auto added = Remote<v1::AddModelResponse>("CostService/AddModel", add);
  EXPECT_EQ(added.outcome(), "added");
  EXPECT_EQ(added.model().kind(), "onnx");
  EXPECT_EQ(added.model().size_bytes(), onnx.size());
  EXPECT_GT(added.model().training_nodes(), 0u);
  EXPECT_EQ(Remote<v1::AddModelResponse>("CostService/AddModel", add).outcome(), "unchanged");
  const auto models = Remote<v1::ListModelsResponse>("CostService/ListModels", v1::ListModelsRequest());
  EXPECT_TRUE(std::any_of(models.models().begin(), models.models().end(), [&](const v1::ModelInfo& m) {
    return m.name() == "rpc-mlp" && m.stored() && m.content_hash() == added.model().content_hash();
  }));

  v1::ScheduleRequest solve;
  solve.set_model("rpc-mlp");
  solve.set_device("a72");
  solve.set_activation_budget_bytes(2000);
  solve.set_runtime_budget_multiple(2);
  const auto schedule = Remote<v1::Schedule>("SolverService/Solve", solve);
  EXPECT_TRUE(schedule.status() == v1::Schedule::STATUS_OPTIMAL || schedule.status() == v1::Schedule::STATUS_FEASIBLE)
      << schedule.message();
  EXPECT_GT(schedule.memory().param_bytes(), 0u);  // the whole memory comes with the schedule

  v1::StartProfileRequest profile;
  profile.set_model("rpc-mlp");
  profile.set_batch_size(1);
  profile.set_threads(1);
  profile.set_accept_noisy(true);
  const auto profiled = WaitForJob(Remote<v1::Job>("JobService/StartProfile", profile).id(), Finished);
  ASSERT_EQ(profiled.state(), v1::Job::STATE_SUCCEEDED) << profiled.message();
  v1::GetCostTableRequest measured;
  measured.set_model("rpc-mlp");
  measured.set_device("this");
  measured.set_threads(1);  // the profile's count
  EXPECT_EQ(Remote<v1::CostTable>("CostService/GetCostTable", measured).cost_source(), "measured");
  v1::StartTrainRequest train;
  train.set_model("rpc-mlp");
  train.set_steps(1);
  train.set_threads(1);
  train.mutable_optimizer()->set_kind("adamw");
  train.mutable_lr_schedule()->set_kind("cosine");
  const auto trained = WaitForJob(Remote<v1::Job>("JobService/StartTrain", train).id(), Finished);
  EXPECT_EQ(trained.state(), v1::Job::STATE_SUCCEEDED) << trained.message();
  EXPECT_EQ(trained.train_run().optimizer().kind(), "adamw");
  EXPECT_EQ(trained.train_run().optimizer().weight_decay(), 0.01);  // PyTorch's default
  EXPECT_EQ(trained.train_run().lr_schedule().kind(), "cosine");
  EXPECT_GT(trained.train_run().optimizer_state_bytes(), 0u);
  // An optimizer's nonsense is refused before the job is queued, saying why.
  Status refused;
  train.mutable_optimizer()->set_kind("sgd");
  train.mutable_optimizer()->set_nesterov(true);
  Remote<v1::Job>("JobService/StartTrain", train, &refused);
  EXPECT_EQ(refused.code(), ErrorCode::kInvalidArgument);
  EXPECT_THAT(refused.message(), HasSubstr("--nesterov needs --momentum"));
  // Its run record, listed over RPC as `edgecost --remote ... runs` lists it.
  v1::ListTrainRunsRequest train_runs;
  train_runs.set_model("rpc-mlp");
  const auto runs = Remote<v1::ListTrainRunsResponse>("TraceService/ListTrainRuns", train_runs);
  ASSERT_EQ(runs.runs_size(), 2);  // the profile's plain steps, then the train job's
  EXPECT_EQ(runs.runs(1).model(), "rpc-mlp");
  EXPECT_EQ(runs.runs(1).id(), trained.train_run().id());

  // Bad bytes, no name, a zoo name and an upload over the daemon's body limit: refused, saying why.
  Status status;
  add.set_model("definitely not a model");
  Remote<v1::AddModelResponse>("CostService/AddModel", add, &status);
  EXPECT_EQ(status.code(), ErrorCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("not an ONNX model"));
  add.set_model(onnx);
  add.set_name("");
  Remote<v1::AddModelResponse>("CostService/AddModel", add, &status);
  EXPECT_THAT(status.message(), HasSubstr("name is required"));
  add.set_name("linear");
  Remote<v1::AddModelResponse>("CostService/AddModel", add, &status);
  EXPECT_THAT(status.message(), HasSubstr("is a zoo model"));
  add.set_name("too-big");
  add.set_model(std::string(5 << 20, 'x'));
  Remote<v1::AddModelResponse>("CostService/AddModel", add, &status);
  EXPECT_EQ(status.code(), ErrorCode::kResourceExhausted) << status.message();
  EXPECT_THAT(status.message(), HasSubstr("limits.max_body_bytes"));

  v1::RemoveModelRequest remove;
  remove.set_name("rpc-mlp");
  Remote<v1::RemoveModelResponse>("CostService/RemoveModel", remove);
  Remote<v1::Schedule>("SolverService/Solve", solve, &status);
  EXPECT_EQ(status.code(), ErrorCode::kNotFound);
  EXPECT_THAT(status.message(), HasSubstr("models add"));
}

TEST_F(RpcTest, ManyClientsWhileAProfileRuns) {
  v1::StartProfileRequest profile;
  profile.set_model("resnet18_cifar");
  profile.set_threads(1);
  profile.set_accept_noisy(true);  // this test is about jobs, not about how quiet the machine is
  profile.set_force(true);         // measure again even if an earlier test did
  const auto job = Remote<v1::Job>("JobService/StartProfile", profile);
  ASSERT_EQ(WaitForJob(job.id(), [](const v1::Job& j) { return j.progress() > 0 || Finished(j); }).state(),
            v1::Job::STATE_RUNNING);

  constexpr int kClients = 32, kCallsEach = 20;
  std::atomic<int> failed{0}, wrong{0}, saw_running{0};
  std::vector<std::thread> clients;
  for (int c = 0; c < kClients; ++c) {
    clients.emplace_back([&, c] {
      for (int i = 0; i < kCallsEach; ++i) {
        Status status;
        switch ((c + i) % 4) {
          case 0: {
            v1::GetCostTableRequest request;
            request.set_model("resnet18_cifar");
            request.set_device("a72");
            if (Remote<v1::CostTable>("CostService/GetCostTable", request, &status).costs_size() != 151) ++wrong;
            break;
          }
          case 1: {
            v1::GetJobRequest request;
            request.set_id(job.id());
            if (Remote<v1::Job>("JobService/GetJob", request, &status).state() == v1::Job::STATE_RUNNING) ++saw_running;
            break;
          }
          case 2:
            if (Remote<v1::ListModelsResponse>("CostService/ListModels", v1::ListModelsRequest(), &status)
                    .models_size() == 0) {
              ++wrong;
            }
            break;
          default:
            Remote<v1::ListDevicesResponse>("CostService/ListDevices", v1::ListDevicesRequest(), &status);
        }
        if (!status.ok()) ++failed;
      }
    });
  }
  for (std::thread& t : clients) t.join();
  EXPECT_EQ(failed.load(), 0);
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_GT(saw_running.load(), 0) << "the calls should overlap the profile";

  // Cancelling the running profile stops it at its next op, keeping what it measured.
  v1::CancelJobRequest cancel;
  cancel.set_id(job.id());
  const auto at_cancel = Remote<v1::Job>("JobService/CancelJob", cancel);
  const auto ended = WaitForJob(job.id(), Finished);
  if (at_cancel.state() == v1::Job::STATE_RUNNING) {
    EXPECT_EQ(ended.state(), v1::Job::STATE_CANCELLED) << ended.message();
    EXPECT_THAT(ended.message(), HasSubstr("measured and kept"));
  }
}

// Long polls hold no worker thread: with 24 of them waiting on a daemon of
// two workers, queries are answered, and one event answers them all.
TEST_F(RpcTest, WatchersWaitWithoutHoldingWorkers) {
  v1::WatchEventsRequest latest;
  const auto so_far = Remote<v1::WatchEventsResponse>("JobService/WatchEvents", latest);
  v1::WatchEventsRequest watch;
  watch.set_after_sequence(so_far.events_size() ? so_far.events(so_far.events_size() - 1).sequence() : 0);
  watch.set_wait_s(60);
  constexpr int kWatchers = 24;
  std::vector<v1::WatchEventsResponse> answers(kWatchers);
  std::vector<std::thread> watchers;
  for (int i = 0; i < kWatchers; ++i) {
    // An event from elsewhere (a job of an earlier test ending late) may answer a
    // watcher first: it watches again from there until a schedule's event comes.
    watchers.emplace_back([&, i] {
      v1::WatchEventsRequest from = watch;
      for (;;) {
        answers[i] = Remote<v1::WatchEventsResponse>("JobService/WatchEvents", from);
        if (answers[i].events_size() == 0) return;  // timed out: the expectations below fail
        const auto& events = answers[i].events();
        if (std::any_of(events.begin(), events.end(), [](const v1::Event& e) { return e.schedule_id() != 0; })) return;
        from.set_after_sequence(events[events.size() - 1].sequence());
      }
    });
  }
  auto metrics = [] { return Shell("curl -s --unix-socket " + Socket() + " http://localhost/metrics"); };
  const std::string all_waiting = "edgecost_event_watchers " + std::to_string(kWatchers) + "\n";
  ASSERT_THAT(PollUntil(metrics, [&](const std::string& m) { return m.find(all_waiting) != std::string::npos; }),
              HasSubstr(all_waiting));
  EXPECT_THAT(CallJson(Socket(), "CostService/ListModels", "{}"), ::testing::EndsWith(" 200"));

  v1::ScheduleRequest solve;  // its stored schedule is the event
  solve.set_model("linear");
  solve.set_device("a72");
  solve.set_activation_budget_bytes(5000);
  const auto schedule = Remote<v1::Schedule>("SolverService/Solve", solve);
  for (std::thread& t : watchers) t.join();
  for (const auto& answer : answers) {
    EXPECT_TRUE(std::any_of(answer.events().begin(), answer.events().end(),
                            [&](const v1::Event& e) { return e.schedule_id() == schedule.id(); }));
  }
}

TEST_F(RpcTest, SocketHasItsModeAndConfiguredGroup) {
  struct stat info {};
  ASSERT_EQ(::stat(Socket().c_str(), &info), 0);
  EXPECT_EQ(info.st_mode & 0777, 0660u);
  const group* g = ::getgrnam(SocketGroup().c_str());
  ASSERT_NE(g, nullptr);
  EXPECT_EQ(info.st_gid, g->gr_gid) << "socket_group " << SocketGroup();

  // A group that does not exist fails the start with a message naming it.
  std::ofstream(dir_ / "bad.toml") << "[server]\nsocket_group = \"no-such-group-edgecost\"\n";
  const std::string out = Shell(std::string(EDGECOST_BIN) + " --db " + (dir_ / "bad.db").string() + " serve --config " +
                                (dir_ / "bad.toml").string() + " --socket " + (dir_ / "bad.sock").string());
  EXPECT_THAT(out, HasSubstr("no group 'no-such-group-edgecost'"));
}

// Solves hold no HTTP worker: with one solver thread busy and four solves
// waiting, queries are answered and a sixth solve is refused; at SIGTERM every
// solve answers with the best schedule it has.
TEST(RpcSolves, RunOnTheirOwnPoolAndAnswerAtShutdown) {
  const fs::path dir = fs::temp_directory_path() / ("edgecost_rpc_solves_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string socket = (dir / "edgecost.sock").string();
  const pid_t pid =
      SpawnServe({"--db", (dir / "costs.db").string(), "serve", "--socket", socket, "--concurrent-solves", "1"}, socket,
                 "/nonexistent-sysfs", dir / "serve.log");

  // Far from provable within its time limit (a 55% gap after 60 s), so each solve runs until stopped.
  v1::ScheduleRequest request;
  request.set_model("resnet18_cifar");
  request.set_device("a72");
  request.set_activation_budget_bytes(1'500'000);
  request.set_runtime_budget_multiple(1.5);
  request.set_time_limit_s(120);
  constexpr int kSolves = 5;  // one running, four waiting: the limit for one solver thread
  std::vector<v1::Schedule> schedules(kSolves);
  std::vector<Status> statuses(kSolves);
  std::vector<std::thread> callers;
  for (int i = 0; i < kSolves; ++i) {
    callers.emplace_back(
        [&, i] { statuses[i] = daemon::CallRemote("unix:" + socket, "SolverService/Solve", request, schedules[i]); });
  }
  auto in_flight = [&] { return Shell("curl -s --unix-socket " + socket + " http://localhost/metrics"); };
  const std::string all_in = "edgecost_solves_in_flight " + std::to_string(kSolves) + "\n";
  ASSERT_THAT(PollUntil(in_flight, [&](const std::string& m) { return m.find(all_in) != std::string::npos; }),
              HasSubstr(all_in));

  const std::string sixth =
      CallJson(socket, "SolverService/Solve", R"({"model":"linear","device":"a72","activationBudgetBytes":"4000"})");
  EXPECT_THAT(sixth, HasSubstr("resource_exhausted"));
  EXPECT_THAT(sixth, ::testing::EndsWith(" 429"));
  EXPECT_THAT(CallJson(socket, "CostService/ListModels", "{}"), ::testing::EndsWith(" 200"));
  EXPECT_THAT(CallJson(socket, "CostService/GetCostTable", R"({"model":"linear","device":"a72"})"),
              ::testing::EndsWith(" 200"));
  EXPECT_THAT(in_flight(), HasSubstr(all_in)) << "the queries were answered while every solve was in flight";

  const int status = StopProcess(pid);
  for (std::thread& t : callers) t.join();
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  for (int i = 0; i < kSolves; ++i) {
    ASSERT_TRUE(statuses[i].ok()) << statuses[i].message();
    EXPECT_EQ(schedules[i].status(), v1::Schedule::STATUS_FEASIBLE) << schedules[i].message();
    EXPECT_GT(schedules[i].stages_size(), 0);
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace edgecost
