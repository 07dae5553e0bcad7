#include "service/cost_tables.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "base/isolated.h"
#include "base/units.h"
#include "graph/cost_source.h"
#include "graph/graph_io.h"
#include "graph/resolve.h"
#include "graph/zoo.h"
#include "profiler/profile.h"
#include "proto/json.h"
#include "service/models.h"
#include "service/step_memory.h"
#include "service/train_job.h"
#include "service/words.h"
#include "solver/problem.h"
#include "solver/solve.h"

namespace edgecost::service {
namespace {

// How `auto` says which source it chose, at the start of a table's note.
constexpr char kAutoNotePrefix[] = "cost source auto: ";

// The tables stored for the request's model and device at other batch sizes, thread counts or
// derivations, each with the command that shows it: a lookup that found none names what exists.
std::string StoredTablesText(costdb::CostDb& db, const v1::GetCostTableRequest& request) {
  const std::string asked_device = request.device().empty() ? "this" : request.device();
  const std::string device = asked_device == "this" ? profiler::ThisDeviceName() : asked_device;
  Result<std::vector<costdb::StoredCostTable>> listed = db.ListCostTables(device);
  if (!listed.ok()) return "";
  std::set<std::string> commands;
  for (const costdb::StoredCostTable& stored : *listed) {
    const costdb::CostTableKey& key = stored.key;
    if (key.model != request.model()) continue;
    std::string command = "edgecost costs " + key.model + " --device " + asked_device;
    if (key.cost_source != profiler::kMeasuredSource) command += " --source " + key.cost_source;
    command += " --batch-size " + std::to_string(key.batch_size);
    if (key.threads > 0) command += " --threads " + std::to_string(key.threads);
    if (key.derivation != "exact") command += " --derivation " + key.derivation;
    if (key.trainable != "all") command += " --trainable " + key.trainable;
    commands.insert("batch size " + std::to_string(key.batch_size) +
                    (key.threads > 0 ? " at " + profiler::ThreadsText(key.threads) : std::string()) + " (" +
                    key.cost_source + ", `" + command + "`)");
  }
  if (commands.empty()) return "";
  constexpr size_t kMostNamed = 6;
  std::string text = "tables stored for " + request.model() + " on " + device + ": ";
  size_t named = 0;
  for (const std::string& c : commands) {
    if (named++ == kMostNamed) break;
    text += (named > 1 ? "; " : "") + c;
  }
  if (commands.size() > kMostNamed) text += "; and " + std::to_string(commands.size() - kMostNamed) + " more";
  return text + " (solve and train take the same --batch-size and --threads)";
}

Result<v1::CostTable> ResolveCostTableAsAsked(costdb::CostDb* db, const v1::GetCostTableRequest& request);

}  // namespace

Result<v1::CostTable> ResolveCostTable(costdb::CostDb* db, const v1::GetCostTableRequest& request) {
  Result<v1::CostTable> table = ResolveCostTableAsAsked(db, request);
  if (table.ok() || db == nullptr) return table;
  const ErrorCode code = table.status().code();
  if (code != ErrorCode::kNotFound && code != ErrorCode::kFailedPrecondition) return table;
  const std::string stored = StoredTablesText(*db, request);
  if (stored.empty()) return table;
  return Status(code, table.status().message() + "; " + stored);
}

Result<std::string> AutoCostSource(costdb::CostDb& db, costdb::CostTableKey key, uint32_t threads, std::string* why) {
  key.cost_source = kMeasuredInStepSource;
  EC_ASSIGN_OR_RETURN(const std::vector<uint32_t> stored, db.CostTableThreads(key));
  if (std::find(stored.begin(), stored.end(), threads) != stored.end()) {
    *why = kAutoNotePrefix + std::string("measured-in-step, the node times inside real training steps at ") +
           profiler::ThreadsText(threads);
    return std::string(kMeasuredInStepSource);
  }
  *why = kAutoNotePrefix + std::string("measured (ops one at a time): no measured-in-step table of ") + key.model + " at " +
         profiler::ThreadsText(threads) + " on " + key.device +
         " (`edgecost profile --in-step` or `edgecost train` stores one)";
  return std::string(profiler::kMeasuredSource);
}

namespace {

Result<v1::CostTable> ResolveCostTableAsAsked(costdb::CostDb* db, const v1::GetCostTableRequest& request) {
  if (request.model().empty()) return InvalidArgument("model is required");
  if (request.cost_source() == kAutoCostSource) {
    if (graph::FindBoardPreset(request.device()).ok()) {  // a preset's default: its analytic costs
      v1::GetCostTableRequest preset = request;
      preset.clear_cost_source();
      return ResolveCostTableAsAsked(db, preset);
    }
    // measured-in-step where its table is, at the thread count asked (or the one chosen for 0)
    v1::GetCostTableRequest in_step = request;
    in_step.set_cost_source(kMeasuredInStepSource);
    Result<v1::CostTable> table = ResolveCostTableAsAsked(db, in_step);
    std::string why;
    if (table.ok()) {
      why = kAutoNotePrefix + std::string("measured-in-step, the node times inside real training steps") +
            (table->threads() > 0 ? " at " + profiler::ThreadsText(table->threads()) : std::string());
    } else if (table.status().code() == ErrorCode::kNotFound ||
               table.status().code() == ErrorCode::kFailedPrecondition) {
      why = kAutoNotePrefix + std::string("measured (ops one at a time), as no measured-in-step table fits: ") +
            table.status().message();
      v1::GetCostTableRequest measured = request;
      measured.set_cost_source(profiler::kMeasuredSource);
      table = ResolveCostTableAsAsked(db, measured);
    }
    if (table.ok()) table->set_note(why + (table->note().empty() ? "" : "; " + table->note()));
    return table;
  }
  const std::string device = request.device().empty() ? "this" : request.device();
  const bool preset = graph::FindBoardPreset(device).ok();
  std::string source = request.cost_source();
  if (source.empty()) source = preset ? std::string(graph::kPoetFlopsSource) : profiler::kMeasuredSource;
  const std::string derivation = request.derivation().empty()
                                     ? std::string(graph::DerivationName(graph::kDefaultDerivation))
                                     : request.derivation();

  graph::GraphSpec spec;
  spec.model_or_file = request.model();
  if (request.batch_size() > static_cast<uint32_t>(graph::kMaxBatchSize)) {
    return InvalidArgument("batch_size is at most " + std::to_string(graph::kMaxBatchSize));
  }
  spec.batch_size = request.batch_size() == 0 ? 1 : static_cast<int>(request.batch_size());
  EC_ASSIGN_OR_RETURN(spec.derivation, graph::ParseDerivation(derivation));
  EC_ASSIGN_OR_RETURN(spec.trainable,
                      graph::Trainable::Parse(request.trainable().empty() ? "all" : request.trainable()));
  if (graph::IsGraphFile(spec.model_or_file)) {
    return InvalidArgument("'" + spec.model_or_file + "' looks like a file; ask for a model by name");
  }
  EC_ASSIGN_OR_RETURN(spec, ResolveModel(db, std::move(spec)));
  if (graph::CarriesCosts(spec)) return graph::LoadCostTable(spec, device, source);  // a stored graph's own costs
  if (source == profiler::kMeasuredSource) {
    if (db == nullptr) return FailedPrecondition("measured costs need the cost database");
    return profiler::LoadMeasuredCostTable(*db, spec, device, static_cast<int>(request.threads()));
  }
  if (source == kMeasuredInStepSource) {  // kept by `edgecost train` from the node times inside real steps
    if (db == nullptr) return FailedPrecondition("measured-in-step costs need the cost database");
    if (preset) return InvalidArgument("measured-in-step costs exist for measured devices, not '" + device + "'");
    const std::string name = device == "this" ? profiler::ThisDeviceName() : device;
    EC_ASSIGN_OR_RETURN(v1::TrainingGraph graph, graph::LoadTrainingGraph(spec));
    costdb::CostTableKey key{graph.model(),    name, kMeasuredInStepSource, graph.batch_size(), graph.derivation(),
                             graph.trainable()};
    auto train_command = [&](int threads) {
      return "`edgecost train --model " + spec.model_or_file + " --steps 10" +
             (threads > 0 ? " --threads " + std::to_string(threads) : "") + "`";
    };
    std::string stated;
    EC_ASSIGN_OR_RETURN(key.threads,
                        profiler::ChooseTableThreads(*db, key, static_cast<int>(request.threads()),
                                                     name == profiler::ThisDeviceName(), train_command, &stated));
    Result<v1::CostTable> table = db->GetCostTable(key);
    if (table.status().code() == ErrorCode::kNotFound) {
      return NotFound("no measured-in-step costs for " + graph.model() + " (batch size " +
                      std::to_string(graph.batch_size()) + ", derivation " + graph.derivation() + ") on device " +
                      name + "; run " + train_command(static_cast<int>(request.threads())) +
                      " there after profiling it");
    }
    if (!table.ok()) return table;
    if (!stated.empty()) table->set_note(table->note() + "; " + stated);
    // Paging is the device's as last measured: inside a profile's paging steps once they ran.
    EC_ASSIGN_OR_RETURN(const std::optional<v1::PagingCost> paging, db->GetPagingCost(table->fingerprint_hash()));
    if (paging) *table->mutable_paging() = *paging;
    // Its energies are the measured table's scaled by time: as estimated as the op costs they came from.
    v1::EnergySource weakest = v1::ENERGY_SOURCE_UNSPECIFIED;
    std::set<std::string> seen;
    for (const v1::NodeCost& cost : table->costs()) {
      if (cost.op_key().empty() || !seen.insert(cost.op_key()).second) continue;
      EC_ASSIGN_OR_RETURN(std::optional<v1::OpCost> op, db->GetOpCost(table->fingerprint_hash(), cost.op_key()));
      if (op) weakest = std::max(weakest, op->energy_source());  // the enum orders sources measured to estimated
    }
    table->set_energy_source(weakest);
    return table;
  }
  if (!preset) {
    return InvalidArgument("cost source '" + source + "' needs a board preset as device, not '" + device + "'");
  }
  return graph::LoadCostTable(spec, device, source);
}

}  // namespace

v1::GetCostTableRequest CostTableRequestFor(const v1::ScheduleRequest& request) {
  v1::GetCostTableRequest table;
  table.set_model(request.model());
  table.set_device(request.device());
  table.set_cost_source(request.cost_source());
  table.set_batch_size(request.batch_size());
  table.set_derivation(request.derivation());
  table.set_trainable(request.trainable());
  table.set_threads(request.compute_threads());  // not solver_threads
  return table;
}

namespace {

// ScheduleRequest.node_runtime_s applied to `table`: the caller's times, each node at its stated power.
Result<v1::CostTable> WithCallerRuntimes(v1::CostTable table, const v1::ScheduleRequest& request) {
  if (request.node_runtime_s().empty()) return table;
  if (request.node_runtime_s_size() != table.costs_size()) {
    return InvalidArgument("node_runtime_s has " + std::to_string(request.node_runtime_s_size()) +
                           " times; the training graph of " + request.model() + " has " +
                           std::to_string(table.costs_size()) + " nodes, one time each in node order");
  }
  double caller_s = 0;
  for (int i = 0; i < table.costs_size(); ++i) {
    const double runtime_s = request.node_runtime_s(i);
    if (!std::isfinite(runtime_s) || runtime_s < 0) {
      return InvalidArgument("node_runtime_s[" + std::to_string(i) + "] is " + std::to_string(runtime_s) +
                             ": a node's time is a finite number of seconds, 0 or more");
    }
    v1::NodeCost& cost = *table.mutable_costs(i);
    const double power_w = cost.runtime_s() > 0 ? cost.compute_j() / cost.runtime_s() : 0;
    cost.set_compute_j(power_w * runtime_s);
    cost.set_runtime_s(runtime_s);
    caller_s += runtime_s;
  }
  table.set_note(table.note() + (table.note().empty() ? "" : "; ") + "runtimes are the caller's (" +
                 FormatSeconds(caller_s) + " for one computation of every node), energies at each node's power above");
  return table;
}

}  // namespace

Result<v1::CostTable> CostTableForRequest(costdb::CostDb* db, const v1::ScheduleRequest& request) {
  if (!request.graph_file().empty()) {
    EC_ASSIGN_OR_RETURN(v1::CostTable table, graph::ReadCostTableFile(request.graph_file()));
    return WithCallerRuntimes(std::move(table), request);
  }
  EC_ASSIGN_OR_RETURN(v1::CostTable table, ResolveCostTable(db, CostTableRequestFor(request)));
  return WithCallerRuntimes(std::move(table), request);
}

Result<v1::Schedule> ReadScheduleFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return NotFound("cannot read " + path);
  std::stringstream text;
  text << in.rdbuf();
  v1::Schedule schedule;
  if (Status decoded = proto::FromJson(text.str(), &schedule); !decoded.ok()) {
    return InvalidArgument(path +
                           " is not a schedule (protobuf JSON of edgecost.v1.Schedule, from `edgecost solve --out`): " +
                           decoded.message());
  }
  return schedule;
}

