// libFuzzer target for the daemon's request decoding: TwirpRouter with every
// request type of the API, JSON and protobuf bodies, content types and routes
// chosen by the input. Built with clang (-fsanitize=fuzzer,address,undefined)
// by tests/fuzz/meson.build and run for a bounded time as the test
// `libfuzzer`. The oracle: every answer is a decoded request that survives a
// protobuf round trip, or a Twirp error object; nothing else, and no crash.
#include <cstdint>
#include <cstdlib>
#include <string>

#include <google/protobuf/stubs/logging.h>

#include "daemon/twirp.h"
#include "proto/edgecost.pb.h"

namespace edgecost::daemon {
namespace {

// Answers with the decoded request itself, after checking that it survives a
// binary round trip unchanged.
template <typename Request>
void AddEcho(TwirpRouter& router, const std::string& method) {
  router.Add<Request, Request>("Fuzz", method, [](const Request& request) -> Result<Request> {
    const std::string bytes = request.SerializeAsString();
    Request again;  // compared as bytes: a NaN field is not equal to itself
    if (!again.ParseFromString(bytes) || again.SerializeAsString() != bytes) std::abort();
    return request;
  });
}

const TwirpRouter& Router() {
  static const TwirpRouter* router = [] {
    google::protobuf::SetLogHandler(nullptr);  // protobuf logs every invalid UTF-8 string it parses
    auto* r = new TwirpRouter;
    AddEcho<v1::ListDevicesRequest>(*r, "ListDevices");
    AddEcho<v1::GetDeviceRequest>(*r, "GetDevice");
    AddEcho<v1::ListModelsRequest>(*r, "ListModels");
    AddEcho<v1::GetCostTableRequest>(*r, "GetCostTable");
    AddEcho<v1::GetPagingCostsRequest>(*r, "GetPagingCosts");
    AddEcho<v1::ScheduleRequest>(*r, "Solve");
    AddEcho<v1::GetScheduleRequest>(*r, "GetSchedule");
    AddEcho<v1::ListSchedulesRequest>(*r, "ListSchedules");
    AddEcho<v1::StartProfileRequest>(*r, "StartProfile");
    AddEcho<v1::GetJobRequest>(*r, "GetJob");
    AddEcho<v1::CancelJobRequest>(*r, "CancelJob");
    AddEcho<v1::ListJobsRequest>(*r, "ListJobs");
    AddEcho<v1::WatchEventsRequest>(*r, "WatchEvents");
    return r;
  }();
  return *router;
}

constexpr const char* kMethods[] = {"ListDevices", "GetDevice",   "ListModels",    "GetCostTable", "GetPagingCosts",
                                    "Solve",       "GetSchedule", "ListSchedules", "StartProfile", "GetJob",
                                    "CancelJob",   "ListJobs",    "WatchEvents",   "NoSuchMethod"};
constexpr const char* kContentTypes[] = {"application/json", "application/protobuf", "application/json; charset=utf-8",
                                         "text/plain"};

}  // namespace
}  // namespace edgecost::daemon

// Byte 0 picks the method (low nibble) and the content type (bits 4-5); the rest is the body.
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace edgecost::daemon;
  if (size < 1) return 0;
  HttpRequest request;
  request.method = "POST";
  request.target = std::string("/twirp/edgecost.v1.Fuzz/") + kMethods[(data[0] & 0x0f) % std::size(kMethods)];
  request.content_type = kContentTypes[(data[0] >> 4) & 0x03];
  request.body.assign(reinterpret_cast<const char*>(data + 1), size - 1);
  bool answered = false;
  Router().Handle(request, [&](HttpResponse response) {
    answered = true;
    if (response.status >= 500) std::abort();  // a decoded request that does not encode again
    if (response.status != 200 && response.body.find("\"code\"") == std::string::npos) std::abort();
  });
  if (!answered) std::abort();  // every route here answers before Handle returns
  return 0;
}
