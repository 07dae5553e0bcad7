// One entry point for every strategy: heuristics for a first schedule, the MILP
// for the optimum and its proof, baselines for comparison. Every schedule
// returned has been replayed by the simulator; "optimal" is claimed only when a
// lower bound meets the energy within kOptimalityTolerance of the energy above
// the floor.
#pragma once

#include <atomic>
#include <functional>
#include <limits>
#include <string>
#include <string_view>

#include "base/status.h"
#include "solver/deadline.h"
#include "solver/problem.h"

namespace edgecost::solver {

inline constexpr double kOptimalityTolerance = 1e-6;  // relative, on the energy above the floor

// How a schedule is found: the optimum (MILP from the best heuristic start),
// the heuristic start alone, or one of the baselines it is compared with.
enum class Strategy { kOptimal, kGreedy, kCheckpointAll, kSqrt, kRevolve, kPagingOnly };
inline constexpr Strategy kStrategies[] = {Strategy::kOptimal, Strategy::kGreedy,  Strategy::kCheckpointAll,
                                           Strategy::kSqrt,    Strategy::kRevolve, Strategy::kPagingOnly};
inline constexpr Strategy kBaselines[] = {Strategy::kCheckpointAll, Strategy::kSqrt, Strategy::kRevolve,
                                          Strategy::kPagingOnly};
// What "optimal" starts from: it never returns a schedule worse than the best of these.
inline constexpr Strategy kBaselinesAndGreedy[] = {Strategy::kCheckpointAll, Strategy::kPagingOnly, Strategy::kSqrt,
                                                   Strategy::kRevolve, Strategy::kGreedy};
std::string_view StrategyName(Strategy strategy);  // "optimal", "checkpoint-all", ...
Result<Strategy> ParseStrategy(std::string_view name);
std::string StrategyNames();  // every name, comma-separated, for help and errors

// A solve's state as it improves, for progress lines.
struct Progress {
  double elapsed_s = 0;
  double energy_j = 0;  // the best schedule's energy; infinity before there is one
  double lower_bound_j = 0;
  double floor_j = 0;
  std::string found_by;  // what found the best schedule: "milp" or a heuristic's name
  // Said once, as soon as no heuristic meets the budget (before the MILP's time limit): the
  // smallest RAM budget they meet at this runtime budget (MinFeasibleRam). 0: not known.
  int64_t min_feasible_ram_bytes = 0;
};

struct SolveOptions {
  std::string strategy = "optimal";  // a StrategyName
  double time_limit_s = 60;
  int threads = 1;
  bool search_min_ram = true;     // for an infeasible budget, look for the smallest feasible one
  bool poet_formulation = false;  // "optimal" through POET's own MILP, with no heuristic start: for comparison
  // Set from another thread (e.g. at shutdown): the MILP stops at its next
  // branch-and-bound event and the best schedule so far is returned.
  const std::atomic<bool>* stop = nullptr;
  // Called as the best schedule or the bound improves, from the solving thread.
  std::function<void(const Progress&)> on_progress;
};

Result<v1::Schedule> Solve(const Problem& problem, const SolveOptions& options);

// The smallest RAM budget (bytes) for which the heuristics and baselines find a
// schedule at the problem's runtime budget: never above the peak of any schedule
// they find on the way; not a proof of minimality. NotFound when none does.
// Past `deadline` it returns the best found so far.
Result<int64_t> MinFeasibleRam(const Problem& problem, const Deadline& deadline = {});

// Fills energy, counts, peak RAM and runtime of `schedule` from a replay; an
// invalid schedule is an Internal error naming the violation.
Status FillFromReplay(const Problem& problem, v1::Schedule& schedule);

}  // namespace edgecost::solver
