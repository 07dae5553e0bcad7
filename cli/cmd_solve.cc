#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>

#include "base/heartbeat.h"
#include "base/units.h"
#include "cli/cli.h"
#include "cli/services.h"
#include "cli/table.h"
#include "costdb/costdb.h"
#include "costdb/postgres.h"
#include "daemon/client.h"
#include "graph/cost_source.h"
#include "profiler/profile.h"
#include "proto/json.h"
#include "service/cost_tables.h"
#include "service/models.h"
#include "service/train_job.h"
#include "service/words.h"
#include "solver/explain.h"
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
  std::string cost_source;  // with --device: measured (default) or measured-in-step
  int batch_size = 1;
  std::string derivation;
  std::string trainable = "all";
  bool update_in_backward = false;
  std::string ram_budget;         // the training process's peak RSS: the step's fixed parts come off it
  std::string activation_budget;  // the activations' alone (the arena's peak)
  std::string runtime_budget = "1.5x";  // solver::kDefaultRuntimeBudgetMultiple, as `train`
  bool no_paging = false;
  bool no_remat = false;
  bool count_paging_time = false;  // when given; else on measured costs (--device) yes, on a board preset no
  double time_limit_s = 60;
  int solver_threads = 1;
  int threads = 0;  // the measured cost table's compute threads (0: service::ResolveCostTable's default)
  std::string optimizer = "sgd";  // whose state the process budget holds
  double momentum = 0;
  std::string strategy = "optimal";
  bool compare = false;
  bool min_ram = false;
  bool no_store = false;
  bool json = false;
  std::string out_path;
  std::string svg_path;
  std::string node_runtimes_path;  // a JSON array of each node's seconds (ScheduleRequest.node_runtime_s)
  CLI::Option* platform_option = nullptr;  // to refuse --platform with --device instead of ignoring it
  CLI::Option* count_paging_option = nullptr;  // given, or the default by cost source
};

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

// Progress of a solve that runs for more than a second: a line when the best
// schedule improves (the bound alone: at most one a second), and at least one
// every few seconds while nothing improves, with the time elapsed.
class ProgressPrinter {
 public:
  explicit ProgressPrinter(std::ostream& out) : out_(out), beat_(1.0, [this](double t) { Tick(t); }) {}

  void operator()(const solver::Progress& p) {
    std::lock_guard<std::mutex> lock(mutex_);
    const double now_s = beat_.ElapsedS();
    if (p.min_feasible_ram_bytes > 0) {  // once, at once: the MILP may search the whole time limit
      printed_s_ = now_s;
      out_ << "progress       " << FormatSeconds(now_s) << ": no heuristic meets this budget; the smallest "
           << "activation budget with a schedule is about " << BytesText(static_cast<uint64_t>(p.min_feasible_ram_bytes))
           << " (the MILP searches on at this one)\n" << std::flush;
      return;
    }
    const bool better = p.energy_j < energy_j_;
    const bool tighter = p.lower_bound_j > bound_j_;
    energy_j_ = std::min(energy_j_, p.energy_j);
    bound_j_ = std::max(bound_j_, p.lower_bound_j);
    floor_j_ = p.floor_j;
    if (now_s < 1.0) return;
    if (printed_s_ >= 0 && !better && (!tighter || now_s - printed_s_ < 1.0)) return;
    Print(now_s, "");
  }

 private:
  static constexpr double kEveryS = 5.0;

  void Tick(double now_s) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (now_s < kEveryS || now_s - printed_s_ < kEveryS) return;  // a line at least every kEveryS seconds
    Print(now_s, "; still searching");
  }

  void Print(double now_s, const char* note) {
    printed_s_ = now_s;
    out_ << "progress       " << FormatSeconds(now_s) << ": ";
    if (!std::isfinite(energy_j_)) {
      out_ << "no schedule yet" << (bound_j_ > 0 ? ", bound " + FormatJoules(bound_j_) : std::string());
    } else {
      out_ << "best " << FormatJoules(energy_j_) << ", bound " << FormatJoules(bound_j_);
      if (energy_j_ > floor_j_) {
        out_ << ", " << Fixed(std::max(0.0, energy_j_ - bound_j_) / (energy_j_ - floor_j_) * 100, 1)
             << "% of the energy above the floor unproven";
      }
    }
    out_ << note << "\n" << std::flush;
  }

  std::ostream& out_;
  std::mutex mutex_;
  double energy_j_ = std::numeric_limits<double>::infinity();
  double bound_j_ = 0;
  double floor_j_ = 0;
  double printed_s_ = -1;
  Heartbeat beat_;  // last: stopped first, before what it prints with
};

