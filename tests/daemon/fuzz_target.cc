// libFuzzer target for request decoding: Twirp routes with arbitrary bodies in
// JSON and protobuf, through the daemon's whole request path (auth, routing,
// decoding, the method, encoding). Read-only methods only, so inputs cannot
// start jobs. Built with clang's -fsanitize=fuzzer by scripts/fuzz, and driven
// by fuzz_test.cc in the ordinary test run.
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <string>

#include <google/protobuf/stubs/logging.h>

#include "daemon/daemon.h"

namespace {

edgecost::daemon::Daemon& FuzzedDaemon() {
  static edgecost::daemon::Daemon* daemon = [] {
    google::protobuf::SetLogHandler(nullptr);  // protobuf logs every invalid UTF-8 string it parses
    edgecost::daemon::DaemonConfig config;
    const auto dir = std::filesystem::temp_directory_path() / ("edgecost_fuzz_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir);
    config.db_path = (dir / "costs.db").string();
    config.fingerprint_check_s = 0;
    return new edgecost::daemon::Daemon(config);
  }();
  return *daemon;
}

constexpr const char* kRoutes[] = {
    "CostService/GetCostTable", "CostService/GetDevice",     "CostService/ListModels",   "CostService/GetPagingCosts",
    "SolverService/GetSchedule", "SolverService/ListSchedules", "JobService/GetJob",      "JobService/ListJobs",
    "CostService/NoSuchMethod",
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  edgecost::daemon::HttpRequest request;
  request.method = "POST";
  request.target = std::string("/twirp/edgecost.v1.") + kRoutes[data[0] % std::size(kRoutes)];
  request.content_type = (data[0] & 0x80) ? "application/protobuf" : "application/json";
  request.body.assign(reinterpret_cast<const char*>(data + 1), size - 1);
  // The fuzzed routes answer before Handle returns.
  edgecost::daemon::HttpResponse response;
  bool answered = false;
  FuzzedDaemon().Handle(request, [&](edgecost::daemon::HttpResponse r) {
    response = std::move(r);
    answered = true;
  });
  if (!answered) std::abort();
  // Every answer is a success or a Twirp error object, never anything else.
  if (response.status != 200 && response.body.find("\"code\"") == std::string::npos) std::abort();
  return 0;
}
