// The three RPC services as plain classes: each method takes its request and
// returns its response or an error, so they are tested in process without a
// transport. The daemon binds them to Twirp routes; what crosses the wire is
// checked here (model names, ranges), once for every method.
#pragma once

#include <atomic>
#include <string>

#include "base/status.h"
#include "costdb/store.h"
#include "daemon/cost_table_cache.h"
#include "daemon/events.h"
#include "daemon/jobs.h"
#include "proto/edgecost.pb.h"

namespace edgecost::daemon {

class CostService {
 public:
  // `cache` (may be null) learns which tables are analytic, and so may be kept encoded whatever the database holds.
  CostService(costdb::Store& store, CostTableCache* cache) : store_(store), cache_(cache) {}

  Result<v1::ListDevicesResponse> ListDevices(const v1::ListDevicesRequest& request);
  Result<v1::Device> GetDevice(const v1::GetDeviceRequest& request);
  Result<v1::ListModelsResponse> ListModels(const v1::ListModelsRequest& request);
  Result<v1::CostTable> GetCostTable(const v1::GetCostTableRequest& request);
  Result<v1::PagingCost> GetPagingCosts(const v1::GetPagingCostsRequest& request);
  // Models as records: the bytes are checked by reading them as every command will.
  Result<v1::AddModelResponse> AddModel(const v1::AddModelRequest& request);
  Result<v1::RemoveModelResponse> RemoveModel(const v1::RemoveModelRequest& request);
  // The database's costs version (CostDb::CostsVersion), under which tables read from it are cached.
  Result<int64_t> CostsVersion();

 private:
  costdb::Store& store_;
  CostTableCache* cache_;
};

class SolverService {
 public:
  static constexpr double kMaxTimeLimitS = 600;  // a solve over RPC holds a solver thread

  // `stop` ends running solves early with their best schedule (the daemon's shutdown).
  SolverService(costdb::Store& store, EventLog& events, const std::atomic<bool>* stop)
      : store_(store), events_(events), stop_(stop) {}

  // Solves and stores; blocking, so the daemon runs it on its solve pool.
  Result<v1::Schedule> Solve(const v1::ScheduleRequest& request);
  Result<v1::Schedule> GetSchedule(const v1::GetScheduleRequest& request);
  Result<v1::ListSchedulesResponse> ListSchedules(const v1::ListSchedulesRequest& request);

 private:
  costdb::Store& store_;
  EventLog& events_;
  const std::atomic<bool>* stop_;
};

class TraceService {
 public:
  explicit TraceService(costdb::Store& store) : store_(store) {}

  Result<v1::Trace> GetTrace(const v1::GetTraceRequest& request);
  Result<v1::ListRunsResponse> ListRuns(const v1::ListRunsRequest& request);
  Result<v1::ListTrainRunsResponse> ListTrainRuns(const v1::ListTrainRunsRequest& request);

 private:
  costdb::Store& store_;
};

class JobService {
 public:
  static constexpr uint32_t kMaxListedJobs = 1000;  // one ListJobs answer; older jobs stay in the database

  JobService(JobManager& jobs, EventLog& events) : jobs_(jobs), events_(events) {}

  Result<v1::Job> StartProfile(const v1::StartProfileRequest& request) { return jobs_.StartProfile(request); }
  Result<v1::Job> StartTrain(const v1::StartTrainRequest& request) { return jobs_.StartTrain(request); }
  Result<v1::Job> GetJob(const v1::GetJobRequest& request) { return jobs_.Get(request.id()); }
  Result<v1::Job> CancelJob(const v1::CancelJobRequest& request) { return jobs_.Cancel(request.id()); }
  Result<v1::ListJobsResponse> ListJobs(const v1::ListJobsRequest& request);
  // A long poll: answers through `done`, perhaps later and from another thread.
  void WatchEvents(const v1::WatchEventsRequest& request, std::function<void(v1::WatchEventsResponse)> done);

 private:
  JobManager& jobs_;
  EventLog& events_;
};

}  // namespace edgecost::daemon
