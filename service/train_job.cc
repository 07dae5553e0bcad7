#include "service/train_job.h"

#include <malloc.h>
#include <unistd.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "base/clock.h"
#include "base/files.h"
#include "base/stats.h"
#include "base/units.h"
#include "probes/registry.h"
#include "profiler/interference.h"
#include "profiler/node_work.h"
#include "profiler/paging.h"
#include "profiler/power_model.h"
#include "profiler/probe_meter.h"
#include "profiler/profile.h"
#include "service/cost_tables.h"
#include "service/models.h"
#include "service/onnx_weights.h"
#include "service/profile_job.h"
#include "service/step_memory.h"
#include "service/words.h"
#include "solver/solve.h"
#include "train/arena.h"
#include "train/checkpoint.h"
#include "train/data.h"
#include "train/executor.h"
#include "train/pager.h"
#include "train/trace.h"

namespace edgecost::service {
namespace {

// The thread count a cost table was measured at: its own, else (a schedule file written before
// tables carried it) from its op keys; 0 when unknown (an analytic or imported table).
int ProfiledThreads(const v1::CostTable& table) {
  return table.threads() > 0 ? static_cast<int>(table.threads()) : profiler::CostTableOpKeyThreads(table);
}

// The thread count whose stored table predicts a run at `threads`: its own when stored, or when
// no count is (the lookup then says what to run). Otherwise the nearest stored count: a run's
// predictions are informational, so it goes on, and the mismatch note says so loudly.
Result<uint32_t> PredictionThreads(costdb::CostDb& db, const costdb::CostTableKey& key, int threads,
                                   std::vector<std::string>& notes) {
  EC_ASSIGN_OR_RETURN(const std::vector<uint32_t> stored, db.CostTableThreads(key));
  const auto asked = static_cast<uint32_t>(threads);
  if (stored.empty() || std::find(stored.begin(), stored.end(), asked) != stored.end()) return asked;
  uint32_t nearest = stored.front();
  std::string counts;
  for (uint32_t t : stored) {
    counts += (counts.empty() ? "" : ", ") + profiler::ThreadsText(t);
    const auto distance = [&](uint32_t c) { return c > asked ? c - asked : asked - c; };
    if (distance(t) <= distance(nearest)) nearest = t;  // ascending: a tie goes to the larger
  }
  notes.push_back("THREAD MISMATCH: this run uses " + profiler::ThreadsText(asked) + " and no " + key.cost_source +
                  " cost table of " + key.model + " was measured at that count (stored: " + counts +
                  "); its predictions come from the " + profiler::ThreadsText(nearest) +
                  " table and are not this run's. Run `edgecost profile --model " + key.model +
                  (key.batch_size != 1 ? " --batch-size " + std::to_string(key.batch_size) : std::string()) +
                  " --threads " + std::to_string(asked) + "` to predict it");
  return nearest;
}

// The stored table a run on this device predicts from, of any thread count.
costdb::CostTableKey PredictionKey(const v1::TrainingGraph& graph, const std::string& cost_source) {
  return {graph.model(),      profiler::ThisDeviceName(), cost_source,
          graph.batch_size(), graph.derivation(),         graph.trainable()};
}

// A /proc/self/status figure in bytes (VmHWM, VmRSS); -1 when unreadable.
int64_t ProcStatusBytes(const std::string& key) {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind(key + ":", 0) == 0) return std::stoll(line.substr(key.size() + 1)) * 1024;
  }
  return -1;
}

// Resets the resident high-water mark to the current RSS (Linux 4.0+), so the peak is the steps'.
bool ResetHighWater() {
  std::ofstream clear("/proc/self/clear_refs");
  clear << "5";
  clear.flush();
  return static_cast<bool>(clear);
}

// The node times of a run too disturbed to leave its disturbed steps out: a low percentile over
// all steps, which an undisturbed execution of each node decides (a node of microseconds mostly
// runs between another task's time slices, where a whole step of milliseconds rarely does).
constexpr double kDisturbedQuantile = 0.25;

uint64_t MedianBytes(const std::vector<uint64_t>& values) {
  return static_cast<uint64_t>(std::llround(Median(std::vector<double>(values.begin(), values.end()))));
}

bool HasSchedule(const v1::Schedule& s) {
  return s.status() == v1::Schedule::STATUS_OPTIMAL || s.status() == v1::Schedule::STATUS_FEASIBLE;
}

// The best energy source here, or the power model, labelled as an estimate.
Result<std::unique_ptr<profiler::EnergyMeter>> StartMeter(const std::string& probes_config,
                                                          const std::function<void(const std::string&)>& log) {
  EC_ASSIGN_OR_RETURN(probes::ProbesConfig config, probes::LoadProbesConfig(probes_config));
  probes::Detected detected = probes::DetectAll(config);
  if (!detected.probes.empty()) {
    log("energy: measuring idle power of " + detected.probes.front()->info().name + " for 1 s ...");
    EC_ASSIGN_OR_RETURN(auto meter, profiler::ProbeMeter::Start(std::move(detected.probes.front())));
    return std::unique_ptr<profiler::EnergyMeter>(std::move(meter));
  }
  auto meter = std::make_unique<profiler::EstimatedMeter>(config.estimate);
  log("energy: no sensor measures energy here (see `edgecost probes`); estimated by " + meter->Name() +
      " and labelled ESTIMATED");
  return std::unique_ptr<profiler::EnergyMeter>(std::move(meter));
}

// The largest difference between two sets of gradients, and where it is.
v1::GradientCheck CompareGradients(const v1::TrainingGraph& graph, const std::vector<train::ParamGradient>& plain,
                                   const std::vector<train::ParamGradient>& scheduled) {
  v1::GradientCheck check;
  check.set_identical(plain.size() == scheduled.size());
  check.set_parameters(static_cast<uint32_t>(plain.size()));
  double worst = 0;
  for (size_t p = 0; p < std::min(plain.size(), scheduled.size()); ++p) {
    const auto& a = plain[p].values;
    const auto& b = scheduled[p].values;
    if (a.size() != b.size() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) != 0) {
      check.set_identical(false);
    }
    for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
      const double diff = std::fabs(static_cast<double>(a[i]) - static_cast<double>(b[i]));
      if (diff > worst || (std::isnan(diff) && !std::isnan(worst))) {
        worst = diff;
        check.set_where("node " + std::to_string(plain[p].node) + " (" + graph.nodes(plain[p].node).name() +
                        ") parameter " + std::to_string(plain[p].index) + ", element " + std::to_string(i) +
                        ": plain " + std::to_string(a[i]) + ", scheduled " + std::to_string(b[i]));
      }
    }
  }
  check.set_max_abs_diff(worst);
  return check;
}

// Where the trained model goes, checked before any step: a run's weights are not lost to a typo.
Status CheckOutputs(const TrainJobOptions& options) {
  const std::string npz = options.out_npz.empty() ? NpzPathFor(options.out_onnx) : options.out_npz;
  std::error_code error;
  if (std::filesystem::weakly_canonical(npz, error) == std::filesystem::weakly_canonical(options.out_onnx, error)) {
    return InvalidArgument("--out-npz and --out name one file (" + options.out_onnx + "): give two");
  }
  for (const std::string& path : {options.out_onnx, npz}) {
    const std::filesystem::path folder = std::filesystem::absolute(path, error).parent_path();
    if (!std::filesystem::is_directory(folder, error)) {
      return InvalidArgument("cannot write " + path + ": there is no folder " + folder.string());
    }
    if (::access(folder.c_str(), W_OK) != 0) return PermissionDenied("cannot write " + path + ": " + folder.string() + " is not writable");
    if (std::filesystem::is_directory(path, error)) return InvalidArgument("cannot write " + path + ": it is a folder");
  }
  return Status::Ok();
}

// A schedule solved for a process budget counted the optimizer state its request named: one solved
// for a lighter optimizer than this run's would not hold its budget.
Status CheckScheduleOptimizer(const v1::Schedule& schedule, const train::OptimizerOptions& optimizer) {
  const auto tensors = static_cast<uint32_t>(train::OptimizerStateTensors(optimizer));
  const uint32_t solved_for = schedule.request().optimizer_state_tensors();
  if (schedule.request().process_ram_budget_bytes() == 0 || tensors <= solved_for) return Status::Ok();
  return FailedPrecondition(
      "the schedule was solved for a process of " + FormatBytes(static_cast<double>(schedule.request().process_ram_budget_bytes())) +
      " with an optimizer that keeps " + std::to_string(solved_for) + " state tensor" + (solved_for == 1 ? "" : "s") +
      " per parameter; this run's " + train::OptimizerKindName(optimizer.kind) + " keeps " + std::to_string(tensors) +
      ", which the budget does not hold: solve again with `--optimizer " + train::OptimizerKindName(optimizer.kind) +
      "`, or train with --ram-budget to solve for this run");
}

// The stored schedule a schedule file holds (`solve --out` of a stored solve): the newest with the
// same model, device, budget and stages; 0 when none is, as for a file solved elsewhere.
Result<uint64_t> StoredScheduleOf(costdb::CostDb& db, const v1::Schedule& file) {
  EC_ASSIGN_OR_RETURN(std::vector<costdb::StoredSchedule> stored,
                      db.ListSchedules(file.request().model(), file.request().device()));
  for (auto it = stored.rbegin(); it != stored.rend(); ++it) {
    if (it->request.activation_budget_bytes() != file.request().activation_budget_bytes()) continue;
    EC_ASSIGN_OR_RETURN(const v1::Schedule candidate, db.GetSchedule(it->id));
    if (candidate.stages_size() != file.stages_size() || candidate.peak_ram_bytes() != file.peak_ram_bytes()) continue;
    bool same = true;
    for (int t = 0; same && t < file.stages_size(); ++t) {
      same = candidate.stages(t).SerializeAsString() == file.stages(t).SerializeAsString();
    }
    if (same) return static_cast<uint64_t>(it->id);
  }
  return uint64_t{0};
}