v1::Schedule PortableSchedule(v1::Schedule schedule, const v1::CostTable& table) {
  *schedule.mutable_cost_table() = table;
  schedule.set_graph_hash(graph::GraphHash(table.graph()));
  *schedule.mutable_cost_digest() = graph::CostDigest(table);
  return schedule;
}

namespace {

// What an edit of a schedule file's costs did to the figures the file states.
std::string EditedFigures(const v1::Schedule& schedule) {
  auto problem = solver::ProblemFromCostTable(schedule.cost_table(), schedule.request());
  if (!problem.ok()) return "; " + problem.status().message();
  const solver::Replay replay = solver::Simulate(*problem, schedule);
  std::string figures;
  auto differ = [](double a, double b) { return std::abs(a - b) > 1e-9 * std::max(std::abs(a), std::abs(b)); };
  if (differ(schedule.energy().total_j(), replay.energy.total_j())) {
    figures += "; its energy was " + FormatJoules(schedule.energy().total_j()) + " and now replays to " +
               FormatJoules(replay.energy.total_j());
  }
  if (schedule.peak_ram_bytes() != static_cast<uint64_t>(replay.peak_ram_bytes)) {
    figures += "; its peak RAM was " + FormatBytes(static_cast<double>(schedule.peak_ram_bytes())) + " and is now " +
               FormatBytes(static_cast<double>(replay.peak_ram_bytes));
  }
  if (differ(schedule.runtime_s(), replay.runtime_s)) {
    figures += "; its runtime was " + FormatSeconds(schedule.runtime_s()) + " and is now " +
               FormatSeconds(replay.runtime_s);
  }
  return figures;
}

}  // namespace

