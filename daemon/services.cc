#include "daemon/services.h"

#include <limits>
#include <thread>

#include <spdlog/spdlog.h>

#include "costdb/costdb.h"
#include "daemon/log.h"
#include "graph/resolve.h"
#include "graph/zoo.h"
#include "profiler/profile.h"
#include "service/cost_tables.h"
#include "service/models.h"
#include "service/trace.h"
#include "service/train_job.h"

namespace edgecost::daemon {
namespace {

unsigned Cores() { return std::max(1u, std::thread::hardware_concurrency()); }

}  // namespace

Result<v1::ListDevicesResponse> CostService::ListDevices(const v1::ListDevicesRequest&) {
  EC_ASSIGN_OR_RETURN(costdb::CostDb * db, store_.Db());
  return service::ListDevices(*db);
}

Result<v1::Device> CostService::GetDevice(const v1::GetDeviceRequest& request) {
  if (request.name().empty()) return InvalidArgument("name is required");
  EC_ASSIGN_OR_RETURN(costdb::CostDb * db, store_.Db());
  return db->GetDevice(request.name());
}

Result<v1::ListModelsResponse> CostService::ListModels(const v1::ListModelsRequest& request) {
  if (request.batch_size() > static_cast<uint32_t>(graph::kMaxBatchSize)) {
    return InvalidArgument("batch_size is at most " + std::to_string(graph::kMaxBatchSize));
  }
  EC_ASSIGN_OR_RETURN(costdb::CostDb * db, store_.Db());
  return service::ListModels(db, std::max(1, static_cast<int>(request.batch_size())));
}

Result<v1::AddModelResponse> CostService::AddModel(const v1::AddModelRequest& request) {
  EC_ASSIGN_OR_RETURN(costdb::CostDb * db, store_.Db());
  EC_ASSIGN_OR_RETURN(service::AddedModel added,
                      service::AddModel(*db, request.name(), request.model(), request.replace()));
  // A replaced model's analytic tables may be cached under the same request.
  if (cache_ && added.outcome == service::AddedModel::Outcome::kReplaced) cache_->Clear();
  spdlog::info("event=model name={} outcome={} kind={} bytes={}", Quoted(request.name()),
               service::OutcomeName(added.outcome), added.info.kind(), request.model().size());
  v1::AddModelResponse response;
  response.set_outcome(std::string(service::OutcomeName(added.outcome)));
  *response.mutable_model() = std::move(added.info);
  return response;
}

Result<v1::RemoveModelResponse> CostService::RemoveModel(const v1::RemoveModelRequest& request) {
  EC_RETURN_IF_ERROR(graph::CheckModelName(request.name()));
  EC_ASSIGN_OR_RETURN(costdb::CostDb * db, store_.Db());
  EC_RETURN_IF_ERROR(service::RemoveModel(*db, request.name()));
  if (cache_) cache_->Clear();
  spdlog::info("event=model name={} outcome=removed", Quoted(request.name()));
  return v1::RemoveModelResponse();
}

Result<v1::CostTable> CostService::GetCostTable(const v1::GetCostTableRequest& request) {
  EC_RETURN_IF_ERROR(graph::CheckModelName(request.model()));
  EC_ASSIGN_OR_RETURN(costdb::CostDb * db, store_.Db());
  EC_ASSIGN_OR_RETURN(v1::CostTable table, service::ResolveCostTable(db, request));
  // A zoo model's table from an analytic source depends on the request alone; any other is read
  // from the database (measured, measured-in-step, a stored model) and kept under its costs version.
  const bool from_db = !service::IsZooModel(request.model()) || table.cost_source() == profiler::kMeasuredSource ||
                       table.cost_source() == service::kMeasuredInStepSource;
  if (cache_ && !from_db) cache_->MarkAnalytic(request);
  return table;
}

Result<int64_t> CostService::CostsVersion() {
  EC_ASSIGN_OR_RETURN(costdb::CostDb * db, store_.Db());
  return db->CostsVersion();
}

Result<v1::PagingCost> CostService::GetPagingCosts(const v1::GetPagingCostsRequest& request) {
  if (request.device().empty()) return InvalidArgument("device is required");
  EC_ASSIGN_OR_RETURN(costdb::CostDb * db, store_.Db());
  EC_ASSIGN_OR_RETURN(v1::Device device, db->GetDevice(request.device()));
  EC_ASSIGN_OR_RETURN(std::optional<v1::PagingCost> paging, db->GetPagingCost(device.fingerprint().hash()));
  if (!paging) return NotFound("no paging costs for " + request.device() + "; profile it first");
  return *paging;
}

Result<v1::Schedule> SolverService::Solve(const v1::ScheduleRequest& request) {
  if (request.activation_budget_bytes() == 0 && request.activation_budget_percent() == 0 && !request.min_ram() &&
      request.process_ram_budget_bytes() == 0) {
    return InvalidArgument(
        "a budget is required: activation_budget_bytes or activation_budget_percent (the saved activations), or "
        "process_ram_budget_bytes (the whole process's RAM), unless min_ram asks for the smallest one");
  }
  // Reading files on a caller's behalf would expose whatever the daemon's user can read.
  if (!request.graph_file().empty()) return InvalidArgument("graph_file is read by the local CLI only; name a model");
  EC_RETURN_IF_ERROR(graph::CheckModelName(request.model()));
  if (request.solver_threads() > Cores()) {
    return InvalidArgument("solver_threads is at most " + std::to_string(Cores()) + " here, the number of cores");
  }
  if (request.time_limit_s() > kMaxTimeLimitS) {
    return InvalidArgument("time_limit_s is at most " + std::to_string(static_cast<int>(kMaxTimeLimitS)) +
                           " s over RPC");
  }
  EC_ASSIGN_OR_RETURN(costdb::CostDb * db, store_.Db());
  EC_ASSIGN_OR_RETURN(service::SolvedRequest solved, service::SolveRequest(db, request, /*store=*/true, stop_));
  solved.schedule.set_id(static_cast<uint64_t>(solved.schedule_id));
  spdlog::info("event=schedule id={} model={} device={} status={} energy_j={:.6g} solve_s={:.3f}", solved.schedule.id(),
               Quoted(request.model()), Quoted(request.device()), v1::Schedule::Status_Name(solved.schedule.status()),
               solved.schedule.energy().total_j(), solved.schedule.solve_time_s());
  v1::Event event;
  event.set_kind("schedule");
  event.set_schedule_id(solved.schedule.id());
  event.set_message("schedule #" + std::to_string(solved.schedule.id()) + " stored for " + request.model());
  events_.Emit(std::move(event));
  return solved.schedule;
}

Result<v1::Schedule> SolverService::GetSchedule(const v1::GetScheduleRequest& request) {
  if (request.id() == 0) return InvalidArgument("id is required");
  if (request.id() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    return NotFound("no schedule " + std::to_string(request.id()));
  }
  EC_ASSIGN_OR_RETURN(costdb::CostDb * db, store_.Db());
  EC_ASSIGN_OR_RETURN(v1::Schedule schedule, db->GetSchedule(static_cast<int64_t>(request.id())));
  schedule.set_id(request.id());
  return schedule;
}

Result<v1::ListSchedulesResponse> SolverService::ListSchedules(const v1::ListSchedulesRequest& request) {
  EC_ASSIGN_OR_RETURN(costdb::CostDb * db, store_.Db());
  return service::ListSchedules(*db, request);
}

Result<v1::Trace> TraceService::GetTrace(const v1::GetTraceRequest& request) {
  EC_ASSIGN_OR_RETURN(costdb::CostDb * db, store_.Db());
  return service::GetTrace(*db, request);
}

Result<v1::ListRunsResponse> TraceService::ListRuns(const v1::ListRunsRequest&) {
  EC_ASSIGN_OR_RETURN(costdb::CostDb * db, store_.Db());
  return service::ListRuns(*db);
}

Result<v1::ListTrainRunsResponse> TraceService::ListTrainRuns(const v1::ListTrainRunsRequest& request) {
  if (!request.model().empty()) EC_RETURN_IF_ERROR(graph::CheckModelName(request.model()));
  if (request.limit() > JobService::kMaxListedJobs) {
    return InvalidArgument("limit is at most " + std::to_string(JobService::kMaxListedJobs) +
                           "; 0 lists the newest 100");
  }
  EC_ASSIGN_OR_RETURN(costdb::CostDb * db, store_.Db());
  EC_ASSIGN_OR_RETURN(std::vector<v1::TrainRun> runs,
                      db->ListTrainRuns(request.model(), request.limit() > 0 ? static_cast<int>(request.limit()) : 100));
  v1::ListTrainRunsResponse response;
  for (v1::TrainRun& run : runs) *response.add_runs() = std::move(run);
  return response;
}

Result<v1::ListJobsResponse> JobService::ListJobs(const v1::ListJobsRequest& request) {
  if (request.limit() > kMaxListedJobs) {
    return InvalidArgument("limit is at most " + std::to_string(kMaxListedJobs) + "; 0 lists the newest 100");
  }
  EC_ASSIGN_OR_RETURN(std::vector<v1::Job> newest, jobs_.List(request.limit() > 0 ? request.limit() : 100));
  v1::ListJobsResponse response;
  for (v1::Job& job : newest) *response.add_jobs() = std::move(job);  // oldest first
  return response;
}

void JobService::WatchEvents(const v1::WatchEventsRequest& request, std::function<void(v1::WatchEventsResponse)> done) {
  events_.Watch(
      request.after_sequence(), request.wait_s(),
      [done = std::move(done)](std::vector<v1::Event> events) {
        v1::WatchEventsResponse response;
        for (v1::Event& event : events) *response.add_events() = std::move(event);
        done(std::move(response));
      },
      request.job_id());
}

}  // namespace edgecost::daemon
