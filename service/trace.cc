#include "service/trace.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include <nlohmann/json.hpp>

#include "service/cost_tables.h"
#include "solver/timeline.h"
#include "train/trace.h"

namespace edgecost::service {
namespace {

using nlohmann::json;

// Events in the order viewers need: metadata first, then by time (stable, so a
// track's events keep their order at equal timestamps).
v1::Trace Finish(std::vector<json> metadata, std::vector<json> events, json other, const std::string& title) {
  std::stable_sort(events.begin(), events.end(),
                   [](const json& a, const json& b) { return a["ts"].get<double>() < b["ts"].get<double>(); });
  json trace;
  trace["traceEvents"] = json::array();
  for (json& e : metadata) trace["traceEvents"].push_back(std::move(e));
  for (json& e : events) trace["traceEvents"].push_back(std::move(e));
  trace["displayTimeUnit"] = "ms";
  other["title"] = title;
  other["generator"] = "edgecost";
  trace["otherData"] = std::move(other);
  v1::Trace out;
  out.set_events(static_cast<uint32_t>(trace["traceEvents"].size()));
  out.set_title(title);
  // Names come from graph files: invalid UTF-8 is replaced rather than refused.
  out.set_trace_json(trace.dump(-1, ' ', false, json::error_handler_t::replace));
  return out;
}

json Meta(const char* name, int pid, int tid, json args) {
  json e = {{"name", name}, {"ph", "M"}, {"pid", pid}, {"args", std::move(args)}};
  if (tid >= 0) e["tid"] = tid;
  return e;
}

// Microseconds on a whole-nanosecond grid, start and end rounded alike, so that
// a slice that starts where another ends never overlaps it by a rounding error.
double Us(double seconds) { return static_cast<double>(std::llround(seconds * 1e9)) / 1e3; }

json Slice(const std::string& name, const std::string& category, int pid, int tid, double start_s, double duration_s,
           json args) {
  const double start_us = Us(start_s), end_us = Us(start_s + duration_s);
  return {{"name", name},
          {"cat", category},
          {"ph", "X"},
          {"pid", pid},
          {"tid", tid},
          {"ts", start_us},
          {"dur", end_us - start_us},
          {"args", std::move(args)}};
}

}  // namespace

Result<v1::Trace> ScheduleTrace(const solver::Problem& p, const v1::Schedule& schedule, const std::string& title) {
  EC_ASSIGN_OR_RETURN(solver::Timeline timeline, solver::PredictTimeline(p, schedule));
  constexpr int kPid = 1;
  constexpr int kStagesTid = 1;
  auto tid = [](solver::StepKind kind) { return 2 + static_cast<int>(kind); };  // compute 2 ... page-in 5
  std::vector<json> metadata, events;
  metadata.push_back(Meta("process_name", kPid, -1, {{"name", title}}));
  metadata.push_back(Meta("thread_name", kPid, kStagesTid, {{"name", "stages"}}));
  metadata.push_back(Meta("thread_sort_index", kPid, kStagesTid, {{"sort_index", kStagesTid}}));
  for (solver::StepKind kind : solver::kStepKinds) {
    metadata.push_back(Meta("thread_name", kPid, tid(kind), {{"name", std::string(solver::StepKindName(kind))}}));
    metadata.push_back(Meta("thread_sort_index", kPid, tid(kind), {{"sort_index", tid(kind)}}));
  }
  const int n = p.size();
  for (int t = 0; t < n; ++t) {
    const double start_s = timeline.stage_start_s[static_cast<size_t>(t)];
    const double end_s = t + 1 < n ? timeline.stage_start_s[static_cast<size_t>(t) + 1] : timeline.runtime_s;
    const std::string& name = p.names[static_cast<size_t>(t)];
    events.push_back(Slice("stage " + std::to_string(t) + ": " + name, "stage", kPid, kStagesTid, start_s,
                           end_s - start_s,
                           {{"stage", t}, {"pass", p.backward[static_cast<size_t>(t)] ? "backward" : "forward"}}));
  }
  for (const solver::TimelineStep& step : timeline.steps) {
    const std::string kind(solver::StepKindName(step.kind));
    json args = {{"node", step.node}, {"stage", step.stage}, {"energy_j", step.energy_j}};
    const bool paging = step.kind == solver::StepKind::kPageIn || step.kind == solver::StepKind::kPageOut;
    if (paging && !timeline.paging_times_known) {
      // No paging times in the cost table: a mark at the moment it is issued, not a made-up duration.
      args["note"] = "the cost table has no paging times";
      events.push_back({{"name", p.names[static_cast<size_t>(step.node)]},
                        {"cat", kind},
                        {"ph", "i"},
                        {"s", "t"},
                        {"pid", kPid},
                        {"tid", tid(step.kind)},
                        {"ts", Us(step.start_s)},
                        {"args", std::move(args)}});
      continue;
    }
    events.push_back(Slice(p.names[static_cast<size_t>(step.node)], kind, kPid, tid(step.kind), step.start_s,
                           step.duration_s, std::move(args)));
  }
  for (const solver::MemorySample& sample : timeline.memory) {
    events.push_back({{"name", "RAM"},
                      {"ph", "C"},
                      {"pid", kPid},
                      {"ts", Us(sample.time_s)},
                      {"args", {{"in_use_bytes", sample.bytes}, {"budget_bytes", timeline.budget_bytes}}}});
  }
  if (timeline.backward_start_s >= 0) {
    events.push_back({{"name", "backward pass begins"},
                      {"ph", "i"},
                      {"s", "p"},
                      {"pid", kPid},
                      {"tid", kStagesTid},
                      {"ts", Us(timeline.backward_start_s)},
                      {"args", {{"node", timeline.first_backward_node}}}});
  }
  json other = {{"kind", "schedule"},
                {"schedule_id", schedule.id()},
                {"strategy", schedule.strategy()},
                {"energy_j", schedule.energy().total_j()},
                {"predicted_runtime_s", timeline.runtime_s},
                {"peak_ram_bytes", timeline.peak_bytes},
                {"activation_budget_bytes", timeline.budget_bytes},
                {"paging", timeline.paging_times_known ? "overlaps computation on one storage queue"
                                                       : "no paging times in the cost table: marks, not slices"}};
  return Finish(std::move(metadata), std::move(events), std::move(other), title);
}

Result<v1::Trace> StoredScheduleTrace(costdb::CostDb& db, int64_t schedule_id) {
  EC_ASSIGN_OR_RETURN(StoredScheduleView view, LoadStoredSchedule(db, schedule_id));
  if (!view.replay.valid) {
    return FailedPrecondition("schedule #" + std::to_string(schedule_id) + " has no timeline: " +
                              (view.replay.violation.empty() ? "it holds no schedule" : view.replay.violation));
  }
  const v1::ScheduleRequest& r = view.schedule.request();
  const std::string title = "schedule #" + std::to_string(schedule_id) + ": " +
                            (r.model().empty() ? r.graph_file() : r.model()) + " on " + view.table.device() + " (" +
                            view.schedule.strategy() + ", predicted)";
  return ScheduleTrace(view.problem, view.schedule, title);
}

Result<v1::Trace> ProfileRunTrace(costdb::CostDb& db, int64_t run_id) {
  EC_ASSIGN_OR_RETURN(costdb::StoredRun run, db.GetRun(run_id));
  EC_ASSIGN_OR_RETURN(std::vector<v1::OpCost> ops, db.ListRunOpCosts(run_id));
  if (ops.empty()) {
    return NotFound("profile run #" + std::to_string(run_id) +
                    " holds no op costs (a later run measured them again); list runs with `edgecost trace --list`");
  }
  std::stable_sort(ops.begin(), ops.end(), [](const v1::OpCost& a, const v1::OpCost& b) {
    return a.window_start_unix_s() < b.window_start_unix_s();
  });
  double origin_s = std::numeric_limits<double>::infinity();
  for (const v1::OpCost& op : ops) {
    if (op.window_start_unix_s() > 0) origin_s = std::min(origin_s, op.window_start_unix_s());
  }
  if (!std::isfinite(origin_s)) origin_s = 0;
  constexpr int kPid = 1, kOpsTid = 1;
  const std::string title = "profile run #" + std::to_string(run_id) + " (" + run.cost_source + ", fingerprint " +
                            run.fingerprint_hash + ", started " + run.started_at + ")";
  std::vector<json> metadata, events;
  metadata.push_back(Meta("process_name", kPid, -1, {{"name", title}}));
  metadata.push_back(Meta("thread_name", kPid, kOpsTid, {{"name", "ops and their repetitions"}}));
  double cursor_s = 0;  // where the next op without a wall time goes: after everything placed so far
  int without_repetitions = 0;
  for (const v1::OpCost& op : ops) {
    const v1::OpSignature& sig = op.signature();
    const std::string name = sig.kind() + (sig.phase() == v1::PHASE_BACKWARD ? " backward" : " forward");
    json args = {{"key", sig.key()},
                 {"median_s", op.runtime().median_s()},
                 {"ci95_low_s", op.runtime().ci95_low_s()},
                 {"ci95_high_s", op.runtime().ci95_high_s()},
                 {"repetitions", op.runtime().repetitions()},
                 {"repetitions_in_trace", op.repetitions_size()},
                 {"energy_j", op.energy_j()},
                 {"energy_source", v1::EnergySource_Name(op.energy_source())}};
    if (op.repetitions_size() == 0 || op.window_start_unix_s() <= 0) {
      ++without_repetitions;
      args["note"] = "repetitions not kept (measured before edgecost kept them): one slice of all of them";
      const double duration_s = op.runtime().median_s() * std::max<uint32_t>(1, op.runtime().repetitions());
      events.push_back(Slice(name, "op", kPid, kOpsTid, cursor_s, duration_s, std::move(args)));
      cursor_s += duration_s;
      continue;
    }
    // The op's slice spans exactly its repetitions, so that they nest inside it.
    const double base_s = std::max(op.window_start_unix_s() - origin_s, cursor_s);
    const v1::Repetition& last = op.repetitions(op.repetitions_size() - 1);
    const double first_s = base_s + op.repetitions(0).start_s();
    const double end_s = base_s + last.start_s() + last.runtime_s();
    events.push_back(Slice(name, "op", kPid, kOpsTid, first_s, end_s - first_s, std::move(args)));
    for (int i = 0; i < op.repetitions_size(); ++i) {
      const v1::Repetition& r = op.repetitions(i);
      // A disturbed repetition (a thread of the op waited for a CPU) is shown; a wall-clock runtime left it out,
      // a thread-CPU one kept it (the wait added no CPU time).
      events.push_back(Slice("repetition " + std::to_string(i + 1),
                             r.disturbed() ? "disturbed repetition" : "repetition", kPid, kOpsTid, base_s + r.start_s(),
                             r.runtime_s(), {{"runtime_s", r.runtime_s()}, {"disturbed", r.disturbed()}}));
    }
    cursor_s = end_s;
  }
  json other = {{"kind", "profile run"},
                {"run_id", run_id},
                {"ops", ops.size()},
                {"ops_without_repetitions", without_repetitions},
                {"started_at", run.started_at},
                {"finished_at", run.finished_at}};
  return Finish(std::move(metadata), std::move(events), std::move(other), title);
}

Result<v1::Trace> TrainRunTrace(costdb::CostDb& db, int64_t train_run_id) {
  EC_ASSIGN_OR_RETURN(v1::TrainRun run, db.GetTrainRun(train_run_id));
  if (run.last_step().empty()) {
    return FailedPrecondition("training run " + std::to_string(train_run_id) +
                              " was recorded before run records kept their last step; `edgecost train` records a new "
                              "one");
  }
  std::vector<std::string> names;
  for (const v1::NodeTime& node : run.nodes()) {
    if (node.node() >= names.size()) names.resize(node.node() + 1);
    names[node.node()] = node.name();
  }
  const std::string title = "training run " + std::to_string(train_run_id) + ": " + run.model() + ", " +
                            run.strategy() + ", step " + std::to_string(run.steps()) + " (measured)";
  return train::ChromeTrace(names, {{static_cast<int>(run.steps()), train::FromProto(run.last_step())}}, title);
}

Result<v1::Trace> GetTrace(costdb::CostDb& db, const v1::GetTraceRequest& request) {
  constexpr uint64_t kMaxId = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
  switch (request.subject_case()) {
    case v1::GetTraceRequest::kScheduleId:
      if (request.schedule_id() == 0 || request.schedule_id() > kMaxId) {
        return InvalidArgument("schedule_id must be a stored schedule's id (edgecost solve prints it)");
      }
      return StoredScheduleTrace(db, static_cast<int64_t>(request.schedule_id()));
    case v1::GetTraceRequest::kRunId:
      if (request.run_id() == 0 || request.run_id() > kMaxId) {
        return InvalidArgument("run_id must be a profile run's id (ListRuns lists them)");
      }
      return ProfileRunTrace(db, static_cast<int64_t>(request.run_id()));
    case v1::GetTraceRequest::kTrainRunId:
      if (request.train_run_id() == 0 || request.train_run_id() > kMaxId) {
        return InvalidArgument("train_run_id must be a training run's id (`edgecost runs` lists them)");
      }
      return TrainRunTrace(db, static_cast<int64_t>(request.train_run_id()));
    case v1::GetTraceRequest::SUBJECT_NOT_SET:
      break;
  }
  return InvalidArgument("say what to trace: schedule_id, run_id or train_run_id");
}

Result<v1::ListRunsResponse> ListRuns(costdb::CostDb& db) {
  EC_ASSIGN_OR_RETURN(auto runs, db.ListRunsWithOpCounts());
  v1::ListRunsResponse response;
  for (const auto& [run, ops] : runs) {
    v1::ProfileRun& out = *response.add_runs();
    out.set_id(static_cast<uint64_t>(run.id));
    out.set_fingerprint_hash(run.fingerprint_hash);
    out.set_cost_source(run.cost_source);
    switch (run.status) {
      case costdb::RunStatus::kRunning:
        out.set_status("running");
        break;
      case costdb::RunStatus::kComplete:
        out.set_status("complete");
        break;
      case costdb::RunStatus::kFailed:
        out.set_status("failed");
        break;
      case costdb::RunStatus::kCancelled:
        out.set_status("cancelled");
        break;
    }
    out.set_started_at(run.started_at);
    out.set_finished_at(run.finished_at);
    out.set_ops(static_cast<uint32_t>(ops));
    out.set_model(run.model);
  }
  return response;
}

}  // namespace edgecost::service