Result<v1::CostTable> ScheduleCostTable(costdb::CostDb* db, const v1::Schedule& schedule) {
  if (!schedule.has_cost_table()) return CostTableForRequest(db, schedule.request());
  if (schedule.graph_hash() != graph::GraphHash(schedule.cost_table().graph())) {
    return InvalidArgument("the schedule's cost table is not the graph it was solved for (graph_hash " +
                           schedule.graph_hash() + " does not match): the file was edited; solve again");
  }
  // Files written before the digest existed carry none: their costs cannot be checked.
  if (schedule.has_cost_digest()) {
    const std::vector<std::string> changed =
        graph::ChangedCosts(schedule.cost_digest(), graph::CostDigest(schedule.cost_table()));
    if (!changed.empty()) {
      std::string names;
      for (const std::string& name : changed) names += (names.empty() ? "" : ", ") + name;
      return InvalidArgument("the schedule's cost table was edited after it was solved (changed: " + names + ")" +
                             EditedFigures(schedule) + ": solve again");
    }
  }
  return schedule.cost_table();
}

Result<CheckedSchedule> CheckSchedule(costdb::CostDb* db, const v1::Schedule& schedule) {
  CheckedSchedule checked;
  EC_ASSIGN_OR_RETURN(v1::CostTable table, ScheduleCostTable(db, schedule));
  EC_ASSIGN_OR_RETURN(checked.problem, solver::ProblemFromCostTable(table, schedule.request()));
  checked.replay = solver::Simulate(checked.problem, schedule);
  return checked;
}

