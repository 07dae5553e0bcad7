#include <fstream>
#include <iostream>
#include <sstream>

#include <google/protobuf/util/json_util.h>

#include "base/units.h"
#include "cli/cli.h"
#include "cli/graph_flags.h"
#include "cli/table.h"
#include "costdb/costdb.h"
#include "graph/cost_source.h"
#include "solver/problem.h"
#include "solver/simulator.h"
#include "solver/solve.h"
#include "solver/svg.h"

namespace edgecost::cli {
namespace {

struct SolveFlags {
  GraphFlags graph;
  std::string model;
  std::string graph_file;
  std::string platform = "a72";
  std::string source = std::string(graph::kPoetFlopsSource);
  std::string ram_budget;
  std::string runtime_budget = "1x";
  bool no_paging = false;
  bool no_remat = false;
  bool count_paging_time = false;
  double time_limit_s = 60;
  int threads = 0;
  std::string strategy = "optimal";
  bool compare = false;
  bool min_ram = false;
  bool store = true;
  bool json = false;
  std::string out_path;
  std::string svg_path;
};

const char* StatusName(v1::Schedule::Status status) {
  switch (status) {
    case v1::Schedule::STATUS_OPTIMAL: return "optimal (proven)";
    case v1::Schedule::STATUS_FEASIBLE: return "feasible";
    case v1::Schedule::STATUS_INFEASIBLE: return "infeasible (proven)";
    case v1::Schedule::STATUS_NO_SOLUTION: return "no schedule found within the time limit";
    default: return "unknown";
  }
}

std::string Percent(double fraction) {
  std::ostringstream out;
  out.precision(3);
  out << fraction * 100 << "%";
  return out.str();
}

void PrintSchedule(const v1::Schedule& s) {
  std::cout << "status         " << StatusName(s.status());
  if (s.status() == v1::Schedule::STATUS_FEASIBLE) {
    std::cout << ", gap " << Percent(s.gap()) << " of the energy above the floor";
  }
  std::cout << "\n";
  if (!s.message().empty()) std::cout << "               " << s.message() << "\n";
  if (s.status() == v1::Schedule::STATUS_INFEASIBLE || s.status() == v1::Schedule::STATUS_NO_SOLUTION) {
    if (s.min_feasible_ram_bytes() > 0) {
      std::cout << "smallest RAM   " << s.min_feasible_ram_bytes() << " B ("
                << FormatBytes(static_cast<double>(s.min_feasible_ram_bytes()))
                << ") is feasible at this runtime budget\n";
    }
    return;
  }
  const v1::EnergyBreakdown& e = s.energy();
  std::cout.precision(6);
  std::cout << std::fixed;
  std::cout << "energy         " << e.total_j() << " J = compute " << e.compute_j() << " + recompute "
            << e.recompute_j() << " + page-in " << e.page_in_j() << " + page-out " << e.page_out_j() << "\n"
            << "lower bound    " << s.lower_bound_j() << " J (floor " << s.floor_j()
            << " J: every node computed once)\n";
  std::cout.unsetf(std::ios::fixed);
  std::cout << "peak RAM       " << s.peak_ram_bytes() << " B of " << s.ram_budget_bytes() << " B budget\n"
            << "runtime        " << FormatSeconds(s.runtime_s()) << " of " << FormatSeconds(s.runtime_budget_s())
            << " budget\n"
            << "operations     " << s.recomputations() << " recomputations, " << s.page_outs() << " page-outs, "
            << s.page_ins() << " page-ins\n"
            << "solve time     " << FormatSeconds(s.solve_time_s()) << " (first feasible after "
            << FormatSeconds(s.time_to_first_feasible_s()) << ")\n";
}

}  // namespace
}  // namespace edgecost::cli
