#include <fstream>
#include <iostream>
#include <sstream>

#include "base/units.h"
#include "cli/cli.h"
#include "cli/table.h"
#include "costdb/costdb.h"
#include "daemon/client.h"
#include "graph/cost_source.h"
#include "proto/json.h"
#include "service/cost_tables.h"
#include "solver/heuristics.h"
#include "solver/problem.h"
#include "solver/simulator.h"
#include "solver/solve.h"
#include "solver/svg.h"

namespace edgecost::cli {
namespace {

struct SolveFlags {
  std::string model = "resnet18_cifar";
  std::string graph_file;
  std::string platform = "a72";
  std::string device;
  int batch_size = 1;
  std::string derivation;
  std::string trainable = "all";
  std::string ram_budget;
  std::string runtime_budget = "1x";
  bool no_paging = false;
  bool no_remat = false;
  bool count_paging_time = false;
  double time_limit_s = 60;
  int threads = 1;
  std::string strategy = "optimal";
  bool compare = false;
  bool min_ram = false;
  bool no_store = false;
  bool json = false;
  std::string out_path;
  std::string svg_path;
  CLI::Option* platform_option = nullptr;  // to refuse --platform with --device instead of ignoring it
};

const char* StatusName(v1::Schedule::Status status) {
  switch (status) {
    case v1::Schedule::STATUS_OPTIMAL:
      return "optimal (proven)";
    case v1::Schedule::STATUS_FEASIBLE:
      return "feasible";
    case v1::Schedule::STATUS_INFEASIBLE:
      return "infeasible (proven)";
    case v1::Schedule::STATUS_NO_SOLUTION:
      return "no schedule found";
    default:
      return "unknown";
  }
}

std::string Fixed(double value, int digits = 6) {
  std::ostringstream out;
  out.setf(std::ios::fixed);
  out.precision(digits);
  out << value;
  return out.str();
}

bool HasSchedule(const v1::Schedule& s) {
  return s.status() == v1::Schedule::STATUS_OPTIMAL || s.status() == v1::Schedule::STATUS_FEASIBLE;
}

void PrintSchedule(const v1::Schedule& s) {
  std::cout << "status         " << StatusName(s.status());
  if (s.status() == v1::Schedule::STATUS_FEASIBLE) {
    std::cout << ", gap " << Fixed(s.gap() * 100, 3) << "% of the energy above the floor";
  }
  std::cout << "\n";
  if (!s.message().empty()) std::cout << "               " << s.message() << "\n";
  if (!HasSchedule(s)) {
    if (s.min_feasible_ram_bytes() > 0) {
      std::cout << "smallest RAM   " << BytesText(s.min_feasible_ram_bytes())
                << " has a schedule at this runtime budget (found by the heuristics)\n";
    }
    return;
  }
  const v1::EnergyBreakdown& e = s.energy();
  const auto energy = [&](double j) { return FormatJoules(j); };
  std::cout << "energy         " << EnergyText(e.total_j(), s.energy_source()) << " = compute " << energy(e.compute_j())
            << " + recompute " << energy(e.recompute_j()) << " + page-in " << energy(e.page_in_j()) << " + page-out "
            << energy(e.page_out_j()) << "\n"
            << "lower bound    " << energy(s.lower_bound_j()) << " (floor " << energy(s.floor_j())
            << ": every node computed once)\n"
            << "peak RAM       " << BytesText(s.peak_ram_bytes()) << " of " << BytesText(s.ram_budget_bytes())
            << " budget\n"
            << "runtime        " << FormatSeconds(s.runtime_s()) << " of " << FormatSeconds(s.runtime_budget_s())
            << " budget\n"
            << "operations     " << s.recomputations() << " recomputations, " << s.page_outs() << " page-outs, "
            << s.page_ins() << " page-ins\n"
            << "solve time     " << FormatSeconds(s.solve_time_s()) << " (first schedule after "
            << FormatSeconds(s.time_to_first_feasible_s()) << ")\n";
}

Result<v1::ScheduleRequest> BuildRequest(const SolveFlags& flags) {
  v1::ScheduleRequest request;
  if (!flags.graph_file.empty()) {
    request.set_graph_file(flags.graph_file);
  } else {
    if (!flags.device.empty() && flags.platform_option && flags.platform_option->count() > 0) {
      return InvalidArgument("--platform " + flags.platform + " names a board preset (poet-flops costs) and --device " +
                             flags.device + " a profiled device (measured costs): give one of them");
    }
    request.set_model(flags.model);
    request.set_device(flags.device.empty() ? flags.platform : flags.device);
    request.set_cost_source(flags.device.empty() ? std::string(graph::kPoetFlopsSource) : "measured");
    request.set_batch_size(static_cast<uint32_t>(flags.batch_size));
    request.set_derivation(flags.derivation);
    request.set_trainable(flags.trainable);
  }
  if (flags.ram_budget.empty()) return InvalidArgument("--ram-budget is required (e.g. 3MB, 2.5MiB, 3000000)");
  EC_ASSIGN_OR_RETURN(int64_t ram, ParseBytes(flags.ram_budget));
  if (ram <= 0) return InvalidArgument("--ram-budget must be positive");
  request.set_ram_budget_bytes(static_cast<uint64_t>(ram));
  EC_ASSIGN_OR_RETURN(RuntimeBudget runtime, ParseRuntimeBudget(flags.runtime_budget));
  if (runtime.kind == RuntimeBudget::Kind::kMultiple) {
    request.set_runtime_budget_multiple(runtime.value);
  } else {
    request.set_runtime_budget_s(runtime.value);
  }
  request.set_disable_paging(flags.no_paging);
  request.set_disable_remat(flags.no_remat);
  request.set_count_paging_time(flags.count_paging_time);
  request.set_time_limit_s(flags.time_limit_s);
  request.set_threads(static_cast<uint32_t>(flags.threads));
  request.set_strategy(flags.strategy);
  return request;
}

Status WriteFile(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
  return out.flush() ? Status::Ok() : PermissionDenied("cannot write " + path);
}

int RunCompare(const solver::Problem& problem, const SolveFlags& flags, v1::EnergySource energy_source) {
  Table table({{"strategy", Table::Align::kLeft},
               {"status", Table::Align::kLeft},
               {"energy"},
               {"vs optimal"},
               {"recompute"},
               {"page in/out"},
               {"peak RAM"},
               {"runtime"}});
  double optimal_j = 0;
  std::vector<solver::Strategy> strategies = {solver::Strategy::kOptimal};
  strategies.insert(strategies.end(), std::begin(solver::kBaselines), std::end(solver::kBaselines));
  for (solver::Strategy kind : strategies) {
    if (kind == solver::Strategy::kPagingOnly && !problem.allow_paging) continue;
    const std::string strategy(solver::StrategyName(kind));
    solver::SolveOptions options{strategy, flags.time_limit_s, flags.threads, false};
    auto s = solver::Solve(problem, options);
    if (!s.ok()) return Failure(s.status());
    if (kind == solver::Strategy::kOptimal && HasSchedule(*s)) optimal_j = s->energy().total_j();
    if (!HasSchedule(*s)) {
      table.AddRow({strategy, s->status() == v1::Schedule::STATUS_INFEASIBLE ? "infeasible" : "no schedule"});
      continue;
    }
    const std::string versus = optimal_j > 0 ? "+" + Fixed((s->energy().total_j() / optimal_j - 1) * 100, 2) + "%" : "";
    table.AddRow({strategy, s->status() == v1::Schedule::STATUS_OPTIMAL ? "optimal" : "feasible",
                  EnergyText(s->energy().total_j(), energy_source), versus, std::to_string(s->recomputations()),
                  std::to_string(s->page_ins()) + "/" + std::to_string(s->page_outs()),
                  FormatBytes(static_cast<double>(s->peak_ram_bytes())), FormatSeconds(s->runtime_s())});
  }
  table.Print(std::cout);
  return kExitOk;
}

// --out: the schedule in protobuf's JSON mapping, indented.
Status WriteScheduleJson(const std::string& path, const v1::Schedule& schedule) {
  EC_ASSIGN_OR_RETURN(std::string json, proto::ToJson(schedule, {.indent = true}));
  return WriteFile(path, json);
}

// Solved by a daemon, which also stores the schedule.
int RunRemoteSolve(const SolveFlags& flags, const Context& ctx, const v1::ScheduleRequest& request) {
  if (flags.compare || flags.min_ram || !flags.svg_path.empty()) {
    return UsageError(InvalidArgument("--compare, --min-ram and --svg are local only"));
  }
  v1::Schedule schedule;
  if (Status s = daemon::CallRemote(ctx.remote, "SolverService/Solve", request, schedule); !s.ok()) return Failure(s);
  if (!flags.out_path.empty()) {
    if (Status s = WriteScheduleJson(flags.out_path, schedule); !s.ok()) return Failure(s);
  }
  if (flags.json) {
    PrintJson(schedule);
  } else {
    std::cout << "problem        " << request.model() << " on " << request.device() << " via " << ctx.remote
              << ", RAM budget " << BytesText(request.ram_budget_bytes()) << ", runtime budget " << flags.runtime_budget
              << "\n";
    PrintSchedule(schedule);
    std::cout << "stored         schedule #" << schedule.id() << " in the daemon's database\n";
    if (!flags.out_path.empty()) std::cout << "written        " << flags.out_path << "\n";
  }
  return HasSchedule(schedule) ? kExitOk : kExitFailure;
}

int RunSolve(const SolveFlags& flags, const Context& ctx) {
  auto request = BuildRequest(flags);
  if (!request.ok()) return UsageError(request.status());
  if (!ctx.remote.empty()) return RunRemoteSolve(flags, ctx, *request);
  const std::string db_path = DbPath(ctx);
  std::optional<costdb::CostDb> db;
  bool store = !flags.no_store;
  std::string not_stored;  // why a schedule meant to be stored is not
  if (store) {
    auto opened = costdb::CostDb::Open(db_path, costdb::OpenMode::kReadWrite);
    if (opened.ok()) {
      db.emplace(std::move(opened).value());
    } else if (opened.status().code() == ErrorCode::kPermissionDenied) {  // read-only media: solve, store nothing
      store = false;
      not_stored = opened.status().message();
    } else {
      return Failure(opened.status());
    }
  }
  if (!db && !flags.device.empty()) {  // measured costs are read from the database
    auto opened = costdb::CostDb::Open(db_path, costdb::OpenMode::kReadOnly);
    if (!opened.ok()) return Failure(opened.status());
    db.emplace(std::move(opened).value());
  }
  if (flags.compare || flags.min_ram) {
    auto table = service::CostTableForRequest(db ? &*db : nullptr, *request);
    if (!table.ok()) return Failure(table.status());
    auto problem = solver::ProblemFromCostTable(*table, *request);
    if (!problem.ok()) return Failure(problem.status());
    if (flags.compare) return RunCompare(*problem, flags, table->energy_source());
    auto ram = solver::MinFeasibleRam(*problem);
    if (!ram.ok()) return Failure(ram.status());
    std::cout << "smallest RAM budget with a schedule at " << flags.runtime_budget << ": " << BytesText(*ram)
              << ", found by the heuristics to 0.1%; lower bound " << BytesText(solver::MemoryLowerBound(*problem))
              << " (the largest node with its inputs)\n";
    return kExitOk;
  }

  // The flags were checked above: what fails now is the graph, the costs or the database.
  auto solved = service::SolveRequest(db ? &*db : nullptr, *request, store);
  if (!solved.ok()) return Failure(solved.status());
  const v1::CostTable& table = solved->table;
  const v1::Schedule& schedule = solved->schedule;
  if (!flags.out_path.empty()) {
    if (Status s = WriteScheduleJson(flags.out_path, schedule); !s.ok()) return Failure(s);
  }
  if (!flags.svg_path.empty() && HasSchedule(schedule)) {
    if (Status s = WriteFile(flags.svg_path, solver::ScheduleToSvg(solved->problem, schedule)); !s.ok()) {
      return Failure(s);
    }
  }
  if (flags.json) {
    PrintJson(schedule);
  } else {
    std::cout << "problem        " << table.graph().model() << " on " << table.device() << " (" << table.cost_source()
              << "), " << solved->problem.size() << " nodes, RAM budget " << BytesText(request->ram_budget_bytes())
              << ", runtime budget " << flags.runtime_budget << "\n";
    PrintSchedule(schedule);
    if (!not_stored.empty()) std::cout << "not stored     " << not_stored << "\n";
    if (!flags.out_path.empty()) std::cout << "written        " << flags.out_path << "\n";
    if (!flags.svg_path.empty() && HasSchedule(schedule)) std::cout << "written        " << flags.svg_path << "\n";
  }
  return HasSchedule(schedule) ? kExitOk : kExitFailure;
}

int RunCheck(const std::string& path, bool json, const Context& ctx) {
  std::ifstream in(path);
  if (!in) return Failure(NotFound("cannot read " + path));
  std::stringstream text;
  text << in.rdbuf();
  v1::Schedule schedule;
  if (Status decoded = proto::FromJson(text.str(), &schedule); !decoded.ok()) {
    return Failure(
        InvalidArgument(path + " is not a schedule (protobuf JSON of edgecost.v1.Schedule): " + decoded.message()));
  }
  std::optional<costdb::CostDb> db;
  if (schedule.request().cost_source() == "measured") {
    auto opened = costdb::CostDb::Open(DbPath(ctx), costdb::OpenMode::kReadOnly);
    if (!opened.ok()) return Failure(opened.status());
    db.emplace(std::move(opened).value());
  }
  auto checked = service::CheckSchedule(db ? &*db : nullptr, schedule);
  if (!checked.ok()) return Failure(checked.status());
  const solver::Problem* problem = &checked->problem;
  const solver::Replay& replay = checked->replay;
  if (json) {
    v1::CheckResult result;
    result.set_valid(replay.valid);
    result.set_violation(replay.violation);
    *result.mutable_energy() = replay.energy;
    result.set_energy_source(schedule.energy_source());
    result.set_peak_ram_bytes(static_cast<uint64_t>(replay.peak_ram_bytes));
    result.set_ram_budget_bytes(static_cast<uint64_t>(problem->ram_budget_bytes));
    result.set_runtime_s(replay.runtime_s);
    result.set_runtime_budget_s(problem->runtime_budget_s);
    result.set_claimed_energy_j(schedule.energy().total_j());
    PrintJson(result);
    return replay.valid ? kExitOk : kExitFailure;
  }
  if (!replay.valid) {
    std::cout << "invalid        " << replay.violation << "\n";
    return kExitFailure;
  }
  std::cout << "valid          energy " << EnergyText(replay.energy.total_j(), schedule.energy_source())
            << ", peak RAM " << BytesText(replay.peak_ram_bytes) << " of " << BytesText(problem->ram_budget_bytes)
            << ", runtime " << FormatSeconds(replay.runtime_s) << " of " << FormatSeconds(problem->runtime_budget_s)
            << "\n";
  if (std::fabs(replay.energy.total_j() - schedule.energy().total_j()) >
      1e-9 * std::max(1.0, replay.energy.total_j())) {
    std::cout << "note           the file claims " << Fixed(schedule.energy().total_j()) << " J\n";
  }
  return kExitOk;
}

}  // namespace

void RegisterSolveCommand(CLI::App& app, Context& ctx) {
  auto flags = std::make_shared<SolveFlags>();
  CLI::App* cmd = app.add_subcommand("solve",
                                     "Energy-optimal schedule of recomputation and paging within RAM and "
                                     "runtime budgets");
  cmd->add_option("--model", flags->model, "Zoo or ONNX model")->capture_default_str();
  cmd->add_option("--graph", flags->graph_file, "A graph file with costs (training-graph/v1 or node-link JSON)");
  flags->platform_option =
      cmd->add_option("--platform", flags->platform, "Board preset for poet-flops costs")->capture_default_str();
  cmd->add_option("--device", flags->device, "Use measured costs of a profiled device (\"this\": this machine)");
  cmd->add_option("--batch-size", flags->batch_size, "Batch size")->capture_default_str();
  cmd->add_option("--derivation", flags->derivation,
                  "exact (default: what each backward really reads) or poet (POET's construction)");
  cmd->add_option("--trainable", flags->trainable, "all, last:K or bias")->capture_default_str();
  cmd->add_option("--ram-budget", flags->ram_budget, "RAM for activations: 3000000, 3MB, 2.5MiB");
  cmd->add_option("--runtime-budget", flags->runtime_budget, "Multiple of a plain step (7.6x) or seconds (1.2s)")
      ->capture_default_str();
  cmd->add_flag("--no-paging", flags->no_paging, "Recompute only");
  cmd->add_flag("--no-remat", flags->no_remat, "Page only");
  cmd->add_flag("--count-paging-time", flags->count_paging_time, "Paging time counts against the runtime budget");
  cmd->add_option("--time-limit-s", flags->time_limit_s, "Solver time limit")->capture_default_str();
  cmd->add_option("--threads", flags->threads, "Solver threads")->capture_default_str();
  std::vector<std::string> strategies;
  for (solver::Strategy s : solver::kStrategies) strategies.emplace_back(solver::StrategyName(s));
  cmd->add_option("--strategy", flags->strategy,
                  solver::StrategyNames() + " (greedy: the MILP's heuristic start alone)")
      ->capture_default_str()
      ->check(CLI::IsMember(strategies));
  cmd->add_flag("--compare", flags->compare, "Every strategy side by side");
  cmd->add_flag("--min-ram", flags->min_ram, "Search the smallest RAM budget with a schedule");
  cmd->add_flag("--no-store", flags->no_store, "Do not store the request and schedule in the cost database");
  cmd->add_flag("--json", flags->json, "Print the schedule as protobuf JSON");
  cmd->add_option("--out", flags->out_path, "Write the schedule (protobuf JSON) to a file");
  cmd->add_option("--svg", flags->svg_path, "Draw the schedule: stages down, nodes across");
  cmd->footer(
      "Examples:\n"
      "  edgecost solve --model resnet18_cifar --platform a72 --ram-budget 3MB --runtime-budget 7.6x\n"
      "  edgecost solve --model resnet18_cifar --ram-budget 1.5MB --runtime-budget 1.5x --compare\n"
      "  edgecost solve --model resnet18_cifar --device this --ram-budget 1MB --out s.json --svg s.svg\n"
      "  edgecost solve --graph checkmate_graph.json --ram-budget 2GB --runtime-budget 1.2x");
  cmd->callback([flags, &ctx] { ctx.exit_code = RunSolve(*flags, ctx); });

  auto path = std::make_shared<std::string>();
  CLI::App* check = app.add_subcommand("check", "Replay a schedule file and name its first violation");
  auto json = std::make_shared<bool>(false);
  check->add_option("schedule", *path, "Schedule JSON written by `edgecost solve --out`")->required();
  check->add_flag("--json", *json, "Print the replay as protobuf JSON (CheckResult)");
  check->footer("Examples:\n  edgecost check schedule.json\n  edgecost check schedule.json --json");
  check->callback([path, json, &ctx] { ctx.exit_code = RunCheck(*path, *json, ctx); });
}

}  // namespace edgecost::cli
