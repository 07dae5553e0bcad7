// edgecost trace: Chrome Trace Event JSON for Perfetto UI and chrome://tracing.
#include <fstream>
#include <iostream>
#include <sstream>

#include "cli/cli.h"
#include "cli/services.h"
#include "cli/table.h"
#include "costdb/costdb.h"
#include "daemon/client.h"
#include "proto/json.h"
#include "service/cost_tables.h"
#include "service/trace.h"

namespace edgecost::cli {
namespace {

struct TraceFlags {
  uint64_t schedule_id = 0;
  uint64_t run_id = 0;
  uint64_t train_run_id = 0;
  std::string schedule_file;
  std::string out;
  bool list = false;
  bool json = false;
};

Result<v1::Trace> TraceOfScheduleFile(const std::string& path, const Context& ctx) {
  EC_ASSIGN_OR_RETURN(v1::Schedule schedule, service::ReadScheduleFile(path));
  costdb::CostDb* db = nullptr;
  const std::string& source = schedule.request().cost_source();
  if (!schedule.has_cost_table() && (source == "measured" || source == "measured-in-step")) {
    EC_ASSIGN_OR_RETURN(db, ctx.Store(costdb::OpenMode::kReadOnly).Db());
  }
  EC_ASSIGN_OR_RETURN(service::CheckedSchedule checked, service::CheckSchedule(db, schedule));
  if (!checked.replay.valid) return InvalidArgument(path + " does not replay: " + checked.replay.violation);
  return service::ScheduleTrace(checked.problem, schedule, path + " (" + schedule.strategy() + ", predicted)");
}

int RunList(const TraceFlags& flags, const Context& ctx) {
  auto listed = Services(ctx).ListRuns(v1::ListRunsRequest());
  if (!listed.ok()) return Failure(listed.status());
  const v1::ListRunsResponse& runs = *listed;
  if (flags.json) {
    PrintJson(runs);
    return kExitOk;
  }
  if (runs.runs().empty()) {
    std::cout << "no profile runs; `edgecost profile --model NAME` makes one (schedules: `edgecost trace --schedule "
                 "ID`, ids from `edgecost solve`)\n";
    return kExitOk;
  }
  Table table({{"run"},
               {"model", Table::Align::kLeft},
               {"status", Table::Align::kLeft},
               {"ops"},
               {"started", Table::Align::kLeft},
               {"fingerprint", Table::Align::kLeft}});
  for (const v1::ProfileRun& run : runs.runs()) {
    table.AddRow(
        {std::to_string(run.id()), run.model().empty() ? "-" : run.model(), run.status(), std::to_string(run.ops()), run.started_at(), run.fingerprint_hash()});
  }
  table.Print(std::cout);
  return kExitOk;
}

int RunTrace(const TraceFlags& flags, const Context& ctx) {
  if (flags.list) return RunList(flags, ctx);
  const int subjects = (flags.schedule_id ? 1 : 0) + (flags.run_id ? 1 : 0) + (flags.train_run_id ? 1 : 0) +
                       (flags.schedule_file.empty() ? 0 : 1);
  if (subjects != 1) {
    return UsageError(InvalidArgument(
        "say what to trace: one of --schedule ID, --run ID, --train-run ID, --schedule-file FILE, or --list"));
  }
  v1::GetTraceRequest request;
  if (flags.schedule_id) request.set_schedule_id(flags.schedule_id);
  if (flags.run_id) request.set_run_id(flags.run_id);
  if (flags.train_run_id) request.set_train_run_id(flags.train_run_id);
  Result<v1::Trace> trace = v1::Trace();
  if (!flags.schedule_file.empty()) {
    if (!ctx.remote.empty()) return UsageError(InvalidArgument("--schedule-file is read locally; drop --remote"));
    trace = TraceOfScheduleFile(flags.schedule_file, ctx);
  } else if (!ctx.remote.empty()) {
    v1::Trace answer;
    Status s = daemon::CallRemote(ctx.remote, "TraceService/GetTrace", request, answer);
    trace = s.ok() ? Result<v1::Trace>(std::move(answer)) : Result<v1::Trace>(s);
  } else {
    auto opened = ctx.Store(costdb::OpenMode::kReadOnly).Db();
    if (!opened.ok()) return Failure(opened.status());
    costdb::CostDb* db = *opened;
    trace = service::GetTrace(*db, request);
  }
  if (!trace.ok()) return Failure(trace.status());
  std::string out = flags.out;
  if (out.empty()) {
    out = flags.schedule_id    ? "schedule-" + std::to_string(flags.schedule_id) + ".trace.json"
          : flags.run_id       ? "run-" + std::to_string(flags.run_id) + ".trace.json"
          : flags.train_run_id ? "train-run-" + std::to_string(flags.train_run_id) + ".trace.json"
                               : "schedule.trace.json";
  }
  if (out == "-") {
    std::cout << trace->trace_json() << "\n";
    return kExitOk;
  }
  std::ofstream file(out);
  file << trace->trace_json() << "\n";
  if (!file.flush()) return Failure(PermissionDenied("cannot write " + out + "; choose another --out"));
  if (flags.json) {
    v1::Trace summary = *trace;
    summary.clear_trace_json();  // the file has it
    PrintJson(summary);
    return kExitOk;
  }
  std::cout << "written        " << out << ": " << trace->title() << ", " << trace->events() << " events\n"
            << "open it in     https://ui.perfetto.dev (Open trace file) or chrome://tracing (Load)\n";
  return kExitOk;
}

}  // namespace

void RegisterTraceCommand(CLI::App& app, Context& ctx) {
  auto flags = std::make_shared<TraceFlags>();
  CLI::App* cmd = app.add_subcommand(
      "trace",
      "Chrome Trace Event JSON of a schedule's predicted timeline, a profile run's measured repetitions or a training "
      "run's last step");
  cmd->add_option("--schedule", flags->schedule_id, "A stored schedule's id (edgecost solve prints it)");
  cmd->add_option("--run", flags->run_id, "A profile run's id (see --list)");
  cmd->add_option("--train-run", flags->train_run_id,
                  "A training run's id (edgecost runs lists them): its last step as it ran");
  cmd->add_option("--schedule-file", flags->schedule_file, "A schedule file written by edgecost solve --out");
  cmd->add_option("--out", flags->out,
                  "Trace file to write; - for stdout (default: schedule-ID.trace.json, run-ID...)");
  cmd->add_flag("--list", flags->list, "List profile runs");
  cmd->add_flag("--json", flags->json, "Print the summary (or the run list) as JSON");
  cmd->footer(
      "A schedule's trace has tracks for stages, compute, recompute, page-out and page-in, and\n"
      "RAM in use next to the budget as a counter; a run's trace has each op with its repetitions;\n"
      "a training run's has each node execution, recomputation, page-out, page-in and wait as it ran.\n"
      "Examples:\n"
      "  edgecost solve --model resnet18_cifar --activation-budget 2MB --runtime-budget 1.5x   # prints schedule #ID\n"
      "  edgecost trace --schedule 3 --out s3.trace.json\n"
      "  edgecost trace --list && edgecost trace --run 1\n"
      "  edgecost train --model resnet18_cifar --steps 5 && edgecost runs && edgecost trace --train-run 1\n"
      "  edgecost solve ... --out s.json && edgecost trace --schedule-file s.json --out - | gzip > s.trace.json.gz\n"
      "  edgecost --remote unix:/run/edgecost.sock trace --schedule 3");
  cmd->callback([flags, &ctx] { ctx.exit_code = RunTrace(*flags, ctx); });
}

}  // namespace edgecost::cli
