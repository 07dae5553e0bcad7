// The scheduling MILP, solved in process with COIN-OR CBC.
//
// Same decisions as POET's formulation (compute, resident, stored, page in/out,
// free), with these differences that make it smaller and tighter:
//  - a variable exists only where it is of use: resident/stored outputs only
//    while some consumer is still to come (so an output is not kept past its
//    last reader to recompute a successor from it), paging only for outputs
//    needed two stages on, frees only on edges whose consumer can run in the stage;
//  - the free decision is bounded from above only (free <= compute of the
//    consumer, <= not kept, <= not used again in the stage): freeing less than
//    allowed only wastes memory, so POET's two-sided big-M is unnecessary, and
//    every solution replays in the simulator with at most the memory it claims;
//  - bytes are scaled by the budget and joules by the mean compute energy;
//  - cuts: the eviction bound's rows, and reach rows (a tensor let go is back
//    for its next read only by a recomputation or an earlier page-out);
//  - a feasible heuristic schedule is handed to CBC as its first incumbent;
//  - no CglPreProcess (seen to mark non-optimal schedules optimal here).
#pragma once

#include <atomic>
#include <functional>
#include <optional>
#include <string>

#include "solver/plan.h"
#include "solver/problem.h"

namespace edgecost::solver {

struct MilpOptions {
  // Kept whole, root LP included: CBC stops at its next event after it, and any
  // LP still running a little later is cut short (its bound is then not trusted).
  double time_limit_s = 60;
  int threads = 1;
  const Plan* incumbent = nullptr;          // a valid schedule to start from
  bool poet_formulation = false;            // POET's own formulation: all T x T variables, two-sided big-M frees
  const std::atomic<bool>* stop = nullptr;  // checked at every branch-and-bound event
  // Called with the best energy (J; infinity when unknown) and the proven bound
  // (J; -infinity when unknown) whenever either improves, and once a second
  // without news; never concurrently, never after SolveMilp returned.
  std::function<void(double energy_j, double lower_bound_j)> on_progress;
};

struct MilpResult {
  std::optional<Plan> plan;  // the best schedule CBC found (not yet replayed)
  double objective_j = 0;    // its energy
  double lower_bound_j = 0;  // CBC's proven bound
  bool proven_optimal = false;
  bool proven_infeasible = false;
  bool root_solved = false;  // the root LP finished: lower_bound_j is at least its bound
  double solve_time_s = 0;
  double first_solution_s = -1;  // when CBC had its first solution (its own or the incumbent)
  int columns = 0;
  int rows = 0;
  std::string error;  // why CBC stopped with an exception, if it did
};

MilpResult SolveMilp(const Problem& problem, const MilpOptions& options);

// The MILP's rows a plan breaks. `model` counts the rows that define the
// MILP's schedules: a plan outside them (an output kept past its last reader,
// say) breaks some, though the simulator may accept it. `cuts` counts the rows
// added to tighten the LP: 0 for every plan with model == 0, or a cut removes
// schedules and the proven bound overstates.
struct BrokenRows {
  int model = 0;
  int cuts = 0;
};
BrokenRows MilpRowsBrokenBy(const Problem& problem, const Plan& plan);

}  // namespace edgecost::solver