// The paging thread's requests inside the steps, per direction: the node's bytes and the seconds
// the request took, fitted to latency + bytes / throughput as profile's storage benchmark is.
class InStepIo {
 public:
  void Add(const std::vector<train::TraceEvent>& events, const std::vector<int64_t>& node_bytes) {
    for (const train::TraceEvent& e : events) {
      const bool out = e.kind == train::TraceEvent::Kind::kPageOut;
      if (!out && e.kind != train::TraceEvent::Kind::kPageIn) continue;
      Direction& d = out ? out_ : in_;
      d.bytes.push_back(static_cast<uint64_t>(node_bytes[static_cast<size_t>(e.node)]));
      d.seconds.push_back(e.duration_s);
    }
  }
  bool Any() const { return !out_.bytes.empty() && !in_.bytes.empty(); }
  // The device's paging cost with these figures, stored in place of the storage benchmark's.
  Result<v1::PagingCost> Fit(costdb::CostDb& db, const std::string& fingerprint_hash) const {
    EC_ASSIGN_OR_RETURN(std::optional<v1::PagingCost> stored, db.GetPagingCost(fingerprint_hash));
    v1::PagingCost cost = stored.value_or(v1::PagingCost{});
    double latency_s = 0, throughput = 0;
    profiler::FitAffine(out_.bytes, out_.seconds, &latency_s, &throughput);
    cost.set_page_out_latency_s(latency_s);
    cost.set_page_out_throughput_bytes_per_s(throughput);
    profiler::FitAffine(in_.bytes, in_.seconds, &latency_s, &throughput);
    cost.set_page_in_latency_s(latency_s);
    cost.set_page_in_throughput_bytes_per_s(throughput);
    EC_RETURN_IF_ERROR(db.PutPagingCost(fingerprint_hash, cost));
    return cost;
  }

 private:
  struct Direction {
    std::vector<uint64_t> bytes;
    std::vector<double> seconds;
  };
  Direction out_, in_;
};

// The measured-in-step table of a run: `isolated`'s nodes with the run's node times, each plus the
// step's time outside its nodes per execution (InStepOverheadS), so that a recomputation pays it
// again and a plain step's costs add up to the step. The step is the run's median, or, for a run
// whose node times are a low percentile, those plus `outside_nodes_s`, the same percentile of the
// time outside them. Energies keep each op's power from its isolated measurement, scaled together
// so that they add up to the step's measured energy as their times add up to its time.
v1::CostTable InStepCostTable(const v1::CostTable& isolated, const v1::TrainRun& run, int64_t run_id,
                              double outside_nodes_s) {
  v1::CostTable in_step = isolated;
  in_step.set_cost_source(kMeasuredInStepSource);
  in_step.set_threads(run.threads());  // the run's: its node times are what is stored
  const std::vector<v1::NodeTime> node_times(run.nodes().begin(), run.nodes().end());
  double nodes_s = 0;
  uint64_t node_executions = 0;
  for (const v1::NodeTime& t : node_times) {
    nodes_s += t.runtime_s() * t.executions();
    node_executions += t.executions();
  }
  const bool robust = outside_nodes_s >= 0;
  const double step_s = robust ? run.paging_wait_s() + nodes_s + outside_nodes_s : run.runtime_s();
  const double overhead_s = InStepOverheadS(step_s, run.paging_wait_s(), node_times);
  const double step_power_w = run.runtime_s() > 0 ? run.energy_j() / run.runtime_s() : 0;
  double raw_j = 0;  // the nodes' energies at their own powers, before they are made to add up
  for (const v1::NodeTime& t : node_times) {
    v1::NodeCost& c = *in_step.mutable_costs(static_cast<int>(t.node()));
    const double runtime_s = std::max(0.0, t.runtime_s() + overhead_s);
    // An op's own power from its measurement alone; a node never measured alone (the input's copy): the step's.
    c.set_compute_j((c.runtime_s() > 0 ? c.compute_j() / c.runtime_s() : step_power_w) * runtime_s);
    c.set_runtime_s(runtime_s);
    raw_j += c.compute_j() * t.executions();
  }
  const double scale = raw_j > 0 ? step_power_w * (step_s - run.paging_wait_s()) / raw_j : 1;
  for (const v1::NodeTime& t : node_times) {
    v1::NodeCost& c = *in_step.mutable_costs(static_cast<int>(t.node()));
    c.set_compute_j(c.compute_j() * scale);
  }
  const double outside_s = step_s - run.paging_wait_s() - nodes_s;
  const std::string statistic =
      robust ? "the " + std::to_string(static_cast<int>(100 * kDisturbedQuantile)) +
                   "th percentile over all " + std::to_string(run.median_steps()) +
                   " steps (most were disturbed: an undisturbed execution of each node decides)"
             : "medians over " + std::to_string(run.median_steps()) +
                   (run.disturbed_steps() > 0 ? " undisturbed" : "") + " steps";
  in_step.set_note("runtimes are " + statistic + " inside real training steps (training run #" +
                   std::to_string(run_id) + "), each plus " + FormatSeconds(overhead_s) +
                   " per execution: the step's " + FormatSeconds(outside_s) + " outside its nodes (binding, arena, "
                   "dispatch; " +
                   std::to_string(step_s > 0 ? static_cast<int>(std::lround(100 * outside_s / step_s)) : 0) +
                   "% of the step of " + FormatSeconds(step_s) + ") spread over its " +
                   std::to_string(node_executions) +
                   " node executions, so a recomputation pays it again and a plain step's costs add up to the "
                   "step; energies are each op's power measured alone times its time here, scaled to add up to "
                   "the step's measured energy (a node never measured alone: the step's power)");
  return in_step;
}

}  // namespace

profiler::Verdict JudgeStep(const v1::Interference& interference, double runtime_s, double window_s, bool single_thread,
                            const profiler::InterferenceLimits& limits) {
  char text[256];
  if (interference.steal_fraction() > limits.max_steal_fraction) {
    std::snprintf(text, sizeof text, "the hypervisor took %.0f%% of the CPUs (steal time)",
                  100 * interference.steal_fraction());
    return {false, text};
  }
  const double wait_s = interference.run_queue_wait_s();
  if (interference.watched() && wait_s > std::max(limits.min_wait_s, limits.wait_fraction * runtime_s)) {
    std::snprintf(text, sizeof text,
                  "its threads waited %s for a CPU (%.0f%% of the step): another task ran on its cores",
                  FormatSeconds(wait_s).c_str(), runtime_s > 0 ? 100 * wait_s / runtime_s : 0.0);
    return {false, text};
  }
  if (!interference.watched() && interference.involuntary_switches() > 0) {
    // No per-thread wait here (no schedstat): a preemption is all the kernel tells.
    std::snprintf(text, sizeof text, "preempted %llu times (this kernel keeps no per-thread wait)",
                  static_cast<unsigned long long>(interference.involuntary_switches()));
    return {false, text};
  }
  if (!single_thread && window_s >= kMinSharedWindowS && interference.other_cpu_cores() >= limits.shared_cpu_cores) {
    std::snprintf(text, sizeof text, "other tasks used %.2f CPUs meanwhile (caches, memory bandwidth shared)",
                  interference.other_cpu_cores());
    return {false, text};
  }
  return {};
}

StepSelection SelectSteps(const std::vector<bool>& disturbed) {
  StepSelection selection;
  std::vector<size_t> clean;
  for (size_t s = 0; s < disturbed.size(); ++s) {
    if (disturbed[s]) {
      ++selection.disturbed_steps;
    } else {
      clean.push_back(s);
    }
  }
  selection.run_disturbed = 2 * selection.disturbed_steps > disturbed.size();
  if (selection.disturbed_steps > 0 && !clean.empty() &&
      clean.size() >= std::min(kMinUndisturbedSteps, disturbed.size())) {
    selection.median_of = std::move(clean);
    selection.undisturbed_only = true;
  } else {
    for (size_t s = 0; s < disturbed.size(); ++s) selection.median_of.push_back(s);
  }
  return selection;
}

std::string DisturbedRunWarning(const v1::TrainRun& run, bool accepted_noisy) {
  if (!run.disturbed()) return "";
  std::string line = run.disturbance() + ": the step time and energy are not this device's alone";
  line += accepted_noisy ? "; stored as accepted (--accept-noisy)"
                         : "; no measured-in-step costs are stored from it (--accept-noisy stores them)";
  return line + "; train again when the device is idle";
}

Result<CheckedRun> CheckScheduleAgainstGraph(const v1::TrainingGraph& graph, const v1::Schedule& schedule,
                                             const v1::CostTable& table) {
  const v1::TrainingGraph& planned = table.graph();
  const std::string stale = ": the schedule is for another model or a stale graph, or was edited; solve it again";
  if (!schedule.request().model().empty() && graph::ModelName(schedule.request().model()) != graph.model()) {
    return FailedPrecondition("the schedule is for model '" + schedule.request().model() + "', not '" + graph.model() +
                              "'");
  }
  if (planned.nodes_size() != graph.nodes_size()) {
    return FailedPrecondition("the schedule's graph has " + std::to_string(planned.nodes_size()) + " nodes, model " +
                              graph.model() + " has " + std::to_string(graph.nodes_size()) + stale);
  }
  for (int i = 0; i < graph.nodes_size(); ++i) {
    const v1::TrainingNode& a = planned.nodes(i);
    const v1::TrainingNode& b = graph.nodes(i);
    const bool same_inputs = std::equal(a.inputs().begin(), a.inputs().end(), b.inputs().begin(), b.inputs().end());
    if (a.name() != b.name() || a.output_bytes() != b.output_bytes() || !same_inputs) {
      return FailedPrecondition("node " + std::to_string(i) + " ('" + b.name() + "') differs from the schedule's ('" +
                                a.name() + "', " + std::to_string(a.output_bytes()) + " B)" + stale);
    }
  }
  CheckedRun checked;
  checked.schedule = schedule;
  checked.table = table;
  EC_ASSIGN_OR_RETURN(checked.problem, solver::ProblemFromCostTable(table, schedule.request()));
  checked.replay = solver::Simulate(checked.problem, schedule);
  if (!checked.replay.valid) {
    return FailedPrecondition("schedule refused before running anything: " + checked.replay.violation);
  }
  checked.plan = solver::PlanFromStages(schedule, graph.nodes_size());
  return checked;
}

