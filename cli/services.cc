#include "cli/services.h"

#include <filesystem>

#include "costdb/postgres.h"
#include "daemon/client.h"
#include "daemon/services.h"
#include "service/models.h"

namespace edgecost::cli {
namespace {

// The daemon's `method`, or `local` on the command's store: one request, one response type.
template <typename Response, typename Request, typename Local>
Result<Response> Call(const Context& ctx, const char* method, const Request& request, Local local) {
  if (ctx.remote.empty()) return local();
  Response response;
  EC_RETURN_IF_ERROR(daemon::CallRemote(ctx.remote, method, request, response));
  return response;
}

bool DatabaseExists(const std::string& path) {
  std::error_code error;
  return costdb::IsPostgresUrl(path) || std::filesystem::exists(path, error);
}

}  // namespace

Result<v1::ListModelsResponse> Services::ListModels(const v1::ListModelsRequest& request) {
  return Call<v1::ListModelsResponse>(ctx_, "CostService/ListModels", request, [&]() -> Result<v1::ListModelsResponse> {
    if (!DatabaseExists(DbPath(ctx_))) return service::ListModels(nullptr, std::max(1u, request.batch_size()));
    return daemon::CostService(ctx_.Store(costdb::OpenMode::kReadOnly), nullptr).ListModels(request);
  });
}

Result<v1::AddModelResponse> Services::AddModel(const v1::AddModelRequest& request) {
  return Call<v1::AddModelResponse>(ctx_, "CostService/AddModel", request, [&] {
    return daemon::CostService(ctx_.Store(costdb::OpenMode::kReadWrite), nullptr).AddModel(request);
  });
}

Result<v1::RemoveModelResponse> Services::RemoveModel(const v1::RemoveModelRequest& request) {
  return Call<v1::RemoveModelResponse>(ctx_, "CostService/RemoveModel", request, [&]() -> Result<v1::RemoveModelResponse> {
    if (!DatabaseExists(DbPath(ctx_))) return NotFound("no database at " + DbPath(ctx_) + ", so no model to remove");
    return daemon::CostService(ctx_.Store(costdb::OpenMode::kReadWrite), nullptr).RemoveModel(request);
  });
}

Result<v1::ListSchedulesResponse> Services::ListSchedules(const v1::ListSchedulesRequest& request) {
  return Call<v1::ListSchedulesResponse>(ctx_, "SolverService/ListSchedules", request, [&] {
    daemon::EventLog no_events;  // listing emits none
    return daemon::SolverService(ctx_.Store(costdb::OpenMode::kReadOnly), no_events, nullptr).ListSchedules(request);
  });
}

Result<v1::ListRunsResponse> Services::ListRuns(const v1::ListRunsRequest& request) {
  return Call<v1::ListRunsResponse>(ctx_, "TraceService/ListRuns", request, [&] {
    return daemon::TraceService(ctx_.Store(costdb::OpenMode::kReadOnly)).ListRuns(request);
  });
}

Result<v1::ListTrainRunsResponse> Services::ListTrainRuns(const v1::ListTrainRunsRequest& request) {
  return Call<v1::ListTrainRunsResponse>(ctx_, "TraceService/ListTrainRuns", request, [&] {
    return daemon::TraceService(ctx_.Store(costdb::OpenMode::kReadOnly)).ListTrainRuns(request);
  });
}

std::string Services::where() const {
  return ctx_.remote.empty() ? costdb::RedactUrl(DbPath(ctx_)) : ctx_.remote;
}

}  // namespace edgecost::cli
