// Chrome Trace Event JSON, the format Perfetto UI and chrome://tracing open:
// a schedule's predicted timeline (compute, recompute, page-out and page-in as
// slices on their own tracks, stages on a track above them, RAM in use and the
// budget as counters), and a profiling run's measured repetitions (each op a
// slice holding one slice per timed repetition). Timestamps are microseconds.
#pragma once

#include <cstdint>
#include <string>

#include "base/status.h"
#include "costdb/costdb.h"
#include "proto/edgecost.pb.h"
#include "solver/problem.h"

namespace edgecost::service {

// The predicted timeline of `schedule` on `problem`; refuses a schedule that does not replay.
Result<v1::Trace> ScheduleTrace(const solver::Problem& problem, const v1::Schedule& schedule, const std::string& title);

// A stored schedule, against the cost table it was solved from.
Result<v1::Trace> StoredScheduleTrace(costdb::CostDb& db, int64_t schedule_id);

// Every op a profiling run measured, at the wall time it was measured, with its
// kept repetitions; ops stored before repetitions were kept appear as one slice.
Result<v1::Trace> ProfileRunTrace(costdb::CostDb& db, int64_t run_id);

// A training run's last step as it ran: node executions, recomputations and
// waits on the compute track, page-outs and page-ins on the I/O track.
Result<v1::Trace> TrainRunTrace(costdb::CostDb& db, int64_t train_run_id);

// What TraceService.GetTrace and `edgecost trace` answer.
Result<v1::Trace> GetTrace(costdb::CostDb& db, const v1::GetTraceRequest& request);

// The runs `edgecost trace --list` and TraceService.ListRuns show, newest first.
Result<v1::ListRunsResponse> ListRuns(costdb::CostDb& db);

}  // namespace edgecost::service