double InStepOverheadS(double step_s, double paging_wait_s, const std::vector<v1::NodeTime>& nodes) {
  double nodes_s = 0;
  uint64_t executions = 0;
  for (const v1::NodeTime& t : nodes) {
    nodes_s += t.runtime_s() * t.executions();
    executions += t.executions();
  }
  return executions > 0 ? (step_s - paging_wait_s - nodes_s) / static_cast<double>(executions) : 0.0;
}

// What a resumed run must share with the run that wrote its checkpoint to end at the same weights,
// one "name: value" line each. The schedule is not among them: every schedule computes the same
// gradients, so a run may resume under another budget.
Result<std::string> ResumeKey(const v1::TrainingGraph& graph, const TrainJobOptions& options,
                              const train::DataSource& data, int steps, int threads, const v1::TrainRun& run) {
  EC_ASSIGN_OR_RETURN(const std::string records, data.ContentHash());
  std::ostringstream key;
  key << "training graph: " << graph::GraphHash(graph) << "\n"
      << "batch: " << graph.batch_size() << ", trainable: " << graph.trainable() << "\n"
      << "seed: " << options.seed << "\n"
      << "data: " << data.Describe() << ", its records as read (keys, --mean, --std applied): " << records << "\n"
      << "steps: " << steps << "\n"
      << "lr: " << options.lr << ", schedule: " << run.lr_schedule().ShortDebugString() << "\n"
      << "optimizer: " << run.optimizer().ShortDebugString() << "\n"
      << "threads: " << threads << "\n";
  return key.str();
}

// The lines of two resume keys that differ, "name: theirs (the checkpoint) / ours".
std::string KeyDifferences(const std::string& checkpoint, const std::string& ours) {
  std::istringstream a(checkpoint), b(ours);
  std::string differences;
  for (std::string x, y; std::getline(a, x) && std::getline(b, y);) {
    if (x != y) differences += "\n  checkpoint " + x + "\n  this run   " + y;
  }
  return differences;
}

Result<TrainJobOptions> TrainJobOptionsOf(const v1::StartTrainRequest& request, costdb::Store& store) {
  TrainJobOptions options;
  options.database = &store;
  options.graph.model_or_file = request.model();
  options.graph.batch_size = request.batch_size() > 0 ? static_cast<int>(request.batch_size()) : 1;
  if (!request.trainable().empty()) {
    EC_ASSIGN_OR_RETURN(options.graph.trainable, graph::Trainable::Parse(request.trainable()));
  }
  options.schedule_id = request.schedule_id();
  options.solve.set_update_in_backward(request.update_in_backward());
  if (request.activation_budget_bytes() > 0 || request.process_ram_budget_bytes() > 0 ||
      request.activation_budget_percent() > 0) {
    options.solve.set_activation_budget_bytes(request.activation_budget_bytes());
    options.solve.set_process_ram_budget_bytes(request.process_ram_budget_bytes());
    options.solve.set_activation_budget_percent(request.activation_budget_percent());
    if (request.runtime_budget_s() > 0) {
      options.solve.set_runtime_budget_s(request.runtime_budget_s());
    } else {
      const double multiple = request.runtime_budget_multiple() > 0 ? request.runtime_budget_multiple()
                                                                    : solver::kDefaultRuntimeBudgetMultiple;
      if (!(multiple >= 1)) return InvalidArgument("the runtime budget must be at least 1x a plain step");
      options.solve.set_runtime_budget_multiple(multiple);
    }
    options.solve.set_strategy(request.strategy().empty() ? "optimal" : request.strategy());
    // Measured: the I/O thread does not hide paging behind compute, so the budget counts it.
    options.solve.set_count_paging_time(!request.overlap_paging());
    options.solve.set_time_limit_s(request.time_limit_s() > 0 ? request.time_limit_s() : 60);
  }
  if (!request.cost_source().empty()) options.cost_source = request.cost_source();
  if (!request.init().empty()) options.init = request.init();
  options.steps = request.steps() > 0 ? static_cast<int>(request.steps()) : 10;
  options.lr = request.lr() > 0 ? request.lr() : 0.01;
  options.optimizer = request.optimizer();
  options.lr_schedule = request.lr_schedule();
  options.threads = static_cast<int>(request.threads());
  options.verify = request.verify();
  options.accept_noisy = request.accept_noisy();
  if (request.seed() > 0) options.seed = request.seed();
  options.data_file = request.data();
  options.val_data = request.val_data();
  options.epochs = static_cast<int>(request.epochs());
  options.val_split = request.val_split();
  options.mean.assign(request.mean().begin(), request.mean().end());
  options.std.assign(request.std().begin(), request.std().end());
  if (!request.data_keys().empty()) {
    std::tie(options.input_key, options.label_key) = DataKeysOf(request.data_keys());
    if (options.input_key.empty()) {
      return InvalidArgument("data keys are INPUTS,LABELS (the .npz's array names), not '" + request.data_keys() + "'");
    }
  }
  return options;
}

std::pair<std::string, std::string> DataKeysOf(const std::string& text) {
  const size_t comma = text.find(',');
  if (comma == std::string::npos || comma == 0 || comma + 1 == text.size()) return {};
  return {text.substr(0, comma), text.substr(comma + 1)};
}

Result<train::OptimizerOptions> OptimizerOptionsOf(const v1::TrainOptimizer& optimizer) {
  train::OptimizerOptions options;
  EC_ASSIGN_OR_RETURN(options.kind, train::ParseOptimizerKind(optimizer.kind().empty() ? "sgd" : optimizer.kind()));
  options.momentum = optimizer.momentum();
  options.dampening = optimizer.dampening();
  options.nesterov = optimizer.nesterov();
  if (optimizer.has_weight_decay()) {
    if (!(optimizer.weight_decay() >= 0)) return InvalidArgument("--weight-decay must be a number at least 0");
    options.weight_decay = optimizer.weight_decay();
  }
  if (optimizer.has_beta1()) options.beta1 = optimizer.beta1();
  if (optimizer.has_beta2()) options.beta2 = optimizer.beta2();
  if (optimizer.has_eps()) options.eps = optimizer.eps();
  EC_RETURN_IF_ERROR(train::ValidateOptimizer(options));
  return options;
}

v1::TrainOptimizer ToProto(const train::OptimizerOptions& options) {
  v1::TrainOptimizer proto;
  proto.set_kind(train::OptimizerKindName(options.kind));
  proto.set_weight_decay(train::WeightDecayOf(options));
  if (options.kind == train::OptimizerKind::kSgd) {
    proto.set_momentum(options.momentum);
    proto.set_dampening(options.dampening);
    proto.set_nesterov(options.nesterov);
  } else {
    proto.set_beta1(options.beta1);
    proto.set_beta2(options.beta2);
    proto.set_eps(options.eps);
  }
  return proto;
}

Result<train::LrScheduleOptions> LrScheduleOptionsOf(const v1::LrSchedule& schedule, int steps, double lr) {
  train::LrScheduleOptions options;
  EC_ASSIGN_OR_RETURN(options.kind, train::ParseLrScheduleKind(schedule.kind().empty() ? "none" : schedule.kind()));
  const bool step = options.kind == train::LrScheduleKind::kStep;
  const bool cosine = options.kind == train::LrScheduleKind::kCosine;
  if ((schedule.step_size() > 0 || schedule.has_gamma()) && !step) {
    return InvalidArgument("--lr-step-size and --lr-gamma belong to --lr-schedule step");
  }
  if ((schedule.t_max() > 0 || schedule.eta_min() != 0) && !cosine) {
    return InvalidArgument("--lr-t-max and --lr-min belong to --lr-schedule cosine");
  }
  options.step_size = schedule.step_size();
  if (schedule.has_gamma()) options.gamma = schedule.gamma();
  options.warmup_steps = schedule.warmup_steps();
  options.t_max = schedule.t_max() > 0 ? static_cast<int64_t>(schedule.t_max()) : steps - options.warmup_steps;
  options.eta_min = schedule.eta_min();
  if (cosine && schedule.t_max() == 0 && options.t_max < 1) {
    return InvalidArgument("--warmup-steps " + std::to_string(options.warmup_steps) + " leaves no step of the " +
                           std::to_string(steps) + " for the cosine; give --lr-t-max or more --steps");
  }
  EC_RETURN_IF_ERROR(train::ValidateLrSchedule(options, lr));
  return options;
}

v1::LrSchedule ToProto(const train::LrScheduleOptions& options) {
  v1::LrSchedule proto;
  proto.set_kind(train::LrScheduleKindName(options.kind));
  proto.set_warmup_steps(static_cast<uint32_t>(options.warmup_steps));
  if (options.kind == train::LrScheduleKind::kStep) {
    proto.set_step_size(static_cast<uint32_t>(options.step_size));
    proto.set_gamma(options.gamma);
  } else if (options.kind == train::LrScheduleKind::kCosine) {
    proto.set_t_max(static_cast<uint32_t>(options.t_max));
    proto.set_eta_min(options.eta_min);
  }
  return proto;
}

