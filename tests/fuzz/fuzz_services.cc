// Fuzz target for the services behind the transport: every route of
// CostService, SolverService, JobService and TraceService, in JSON and protobuf, through the
// daemon's whole request path (Daemon::Handle: auth, metrics, the cost-table
// cache, Twirp decoding, the service, encoding) on a temporary database.
//
// Input: byte 0 picks the route (low 7 bits) and the encoding (bit 7); the
// rest is the body. Oracle: every call is answered, with a success or a Twirp
// error object, and never with "internal" (an exception or a broken
// invariant); the daemon survives; no job fails inside edgecost (checked at
// exit). Profiles a call starts are cancelled at
// once so that oneDNN does not run under the fuzzer; solves and long polls are
// given a short time limit so that an input is judged in milliseconds.
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <string>
#include <thread>

#include <google/protobuf/stubs/logging.h>
#include <google/protobuf/util/json_util.h>
#include <spdlog/spdlog.h>

#include "costdb/costdb.h"
#include "daemon/daemon.h"

namespace edgecost::daemon {
namespace {

constexpr const char* kRoutes[] = {
    "CostService/ListDevices",   "CostService/GetDevice",       "CostService/ListModels",
    "CostService/GetCostTable",  "CostService/GetPagingCosts",  "SolverService/Solve",
    "SolverService/GetSchedule", "SolverService/ListSchedules", "JobService/StartProfile",
    "JobService/GetJob",         "JobService/CancelJob",        "JobService/ListJobs",
    "JobService/WatchEvents",    "CostService/NoSuchMethod",    "JobService/StartTrain",
    "TraceService/GetTrace",     "TraceService/ListRuns",       "CostService/AddModel",
    "CostService/RemoveModel",
};

std::filesystem::path FuzzDir() {
  return std::filesystem::temp_directory_path() / ("edgecost_fuzz_services_" + std::to_string(::getpid()));
}

Daemon& FuzzedDaemon();

// At exit: the daemon's job thread stops before the statics it uses are
// destroyed, and no job the inputs started may have failed inside edgecost (a
// job's exception is caught and stored as "internal error: ...", so the HTTP
// answers alone would not show it).
void StopAndCheckJobs() {
  delete &FuzzedDaemon();
  Result<costdb::CostDb> db = costdb::CostDb::Open((FuzzDir() / "costs.db").string(), costdb::OpenMode::kReadOnly);
  if (!db.ok()) std::abort();
  Result<std::vector<costdb::StoredJob>> jobs = db->ListJobs();
  if (!jobs.ok()) std::abort();
  for (const costdb::StoredJob& stored : *jobs) {
    if (stored.job.message().starts_with("internal error")) {
      std::fprintf(stderr, "job %llu (%s) failed inside edgecost: %s\n",
                   static_cast<unsigned long long>(stored.job.id()), stored.job.kind().c_str(),
                   stored.job.message().c_str());
      std::abort();
    }
  }
}

Daemon& FuzzedDaemon() {
  static Daemon* daemon = [] {
    google::protobuf::SetLogHandler(nullptr);  // protobuf logs every invalid UTF-8 string it parses
    spdlog::set_level(spdlog::level::off);     // one log line per job and schedule otherwise
    const auto dir = FuzzDir();
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
    DaemonConfig config;
    config.db_path = (dir / "costs.db").string();
    config.socket_path = (dir / "unused.sock").string();  // Start() is not called: nothing listens
    config.fingerprint_check_s = 0;
    config.concurrent_solves = 1;
    auto* created = new Daemon(config);  // kept for the process: the fuzzer calls in until it exits
    if (!created->Start().ok()) std::abort();
    std::atexit(StopAndCheckJobs);
    return created;
  }();
  return *daemon;
}

// Decodes a body in its encoding, or says it does not decode.
bool Decode(const std::string& body, bool json, google::protobuf::Message& message) {
  return json ? google::protobuf::util::JsonStringToMessage(body, &message).ok() : message.ParseFromString(body);
}
std::string Encode(const google::protobuf::Message& message, bool json) {
  std::string out;
  if (json) {
    (void)google::protobuf::util::MessageToJsonString(message, &out);
  } else {
    message.SerializeToString(&out);
  }
  return out;
}

// What a caller may legitimately ask for (a 10-minute solve, a one-minute long
// poll) would make each input take that long: bounded here, the rest as sent.
void Shorten(HttpRequest& request, bool json) {
  if (request.target.ends_with("/Solve")) {
    v1::ScheduleRequest solve;
    if (!Decode(request.body, json, solve)) return;
    if (!(solve.time_limit_s() > 0 && solve.time_limit_s() < 0.2)) solve.set_time_limit_s(0.2);
    request.body = Encode(solve, json);
  } else if (request.target.ends_with("/WatchEvents")) {
    v1::WatchEventsRequest watch;
    if (!Decode(request.body, json, watch)) return;
    if (watch.wait_s() > 0.01) watch.set_wait_s(0.01);
    request.body = Encode(watch, json);
  }
}

HttpResponse Call(HttpRequest request) {
  std::mutex mutex;
  std::condition_variable answered;
  std::optional<HttpResponse> response;
  FuzzedDaemon().Handle(std::move(request), [&](HttpResponse r) {
    std::lock_guard lock(mutex);
    response = std::move(r);
    answered.notify_all();
  });
  std::unique_lock lock(mutex);
  // Every call is answered; a minute without an answer is a lost request.
  if (!answered.wait_for(lock, std::chrono::seconds(60), [&] { return response.has_value(); })) std::abort();
  return *std::move(response);
}

// Every job an input started (or a decoded answer would not name, or the daemon started itself)
// is cancelled, and ended, before the next input: a job thread still running when the fuzzer
// exits would use statics the exit has already destroyed (oneDNN's JIT kernels among them).
void SettleJobs() {
  for (int polls = 0;; ++polls) {
    v1::ListJobsRequest list;
    list.set_limit(1000);
    const HttpResponse answer = Call({.method = "POST",
                                      .target = "/twirp/edgecost.v1.JobService/ListJobs",
                                      .content_type = "application/protobuf",
                                      .body = list.SerializeAsString()});
    v1::ListJobsResponse jobs;
    if (answer.status != 200 || !jobs.ParseFromString(answer.body)) std::abort();
    bool active = false;
    for (const v1::Job& job : jobs.jobs()) {
      if (job.state() != v1::Job::STATE_QUEUED && job.state() != v1::Job::STATE_RUNNING) continue;
      active = true;
      v1::CancelJobRequest cancel;
      cancel.set_id(job.id());
      if (Call({.method = "POST",
                .target = "/twirp/edgecost.v1.JobService/CancelJob",
                .content_type = "application/protobuf",
                .body = cancel.SerializeAsString()})
              .status != 200) {
        std::abort();
      }
    }
    if (!active) return;
    if (polls == 6000) std::abort();  // a cancelled job still running after a minute
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

}  // namespace
}  // namespace edgecost::daemon

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace edgecost::daemon;
  if (size < 1) return 0;
  const bool json = (data[0] & 0x80) == 0;
  HttpRequest request;
  request.method = "POST";
  request.target = std::string("/twirp/edgecost.v1.") + kRoutes[(data[0] & 0x7f) % std::size(kRoutes)];
  request.content_type = json ? "application/json" : "application/protobuf";
  request.body.assign(reinterpret_cast<const char*>(data + 1), size - 1);
  Shorten(request, json);
  const bool starts_jobs = request.target.ends_with("/StartProfile") || request.target.ends_with("/StartTrain");
  const HttpResponse response = Call(std::move(request));
  if (response.status != 200) {
    // A Twirp error object; "internal" means a handler threw or an invariant broke.
    if (response.body.find("\"code\":") == std::string::npos) std::abort();
    if (response.body.find("\"code\":\"internal\"") != std::string::npos) {
      std::fprintf(stderr, "internal error: %s\n", response.body.c_str());
      std::abort();
    }
  }
  if (starts_jobs) SettleJobs();
  return 0;
}