Result<StoredScheduleView> LoadStoredSchedule(costdb::CostDb& db, int64_t schedule_id) {
  StoredScheduleView view;
  EC_ASSIGN_OR_RETURN(view.schedule, db.GetSchedule(schedule_id));
  view.schedule.set_id(static_cast<uint64_t>(schedule_id));
  EC_ASSIGN_OR_RETURN(int64_t table_id, db.ScheduleCostTableId(schedule_id));
  if (table_id != 0) {
    EC_ASSIGN_OR_RETURN(view.table, db.GetCostTableById(table_id));
  } else {
    EC_ASSIGN_OR_RETURN(view.table, CostTableForRequest(&db, view.schedule.request()));
  }
  EC_ASSIGN_OR_RETURN(view.problem, solver::ProblemFromCostTable(view.table, view.schedule.request()));
  view.replay = solver::Simulate(view.problem, view.schedule);
  return view;
}

namespace {

// A solve in a child process is killed after this long: a hang, not a long solve (an hour).
constexpr double kSolveInChildWallS = 3600;

// Solves again when the arena's layout of a schedule exceeds a process budget: rarely more than once.
constexpr int kArenaRetries = 3;

bool HasSchedule(const v1::Schedule& s) {
  return s.status() == v1::Schedule::STATUS_OPTIMAL || s.status() == v1::Schedule::STATUS_FEASIBLE;
}

v1::Device PresetDevice(const std::string& name) {
  v1::Device device;
  device.set_name(name);
  device.set_kind(v1::Device::KIND_PRESET);
  device.mutable_fingerprint()->set_board_preset(name);
  device.mutable_fingerprint()->set_hash("preset:" + name);
  return device;
}

}  // namespace