std::string DescribeTraining(const v1::TrainRun& run) {
  Result<train::OptimizerOptions> optimizer = OptimizerOptionsOf(run.optimizer());
  std::ostringstream text;
  text << (optimizer.ok() ? train::DescribeOptimizer(*optimizer) : run.optimizer().kind()) << ", lr " << run.lr();
  const v1::LrSchedule& schedule = run.lr_schedule();
  if (schedule.kind() == "step") {
    text << " x " << schedule.gamma() << " every " << schedule.step_size() << " steps";
  } else if (schedule.kind() == "cosine") {
    text << " cosine to " << schedule.eta_min() << " over " << schedule.t_max() << " steps";
  }
  if (schedule.warmup_steps() > 0) text << " after " << schedule.warmup_steps() << " linear warm-up steps";
  return text.str();
}

Status EvaluateHeldOut(const train::DataSource& data, train::Executor& executor, v1::EpochStats& epoch) {
  train::EvalStats total;
  for (int64_t b = 0; b < data.held_out_batches(); ++b) {
    int64_t rows = 0;
    EC_ASSIGN_OR_RETURN(const train::Batch batch, data.HeldOutBatch(b, &rows));
    EC_ASSIGN_OR_RETURN(const train::EvalStats stats, executor.Evaluate(batch, rows));
    total.loss_sum += stats.loss_sum;
    total.correct += stats.correct;
    total.rows += stats.rows;
  }
  if (total.rows > 0) {
    epoch.set_held_out_loss(total.loss_sum / static_cast<double>(total.rows));
    epoch.set_held_out_accuracy(static_cast<double>(total.correct) / static_cast<double>(total.rows));
  }
  return Status::Ok();
}

std::string EpochLine(const v1::EpochStats& epoch, int64_t batches_per_epoch, int64_t held_out_records) {
  const auto fixed = [](double value, int digits) {
    char text[64];
    std::snprintf(text, sizeof text, "%.*f", digits, value);
    return std::string(text);
  };
  std::string line = "epoch " + std::to_string(epoch.epoch());
  if (epoch.steps() < batches_per_epoch) {
    line += " (" + std::to_string(epoch.steps()) + " of its " + std::to_string(batches_per_epoch) + " steps)";
  }
  line += ": train loss " + fixed(epoch.train_loss(), 4);
  if (held_out_records > 0) {
    line += ", held-out loss " + fixed(epoch.held_out_loss(), 4) + ", accuracy " +
            fixed(100 * epoch.held_out_accuracy(), 2) + "% of " + std::to_string(held_out_records);
  }
  return line;
}

Result<train::DataSource> OpenTrainingData(const TrainJobOptions& options, const train::Executor& executor,
                                           std::vector<std::string>& notes) {
  if (options.data_file.empty()) {
    if (options.epochs > 0 || options.val_split > 0 || !options.val_data.empty()) {
      return InvalidArgument("--epochs, --val-split and --val-data need a data set (--data)");
    }
    return train::DataSource::Synthetic(executor.input_elements(), executor.label_rows(), executor.classes(),
                                        options.seed, executor.input_id_limit());
  }
  train::ModelInput model{executor.input_dims(), executor.classes()};
  int64_t elements = 1;
  for (int64_t d : model.dims) elements *= d;
  if (model.dims.empty() || elements != executor.input_elements()) {
    model.dims = {executor.label_rows(), executor.input_elements() / std::max<int64_t>(1, executor.label_rows())};
  }
  EC_ASSIGN_OR_RETURN(train::DataSource data, train::DataSource::Open({.path = options.data_file,
                                                                       .mean = options.mean,
                                                                       .std = options.std,
                                                                       .input_key = options.input_key,
                                                                       .label_key = options.label_key,
                                                                       .val_split = options.val_split,
                                                                       .val_path = options.val_data,
                                                                       .seed = options.seed},
                                                                      model));
  if (data.dropped_per_epoch() > 0) {
    notes.push_back("each epoch leaves out its last partial batch (" + std::to_string(data.dropped_per_epoch()) +
                    " of " + std::to_string(data.train_records()) + " records; PyTorch's drop_last=True)");
  }
  return data;
}

std::string NpzPathFor(const std::string& onnx_path) {
  std::filesystem::path path(onnx_path);
  if (path.extension() == ".onnx") return path.replace_extension(".npz").string();
  return onnx_path + ".npz";
}

