#include "bench/solver_bench.h"

#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <string>
#include <vector>

#include "graph/cost_source.h"
#include "graph/graph_io.h"
#include "graph/resolve.h"
#include "solver/solve.h"

namespace edgecost::solver {
namespace {

struct Instance {
  std::string model;
  std::string platform;
  int64_t ram_budget_bytes;  // 0: ram_fraction of the sum of node outputs
  double ram_fraction;
  double runtime_multiple;
  double time_limit_s;
  bool with_poet;  // also run POET's formulation
  std::string target;
};

// The targets: the README instance, a tight resnet18_cifar, and the two large graphs.
const std::vector<Instance>& Instances() {
  static const std::vector<Instance> instances = {
      {"resnet18_cifar", "a72", 3000000, 0, 7.6, 5, true, "7.889510 J, proven, < 5 s"},
      {"resnet18_cifar", "a72", 2000000, 0, 2.0, 60, false, "-"},
      {"resnet18_cifar", "a72", 1500000, 0, 1.5, 60, true, "feasible < 10 s; <= 1% in 60 s"},
      {"resnet50", "a72", 0, 0.4, 1.5, 300, false, "feasible < 30 s; <= 5% in 300 s"},
      {"bert", "a72", 0, 0.4, 1.5, 300, false, "feasible < 30 s; <= 5% in 300 s"},
  };
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
              const std::string& target) {
  const bool has_schedule = s.status() == v1::Schedule::STATUS_OPTIMAL || s.status() == v1::Schedule::STATUS_FEASIBLE;
  char line[512];
  std::snprintf(line, sizeof line, "%-34s %-6s %-10s %11s %11s %9s %9s %9s  %s\n", instance.c_str(),
                formulation.c_str(), StatusWord(s.status()),
                has_schedule ? std::to_string(s.energy().total_j()).substr(0, 10).c_str() : "-",
                std::to_string(s.floor_j()).substr(0, 10).c_str(),
                has_schedule ? (std::to_string(100 * s.gap()).substr(0, 7) + "%").c_str() : "-",
                Seconds(has_schedule ? s.time_to_first_feasible_s() : -1).c_str(),
                Seconds(s.status() == v1::Schedule::STATUS_OPTIMAL ? s.solve_time_s() : -1).c_str(), target.c_str());
  out << line << std::flush;
}

}  // namespace

Status RunSolverBenchmark(std::ostream& out, const SolverBenchOptions& options) {
  out << "Solver benchmark: POET's instances; gap is measured on the energy above the floor (every node computed "
         "once).\nTime limits scaled by "
      << options.time_scale << "; POET's formulation gets " << options.poet_time_limit_s * options.time_scale
      << " s, no starting schedule; " << options.threads << " CBC thread(s).\n\n";
  char header[512];
  std::snprintf(header, sizeof header, "%-34s %-6s %-10s %11s %11s %9s %9s %9s  %s\n", "instance", "milp", "status",
                "energy J", "floor J", "gap", "first s", "proof s", "target");
  out << header << std::string(130, '-') << "\n";
  for (const Instance& instance : Instances()) {
    EC_ASSIGN_OR_RETURN(v1::CostTable table, LoadInstance(instance));
    v1::ScheduleRequest request;
    int64_t ram = instance.ram_budget_bytes;
    if (ram == 0) {
      int64_t outputs = 0;
      for (const auto& cost : table.costs()) outputs += static_cast<int64_t>(cost.ram_bytes());
      ram = static_cast<int64_t>(instance.ram_fraction * static_cast<double>(outputs));
    }
    request.set_ram_budget_bytes(static_cast<uint64_t>(ram));
    request.set_runtime_budget_multiple(instance.runtime_multiple);
    EC_ASSIGN_OR_RETURN(Problem problem, ProblemFromCostTable(table, request));
    char name[96];
    std::snprintf(name, sizeof name, "%s/%s %lld B %.1fx", instance.model.c_str(), instance.platform.c_str(),
                  static_cast<long long>(ram), instance.runtime_multiple);

    SolveOptions solve;
    solve.time_limit_s = instance.time_limit_s * options.time_scale;
    solve.threads = options.threads;
    solve.search_min_ram = false;
    EC_ASSIGN_OR_RETURN(v1::Schedule ours, Solve(problem, solve));
    PrintRow(out, name, "ours", ours, instance.target);
    if (instance.with_poet) {
      solve.poet_formulation = true;
      solve.time_limit_s = options.poet_time_limit_s * options.time_scale;
      EC_ASSIGN_OR_RETURN(v1::Schedule poet, Solve(problem, solve));
      PrintRow(out, name, "poet", poet, "");
    }
  }
  out << "\nfirst s: time to the first feasible schedule; proof s: time to the proof of optimality (- if none).\n";
  return Status::Ok();
}

}  // namespace edgecost::solver