Result<int64_t> StoreCostTable(costdb::CostDb& db, v1::CostTable table) {
  if (table.fingerprint_hash().empty() || table.fingerprint_hash().starts_with("preset:")) {
    if (table.device().empty()) table.set_device(table.cost_source());
    const v1::Device device = PresetDevice(table.device());
    table.set_fingerprint_hash(device.fingerprint().hash());
    EC_RETURN_IF_ERROR(db.UpsertDevice(device).status());
  }
  // A table read from the store comes back with notes on how it was chosen: with the same
  // figures it is the newest stored version, not a new one whose note grows with every solve.
  EC_ASSIGN_OR_RETURN(const std::vector<int64_t> versions, db.ListCostTableVersions(table));
  if (!versions.empty()) {
    EC_ASSIGN_OR_RETURN(v1::CostTable newest, db.GetCostTableById(versions.front()));
    const auto figures = [](v1::CostTable t) {  // without what a read adds: notes, memory, energy source
      t.clear_note();
      t.clear_memory();
      t.clear_energy_source();
      return t.SerializeAsString();
    };
    if (figures(newest) == figures(table)) return versions.front();
  }
  // What `auto` says of its choice belongs to the read, not to the table.
  while (table.note().starts_with(kAutoNotePrefix)) {
    const size_t end = table.note().find("; ");
    table.set_note(end == std::string::npos ? "" : table.note().substr(end + 2));
  }
  return db.PutCostTable(table);
}

Result<v1::ListDevicesResponse> ListDevices(costdb::CostDb& db) {
  EC_ASSIGN_OR_RETURN(std::vector<v1::Device> stored, db.ListDevices());
  v1::ListDevicesResponse response;
  std::set<std::string> names;
  // As the README says: measured devices first, then every board preset (stored or not).
  for (v1::Device& device : stored) {
    if (device.kind() == v1::Device::KIND_PRESET) continue;
    names.insert(device.name());
    *response.add_devices() = std::move(device);
  }
  std::map<std::string, v1::Device> stored_presets;
  for (v1::Device& device : stored) {
    if (device.kind() == v1::Device::KIND_PRESET) stored_presets[device.name()] = std::move(device);
  }
  for (const graph::BoardPreset& preset : graph::BoardPresets()) {
    const std::string name(preset.name);
    if (names.count(name)) continue;  // a measured device under a preset's name
    auto it = stored_presets.find(name);
    *response.add_devices() = it != stored_presets.end() ? std::move(it->second) : PresetDevice(name);
    stored_presets.erase(name);
  }
  for (auto& [name, device] : stored_presets)
    *response.add_devices() = std::move(device);  // presets no longer built in
  return response;
}

Result<v1::ListModelsResponse> DescribeZoo(int batch_size) {
  v1::ListModelsResponse response;
  for (const graph::ZooModel& model : graph::ZooModels()) {
    EC_ASSIGN_OR_RETURN(v1::TrainingGraph training,
                        graph::ZooTrainingGraph(model.name, model.BatchSize(batch_size), graph::kDefaultDerivation));
    v1::ModelInfo& info = *response.add_models();
    info.set_name(std::string(model.name));
    for (const v1::TrainingNode& node : training.nodes()) {
      if (node.phase() == v1::PHASE_FORWARD) info.set_forward_nodes(info.forward_nodes() + 1);
    }
    info.set_training_nodes(static_cast<uint32_t>(training.nodes_size()));
    info.set_param_bytes(training.param_bytes());
    info.set_activation_bytes(graph::ActivationBytes(training));
  }
  return response;
}

namespace {

// The plain step's activation peak, the checkpoint-all schedule's: what a percent activation budget
// is a share of (as the Python package reads "50%").
Result<uint64_t> PlainActivationPeak(const v1::CostTable& table, v1::ScheduleRequest request) {
  request.set_activation_budget_bytes(uint64_t{1} << 50);
  request.set_runtime_budget_multiple(1e6);  // no recomputation: only the memory is asked about
  EC_ASSIGN_OR_RETURN(const solver::Problem problem, solver::ProblemFromCostTable(table, request));
  solver::SolveOptions options;
  options.strategy = "checkpoint-all";
  EC_ASSIGN_OR_RETURN(const v1::Schedule plain, solver::Solve(problem, options));
  if (!HasSchedule(plain)) return Internal("the plain step has no schedule: " + plain.message());
  return plain.peak_ram_bytes();
}

// One budget per request: the RAM budget, the activation budget (bytes or a percentage), or min_ram.
Status CheckOneBudget(const v1::ScheduleRequest& request) {
  const int budgets = (request.process_ram_budget_bytes() > 0) + (request.activation_budget_percent() != 0) +
                      (request.activation_budget_bytes() > 0 || request.min_ram());
  if (budgets > 1) {
    return InvalidArgument(
        "give one budget: the RAM budget (process_ram_budget_bytes, --ram-budget: the whole process), or the activation "
        "budget (activation_budget_bytes or activation_budget_percent, --activation-budget), or min_ram (--min-ram)");
  }
  if (!(request.activation_budget_percent() >= 0) || !std::isfinite(request.activation_budget_percent())) {
    return InvalidArgument("activation_budget_percent must be a positive percentage of the plain step's activation peak");
  }
  return Status::Ok();
}

}  // namespace

