#include "solver/solve.h"

#include <chrono>
#include <cmath>
#include <limits>
#include <optional>

#include "base/units.h"
#include "solver/bound.h"
#include "solver/heuristics.h"
#include "solver/milp.h"
#include "solver/simulator.h"

namespace edgecost::solver {
namespace {


v1::Schedule Base(const Problem& p, const std::string& strategy) {
  v1::Schedule s;
  s.set_strategy(strategy);
  s.set_floor_j(p.FloorJ());
  s.set_lower_bound_j(p.FloorJ());  // every node must be computed at least once
  s.set_activation_budget_bytes(static_cast<uint64_t>(p.activation_budget_bytes));
  s.set_runtime_budget_s(p.runtime_budget_s);
  return s;
}

void SetGap(v1::Schedule& s) {
  const double above_floor = s.energy().total_j() - s.floor_j();
  const double unproven = s.energy().total_j() - s.lower_bound_j();
  s.set_gap(above_floor > 0 ? std::max(0.0, unproven) / above_floor : 0.0);
  const bool proven = unproven <= kOptimalityTolerance * std::max(above_floor, 0.0) + 1e-12 * s.floor_j();
  s.set_status(proven ? v1::Schedule::STATUS_OPTIMAL : v1::Schedule::STATUS_FEASIBLE);
  if (proven) s.set_gap(0);
}

// A schedule message from a valid candidate.
v1::Schedule FromCandidate(const Problem& p, const Candidate& c, const std::string& strategy) {
  v1::Schedule s = Base(p, strategy);
  PlanToStages(c.plan, s);
  *s.mutable_energy() = c.replay.energy;
  s.set_peak_ram_bytes(static_cast<uint64_t>(c.replay.peak_ram_bytes));
  s.set_runtime_s(c.replay.runtime_s);
  s.set_recomputations(c.replay.recomputations);
  s.set_page_ins(c.replay.page_ins);
  s.set_page_outs(c.replay.page_outs);
  return s;
}

// `min_ram_bytes`: MinFeasibleRam's answer when the caller has it already (0: search now).
v1::Schedule NoSchedule(const Problem& p, const std::string& strategy, v1::Schedule::Status status,
                        const std::string& message, bool search_min_ram, const Deadline& deadline,
                        int64_t min_ram_bytes = 0) {
  v1::Schedule s = Base(p, strategy);
  s.set_status(status);
  s.set_message(message);
  if (search_min_ram && min_ram_bytes == 0) {
    if (Result<int64_t> ram = MinFeasibleRam(p, deadline); ram.ok()) min_ram_bytes = *ram;
  }
  if (search_min_ram && min_ram_bytes > 0) s.set_min_feasible_ram_bytes(static_cast<uint64_t>(min_ram_bytes));
  return s;
}

// Cases no schedule can meet, provable without search.
std::string ObviouslyInfeasible(const Problem& p) {
  const int64_t least = MemoryLowerBound(p);
  if (least > p.activation_budget_bytes) {
    // Readable, and exact where it is compared with the budget.
    auto bytes = [](int64_t b) {
      return b < 1000 ? std::to_string(b) + " B"
                      : FormatBytes(static_cast<double>(b)) + " (" + std::to_string(b) + " B)";
    };
    return "some node needs " + bytes(least) + " for its inputs and output together, more than the " +
           bytes(p.activation_budget_bytes) + " budget";
  }
  if (p.PlainRuntimeS() > p.runtime_budget_s * (1 + 1e-12)) {
    return "one plain training step takes " + FormatSeconds(p.PlainRuntimeS()) + ", more than the " +
           FormatSeconds(p.runtime_budget_s) + " budget";
  }
  return "";
}

// The heuristics and baselines are deterministic and polynomial (well under a
// second on the zoo's largest graphs): under a smaller time limit they still
// get this long, so that "optimal" always has their schedules to start from.
// Their deadline guards against inputs no device measures; the stop flag ends them at once.
constexpr double kHeuristicsMinS = 2;

Deadline HeuristicsDeadline(double start, const SolveOptions& options) {
  return {start + std::max(kHeuristicsMinS, options.time_limit_s), options.stop};
}

// One heuristic or baseline, replayed; nullopt when it finds nothing.
std::optional<Candidate> RunHeuristic(const Problem& p, Strategy kind, const Deadline& deadline) {
  switch (kind) {
    case Strategy::kCheckpointAll:
      return CheckpointAll(p);
    case Strategy::kPagingOnly:
      return PagingOnly(p);
    case Strategy::kSqrt:
      return SqrtCheckpointing(p);
    case Strategy::kRevolve:
      return Revolve(p);
    case Strategy::kGreedy:
      return Greedy(p, deadline);
    case Strategy::kOptimal:
      return std::nullopt;  // not a heuristic
  }
  return std::nullopt;
}

// A baseline or the greedy heuristic alone.
v1::Schedule SolveHeuristic(const Problem& p, const SolveOptions& options, Strategy kind, double start) {
  const std::string strategy(StrategyName(kind));
  const Deadline deadline = HeuristicsDeadline(start, options);
  std::optional<Candidate> found = RunHeuristic(p, kind, deadline);
  std::string why_not = "no placement of its checkpoints fits both budgets";
  if (found && !found->replay.valid) {
    why_not = "its schedule fails: " + found->replay.violation;
    found.reset();
  }
  if (!found) {
    v1::Schedule s = NoSchedule(p, strategy, v1::Schedule::STATUS_NO_SOLUTION,
                                "the " + strategy + " strategy does not meet these budgets; " + why_not,
                                options.search_min_ram, deadline);
    s.set_solve_time_s(SteadyNowS() - start);
    return s;
  }
  v1::Schedule s = FromCandidate(p, *found, strategy);
  SetGap(s);
  if (s.status() == v1::Schedule::STATUS_FEASIBLE) s.set_lower_bound_j(p.FloorJ());
  s.set_found_by(strategy);
  s.set_time_to_first_feasible_s(SteadyNowS() - start);
  s.set_solve_time_s(SteadyNowS() - start);
  return s;
}

}  // namespace

Status FillFromReplay(const Problem& p, v1::Schedule& schedule) {
  const Replay replay = Simulate(p, schedule);
  if (!replay.valid) return Internal("the schedule fails its replay: " + replay.violation);
  *schedule.mutable_energy() = replay.energy;
  schedule.set_peak_ram_bytes(static_cast<uint64_t>(replay.peak_ram_bytes));
  schedule.set_runtime_s(replay.runtime_s);
  schedule.set_recomputations(replay.recomputations);
  schedule.set_page_ins(replay.page_ins);
  schedule.set_page_outs(replay.page_outs);
  return Status::Ok();
}

Result<int64_t> MinFeasibleRam(const Problem& problem, const Deadline& deadline) {
  Problem p = problem;
  int64_t best = std::numeric_limits<int64_t>::max();
  // Whether any heuristic meets `budget`; the smallest peak any of them reaches is kept
  // (a schedule with peak P is valid at every budget from P up).
  auto feasible = [&](int64_t budget) {
    p.activation_budget_bytes = budget;
    bool any = false;
    for (Strategy kind : kBaselinesAndGreedy) {
      if (kind == Strategy::kPagingOnly && !p.allow_paging) continue;
      std::optional<Candidate> c = RunHeuristic(p, kind, deadline);
      if (!c || !c->replay.valid) continue;
      any = true;
      best = std::min(best, c->replay.peak_ram_bytes);
    }
    return any;
  };
  int64_t low = MemoryLowerBound(p) - 1;  // infeasible
  int64_t high = 0;
  for (int64_t ram : p.ram_bytes) high += ram;
  high = std::max(high, low + 1);
  if (!feasible(high)) return NotFound("no schedule found at this runtime budget even with all activations in RAM");
  // The heuristics are not monotone in the budget (one may meet a budget and miss a larger one),
  // so a coarse scan in 5% steps comes before the bisection.
  const int64_t top = best;
  for (int percent = 95; percent >= 5 && !deadline.Passed(); percent -= 5) {
    const int64_t budget = top / 100 * percent;
    if (budget <= low) break;
    if (budget < best) feasible(budget);
  }
  high = best;
  while (high - low > std::max<int64_t>(1, high / 1000) && !deadline.Passed()) {  // to 0.1%
    const int64_t mid = low + (high - low) / 2;
    if (feasible(mid)) {
      high = std::min(mid, best);
    } else {
      low = mid;
    }
  }
  return best;
}

std::string_view StrategyName(Strategy strategy) {
  switch (strategy) {
    case Strategy::kOptimal:
      return "optimal";
    case Strategy::kGreedy:
      return "greedy";
    case Strategy::kCheckpointAll:
      return "checkpoint-all";
    case Strategy::kSqrt:
      return "sqrt";
    case Strategy::kRevolve:
      return "revolve";
    case Strategy::kPagingOnly:
      return "paging-only";
  }
  return "optimal";
}

std::string StrategyNames() {
  std::string names;
  for (Strategy s : kStrategies) names += (names.empty() ? "" : ", ") + std::string(StrategyName(s));
  return names;
}

Result<Strategy> ParseStrategy(std::string_view name) {
  for (Strategy s : kStrategies) {
    if (StrategyName(s) == name) return s;
  }
  return InvalidArgument("unknown strategy '" + std::string(name) + "'; use one of " + StrategyNames());
}

Result<v1::Schedule> Solve(const Problem& p, const SolveOptions& options) {
  const double start = SteadyNowS();
  const Deadline deadline{start + std::max(0.0, options.time_limit_s), options.stop};
  if (p.size() == 0) return InvalidArgument("the graph has no nodes");
  const std::string infeasible = ObviouslyInfeasible(p);
  if (!infeasible.empty()) {
    v1::Schedule s = NoSchedule(p, options.strategy, v1::Schedule::STATUS_INFEASIBLE, infeasible,
                                options.search_min_ram, deadline);
    s.set_solve_time_s(SteadyNowS() - start);
    return s;
  }

  EC_ASSIGN_OR_RETURN(const Strategy kind, ParseStrategy(options.strategy));
  const std::string strategy(StrategyName(kind));
  if (kind == Strategy::kPagingOnly && !p.allow_paging) {
    return InvalidArgument("paging-only needs paging; drop --no-paging");
  }
  if (kind != Strategy::kOptimal) return SolveHeuristic(p, options, kind, start);

  // Every heuristic and baseline first: the best of them is CBC's incumbent and
  // what is returned if CBC finds nothing better, so the optimum is never worse.
  std::optional<Candidate> found;
  Strategy found_by = Strategy::kOptimal;
  for (Strategy start_kind : kBaselinesAndGreedy) {
    if (options.poet_formulation) break;  // POET hands CBC nothing to start from
    if (start_kind == Strategy::kPagingOnly && !p.allow_paging) continue;
    std::optional<Candidate> c = RunHeuristic(p, start_kind, HeuristicsDeadline(start, options));
    if (!c || !c->replay.valid) continue;
    if (!found || c->replay.energy.total_j() < found->replay.energy.total_j()) {
      found = std::move(c);
      found_by = start_kind;
    }
  }
  const double first_feasible_s = SteadyNowS() - start;
  // No heuristic meets the budget: the smallest budget they meet is known within a second, and
  // said now rather than after the MILP's time limit (which may yet find a schedule at this one).
  int64_t min_ram_bytes = 0;
  if (!found && options.search_min_ram && !options.poet_formulation) {
    if (Result<int64_t> ram = MinFeasibleRam(p, HeuristicsDeadline(start, options)); ram.ok()) {
      min_ram_bytes = *ram;
      if (options.on_progress) {
        options.on_progress({SteadyNowS() - start, std::numeric_limits<double>::infinity(), p.FloorJ(), p.FloorJ(), "",
                             min_ram_bytes});
      }
    }
  }
  if (found && options.on_progress) {  // said at once: the exchanges and the MILP may take the whole time limit
    options.on_progress({first_feasible_s, found->replay.energy.total_j(), p.FloorJ(), p.FloorJ(),
                         std::string(StrategyName(found_by))});
  }
  bool exchanged = false;  // the best schedule is greedy's improved by exchanges, not greedy's alone
  // Then exchanges from greedy's schedule (deterministic, and converged in
  // seconds on the zoo's graphs), for at most a third of the time.
  if (!options.poet_formulation) {
    std::optional<Candidate> c =
        GreedyWithExchanges(p, HeuristicsDeadline(start, options), deadline.Before(start + options.time_limit_s / 3));
    if (c && c->replay.valid && (!found || c->replay.energy.total_j() < found->replay.energy.total_j())) {
      found = std::move(c);
      found_by = Strategy::kGreedy;
      exchanged = true;
    }
  }
  double best_j = found ? found->replay.energy.total_j() : std::numeric_limits<double>::infinity();
  // POET's formulation is measured as it is: no bound of ours either.
  // The covering problem in integers gets a twentieth of the time, at most a second.
  const double eviction_bound_j = options.poet_formulation
                                      ? p.FloorJ()
                                      : EvictionLowerBoundJ(p, std::min(1.0, 0.05 * std::max(0.0, deadline.at_s - SteadyNowS())));
  auto report = [&](double energy_j, double bound_j, const std::string& by) {
    if (!options.on_progress) return;
    options.on_progress({SteadyNowS() - start, energy_j, std::max(bound_j, eviction_bound_j), p.FloorJ(), by});
  };
  if (found) report(best_j, p.FloorJ(), std::string(StrategyName(found_by)));

  // A heuristic schedule at the floor, or at the eviction bound, is already optimal: no MILP needed.
  if (found) {
    v1::Schedule s = FromCandidate(p, *found, strategy);
    s.set_lower_bound_j(std::min(eviction_bound_j, s.energy().total_j()));
    SetGap(s);
    if (s.status() == v1::Schedule::STATUS_OPTIMAL) {
      const bool at_floor = s.energy().total_j() <= s.floor_j() * (1 + 1e-12);
      s.set_message(!at_floor ? "no schedule can let go of less memory for less energy (the eviction bound): "
                                "optimal without the MILP"
                    : s.recomputations() > 0
                        ? "at the energy floor: only nodes that cost no energy are recomputed, nothing paged"
                        : "every node computed once and nothing paged: the energy floor, optimal by definition");
      s.set_found_by(std::string(StrategyName(found_by)));
      s.set_time_to_first_feasible_s(first_feasible_s);
      s.set_solve_time_s(SteadyNowS() - start);
      return s;
    }
  }

  const double milp_start_s = SteadyNowS() - start;
  MilpOptions milp;
  milp.time_limit_s = std::max(0.0, deadline.at_s - SteadyNowS());
  milp.threads = options.threads;
  milp.incumbent = found ? &found->plan : nullptr;
  milp.poet_formulation = options.poet_formulation;
  milp.stop = options.stop;
  if (options.on_progress) {
    milp.on_progress = [&](double energy_j, double bound_j) {
      const bool better = Cheaper(energy_j, best_j);
      if (better) best_j = energy_j;
      report(best_j, bound_j, better ? "milp" : "");
    };
  }
  // Below a tenth of a second no model of interest is even built: the heuristics' best is the answer.
  MilpResult result;
  if (milp.time_limit_s >= 0.1) {
    result = SolveMilp(p, milp);
  } else {
    result.error = "no time left for the MILP after the heuristics";
  }
  std::string message;
  auto note = [&message](const std::string& text) { message += (message.empty() ? "" : "; ") + text; };
  if (result.columns > 0) {
    note("MILP: " + std::to_string(result.columns) + " variables, " + std::to_string(result.rows) + " constraints");
  }
  if (!result.error.empty()) note(result.error);
  if (!result.root_solved) {
    note(eviction_bound_j > p.FloorJ() ? "the bound is the eviction bound: the MILP's root LP did not finish in time"
                                       : "no bound beyond the floor: the MILP's root LP did not finish in time");
  }
  if (result.plan) {
    Candidate milp_candidate{*result.plan, Simulate(p, *result.plan)};
    if (!milp_candidate.replay.valid) {
      note("CBC's schedule failed the replay (" + milp_candidate.replay.violation + ") and was discarded");
    } else if (!found || milp_candidate.replay.energy.total_j() < found->replay.energy.total_j()) {
      found = std::move(milp_candidate);
      found_by = Strategy::kOptimal;
    }
  }
  if (!found) {
    const bool infeasible_proven = result.proven_infeasible;
    v1::Schedule s =
        NoSchedule(p, strategy, infeasible_proven ? v1::Schedule::STATUS_INFEASIBLE : v1::Schedule::STATUS_NO_SOLUTION,
                   infeasible_proven ? "CBC proved that no schedule meets these budgets"
                                     : "no schedule found within the time limit by CBC or any heuristic; " + message,
                   options.search_min_ram, Deadline{std::max(deadline.at_s, SteadyNowS() + 0.5), options.stop},
                   min_ram_bytes);
    s.set_solve_time_s(SteadyNowS() - start);
    return s;
  }
  if (found_by != Strategy::kOptimal) {
    note("the MILP found nothing better than the heuristics' best, which " +
         (exchanged                       ? std::string("greedy improved by exchanges")
          : found_by == Strategy::kGreedy ? std::string("greedy")
                                          : "the " + std::string(StrategyName(found_by)) + " baseline") +
         " found");
  }
  v1::Schedule s = FromCandidate(p, *found, strategy);
  s.set_lower_bound_j(std::min(std::max(eviction_bound_j, result.lower_bound_j), s.energy().total_j()));
  SetGap(s);
  s.set_message(message);
  s.set_found_by(found_by == Strategy::kOptimal ? "milp" : std::string(StrategyName(found_by)));
  const bool milp_first = !milp.incumbent && result.first_solution_s >= 0;  // POET's formulation starts from nothing
  s.set_time_to_first_feasible_s(milp_first ? milp_start_s + result.first_solution_s : first_feasible_s);
  s.set_solve_time_s(SteadyNowS() - start);
  return s;
}

}  // namespace edgecost::solver