void PrintSchedule(const v1::Schedule& s) {
  std::cout << "status         " << service::ScheduleStatusText(s.status());
  if (s.status() == v1::Schedule::STATUS_FEASIBLE) std::cout << ": " << service::GapText(s);
  std::cout << "\n";
  if (!s.message().empty()) std::cout << "               " << s.message() << "\n";
  if (!HasSchedule(s)) {
    if (s.min_feasible_ram_bytes() > 0) {
      std::cout << "smallest       activation budget " << BytesText(s.min_feasible_ram_bytes())
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
            << "activations    peak " << BytesText(s.peak_ram_bytes()) << " of " << BytesText(s.activation_budget_bytes())
            << " activation budget\n"
            << "runtime        " << FormatSeconds(s.runtime_s()) << " of " << FormatSeconds(s.runtime_budget_s())
            << " budget\n"
            << "operations     " << service::OperationsText(s.recomputations(), s.page_outs(), s.page_ins()) << "\n"
            << "updates        " << service::UpdatesText(s) << "\n"
            << "solve time     " << FormatSeconds(s.solve_time_s()) << " (first schedule after "
            << FormatSeconds(s.time_to_first_feasible_s()) << ")\n";
}

// The budget as the user gave it: "RAM budget 60.0 MB (activation budget ...)" or "activation budget 9.00 MB".
std::string BudgetLabel(const v1::ScheduleRequest& request) {
  if (request.process_ram_budget_bytes() > 0) {
    return "RAM budget " + BytesText(request.process_ram_budget_bytes()) + " (activation budget " +
           BytesText(request.activation_budget_bytes()) + ")";
  }
  std::string label = "activation budget " + BytesText(request.activation_budget_bytes());
  if (request.activation_budget_percent() > 0) {
    label += " (" + service::PercentText(request.activation_budget_percent()) + " of the plain step's activation peak)";
  }
  return label;
}

// The whole memory next to the schedule's activations, and how --ram-budget was split.
void PrintMemory(const v1::Schedule& s) {
  if (!s.has_memory()) return;
  const v1::StepMemory& m = s.memory();
  PrintStepMemory(m, HasSchedule(s) ? std::optional<uint64_t>(s.peak_ram_bytes()) : std::nullopt);
  if (s.request().process_ram_budget_bytes() > 0) {
    std::cout << "RAM budget     " << BytesText(s.request().process_ram_budget_bytes()) << " = fixed parts "
              << BytesText(m.fixed_bytes()) << " + activation budget " << BytesText(s.request().activation_budget_bytes())
              << "\n";
  }
}

// --node-runtimes FILE: a JSON array with each node's seconds, in node order.
Result<std::vector<double>> ReadNodeRuntimes(const std::string& path) {
  std::ifstream in(path);
  if (!in) return NotFound("cannot read --node-runtimes " + path);
  const nlohmann::json doc = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (!doc.is_array()) return InvalidArgument(path + " is not a JSON array of each node's seconds");
  std::vector<double> runtimes;
  for (const nlohmann::json& value : doc) {
    if (!value.is_number()) return InvalidArgument(path + ": entry " + std::to_string(runtimes.size()) + " is not a number");
    runtimes.push_back(value.get<double>());
  }
  return runtimes;
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
    if (!flags.cost_source.empty() && flags.device.empty()) {
      return InvalidArgument("--cost-source " + flags.cost_source + " needs --device (costs measured on a device)");
    }
    request.set_cost_source(flags.device.empty()        ? std::string(graph::kPoetFlopsSource)
                            : flags.cost_source.empty() ? service::kAutoCostSource
                                                        : flags.cost_source);
    request.set_batch_size(static_cast<uint32_t>(flags.batch_size));
    request.set_derivation(flags.derivation);
    request.set_trainable(flags.trainable);
  }
  if (flags.threads > 0 && flags.device.empty()) {
    return InvalidArgument("--threads picks the measured cost table of that many compute threads: it needs --device");
  }
  request.set_compute_threads(static_cast<uint32_t>(std::max(0, flags.threads)));
  request.set_solver_threads(static_cast<uint32_t>(std::max(1, flags.solver_threads)));
  v1::TrainOptimizer optimizer;
  optimizer.set_kind(flags.optimizer);
  optimizer.set_momentum(flags.momentum);
  EC_ASSIGN_OR_RETURN(const train::OptimizerOptions options, service::OptimizerOptionsOf(optimizer));
  request.set_optimizer_state_tensors(static_cast<uint32_t>(train::OptimizerStateTensors(options)));
  request.set_update_in_backward(flags.update_in_backward);
  if (!flags.node_runtimes_path.empty()) {
    EC_ASSIGN_OR_RETURN(const std::vector<double> runtimes, ReadNodeRuntimes(flags.node_runtimes_path));
    request.mutable_node_runtime_s()->Assign(runtimes.begin(), runtimes.end());
  }
  if (!flags.ram_budget.empty()) {
    if (!flags.activation_budget.empty() || flags.min_ram) {
      return InvalidArgument(
          "--ram-budget is the whole process's memory, --activation-budget (or --min-ram) the activations': give one");
    }
    EC_ASSIGN_OR_RETURN(int64_t ram, ParseBytes(flags.ram_budget));
    if (ram <= 0) return InvalidArgument("--ram-budget must be positive");
    request.set_process_ram_budget_bytes(static_cast<uint64_t>(ram));
  } else if (flags.activation_budget.empty() && !flags.min_ram) {
    return InvalidArgument(
        "--ram-budget is required (the whole process's memory, e.g. 30MB or 2.5GiB), unless --activation-budget "
        "gives the activations' alone or --min-ram searches for it");
  }
  if (!flags.activation_budget.empty()) {
    if (flags.min_ram) return InvalidArgument("--min-ram searches the activation budget: give it or --activation-budget");
    EC_ASSIGN_OR_RETURN(const ActivationBudget budget, ParseActivationBudget(flags.activation_budget));
    request.set_activation_budget_bytes(budget.bytes);
    request.set_activation_budget_percent(budget.percent);
  }
  request.set_compare(flags.compare);
  request.set_min_ram(flags.min_ram);
  EC_ASSIGN_OR_RETURN(RuntimeBudget runtime, ParseRuntimeBudget(flags.runtime_budget));
  if (runtime.kind == RuntimeBudget::Kind::kMultiple) {
    request.set_runtime_budget_multiple(runtime.value);
  } else {
    request.set_runtime_budget_s(runtime.value);
  }
  request.set_disable_paging(flags.no_paging);
  request.set_disable_remat(flags.no_remat);
  // Measured paging is not hidden by overlap (as `train` counts it); a preset keeps POET's formulation.
  const bool given = flags.count_paging_option && flags.count_paging_option->count() > 0;
  request.set_count_paging_time(given ? flags.count_paging_time : !flags.device.empty());
  request.set_time_limit_s(flags.time_limit_s);
  request.set_strategy(flags.strategy);
  return request;
}

Status WriteFile(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
  return out.flush() ? Status::Ok() : PermissionDenied("cannot write " + path);
}

// The optimum next to every baseline and greedy (Schedule.compared).
void PrintComparison(const v1::Schedule& optimal) {
  Table table({{"strategy", Table::Align::kLeft},
               {"status", Table::Align::kLeft},
               {"energy"},
               {"vs optimal"},
               {"recompute"},
               {"page in/out"},
               {"activation peak"},
               {"runtime"}});
  const double optimal_j = HasSchedule(optimal) ? optimal.energy().total_j() : 0;
  std::vector<const v1::Schedule*> rows = {&optimal};
  for (const v1::Schedule& s : optimal.compared()) rows.push_back(&s);
  for (const v1::Schedule* s : rows) {
    if (!HasSchedule(*s)) {
      table.AddRow({s->strategy(), s->status() == v1::Schedule::STATUS_INFEASIBLE ? "infeasible" : "no schedule"});
      continue;
    }
    std::string versus;
    if (optimal_j > 0) {
      const double percent = (s->energy().total_j() / optimal_j - 1) * 100;
      versus = (percent < 0 ? "" : "+") + Fixed(percent, 2) + "%";
    }
    table.AddRow({s->strategy(), s->status() == v1::Schedule::STATUS_OPTIMAL ? "optimal" : "feasible",
                  EnergyText(s->energy().total_j(), optimal.energy_source()), versus,
                  std::to_string(s->recomputations()),
                  std::to_string(s->page_ins()) + "/" + std::to_string(s->page_outs()),
                  FormatBytes(static_cast<double>(s->peak_ram_bytes())), FormatSeconds(s->runtime_s())});
  }
  table.Print(std::cout);
}

// --min-ram: the smallest budget found, before the schedule solved at it.
void PrintMinRam(const v1::Schedule& s, const solver::Problem* problem, const std::string& runtime_budget) {
  std::cout << "smallest       activation budget " << BytesText(s.min_feasible_ram_bytes()) << " has a schedule at " << runtime_budget
            << ", found by the heuristics and baselines";
  if (problem) {
    std::cout << "; no schedule needs less than " << BytesText(solver::MemoryLowerBound(*problem))
              << " (the largest node with its inputs)";
  }
  std::cout << "\n";
}

// --out: the schedule with its cost table, in protobuf's JSON mapping, indented.
Status WriteScheduleJson(const std::string& path, const v1::Schedule& schedule, const v1::CostTable& table) {
  EC_ASSIGN_OR_RETURN(std::string json, proto::ToJson(service::PortableSchedule(schedule, table), {.indent = true}));
  return WriteFile(path, json);
}

// Solved by a daemon, which also stores the schedule.
int RunRemoteSolve(const SolveFlags& flags, const Context& ctx, const v1::ScheduleRequest& request) {
  if (!flags.svg_path.empty()) return UsageError(InvalidArgument("--svg is local only"));
  v1::Schedule schedule;
  if (Status s = daemon::CallRemote(ctx.remote, "SolverService/Solve", request, schedule); !s.ok()) return Failure(s);
  if (!flags.out_path.empty() && HasSchedule(schedule)) {
    v1::CostTable table;  // the file carries the table the daemon solved on
    if (Status s = daemon::CallRemote(ctx.remote, "CostService/GetCostTable",
                                      service::CostTableRequestFor(schedule.request()), table);
        !s.ok()) {
      return Failure(s);
    }
    if (Status s = WriteScheduleJson(flags.out_path, schedule, table); !s.ok()) return Failure(s);
  }
  if (flags.json) {
    PrintJson(schedule);
  } else {
    std::cout << "problem        " << request.model() << " on " << request.device() << " via " << ctx.remote
              << ", " << BudgetLabel(schedule.request()) << ", runtime budget "
              << flags.runtime_budget << (schedule.request().count_paging_time() ? " with paging time counted" : "")
              << "\n";
    if (request.compute_threads() == 0 && schedule.request().compute_threads() > 0) {
      std::cout << "costs          the daemon chose the table of "
                << profiler::ThreadsText(schedule.request().compute_threads())
                << " (--threads asks for another)\n";
    }
    if (flags.min_ram) PrintMinRam(schedule, nullptr, flags.runtime_budget);
    PrintSchedule(schedule);
    PrintMemory(schedule);
    if (flags.compare) PrintComparison(schedule);
    std::cout << "stored         schedule #" << schedule.id() << " in the daemon's database\n";
    if (!flags.out_path.empty() && HasSchedule(schedule)) std::cout << "written        " << flags.out_path << "\n";
  }
  return HasSchedule(schedule) ? kExitOk : kExitFailure;
}

int RunSolve(const SolveFlags& flags, const Context& ctx) {
  auto request = BuildRequest(flags);
  if (!request.ok()) return UsageError(request.status());
  if (!ctx.remote.empty()) return RunRemoteSolve(flags, ctx, *request);
  const std::string db_path = DbPath(ctx);
  costdb::CostDb* db = nullptr;
  bool store = !flags.no_store;
  std::string not_stored;  // why a schedule meant to be stored is not
  if (store) {
    auto opened = ctx.Store(costdb::OpenMode::kReadWrite).Db();
    if (opened.ok()) {
      db = *opened;
    } else if (opened.status().code() == ErrorCode::kPermissionDenied) {  // read-only media: solve, store nothing
      store = false;
      not_stored = opened.status().message();
    } else {
      return Failure(opened.status());
    }
  }
  // Measured costs, and models stored by `edgecost models add`, are read from the database.
  const bool needs_db = !flags.device.empty() || (flags.graph_file.empty() && !service::IsZooModel(flags.model));
  if (!db && needs_db && (!flags.device.empty() || costdb::IsPostgresUrl(db_path) || std::filesystem::exists(db_path))) {
    auto opened = ctx.Store(costdb::OpenMode::kReadOnly).Db();
    if (!opened.ok()) return Failure(opened.status());
    db = *opened;
  }
  // The flags were checked above: what fails now is the graph, the costs or the database.
  ProgressPrinter progress(flags.json ? std::cerr : std::cout);  // stdout stays one JSON document
  auto solved = service::SolveRequest(db, *request, store, nullptr,
                                      [&progress](const solver::Progress& p) { progress(p); });
  if (!solved.ok()) return Failure(solved.status());
  const v1::CostTable& table = solved->table;
  const v1::Schedule& schedule = solved->schedule;
  if (!flags.out_path.empty() && HasSchedule(schedule)) {  // a failed solve writes no file
    if (Status s = WriteScheduleJson(flags.out_path, schedule, table); !s.ok()) return Failure(s);
  }
  if (!flags.svg_path.empty() && HasSchedule(schedule)) {
    if (Status s = WriteFile(flags.svg_path, solver::ScheduleToSvg(solved->problem, schedule).text()); !s.ok()) {
      return Failure(s);
    }
  }
  if (flags.json) {
    PrintJson(schedule);
  } else {
    const std::string where = table.device().empty() ? " from " + flags.graph_file : " on " + table.device();
    std::cout << "problem        " << table.graph().model() << where << " (" << table.cost_source()
              << (table.threads() > 0 ? ", " + profiler::ThreadsText(table.threads()) : "") << "), "
              << solved->problem.size() << " nodes, " << BudgetLabel(schedule.request())
              << ", runtime budget " << flags.runtime_budget
              << (schedule.request().count_paging_time() ? " with paging time counted" : "") << "\n";
    if (!flags.device.empty() && !table.note().empty()) std::cout << "costs          " << table.note() << "\n";
    if (flags.min_ram) PrintMinRam(schedule, &solved->problem, flags.runtime_budget);
    PrintSchedule(schedule);
    PrintMemory(schedule);
    if (flags.compare) PrintComparison(schedule);
    if (HasSchedule(schedule)) {
      auto plan = solver::ExplainPlan(solved->problem, schedule);
      std::cout << "plan           " << (plan.ok() ? solver::PlanInWords(*plan) : plan.status().message() + "\n");
    }
    if (solved->schedule_id > 0) std::cout << "stored         schedule #" << solved->schedule_id << "\n";
    if (!not_stored.empty()) std::cout << "not stored     " << not_stored << "\n";
    if (!flags.out_path.empty() && HasSchedule(schedule)) std::cout << "written        " << flags.out_path << "\n";
    if (!flags.svg_path.empty() && HasSchedule(schedule)) std::cout << "written        " << flags.svg_path << "\n";
  }
  return HasSchedule(schedule) ? kExitOk : kExitFailure;
}

int RunCheck(const std::string& path, bool json, const Context& ctx) {
  auto read = service::ReadScheduleFile(path);
  if (!read.ok()) return Failure(read.status());
  const v1::Schedule& schedule = *read;
  costdb::CostDb* db = nullptr;
  const std::string& source = schedule.request().cost_source();
  if (!schedule.has_cost_table() && (source == "measured" || source == "measured-in-step")) {
    auto opened = ctx.Store(costdb::OpenMode::kReadOnly).Db();
    if (!opened.ok()) return Failure(opened.status());
    db = *opened;
  }
  auto checked = service::CheckSchedule(db, schedule);
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
    result.set_activation_budget_bytes(static_cast<uint64_t>(problem->activation_budget_bytes));
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
            << ", activation peak " << BytesText(replay.peak_ram_bytes) << " of activation budget " << BytesText(problem->activation_budget_bytes)
            << ", runtime " << FormatSeconds(replay.runtime_s) << " of " << FormatSeconds(problem->runtime_budget_s)
            << "\n";
  if (std::fabs(replay.energy.total_j() - schedule.energy().total_j()) >
      1e-9 * std::max(1.0, replay.energy.total_j())) {
    std::cout << "note           the file claims " << Fixed(schedule.energy().total_j()) << " J\n";
  }
  return kExitOk;
}

struct SchedulesFlags {
  std::string model;
  std::string device;
  bool all = false;  // superseded schedules too
  bool json = false;
  bool csv = false;
};

// The stored schedules, from the database or a daemon's SolverService.ListSchedules.
int RunSchedules(const SchedulesFlags& flags, const Context& ctx) {
  v1::ListSchedulesRequest request;
  request.set_model(flags.model);
  request.set_device(flags.device);
  auto stored = Services(ctx).ListSchedules(request);
  if (!stored.ok()) return Failure(stored.status());
  v1::ListSchedulesResponse listed = std::move(stored).value();
  if (!flags.all) {  // a request solved again supersedes its earlier schedules
    v1::ListSchedulesResponse current;
    for (const v1::ScheduleSummary& s : listed.schedules()) {
      if (!s.superseded()) *current.add_schedules() = s;
    }
    listed = std::move(current);
  }
  if (flags.csv) {
    std::cout << service::SchedulesCsv(listed);
    return kExitOk;
  }
  if (flags.json) {
    PrintJson(listed);
    return kExitOk;
  }
  if (listed.schedules().empty()) {
    std::cout << "no schedules" << (flags.model.empty() ? "" : " of " + flags.model) << "; `edgecost solve` stores them\n";
    return kExitOk;
  }
  Table table({{"#"},
               {"model", Table::Align::kLeft},
               {"device", Table::Align::kLeft},
               {"costs", Table::Align::kLeft},
               {"strategy", Table::Align::kLeft},
               {"budget"},
               {"runtime budget"},
               {"status", Table::Align::kLeft},
               {"energy"}});
  for (const v1::ScheduleSummary& s : listed.schedules()) {
    const v1::ScheduleRequest& r = s.request();
    const std::string runtime_budget = r.has_runtime_budget_s()          ? FormatSeconds(r.runtime_budget_s())
                                       : r.has_runtime_budget_multiple() ? Fixed(r.runtime_budget_multiple(), 2) + "x"
                                                                         : "1x";
    const bool has = s.status() == v1::Schedule::STATUS_OPTIMAL || s.status() == v1::Schedule::STATUS_FEASIBLE;
    table.AddRow({std::to_string(s.id()), r.model().empty() ? r.graph_file() : r.model(), r.device(), r.cost_source(),
                  r.strategy().empty() ? "optimal" : r.strategy(), service::BudgetAsGiven(r),
                  runtime_budget,
                  std::string(service::ScheduleStatusText(s.status())) + (s.superseded() ? ", superseded" : ""),
                  has ? EnergyText(s.energy_j(), s.energy_source()) : "no schedule"});
  }
  table.Print(std::cout);
  return kExitOk;
}

}  // namespace