namespace {

// What solving a request needs from the database, read before the solver runs: the cost table, the
// request as it will be stored, the step's memory and the problem.
struct PreparedSolve {
  SolvedRequest solved;  // table and problem
  v1::ScheduleRequest request;
  v1::StepMemory memory;
};

Result<PreparedSolve> PrepareSolve(costdb::CostDb* db, const v1::ScheduleRequest& request) {
  PreparedSolve prepared;
  SolvedRequest& solved = prepared.solved;
  v1::ScheduleRequest& solved_request = prepared.request;
  solved_request = request;
  if (request.min_ram() && request.activation_budget_bytes() == 0) solved_request.set_activation_budget_bytes(1);  // searched below
  EC_RETURN_IF_ERROR(CheckOneBudget(request));
  EC_ASSIGN_OR_RETURN(solved.table, CostTableForRequest(db, request));
  if (request.activation_budget_percent() > 0) {
    EC_ASSIGN_OR_RETURN(const uint64_t plain_peak, PlainActivationPeak(solved.table, request));
    solved_request.set_activation_budget_bytes(
        std::max<uint64_t>(1, static_cast<uint64_t>(static_cast<double>(plain_peak) * request.activation_budget_percent() / 100)));
  }
  // One name for a device everywhere: "this" is stored as the name the device list shows.
  if (request.device() == "this" && !solved.table.device().empty()) solved_request.set_device(solved.table.device());
  // `auto` is stored as what it chose, so that the request is solved again on the same source.
  // So is the default (empty) source: a listing names the costs each schedule was solved on.
  if (request.cost_source() == kAutoCostSource || request.cost_source().empty()) {
    solved_request.set_cost_source(solved.table.cost_source());
  }
  // The stored request names the table's thread count, so that it is solved again on that one.
  if (solved.table.threads() > 0) solved_request.set_compute_threads(solved.table.threads());
  v1::StepMemory& memory = prepared.memory;
  memory =
      StepMemoryOf(solved.table.graph(), {.build_large = request.process_ram_budget_bytes() > 0,
                                          .optimizer_state_tensors = static_cast<int>(request.optimizer_state_tensors()),
                                          .update_in_backward = request.update_in_backward()});
  if (db && memory.executor_known() && solved.table.cost_source() != graph::kPoetFlopsSource) {  // a device's runs
    AddProcessRest(*db, solved.table.graph().model(), solved.table.device(), solved.table.graph().batch_size(),
                   solved.table.threads(), memory);
  }
  if (request.process_ram_budget_bytes() > 0) {
    EC_ASSIGN_OR_RETURN(const uint64_t activations, ActivationBudget(memory, request.process_ram_budget_bytes()));
    solved_request.set_activation_budget_bytes(activations);
  }
  EC_ASSIGN_OR_RETURN(solved.problem, solver::ProblemFromCostTable(solved.table, solved_request));
  return prepared;
}

// The prepared request solved, with no database: a forked child may run it.
Status SolvePrepared(PreparedSolve& prepared, const std::atomic<bool>* stop,
                     const std::function<void(const solver::Progress&)>& on_progress) {
  const auto start = std::chrono::steady_clock::now();
  SolvedRequest& solved = prepared.solved;
  v1::ScheduleRequest& solved_request = prepared.request;
  const v1::ScheduleRequest request = prepared.request;
  const v1::StepMemory& memory = prepared.memory;
  solver::SolveOptions options;
  if (!request.strategy().empty()) options.strategy = request.strategy();
  if (request.time_limit_s() > 0) options.time_limit_s = request.time_limit_s();
  if (request.solver_threads() > 0) options.threads = static_cast<int>(request.solver_threads());
  options.stop = stop;
  options.on_progress = on_progress;
  auto elapsed_s = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); };
  if (request.min_ram()) {
    EC_ASSIGN_OR_RETURN(const int64_t ram,
                        solver::MinFeasibleRam(solved.problem, {SteadyNowS() + 0.5 * options.time_limit_s, stop}));
    solved.problem.activation_budget_bytes = ram;
    solved_request.set_activation_budget_bytes(static_cast<uint64_t>(ram));
    options.time_limit_s = std::max(0.0, options.time_limit_s - elapsed_s());
  }
  EC_ASSIGN_OR_RETURN(solved.schedule, solver::Solve(solved.problem, options));
  // A process budget holds the arena's region, which a layout may make larger than the schedule's
  // peak: solved again with the activation budget lowered by the excess until the region fits.
  for (int retry = 0; retry < kArenaRetries && request.process_ram_budget_bytes() > 0 && HasSchedule(solved.schedule);
       ++retry) {
    const uint64_t region = ArenaRegionBytes(solved.table.graph(), solved.schedule);
    if (memory.fixed_bytes() + region <= request.process_ram_budget_bytes()) break;
    const uint64_t excess = memory.fixed_bytes() + region - request.process_ram_budget_bytes();
    const uint64_t budget = solved_request.activation_budget_bytes();
    if (excess >= budget) break;
    solved_request.set_activation_budget_bytes(budget - excess);
    solved.problem.activation_budget_bytes = static_cast<int64_t>(budget - excess);
    EC_ASSIGN_OR_RETURN(solved.schedule, solver::Solve(solved.problem, options));
  }
  if (request.min_ram()) solved.schedule.set_min_feasible_ram_bytes(solved_request.activation_budget_bytes());
  if (request.compare()) {
    for (solver::Strategy kind : solver::kBaselinesAndGreedy) {
      if (kind == solver::Strategy::kPagingOnly && !solved.problem.allow_paging) continue;
      solver::SolveOptions baseline;
      baseline.strategy = std::string(solver::StrategyName(kind));
      baseline.search_min_ram = false;
      EC_ASSIGN_OR_RETURN(*solved.schedule.add_compared(), solver::Solve(solved.problem, baseline));
    }
  }
  *solved.schedule.mutable_request() = solved_request;
  // The graph it was solved for: a client that attaches the cost table (GetCostTable) to a
  // Solve response has a schedule file `check` takes, and one for another graph refused.
  solved.schedule.set_graph_hash(graph::GraphHash(solved.table.graph()));
  solved.schedule.set_energy_source(solved.table.energy_source());
  *solved.schedule.mutable_memory() = memory;
  return Status::Ok();
}