namespace {

using Log = std::function<void(const std::string&)>;

// What a run is built from, resolved and checked before anything runs.
struct TrainSetup {
  graph::GraphSpec spec;
  std::optional<graph::OnnxModel> onnx;  // an ONNX model's, whose weights load and write back
  v1::TrainingGraph graph;
  train::OptimizerOptions optimizer;
  int threads = 1;
  std::string cost_source;
  std::string paging_dir;
  std::optional<CheckedRun> checked;  // with a schedule
  uint64_t schedule_id = 0;
  std::optional<v1::CostTable> table;  // the predictions' costs, when there are
  // A table of `table`'s key at the run's own thread count is stored: a mismatch is then the
  // schedule's, solved on another count, and solving again, not profiling, is the advice.
  bool run_threads_table_stored = false;
  std::optional<v1::TrainRun> earlier_process;  // the run whose process predicts this one's
  bool update_in_backward = false;  // the schedule's (solved for it), else the options'
};

bool AsksForBudget(const v1::ScheduleRequest& request) {
  return request.activation_budget_bytes() > 0 || request.process_ram_budget_bytes() > 0 ||
         request.activation_budget_percent() > 0;
}

// "60.0 MB of process memory": the budget as the request gives it.
std::string BudgetText(const v1::ScheduleRequest& request) {
  if (request.process_ram_budget_bytes() > 0) {
    return FormatBytes(static_cast<double>(request.process_ram_budget_bytes())) + " of process memory (RAM budget)";
  }
  if (request.activation_budget_percent() > 0) {
    return PercentText(request.activation_budget_percent()) + " of the plain step's activation peak (activation budget)";
  }
  return FormatBytes(static_cast<double>(request.activation_budget_bytes())) + " of activations (activation budget)";
}

// A schedule solved for the options' budgets, and the table it was solved from.
Result<SolvedRequest> SolveForBudgets(costdb::CostDb& db, const TrainJobOptions& options, const TrainSetup& setup,
                                      const Log& log, std::vector<std::string>& notes) {
  v1::ScheduleRequest request = options.solve;
  request.set_model(setup.spec.model_or_file);
  request.set_optimizer_state_tensors(static_cast<uint32_t>(train::OptimizerStateTensors(setup.optimizer)));
  if (request.device().empty()) request.set_device("this");
  if (request.cost_source().empty() || request.cost_source() == kAutoCostSource) {
    request.set_cost_source(setup.cost_source);
  }
  const bool here = request.device() == "this" || request.device() == profiler::ThisDeviceName();
  if (request.compute_threads() == 0 && here) {
    EC_ASSIGN_OR_RETURN(const uint32_t table_threads,
                        PredictionThreads(db, PredictionKey(setup.graph, request.cost_source()), setup.threads, notes));
    request.set_compute_threads(table_threads);
  }
  request.set_batch_size(static_cast<uint32_t>(setup.spec.batch_size));
  const bool store_schedule = options.store && options.store_schedule;
  request.set_derivation("exact");
  request.set_trainable(setup.spec.trainable.ToString());
  log("solving a schedule (" + (request.strategy().empty() ? std::string("optimal") : request.strategy()) + ") for " +
      BudgetText(request) +
      " ...");
  // The smallest RAM budget the heuristics meet is said as soon as they know it, not after the time limit.
  auto say_min_ram = [&log, said = false](const solver::Progress& p) mutable {
    if (said || p.min_feasible_ram_bytes <= 0) return;
    said = true;
    log("no heuristic meets this budget; the smallest activation budget with a schedule is about " +
        FormatBytes(static_cast<double>(p.min_feasible_ram_bytes)) + " (the MILP searches on at this one)");
  };
  EC_ASSIGN_OR_RETURN(SolvedRequest solved, options.solve_in_child
                                                ? SolveRequestInChild(db, request, store_schedule, say_min_ram)
                                                : SolveRequest(&db, request, store_schedule, nullptr, say_min_ram));
  if (!HasSchedule(solved.schedule)) {
    std::string hint;
    if (solved.schedule.min_feasible_ram_bytes() > 0) {
      hint = "; the smallest activation budget with a schedule is about " +
             FormatBytes(static_cast<double>(solved.schedule.min_feasible_ram_bytes()));
    }
    return FailedPrecondition((solved.schedule.status() == v1::Schedule::STATUS_INFEASIBLE
                                   ? "no schedule meets the budgets: "
                                   : "no schedule found for the budgets: ") +
                              solved.schedule.message() + hint);
  }
  return solved;
}

// The schedule (a file, a stored one, or one solved for budgets) checked against the graph, and the
// cost table the run's predictions come from; without a schedule, the plain step's table.
Status ChooseSchedule(costdb::CostDb& db, const TrainJobOptions& options, TrainSetup& setup, const Log& log,
                      std::vector<std::string>& notes) {
  std::optional<v1::Schedule> schedule;
  setup.schedule_id = options.schedule_id;
  setup.update_in_backward = options.solve.update_in_backward();
  if (!options.schedule_file.empty()) {
    EC_ASSIGN_OR_RETURN(schedule, ReadScheduleFile(options.schedule_file));
    EC_ASSIGN_OR_RETURN(setup.schedule_id, StoredScheduleOf(db, *schedule));
  } else if (options.schedule_id != 0) {
    EC_ASSIGN_OR_RETURN(schedule, db.GetSchedule(static_cast<int64_t>(options.schedule_id)));
  } else if (AsksForBudget(options.solve)) {
    EC_ASSIGN_OR_RETURN(SolvedRequest solved, SolveForBudgets(db, options, setup, log, notes));
    schedule = solved.schedule;
    setup.schedule_id = static_cast<uint64_t>(solved.schedule_id);
    setup.table = solved.table;
  }
  if (schedule) {
    EC_RETURN_IF_ERROR(CheckScheduleOptimizer(*schedule, setup.optimizer));
    if (options.solve.update_in_backward() && !schedule->request().update_in_backward()) {
      return FailedPrecondition(
          "the schedule was solved with every update after the step; updates in the backward pass hold weight "
          "gradients as activations, which it did not plan: solve it again with --update-in-backward");
    }
    setup.update_in_backward = schedule->request().update_in_backward();
    if (!setup.table) {
      EC_ASSIGN_OR_RETURN(setup.table, ScheduleCostTable(&db, *schedule));
    }
    EC_ASSIGN_OR_RETURN(setup.checked, CheckScheduleAgainstGraph(setup.graph, *schedule, *setup.table));
    EC_ASSIGN_OR_RETURN(const std::vector<uint32_t> stored,
                        db.CostTableThreads(PredictionKey(setup.graph, setup.table->cost_source())));
    setup.run_threads_table_stored =
        std::find(stored.begin(), stored.end(), static_cast<uint32_t>(setup.threads)) != stored.end();
    const solver::Replay& replay = setup.checked->replay;
    log("schedule: " + (schedule->strategy().empty() ? std::string("?") : schedule->strategy()) + ", replayed: activation peak " +
        FormatBytes(static_cast<double>(replay.peak_ram_bytes)) + " of the activation budget " +
        FormatBytes(static_cast<double>(setup.checked->problem.activation_budget_bytes)) + ", " +
        OperationsText(replay.recomputations, replay.page_outs, replay.page_ins));
    return Status::Ok();
  }
  v1::GetCostTableRequest request;
  request.set_model(setup.spec.model_or_file);
  request.set_device("this");
  request.set_cost_source(setup.cost_source);
  request.set_batch_size(static_cast<uint32_t>(setup.spec.batch_size));
  request.set_derivation("exact");
  request.set_trainable(setup.spec.trainable.ToString());
  EC_ASSIGN_OR_RETURN(const uint32_t table_threads,
                      PredictionThreads(db, PredictionKey(setup.graph, setup.cost_source), setup.threads, notes));
  request.set_threads(table_threads);
  Result<v1::CostTable> found = ResolveCostTable(&db, request);
  if (found.ok()) {
    setup.table = *found;
  } else {
    notes.push_back("no predictions: " + found.status().message());
  }
  return Status::Ok();
}

// The options checked, the model, graph, threads, schedule and cost table resolved: everything a
// run needs from the database, which is closed again when this returns.
Result<TrainSetup> SetUpTraining(const TrainJobOptions& options, const Log& log, std::vector<std::string>& notes) {
  if (options.steps < 1) return InvalidArgument("--steps must be at least 1");
  if (!(options.lr > 0) || !std::isfinite(options.lr)) return InvalidArgument("--lr must be a positive number");
  TrainSetup setup;
  EC_ASSIGN_OR_RETURN(setup.optimizer, OptimizerOptionsOf(options.optimizer));
  // Checked now, before anything is built; again once --epochs give the steps (cosine's t_max).
  EC_RETURN_IF_ERROR(LrScheduleOptionsOf(options.lr_schedule, options.steps, options.lr).status());
  const int sources = !options.schedule_file.empty() + (options.schedule_id != 0) +
                      (AsksForBudget(options.solve));
  if (sources > 1) return InvalidArgument("give one schedule: --schedule FILE, --schedule-id N, or budgets to solve");
  if (options.init != "file" && options.init != "random") {
    return InvalidArgument("--init must be file (the model's own weights) or random (drawn from --seed), not '" +
                           options.init + "'");
  }
  EC_ASSIGN_OR_RETURN(costdb::CostDb * opened, options.database->Db());
  costdb::CostDb& db = *opened;
  EC_ASSIGN_OR_RETURN(setup.spec, ResolveModel(&db, options.graph));
  if (graph::CarriesCosts(setup.spec)) {
    return InvalidArgument("'" + setup.spec.model_or_file +
                           "' is a graph with its own costs and no layers to run; train a zoo or ONNX model");
  }
  setup.spec.derivation = graph::Derivation::kExact;
  // An ONNX model's forward graph names the initializer behind each parameter: its weights load from them.
  EC_ASSIGN_OR_RETURN(setup.onnx, graph::LoadOnnxModel(setup.spec));
  if (!setup.onnx && !options.out_onnx.empty()) {
    return InvalidArgument("--out writes an ONNX model with its trained weights: '" + setup.spec.model_or_file +
                           "' is not an ONNX model");
  }
  if (!options.out_onnx.empty()) EC_RETURN_IF_ERROR(CheckOutputs(options));
  if (setup.onnx) {
    EC_ASSIGN_OR_RETURN(setup.graph,
                        graph::DeriveTrainingGraph(setup.onnx->forward, setup.spec.derivation, setup.spec.trainable));
  } else {
    EC_ASSIGN_OR_RETURN(setup.graph, graph::LoadTrainingGraph(setup.spec));
  }
  setup.threads = options.threads > 0 ? options.threads : omp_get_num_procs();
  omp_set_num_threads(setup.threads);
  // `auto`: measured-in-step where its table exists at this thread count, else measured.
  setup.cost_source = options.cost_source;
  if (setup.cost_source == kAutoCostSource) {
    std::string why;
    EC_ASSIGN_OR_RETURN(setup.cost_source, AutoCostSource(db, PredictionKey(setup.graph, setup.cost_source),
                                                          static_cast<uint32_t>(setup.threads), &why));
    if (options.schedule_file.empty() && options.schedule_id == 0) notes.push_back(why);
  }
  setup.paging_dir = options.paging_dir.empty() ? DefaultPagingDir(options.database->path()) : options.paging_dir;
  if (const int removed = train::Pager::RemoveStaleFiles(setup.paging_dir); removed > 0) {
    log("paging: removed " + std::to_string(removed) + " files left in " + setup.paging_dir +
        " by runs that were killed");
  }
  EC_RETURN_IF_ERROR(ChooseSchedule(db, options, setup, log, notes));
  if (!setup.onnx && options.init == "file") {
    notes.push_back("weights: " + setup.graph.model() + " is a zoo model, with no file of weights: drawn from --seed " +
                    std::to_string(options.seed));
  } else if (options.init == "random") {
    notes.push_back("weights: drawn from --seed " + std::to_string(options.seed) + " (--init random)");
  }
  // Read before the peak is: reading runs is not training.
  setup.earlier_process =
      LatestProcessRun(db, setup.graph.model(), profiler::ThisDeviceName(), setup.graph.batch_size(),
                       static_cast<uint32_t>(setup.threads), setup.checked && setup.checked->replay.page_outs > 0);
  return setup;
}


// What the run is: model, schedule, data, optimizer; and a loud note when the cost table was
// profiled at another thread count than the run uses.
void DescribeRun(const TrainJobOptions& options, const TrainSetup& setup, const train::DataSource& data,
                 const train::Executor& executor, int steps, const train::LrScheduleOptions& lr_schedule,
                 v1::TrainRun& run, std::vector<std::string>& notes) {
  const v1::TrainingGraph& graph = setup.graph;
  run.set_model(graph.model());
  run.set_device(profiler::ThisDeviceName());
  run.set_strategy(setup.checked ? setup.checked->schedule.strategy() : "plain");
  run.set_schedule_id(setup.schedule_id);
  run.set_batch_size(graph.batch_size());
  run.set_steps(static_cast<uint32_t>(steps));
  run.set_threads(static_cast<uint32_t>(setup.threads));
  run.set_lr(options.lr);
  run.set_data(data.Describe());
  if (!options.data_file.empty()) {
    run.set_batches_per_epoch(static_cast<uint32_t>(data.batches_per_epoch()));
    run.set_dropped_per_epoch(static_cast<uint64_t>(data.dropped_per_epoch()));
    run.set_held_out_records(static_cast<uint64_t>(data.held_out_records()));
  }
  run.set_layer_state_bytes(executor.layer_state_bytes());
  *run.mutable_optimizer() = ToProto(setup.optimizer);
  *run.mutable_lr_schedule() = ToProto(lr_schedule);
  run.set_optimizer_state_bytes(executor.optimizer_state_bytes());
  if (setup.table) run.set_cost_source(setup.table->cost_source());
  // A schedule's own table (a file, a stored schedule, a solve with compute_threads given) may
  // be of another count: said too, unless PredictionThreads already did.
  const bool stated = std::any_of(notes.begin(), notes.end(),
                                  [](const std::string& note) { return note.starts_with("THREAD MISMATCH"); });
  const int threads = setup.threads;
  if (const int profiled = setup.table ? ProfiledThreads(*setup.table) : 0;
      profiled > 0 && profiled != threads && !stated) {
    const std::string run_threads = std::to_string(threads);
    const std::string advice =
        setup.run_threads_table_stored
            ? "a table at " + profiler::ThreadsText(static_cast<uint32_t>(threads)) +
                  " is stored: solve the schedule again on it (`edgecost solve --device this --threads " + run_threads +
                  "` with its budgets, or `edgecost train` with the budgets and --threads " + run_threads + ")"
            : "run " + profiler::ProfileCommand(graph, setup.spec.model_or_file, threads) + " to predict this run";
    notes.push_back("THREAD MISMATCH: the schedule's cost table was profiled at " +
                    profiler::ThreadsText(static_cast<uint32_t>(profiled)) + " and this run uses " +
                    profiler::ThreadsText(static_cast<uint32_t>(threads)) + ": its predictions are for " +
                    std::to_string(profiled) + "; " + advice);
  }
}

// The predicted step: time, energy, paging and the activations' peak from the schedule's replay (or
// the plain step's table), and the process's peak: what the executor holds outside the arena
// (parameters, gradients, optimizer state, layer state), the arena's region under the schedule's
// layout, and the rest of the process as the latest earlier run like this one measured it.
// Returns the tensors' bytes, which the measured peak is compared with.
uint64_t PredictRun(const TrainSetup& setup, const train::Executor& executor, v1::TrainRun& run,
                    std::vector<std::string>& notes) {
  const std::optional<CheckedRun>& checked = setup.checked;
  if (checked) {
    const solver::Replay& r = checked->replay;
    const solver::Problem& p = checked->problem;
    run.set_activation_budget_bytes(static_cast<uint64_t>(p.activation_budget_bytes));
    // As the user gave it: the activation budget above may be derived from it.
    run.set_process_ram_budget_bytes(checked->schedule.request().process_ram_budget_bytes());
    run.set_activation_budget_percent(checked->schedule.request().activation_budget_percent());
    run.set_runtime_budget_s(p.runtime_budget_s);
    // As the executor runs it: paging on its I/O thread, on the critical path where compute waits.
    run.set_predicted_runtime_s(solver::OverlappedRuntimeS(p, checked->plan));
    run.set_predicted_peak_bytes(static_cast<uint64_t>(r.peak_ram_bytes));
    run.set_predicted_energy_j(r.energy.total_j());
    run.set_page_outs(r.page_outs);
    run.set_page_ins(r.page_ins);
    run.set_recomputations(r.recomputations);
    double paging_s = 0;
    if (!p.page_in_s.empty()) {
      for (int t = 0; t < p.size(); ++t) {
        for (int i = 0; i < p.size(); ++i) {
          if (checked->plan.page_in[t][i]) paging_s += p.page_in_s[static_cast<size_t>(i)];
          if (checked->plan.page_out[t][i]) paging_s += p.page_out_s[static_cast<size_t>(i)];
        }
      }
    } else if (r.page_ins + r.page_outs > 0) {
      notes.push_back("the cost table has no paging times: the paging time is not predicted");
    }
    run.set_predicted_paging_s(paging_s);
    double compute_s = 0;
    for (int t = 0; t < p.size(); ++t) {
      for (int k = 0; k <= t; ++k) compute_s += checked->plan.compute[t][k] ? p.runtime_s[static_cast<size_t>(k)] : 0;
    }
    run.set_predicted_paging_wait_s(std::max(0.0, run.predicted_runtime_s() - compute_s));
  } else {
    run.set_predicted_peak_bytes(static_cast<uint64_t>(
        train::PlanMemory(executor.node_bytes(), executor.preds(), train::PlainPlan(executor.preds())).peak_bytes));
    if (setup.table) {
      double runtime = 0, energy = 0;
      for (const v1::NodeCost& c : setup.table->costs()) {
        runtime += c.runtime_s();
        energy += c.compute_j();
      }
      run.set_predicted_runtime_s(runtime);
      run.set_predicted_energy_j(energy);
    }
  }
  const uint64_t outside_arena_bytes = executor.param_bytes() + executor.grad_param_bytes() +
                                       executor.optimizer_state_bytes() + executor.layer_state_bytes();
  run.set_arena_bytes(train::LayOut(executor.node_bytes(), executor.preds(),
                                    checked ? checked->plan : train::PlainPlan(executor.preds()))
                          .region_bytes);
  const uint64_t tensor_bytes = outside_arena_bytes + run.arena_bytes();
  if (setup.earlier_process) {
    run.set_predicted_process_rest_bytes(setup.earlier_process->process_rest_bytes());
    run.set_process_rest_from_run(setup.earlier_process->id());
  } else {
    notes.push_back(
        "the process peak is predicted without the rest of the process (binary, libraries, kernels' code, the "
        "heap's overhead): no earlier run of this model at this batch and thread count on this device measured it "
        "(this one does; `edgecost profile` runs one)");
  }
  run.set_predicted_process_bytes(tensor_bytes + run.predicted_process_rest_bytes());
  return tensor_bytes;
}

// With --resume and a checkpoint of these settings: the state and the record of the steps before
// restored. Returns the steps already done (0 without a checkpoint).
Result<int> ResumeIfAsked(const TrainJobOptions& options, const std::string& resume_key, int steps,
                          train::Executor& executor, v1::TrainRun& run, const Log& log,
                          std::vector<std::string>& notes) {
  if (!options.checkpoint_path.empty()) {
    if (const int removed = RemoveStaleTemporaries(options.checkpoint_path); removed > 0) {
      log("checkpoint: removed " + std::to_string(removed) + " partial writes left by runs that were killed");
    }
  }
  if (!options.resume) return 0;
  if (options.checkpoint_path.empty()) return InvalidArgument("--resume needs --checkpoint FILE");
  Result<v1::TrainCheckpoint> checkpoint = train::ReadCheckpoint(options.checkpoint_path);
  if (checkpoint.status().code() == ErrorCode::kNotFound) {
    notes.push_back("no checkpoint at " + options.checkpoint_path + " yet: trained from step 1");
    return 0;
  }
  if (!checkpoint.ok()) return checkpoint.status();
  if (checkpoint->resume_key() != resume_key) {
    return FailedPrecondition(options.checkpoint_path + " was written by a run with other settings; resuming " +
                              "would not give its weights:" + KeyDifferences(checkpoint->resume_key(), resume_key));
  }
  if (checkpoint->steps_done() >= static_cast<uint64_t>(steps)) {
    return FailedPrecondition(options.checkpoint_path + " holds a finished run (" + std::to_string(steps) + " of " +
                              std::to_string(steps) + " steps): nothing to resume");
  }
  EC_RETURN_IF_ERROR(train::RestoreState(*checkpoint, executor));
  const int start = static_cast<int>(checkpoint->steps_done());
  *run.mutable_step_stats() = checkpoint->run().step_stats();
  *run.mutable_epochs() = checkpoint->run().epochs();
  log("resuming at step " + std::to_string(start + 1) + " of " + std::to_string(steps) + " from " +
      options.checkpoint_path);
  notes.push_back("resumed from " + options.checkpoint_path + " after step " + std::to_string(start) +
                  ": step times, energy and memory are of the steps after it");
  return start;
}

// What the steps measured beyond their records in the run: per node times, the CPU time, the paging
// thread's requests, the traces, and the energy meter's marks around the steps after the first.
struct StepRecords {
  // Per step, each node's time per execution (-1: it did not run; the steps before a resume did not here).
  std::vector<std::vector<double>> node_per_execution_s;
  std::vector<uint32_t> executions;  // per node
  std::vector<double> step_cpu_s;
  InStepIo io;  // the paging thread's requests as the steps ran them
  std::vector<train::StepTrace> traces;
  uint64_t peak_activation_bytes = 0;
  profiler::EnergyMark energy_start, energy_end;
};

// The training session: the executor, its data, schedule, meter and interference watch, running
// steps `start` to `steps`, one record each in `run`, with a checkpoint every --checkpoint-every.
class TrainingSession {
 public:
  TrainingSession(const TrainJobOptions& options, const TrainSetup& setup, train::Executor& executor,
                  train::DataSource& data, const train::LrScheduleOptions& lr_schedule,
                  profiler::EnergyMeter& meter, std::string resume_key, v1::TrainRun& run)
      : options_(options),
        setup_(setup),
        executor_(executor),
        data_(data),
        lr_schedule_(lr_schedule),
        meter_(meter),
        resume_key_(std::move(resume_key)),
        run_(run),
        watch_(options.watch ? options.watch : &sched_watch_) {}

