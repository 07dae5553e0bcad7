#include "bench/solver_bench.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <mutex>
#include <numeric>
#include <optional>
#include <string>
#include <vector>

#include "base/heartbeat.h"
#include "base/units.h"
#include "graph/cost_source.h"
#include "graph/graph_io.h"
#include "graph/resolve.h"
#include "solver/heuristics.h"
#include "solver/solve.h"

namespace edgecost::solver {
namespace {

// How an instance's RAM budget is given.
enum class Budget { kBytes, kOfCheckpointAllPeak, kOfActivations };

struct Instance {
  std::string model;
  std::string platform;
  Budget budget;
  double ram;  // bytes, or a fraction of the checkpoint-all peak or of the sum of node outputs
  double runtime_multiple;
  double time_limit_s;
  bool remat_only;
  bool with_poet;         // also run POET's formulation
  double target_gap;      // the target for the gap on the energy above the floor
  double target_first_s;  // ... and for the first schedule (0: none)
  int runs;               // > 1: solved again to see that the schedule is the same
  std::string target;
};

// The target table.
std::vector<Instance> Instances() {
  std::vector<Instance> instances = {
      {"resnet18_cifar", "a72", Budget::kBytes, 3e6, 7.6, 5, false, true, 0, 0, 1, "proven optimal < 5 s"},
      {"resnet18_cifar", "a72", Budget::kBytes, 1.2e6, 1.5, 60, false, true, 0.05, 0, 2,
       "<= 5% in 60 s, same schedule"},
  };
  for (const char* model : {"resnet18_cifar", "vgg16_cifar", "resnet18"}) {
    for (double fraction : {0.5, 0.6, 0.7, 0.8, 0.9, 1.0}) {
      instances.push_back({model, "a72", Budget::kOfCheckpointAllPeak, fraction, 1.5, 240, false, false, 0.10, 0, 1,
                           "<= 10% in 240 s"});
    }
  }
  for (const char* model : {"resnet50", "bert"}) {
    instances.push_back(
        {model, "a72", Budget::kOfActivations, 0.4, 1.5, 300, false, false, 0.05, 0, 1, "<= 5% in 300 s"});
  }
  for (double fraction : {0.6, 0.7, 0.8, 0.9}) {
    instances.push_back({"resnet50", "a72", Budget::kOfCheckpointAllPeak, fraction, 1.5, 120, true, false, 0.05, 10, 1,
                         "first < 10 s, <= 5% in 120 s"});
  }
  return instances;
}

// POET's instance, from the zoo: tests check that it equals POET's exported graph to 1e-9.
Result<v1::CostTable> LoadInstance(const Instance& instance) {
  graph::GraphSpec spec;
  spec.model_or_file = instance.model;
  spec.derivation = graph::Derivation::kPoet;  // POET's own construction, as its instances
  return graph::LoadCostTable(spec, instance.platform, graph::kPoetFlopsSource);
}

std::string Seconds(double s) {
  if (s < 0) return "-";
  char text[32];
  std::snprintf(text, sizeof text, s < 10 ? "%.3f" : "%.1f", s);
  return text;
}

const char* StatusWord(v1::Schedule::Status status) {
  switch (status) {
    case v1::Schedule::STATUS_OPTIMAL:
      return "optimal";
    case v1::Schedule::STATUS_FEASIBLE:
      return "feasible";
    case v1::Schedule::STATUS_INFEASIBLE:
      return "infeasible";
    case v1::Schedule::STATUS_NO_SOLUTION:
      return "none";
    default:
      return "?";
  }
}

void PrintRow(std::ostream& out, const std::string& instance, const std::string& formulation, const v1::Schedule& s,
              const std::string& target, const std::string& met) {
  const bool has_schedule = s.status() == v1::Schedule::STATUS_OPTIMAL || s.status() == v1::Schedule::STATUS_FEASIBLE;
  char line[640];
  std::snprintf(line, sizeof line, "%-44s %-6s %-10s %12s %12s %9s %9s %9s %9s  %-4s %s\n", instance.c_str(),
                formulation.c_str(), StatusWord(s.status()),
                has_schedule ? std::to_string(s.energy().total_j()).substr(0, 11).c_str() : "-",
                std::to_string(s.lower_bound_j()).substr(0, 11).c_str(),
                has_schedule ? (std::to_string(100 * s.gap()).substr(0, 7) + "%").c_str() : "-",
                Seconds(has_schedule ? s.time_to_first_feasible_s() : -1).c_str(),
                Seconds(s.status() == v1::Schedule::STATUS_OPTIMAL ? s.solve_time_s() : -1).c_str(),
                Seconds(s.solve_time_s()).c_str(), met.c_str(), target.c_str());
  out << line << std::flush;
}

// Solve(), with a line on `progress` every few seconds: which instance, for how long so far, the best yet.
Result<v1::Schedule> SolveShowingProgress(const Problem& problem, SolveOptions solve, const std::string& what,
                                          std::ostream* progress) {
  if (progress == nullptr) return Solve(problem, solve);
  std::mutex mutex;
  double best_j = std::numeric_limits<double>::infinity();
  solve.on_progress = [&](const Progress& p) {
    std::lock_guard<std::mutex> lock(mutex);
    best_j = std::min(best_j, p.energy_j);
  };
  Heartbeat beat(5.0, [&](double elapsed_s) {
    std::lock_guard<std::mutex> lock(mutex);
    *progress << "  solving " << what << ": " << FormatSeconds(elapsed_s) << " of at most "
              << FormatSeconds(solve.time_limit_s) << ", best "
              << (std::isfinite(best_j) ? FormatJoules(best_j) : std::string("none yet")) << "\n"
              << std::flush;
  });
  return Solve(problem, solve);
}

bool SameStages(const v1::Schedule& a, const v1::Schedule& b) {
  if (a.stages_size() != b.stages_size()) return false;
  for (int t = 0; t < a.stages_size(); ++t) {
    if (a.stages(t).SerializeAsString() != b.stages(t).SerializeAsString()) return false;
  }
  return true;
}

}  // namespace

Status RunSolverBenchmark(std::ostream& out, const SolverBenchOptions& options) {
  out << "Solver benchmark: the issue's targets on POET's instances (poet-flops costs); gap is the share of the energy "
         "above the floor (every node computed once) still unproven.\nTime limits scaled by "
      << options.time_scale << "; POET's formulation gets " << options.poet_time_limit_s * options.time_scale
      << " s, no starting schedule; " << options.threads
      << " CBC thread(s). Timing figures depend on the machine and its load.\n\n";
  char header[640];
  std::snprintf(header, sizeof header, "%-44s %-6s %-10s %12s %12s %9s %9s %9s %9s  %-4s %s\n", "instance", "milp",
                "status", "energy J", "bound J", "gap", "first s", "proof s", "total s", "met", "target");
  out << header << std::string(150, '-') << "\n";
  for (const Instance& instance : Instances()) {
    if (!options.only.empty() && instance.model.find(options.only) == std::string::npos) continue;
    EC_ASSIGN_OR_RETURN(v1::CostTable table, LoadInstance(instance));
    v1::ScheduleRequest request;
    request.set_activation_budget_bytes(1);
    request.set_runtime_budget_multiple(instance.runtime_multiple);
    request.set_disable_paging(instance.remat_only);
    EC_ASSIGN_OR_RETURN(Problem problem, ProblemFromCostTable(table, request));
    int64_t ram = static_cast<int64_t>(instance.ram);
    if (instance.budget == Budget::kOfActivations) {
      int64_t outputs = 0;
      for (const auto& cost : table.costs()) outputs += static_cast<int64_t>(cost.ram_bytes());
      ram = static_cast<int64_t>(instance.ram * static_cast<double>(outputs));
    } else if (instance.budget == Budget::kOfCheckpointAllPeak) {
      Problem all = problem;
      all.activation_budget_bytes = std::numeric_limits<int64_t>::max() / 4;
      ram = static_cast<int64_t>(instance.ram * static_cast<double>(CheckpointAll(all).replay.peak_ram_bytes));
    }
    problem.activation_budget_bytes = ram;
    char name[128];
    std::snprintf(name, sizeof name, "%s/%s %lld B %.1fx%s", instance.model.c_str(), instance.platform.c_str(),
                  static_cast<long long>(ram), instance.runtime_multiple, instance.remat_only ? " remat" : "");

    SolveOptions solve;
    solve.time_limit_s = instance.time_limit_s * options.time_scale;
    solve.threads = options.threads;
    solve.search_min_ram = false;
    std::optional<v1::Schedule> first;
    for (int run = 0; run < instance.runs; ++run) {
      EC_ASSIGN_OR_RETURN(v1::Schedule ours,
                          SolveShowingProgress(problem, solve,
                                               std::string(name) + " (ours, run " + std::to_string(run + 1) + " of " +
                                                   std::to_string(instance.runs) + ")",
                                               options.progress));
      const bool has = ours.status() == v1::Schedule::STATUS_OPTIMAL || ours.status() == v1::Schedule::STATUS_FEASIBLE;
      bool met = instance.target_gap > 0 ? has && ours.gap() <= instance.target_gap
                                         : ours.status() == v1::Schedule::STATUS_OPTIMAL;
      if (instance.target_first_s > 0) met = met && ours.time_to_first_feasible_s() <= instance.target_first_s;
      std::string target = instance.target;
      if (first) {
        const bool same = SameStages(*first, ours);
        met = met && same;
        target += same ? " (same schedule as run 1)" : " (a different schedule from run 1)";
      }
      PrintRow(out, name, "ours", ours, target, met ? "yes" : "no");
      if (!first) first = ours;
    }
    if (instance.with_poet) {
      solve.poet_formulation = true;
      solve.time_limit_s = options.poet_time_limit_s * options.time_scale;
      EC_ASSIGN_OR_RETURN(v1::Schedule poet,
                          SolveShowingProgress(problem, solve, std::string(name) + " (POET's formulation)",
                                               options.progress));
      PrintRow(out, name, "poet", poet, "", "");
    }
  }
  out << "\nfirst s: time to the first feasible schedule; proof s: time to the proof of optimality (- if none); "
         "met: the target at this time scale.\n";
  return Status::Ok();
}

}  // namespace edgecost::solver