Status StoreSolved(costdb::CostDb& db, const v1::ScheduleRequest& request, SolvedRequest& solved) {
  EC_ASSIGN_OR_RETURN(int64_t request_id, db.PutScheduleRequest(request));
  EC_ASSIGN_OR_RETURN(int64_t table_id, StoreCostTable(db, solved.table));
  EC_ASSIGN_OR_RETURN(solved.schedule_id, db.PutSchedule(request_id, table_id, solved.schedule));
  return Status::Ok();
}

}  // namespace

Result<SolvedRequest> SolveRequest(costdb::CostDb* db, const v1::ScheduleRequest& request, bool store,
                                   const std::atomic<bool>* stop,
                                   const std::function<void(const solver::Progress&)>& on_progress) {
  EC_ASSIGN_OR_RETURN(PreparedSolve prepared, PrepareSolve(db, request));
  EC_RETURN_IF_ERROR(SolvePrepared(prepared, stop, on_progress));
  if (db && store) EC_RETURN_IF_ERROR(StoreSolved(*db, prepared.request, prepared.solved));
  return prepared.solved;
}

Result<SolvedRequest> SolveRequestInChild(costdb::CostDb& db, const v1::ScheduleRequest& request, bool store,
                                          const std::function<void(const solver::Progress&)>& on_progress) {
  // The database is read and written here, never in the child: SQLite's state does not survive a
  // fork (a database another process holds in WAL mode fails there with "locking protocol").
  EC_ASSIGN_OR_RETURN(PreparedSolve prepared, PrepareSolve(&db, request));
  IsolationLimits limits;  // the caller's own work on its own data: no resource limits, no filter
  limits.memory_bytes = 0;
  limits.cpu_s = 0;
  limits.seccomp = false;
  limits.wall_s = kSolveInChildWallS;
  Result<std::string> bytes = RunIsolated([&]() -> Result<std::string> {
    EC_RETURN_IF_ERROR(SolvePrepared(prepared, nullptr, on_progress));
    return prepared.solved.schedule.SerializeAsString();
  }, limits);
  if (!bytes.ok()) {
    // The child's own errors come through as they were; a crash reads after what ran.
    if (bytes.status().code() == ErrorCode::kInternal || bytes.status().code() == ErrorCode::kDeadlineExceeded) {
      return Status(bytes.status().code(), "the solver's process " + bytes.status().message());
    }
    return bytes.status();
  }
  SolvedRequest& solved = prepared.solved;
  if (!solved.schedule.ParseFromString(*bytes)) return Internal("the solver's process returned no schedule");
  if (store) EC_RETURN_IF_ERROR(StoreSolved(db, solved.schedule.request(), solved));
  return solved;
}

}  // namespace edgecost::service