  Result<StepRecords> Run(int start, int steps, const std::atomic<bool>* stop,
                          const std::function<void(const TrainProgress&)>& on_step, const Log& log) {
    const int n = setup_.graph.nodes_size();
    StepRecords records;
    records.node_per_execution_s.assign(static_cast<size_t>(start), std::vector<double>(static_cast<size_t>(n), -1.0));
    records.executions.assign(static_cast<size_t>(n), 0);
    records.step_cpu_s.assign(static_cast<size_t>(start), 0.0);
    EC_ASSIGN_OR_RETURN(records.energy_start, profiler::MarkEnergy(meter_, profiler::SteadyClock()));
    for (int s = start; s < steps; ++s) {
      if (s == start + 1) {  // energy, like time, over the steps after the first (which warms caches and kernels)
        EC_ASSIGN_OR_RETURN(records.energy_start, profiler::MarkEnergy(meter_, profiler::SteadyClock()));
      }
      if (stop && stop->load()) {
        return Status(ErrorCode::kCancelled,
                      "stopped after " + std::to_string(s) + " of " + std::to_string(steps) +
                          " steps; no run record is stored" +
                          (options_.checkpoint_path.empty() ? "" : " (--resume goes on from the last checkpoint)"));
      }
      EC_ASSIGN_OR_RETURN(train::StepStats stats, Step(s));
      Record(s, start, steps, stats, records);
      if (on_step) on_step({s + 1, steps, stats.loss, stats.runtime_s});
      // A user's data set: after each epoch (and after the last step), its loss and the held-out part's.
      const int64_t per_epoch = data_.batches_per_epoch();
      if (!options_.data_file.empty() && ((s + 1) % per_epoch == 0 || s + 1 == steps)) {
        EC_ASSIGN_OR_RETURN(const v1::EpochStats* epoch, EndEpoch(s, per_epoch));
        log(EpochLine(*epoch, per_epoch, data_.held_out_records()));
        if (on_step) on_step({s + 1, steps, stats.loss, stats.runtime_s, epoch, data_.held_out_records(), per_epoch});
      }
      if (!options_.checkpoint_path.empty() &&
          ((s + 1) % std::max(1, options_.checkpoint_every) == 0 || s + 1 == steps)) {
        EC_RETURN_IF_ERROR(WriteCheckpoint(s + 1));
      }
    }
    EC_ASSIGN_OR_RETURN(records.energy_end, profiler::MarkEnergy(meter_, profiler::SteadyClock()));
    return records;
  }