void RegisterSolveCommand(CLI::App& app, Context& ctx) {
  auto flags = std::make_shared<SolveFlags>();
  CLI::App* cmd = app.add_subcommand("solve",
                                     "Energy-optimal schedule of recomputation and paging within RAM and "
                                     "runtime budgets");
  cmd->add_option("--model", flags->model, "Zoo, stored (`edgecost models`) or ONNX model")->capture_default_str();
  cmd->add_option("--graph", flags->graph_file, "A graph file with costs (training-graph/v1 or node-link JSON)");
  flags->platform_option =
      cmd->add_option("--platform", flags->platform, "Board preset for poet-flops costs")->capture_default_str();
  cmd->add_option("--device", flags->device, "Use measured costs of a profiled device (\"this\": this machine)");
  cmd->add_option("--cost-source", flags->cost_source,
                  "With --device: measured (ops one at a time), measured-in-step (node times inside real steps, "
                  "kept by `edgecost profile --in-step` and `edgecost train`) or auto (the default: measured-in-step "
                  "where its table exists at the thread count, else measured; the costs line says which)")
      ->check(CLI::IsMember({"auto", "measured", "measured-in-step"}));
  cmd->add_option("--batch-size", flags->batch_size, "Batch size")->capture_default_str();
  cmd->add_option("--derivation", flags->derivation,
                  "exact (default: what each backward really reads) or poet (POET's construction)");
  AddTrainableOption(cmd, flags->trainable);
  cmd->add_flag("--update-in-backward", flags->update_in_backward, kUpdateInBackwardHelp);
  cmd->add_option("--ram-budget", flags->ram_budget,
                  "The RAM budget: the training process's peak RSS (VmHWM, everything it holds): parameters, gradients, the "
                  "optimizer's state (--optimizer), workspace and the rest of the process a run measured come off "
                  "it, and what is left is the activation budget (e.g. 60MB, 4GiB)");
  cmd->add_option("--optimizer", flags->optimizer,
                  "The optimizer that will train, whose state --ram-budget holds: sgd (with --momentum: one state "
                  "tensor per parameter), adam or adamw (two)")
      ->capture_default_str()
      ->check(CLI::IsMember({"sgd", "adam", "adamw"}));
  cmd->add_option("--momentum", flags->momentum, "With --optimizer sgd: its momentum (above 0 keeps a buffer)");
  cmd->add_option("--activation-budget", flags->activation_budget,
                  "The activation budget: RAM for the saved activations alone (the arena's peak): 3MB, 2.5MiB, "
                  "3000000B, or 50% of the plain step's activation peak");
  cmd->add_option("--runtime-budget", flags->runtime_budget,
                  "Multiple of a plain step (7.6x) or seconds (1.2s); the default is train's too")
      ->capture_default_str();
  cmd->add_option("--node-runtimes", flags->node_runtimes_path,
                  "A JSON array of each node's measured seconds, in node order, that replace the cost table's "
                  "(energies kept at each node's power): the PyTorch bridge's times on PyTorch's kernels");
  cmd->add_flag("--no-paging", flags->no_paging, "Recompute only");
  cmd->add_flag("--no-remat", flags->no_remat, "Page only");
  flags->count_paging_option = cmd->add_flag("--count-paging-time,!--no-count-paging-time", flags->count_paging_time,
                "Paging time counts against the runtime budget (default, as in train: yes on measured costs "
                "(--device), as measured steps show that overlap does not hide paging; no on a board preset, "
                "POET's formulation)");
  cmd->add_option("--time-limit-s", flags->time_limit_s, "Solver time limit")->capture_default_str();
  cmd->add_option("--threads", flags->threads,
                  "With --device: the compute threads the training will run on, whose cost table plans it "
                  "(default: all cores for this device; for another, its only thread count, else the most, stated); "
                  "the same as profile's and train's --threads")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--solver-threads", flags->solver_threads, "The MILP solver's (CBC's) threads")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  std::vector<std::string> strategies;
  for (solver::Strategy s : solver::kStrategies) strategies.emplace_back(solver::StrategyName(s));
  cmd->add_option("--strategy", flags->strategy,
                  solver::StrategyNames() + " (optimal starts from all the others and is never worse than them)")
      ->capture_default_str()
      ->check(CLI::IsMember(strategies));
  cmd->add_flag("--compare", flags->compare, "The schedule next to every baseline and greedy");
  cmd->add_flag("--min-ram", flags->min_ram,
                "Search the smallest activation budget with a schedule (no budget needed), then solve there");
  cmd->add_flag("--no-store", flags->no_store, "Do not store the request and schedule in the cost database");
  cmd->add_flag("--json", flags->json, "Print the schedule as protobuf JSON");
  cmd->add_option("--out", flags->out_path, "Write the schedule (protobuf JSON) to a file");
  cmd->add_option("--svg", flags->svg_path, "Draw the schedule: stages down, nodes across");
  cmd->footer(
      "Examples:\n"
      "  edgecost solve --model resnet18_cifar --platform a72 --activation-budget 3MB --runtime-budget 7.6x\n"
      "  edgecost solve --model resnet18_cifar --activation-budget 1.5MB --runtime-budget 1.5x --compare\n"
      "  edgecost solve --model resnet18_cifar --device this --activation-budget 1MB --out s.json --svg s.svg\n"
      "  edgecost solve --model resnet18_cifar --device this --cost-source measured-in-step --activation-budget 1MB\n"
      "  edgecost solve --graph checkmate_graph.json --activation-budget 2GB --runtime-budget 1.2x\n"
      "  edgecost solve --model resnet50 --no-paging --min-ram --runtime-budget 1.5x --json\n"
      "  edgecost solve --model resnet18_cifar --device this --ram-budget 30MB --runtime-budget 1.5x   # the whole process\n"
      "  edgecost solve --model mine --device this --activation-budget 1MB   # a model stored by `edgecost models add`\n"
      "Words in the output:\n"
      "  stage: " + std::string(service::kStageMeaning) + "\n"
      "  energy above the floor unproven: " + service::kUnprovenMeaning + "\n"
      "  eviction bound: " + service::kEvictionBoundMeaning + "\n"
      "  root LP: " + service::kRootLpMeaning);
  cmd->callback([flags, &ctx] { ctx.exit_code = RunSolve(*flags, ctx); });

  auto path = std::make_shared<std::string>();
  CLI::App* check = app.add_subcommand("check", "Replay a schedule file and name its first violation");
  auto json = std::make_shared<bool>(false);
  check->add_option("schedule", *path, "Schedule JSON written by `edgecost solve --out`")->required();
  check->add_flag("--json", *json, "Print the replay as protobuf JSON (CheckResult)");
  check->footer("Examples:\n  edgecost check schedule.json\n  edgecost check schedule.json --json");
  check->callback([path, json, &ctx] { ctx.exit_code = RunCheck(*path, *json, ctx); });

  auto schedules_flags = std::make_shared<SchedulesFlags>();
  CLI::App* schedules = app.add_subcommand("schedules", "List the stored schedules: budgets, status and energy");
  schedules->add_option("--model", schedules_flags->model, "Only this model's schedules");
  schedules->add_option("--device", schedules_flags->device, "Only schedules for this device or board preset");
  schedules->add_flag("--all", schedules_flags->all, "Also the schedules superseded by solving their request again");
  schedules->add_flag("--json", schedules_flags->json, "Print the list as protobuf JSON (ListSchedulesResponse)");
  schedules->add_flag("--csv", schedules_flags->csv, "Print CSV, a row per schedule in plain SI numbers, for spreadsheets")
      ->excludes("--json");
  schedules->footer(
      "Examples:\n  edgecost schedules\n  edgecost schedules --model resnet18_cifar --csv > schedules.csv\n"
      "  edgecost --remote unix:/run/edgecost/edgecost.sock schedules --json");
  schedules->callback([schedules_flags, &ctx] { ctx.exit_code = RunSchedules(*schedules_flags, ctx); });
}

}  // namespace edgecost::cli