namespace edgecost::service {

std::string CsvField(const std::string& given) {
  // A spreadsheet runs a cell that starts with one of these as a formula: a quote makes it text.
  const std::string text = !given.empty() && std::string_view("=+-@\t\r").find(given[0]) != std::string_view::npos
                               ? "'" + given
                               : given;
  if (text.find_first_of(",\"\r\n") == std::string::npos) return text;
  std::string out = "\"";
  for (char c : text) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + "\"";
}

std::string CsvNumber(double value) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, "%.9g", value);
  return buffer;
}

Result<v1::ListSchedulesResponse> ListSchedules(costdb::CostDb& db, const v1::ListSchedulesRequest& request) {
  EC_ASSIGN_OR_RETURN(std::vector<costdb::StoredSchedule> stored, db.ListSchedules(request.model(), request.device()));
  v1::ListSchedulesResponse response;
  for (const costdb::StoredSchedule& s : stored) {
    v1::ScheduleSummary* summary = response.add_schedules();
    summary->set_id(static_cast<uint64_t>(s.id));
    *summary->mutable_request() = s.request;
    summary->set_status(s.status);
    summary->set_energy_j(s.energy_j);
    summary->set_superseded(s.superseded);
    summary->set_energy_source(s.energy_source);
  }
  return response;
}

std::string SchedulesCsv(const v1::ListSchedulesResponse& listed) {
  std::ostringstream out;
  out << "schedule,model,device,cost_source,strategy,batch_size,activation_budget_bytes,runtime_budget_multiple,"
         "runtime_budget_s,count_paging_time,status,energy_j,energy_estimated,superseded,process_ram_budget_bytes,"
         "activation_budget_percent\n";
  for (const v1::ScheduleSummary& s : listed.schedules()) {
    const v1::ScheduleRequest& r = s.request();
    const bool has = s.status() == v1::Schedule::STATUS_OPTIMAL || s.status() == v1::Schedule::STATUS_FEASIBLE;
    out << s.id() << ',' << CsvField(r.model().empty() ? r.graph_file() : r.model()) << ',' << CsvField(r.device())
        << ',' << CsvField(r.cost_source()) << ',' << CsvField(r.strategy().empty() ? "optimal" : r.strategy()) << ','
        << std::max(1u, r.batch_size()) << ',' << r.activation_budget_bytes() << ','
        << (r.has_runtime_budget_multiple() ? CsvNumber(r.runtime_budget_multiple()) : "") << ','
        << (r.has_runtime_budget_s() ? CsvNumber(r.runtime_budget_s()) : "") << ',' << (r.count_paging_time() ? 1 : 0)
        << ',' << CsvField(std::string(ScheduleStatusText(s.status()))) << ',' << (has ? CsvNumber(s.energy_j()) : "")
        << ',' << (s.energy_source() == v1::ENERGY_SOURCE_ESTIMATED ? 1 : 0) << ',' << (s.superseded() ? 1 : 0) << ','
        << r.process_ram_budget_bytes() << ',' << CsvNumber(r.activation_budget_percent()) << '\n';
  }
  return out.str();
}

std::string CostTableCsv(const v1::CostTable& table) {
  const auto number = CsvNumber;
  std::ostringstream out;
  out << "node,name,phase,runtime_s,compute_j,ram_bytes,page_in_j,page_out_j,runtime_ci95_low_s,"
         "runtime_ci95_high_s,repetitions,unreliable,op_key,model,device,cost_source\n";
  const v1::TrainingGraph& g = table.graph();
  for (int i = 0; i < table.costs_size(); ++i) {
    const v1::NodeCost& c = table.costs(i);
    const v1::TrainingNode* node = i < g.nodes_size() ? &g.nodes(i) : nullptr;
    const char* phase = !node                                       ? ""
                        : node->phase() == v1::PHASE_FORWARD        ? "forward"
                        : node->phase() == v1::PHASE_LOSS           ? "loss"
                        : node->phase() == v1::PHASE_BACKWARD       ? "backward"
                                                                    : "";
    const bool stats = c.has_runtime_stats() && c.runtime_stats().repetitions() > 0;
    out << c.node() << ',' << CsvField(node ? node->name() : "") << ',' << phase << ',' << number(c.runtime_s())
        << ',' << number(c.compute_j()) << ',' << c.ram_bytes() << ',' << number(c.page_in_j()) << ','
        << number(c.page_out_j()) << ',' << (stats ? number(c.runtime_stats().ci95_low_s()) : "") << ','
        << (stats ? number(c.runtime_stats().ci95_high_s()) : "") << ','
        << (stats ? std::to_string(c.runtime_stats().repetitions()) : "") << ',' << (c.unreliable() ? 1 : 0) << ','
        << CsvField(c.op_key()) << ',' << CsvField(g.model()) << ',' << CsvField(table.device()) << ','
        << CsvField(table.cost_source()) << '\n';
  }
  return out.str();
}

}  // namespace edgecost::service