 private:
  // One step and its update, in a window of the interference watch; the step's record in the run.
  Result<train::StepStats> Step(int s) {
    const double window_start_s = SteadyNowS();
    EC_RETURN_IF_ERROR(watch_->BeginWindow());
    EC_ASSIGN_OR_RETURN(const train::Batch batch, data_.BatchFor(s));
    EC_RETURN_IF_ERROR(executor_.SetBatch(batch));
    EC_ASSIGN_OR_RETURN(train::StepStats stats,
                        executor_.TrainStep(setup_.checked ? &setup_.checked->plan : nullptr,
                                            train::LearningRateAt(lr_schedule_, options_.lr, s)));
    EC_RETURN_IF_ERROR(watch_->WaitSinceLastS().status());  // brings the window's wait up to now
    const double window_s = SteadyNowS() - window_start_s;
    EC_ASSIGN_OR_RETURN(v1::Interference interference, watch_->EndWindow(window_s));
    if (!std::isfinite(stats.loss)) {
      return FailedPrecondition("the loss is " + std::to_string(stats.loss) + " at step " + std::to_string(s + 1) +
                                "; lower --lr");
    }
    v1::TrainStep& step = *run_.add_step_stats();
    step.set_step(static_cast<uint32_t>(s + 1));
    step.set_loss(stats.loss);
    step.set_runtime_s(stats.runtime_s);
    step.set_update_s(stats.update_s);
    step.set_peak_activation_bytes(stats.peak_activation_bytes);
    step.set_paged_out_bytes(stats.paged_out_bytes);
    step.set_paged_in_bytes(stats.paged_in_bytes);
    step.set_page_out_s(stats.page_out_s);
    step.set_page_in_s(stats.page_in_s);
    step.set_paging_wait_s(stats.paging_wait_s);
    const profiler::Verdict verdict = JudgeStep(interference, stats.runtime_s, window_s, setup_.threads == 1);
    *step.mutable_interference() = interference;
    step.set_disturbed(!verdict.clean);
    step.set_disturbance(verdict.reason);
    return stats;
  }

  // What a step measured beyond its record: node times, CPU time, paging requests, its trace.
  void Record(int s, int start, int steps, train::StepStats& stats, StepRecords& records) {
    const int n = setup_.graph.nodes_size();
    records.step_cpu_s.push_back(stats.cpu_s);
    records.peak_activation_bytes = std::max(records.peak_activation_bytes, stats.peak_activation_bytes);
    std::vector<double>& node_s = records.node_per_execution_s.emplace_back(static_cast<size_t>(n), -1.0);
    for (int i = 0; i < n; ++i) {
      const uint32_t runs = stats.node_runs[static_cast<size_t>(i)];
      if (runs == 0) continue;
      node_s[static_cast<size_t>(i)] = stats.node_s[static_cast<size_t>(i)] / runs;
      records.executions[static_cast<size_t>(i)] = runs;
    }
    if (s > start) records.io.Add(stats.events, executor_.node_bytes());  // the first step warms the storage too
    if (s + 1 == steps) train::ToProto(stats.events, *run_.mutable_last_step());
    if (options_.trace) records.traces.push_back({s + 1, std::move(stats.events)});
  }

  // The epoch that step s ends: its mean training loss and the held-out part's loss and accuracy.
  Result<const v1::EpochStats*> EndEpoch(int s, int64_t per_epoch) {
    v1::EpochStats& epoch = *run_.add_epochs();
    epoch.set_epoch(static_cast<uint32_t>(s / per_epoch + 1));
    epoch.set_steps(static_cast<uint32_t>(s % per_epoch + 1));
    double loss_sum = 0;
    for (int k = s + 1 - static_cast<int>(epoch.steps()); k <= s; ++k) loss_sum += run_.step_stats(k).loss();
    epoch.set_train_loss(loss_sum / epoch.steps());
    EC_RETURN_IF_ERROR(EvaluateHeldOut(data_, executor_, epoch));
    return &epoch;
  }

  Status WriteCheckpoint(int steps_done) {
    v1::TrainCheckpoint checkpoint;
    checkpoint.set_resume_key(resume_key_);
    *checkpoint.mutable_run()->mutable_step_stats() = run_.step_stats();
    *checkpoint.mutable_run()->mutable_epochs() = run_.epochs();
    train::CaptureState(executor_, checkpoint);
    if (checkpoint.steps_done() != static_cast<uint64_t>(steps_done)) {
      return Internal("the executor completed " + std::to_string(checkpoint.steps_done()) + " steps, not " +
                      std::to_string(steps_done));
    }
    return train::WriteCheckpoint(options_.checkpoint_path, checkpoint);
  }

  const TrainJobOptions& options_;
  const TrainSetup& setup_;
  train::Executor& executor_;
  train::DataSource& data_;  // its batches are read into a buffer of its own
  const train::LrScheduleOptions& lr_schedule_;
  profiler::EnergyMeter& meter_;
  const std::string resume_key_;
  v1::TrainRun& run_;
  // What the scheduler and the hypervisor did to each step, as the profiler watches an op's window.
  profiler::SchedInterferenceWatch sched_watch_;
  profiler::InterferenceWatch* watch_;
};

// The run's figures from its steps after the first (of this process): medians over the undisturbed
// ones when enough are (SelectSteps), else over all, and each node's time per execution.
// Returns what the in-step cost table needs: whether the figures are a low percentile of disturbed
// steps, and then the time outside the nodes at that percentile (else -1).
double SummarizeSteps(const TrainSetup& setup, const StepRecords& records, int start, int steps,
                      profiler::EnergyMeter& meter, v1::TrainRun& run, TrainJobResult& result) {
  const int n = setup.graph.nodes_size();
  const int first = start + (steps - start > 1 ? 1 : 0);
  std::vector<bool> disturbed;
  for (int s = first; s < steps; ++s) disturbed.push_back(run.step_stats(s).disturbed());
  const StepSelection selection = SelectSteps(disturbed);
  run.set_disturbed_steps(static_cast<uint32_t>(selection.disturbed_steps));
  run.set_median_steps(static_cast<uint32_t>(selection.median_of.size()));
  if (selection.disturbed_steps > 0) {
    const auto worst = std::find_if(run.step_stats().begin() + first, run.step_stats().end(),
                                    [](const v1::TrainStep& step) { return step.disturbed(); });
    const std::string which = std::to_string(selection.disturbed_steps) + " of " + std::to_string(disturbed.size()) +
                              " steps" + (first ? " after the first" : "") + " were disturbed (step " +
                              std::to_string(worst->step()) + ": " + worst->disturbance() + ")";
    if (selection.run_disturbed) {
      run.set_disturbed(true);
      run.set_disturbance(which);
    }
    result.notes.push_back(which + (selection.undisturbed_only
                                        ? "; the step time is the median of the " +
                                              std::to_string(selection.median_of.size()) + " undisturbed ones"
                                        : "; too few were undisturbed to leave them out: the step time is the "
                                          "median of all"));
  }
  std::vector<double> runtimes, waits, cpus, outside_nodes_s;
  std::vector<uint64_t> outs, ins;
  std::vector<std::vector<double>> per_execution_s(static_cast<size_t>(n));
  for (const size_t k : selection.median_of) {
    const int s = first + static_cast<int>(k);
    const v1::TrainStep& step = run.step_stats(s);
    double nodes_s = 0;
    for (int i = 0; i < n; ++i) {
      const double t = records.node_per_execution_s[static_cast<size_t>(s)][static_cast<size_t>(i)];
      if (t < 0) continue;
      per_execution_s[static_cast<size_t>(i)].push_back(t);
      nodes_s += t * records.executions[static_cast<size_t>(i)];
    }
    outside_nodes_s.push_back(step.runtime_s() - step.paging_wait_s() - nodes_s);
    runtimes.push_back(step.runtime_s());
    cpus.push_back(records.step_cpu_s[static_cast<size_t>(s)]);
    waits.push_back(step.paging_wait_s());
    outs.push_back(step.paged_out_bytes());
    ins.push_back(step.paged_in_bytes());
  }
  run.set_runtime_s(Median(runtimes));
  // A step's energy: the steps' mean power times the step time reported, so
  // that energy / time is a power the device drew (never above a power model's ceiling).
  const double power_w = profiler::MeanPowerW(meter, records.energy_start, records.energy_end);
  run.set_energy_j(power_w * run.runtime_s());
  result.median_cpu_s = Median(cpus);
  run.set_paging_wait_s(Median(waits));
  run.set_paged_out_bytes(MedianBytes(outs));
  run.set_paged_in_bytes(MedianBytes(ins));
  run.set_peak_activation_bytes(records.peak_activation_bytes);
  run.set_first_loss(run.step_stats(0).loss());
  run.set_last_loss(run.step_stats(steps - 1).loss());
  // Medians over the undisturbed steps; over all of them, when too few were, a low percentile.
  const bool robust = selection.disturbed_steps > 0 && !selection.undisturbed_only;
  const double node_quantile = robust ? kDisturbedQuantile : 0.5;
  for (int i = 0; i < n; ++i) {
    if (records.executions[static_cast<size_t>(i)] == 0 || per_execution_s[static_cast<size_t>(i)].empty()) continue;
    v1::NodeTime& t = *run.add_nodes();
    t.set_node(static_cast<uint32_t>(i));
    t.set_name(setup.graph.nodes(i).name());
    t.set_runtime_s(Quantile(per_execution_s[static_cast<size_t>(i)], node_quantile));
    t.set_executions(records.executions[static_cast<size_t>(i)]);
    if (setup.table && i < setup.table->costs_size()) t.set_predicted_s(setup.table->costs(i).runtime_s());
  }
  return robust ? Quantile(outside_nodes_s, kDisturbedQuantile) : -1;
}

// The run stored whole, and from a measured table's run, what the steps measured: the device's
// paging cost when they paged, else the measured-in-step cost table.
Status StoreRun(const TrainJobOptions& options, const TrainSetup& setup, const StepRecords& records, int steps,
                double robust_outside_nodes_s, TrainJobResult& result) {
  v1::TrainRun& run = result.run;
  EC_ASSIGN_OR_RETURN(costdb::CostDb * opened, options.database->Db());
  costdb::CostDb& db = *opened;
  EC_ASSIGN_OR_RETURN(result.run_id, db.PutTrainRun(run));
  run.set_id(static_cast<uint64_t>(result.run_id));
  const std::optional<v1::CostTable>& table = setup.table;
  const bool measured =
      table && (table->cost_source() == profiler::kMeasuredSource || table->cost_source() == kMeasuredInStepSource);
  if (measured && steps >= 2 && run.disturbed() && !options.accept_noisy) {
    result.notes.push_back("no measured-in-step costs: most steps were disturbed (--accept-noisy stores them)");
  } else if (measured && steps >= 2 && records.io.Any()) {
    // Compute shares the cores with the paging thread here: node times come from steps that do not page.
    EC_ASSIGN_OR_RETURN(const v1::PagingCost paging, records.io.Fit(db, table->fingerprint_hash()));
    result.notes.push_back("paging measured inside the steps and stored for this device: out " +
                           FormatSeconds(paging.page_out_latency_s()) + " + " +
                           FormatBytes(paging.page_out_throughput_bytes_per_s()) + "/s, in " +
                           FormatSeconds(paging.page_in_latency_s()) + " + " +
                           FormatBytes(paging.page_in_throughput_bytes_per_s()) +
                           "/s; no measured-in-step costs from a run that pages");
  } else if (measured && steps >= 2) {
    const v1::CostTable in_step = InStepCostTable(*table, run, result.run_id, robust_outside_nodes_s);
    EC_ASSIGN_OR_RETURN(result.in_step_table_id, db.PutCostTable(in_step));
    run.set_in_step_table_id(static_cast<uint64_t>(result.in_step_table_id));
  } else if (!measured) {
    result.notes.push_back("no measured-in-step costs: they are kept for measured cost tables only");
  }
  return Status::Ok();
}

// --verify: the plain step and the scheduled step on one batch, with the same parameters.
Status Verify(const TrainSetup& setup, train::DataSource& data, train::Executor& executor, const Log& log,
              TrainJobResult& result) {
  if (!setup.checked) {
    result.notes.push_back("--verify compares a schedule's gradients with the plain step's; this run has no schedule");
    return Status::Ok();
  }
  if (setup.update_in_backward) {
    result.notes.push_back(
        "--verify compares gradients, which updates in the backward pass free as they are applied; the executor's "
        "tests prove those updates bit-identical to the step and update after it");
    return Status::Ok();
  }
  log("verifying: the plain step and the scheduled step on one batch ...");
  EC_ASSIGN_OR_RETURN(const train::Batch batch, data.BatchFor(0));
  EC_RETURN_IF_ERROR(executor.SetBatch(batch));
  EC_RETURN_IF_ERROR(executor.Step(nullptr).status());
  const std::vector<train::ParamGradient> plain = executor.Gradients();
  EC_RETURN_IF_ERROR(executor.Step(&setup.checked->plan).status());
  *result.run.mutable_verify() = CompareGradients(setup.graph, plain, executor.Gradients());
  return Status::Ok();
}

}  // namespace

Result<TrainJobResult> RunTrainJob(const TrainJobOptions& options, const std::atomic<bool>* stop,
                                   const std::function<void(const TrainProgress&)>& on_step, const Log& log) {
  TrainJobResult result;
  v1::TrainRun& run = result.run;
  EC_ASSIGN_OR_RETURN(const TrainSetup setup, SetUpTraining(options, log, result.notes));
  // The training's peak is the process's from here: the database is closed (the record reopens
  // it), heap pages freed by earlier work go back to the kernel, and the high-water mark restarts
  // at what the process holds now. The daemon runs train jobs in a process of their own for this.
  malloc_trim(0);
  run.set_peak_reset_at_start(ResetHighWater());
  const int64_t unbuilt_rss = ProcStatusBytes("VmRSS");
  EC_ASSIGN_OR_RETURN(std::unique_ptr<train::Executor> executor,
                      train::Executor::Create(setup.graph, {.seed = options.seed,
                                                            .paging_dir = setup.paging_dir,
                                                            .trace = true,  // the last step goes into the record
                                                            .update_in_backward = setup.update_in_backward}));
  if (setup.onnx && options.init == "file") {
    // Weights the importer cannot map yet (behind a Transpose, in an embedding) leave the run on
    // weights from the seed, said loudly; a run that writes its weights (--out) needs the file's.
    if (Status loaded = LoadOnnxWeights(*setup.onnx, *executor, result.notes, LoadedInitializers::kFree);
        !loaded.ok()) {
      if (!options.out_onnx.empty() || loaded.code() != ErrorCode::kInvalidArgument) return loaded;
      result.notes.push_back("WEIGHTS FROM --seed " + std::to_string(options.seed) + ", not the file's: " +
                             loaded.message() + " (times and memory are the same; --out refuses to write them)");
    }
  }
  EC_RETURN_IF_ERROR(executor->SetOptimizer(setup.optimizer));
  EC_ASSIGN_OR_RETURN(train::DataSource data, OpenTrainingData(options, *executor, result.notes));
  const int64_t total_steps = options.epochs > 0 ? options.epochs * data.batches_per_epoch() : options.steps;
  if (total_steps > 10'000'000) return InvalidArgument("more than 10 million steps: lower --epochs");
  const int steps = static_cast<int>(total_steps);
  EC_ASSIGN_OR_RETURN(const train::LrScheduleOptions lr_schedule,
                      LrScheduleOptionsOf(options.lr_schedule, steps, options.lr));
  DescribeRun(options, setup, data, *executor, steps, lr_schedule, run, result.notes);
  const uint64_t tensor_bytes = PredictRun(setup, *executor, run, result.notes);
  EC_ASSIGN_OR_RETURN(std::unique_ptr<profiler::EnergyMeter> meter, StartMeter(options.probes_config, log));
  run.set_energy_source(meter->Source());
  run.set_energy_probe(meter->Name());

  std::string resume_key;  // read only for checkpoints: it reads the whole data set
  if (!options.checkpoint_path.empty()) {
    EC_ASSIGN_OR_RETURN(resume_key, ResumeKey(setup.graph, options, data, steps, setup.threads, run));
  }
  EC_ASSIGN_OR_RETURN(const int start, ResumeIfAsked(options, resume_key, steps, *executor, run, log, result.notes));
  run.set_unbuilt_rss_bytes(static_cast<uint64_t>(std::max<int64_t>(0, unbuilt_rss)));
  run.set_baseline_rss_bytes(static_cast<uint64_t>(std::max<int64_t>(0, ProcStatusBytes("VmRSS"))));
  TrainingSession session(options, setup, *executor, data, lr_schedule, *meter, resume_key, run);
  EC_ASSIGN_OR_RETURN(StepRecords records, session.Run(start, steps, stop, on_step, log));
  run.set_peak_rss_bytes(static_cast<uint64_t>(std::max<int64_t>(0, ProcStatusBytes("VmHWM"))));
  if (run.peak_rss_bytes() > tensor_bytes && run.peak_reset_at_start()) {
    run.set_process_rest_bytes(run.peak_rss_bytes() - tensor_bytes);
  }
  // After the measurements: serializing the model is neither the steps' time nor their memory.
  if (setup.onnx && !options.out_onnx.empty()) {
    const std::string npz = options.out_npz.empty() ? NpzPathFor(options.out_onnx) : options.out_npz;
    EC_RETURN_IF_ERROR(WriteTrainedOnnx(*setup.onnx, *executor, options.out_onnx, npz, result.notes));
    result.written_onnx = options.out_onnx;
    result.written_npz = npz;
    run.set_trained_onnx_path(options.out_onnx);  // the daemon serves its own store's for download
    run.set_trained_npz_path(npz);
  }
  const double robust_outside_nodes_s = SummarizeSteps(setup, records, start, steps, *meter, run, result);
  if (options.verify) EC_RETURN_IF_ERROR(Verify(setup, data, *executor, log, result));
  if (options.trace) {
    result.trace_json =
        train::ChromeTrace(setup.graph, records.traces, run.model() + ", " + run.strategy() + " (measured)")
            .trace_json();
  }
  // Stored only now, whole: a failed or stopped run leaves no record.
  if (options.store) EC_RETURN_IF_ERROR(StoreRun(options, setup, records, steps, robust_outside_nodes_s, result));
  return result;
}

}  // namespace edgecost::service
