#include "solver/solve.h"

#include <chrono>
#include <cmath>

#include "solver/heuristics.h"
#include "solver/milp.h"
#include "solver/simulator.h"

namespace edgecost::solver {
namespace {

double Now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

v1::Schedule Base(const Problem& p, const std::string& strategy) {
  v1::Schedule s;
  s.set_strategy(strategy);
  s.set_floor_j(p.FloorJ());
  s.set_lower_bound_j(p.FloorJ());  // every node must be computed at least once
  s.set_ram_budget_bytes(static_cast<uint64_t>(p.ram_budget_bytes));
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

v1::Schedule NoSchedule(const Problem& p, const std::string& strategy, v1::Schedule::Status status,
                        const std::string& message, bool search_min_ram) {
  v1::Schedule s = Base(p, strategy);
  s.set_status(status);
  s.set_message(message);
  if (search_min_ram) {
    if (Result<int64_t> ram = MinFeasibleRam(p); ram.ok()) s.set_min_feasible_ram_bytes(static_cast<uint64_t>(*ram));
  }
  return s;
}

// Cases no schedule can meet, provable without search.
std::string ObviouslyInfeasible(const Problem& p) {
  const int64_t least = MemoryLowerBound(p);
  if (least > p.ram_budget_bytes) {
    return "some node needs " + std::to_string(least) + " B for its inputs and output together, more than the " +
           std::to_string(p.ram_budget_bytes) + " B budget";
  }
  if (p.PlainRuntimeS() > p.runtime_budget_s * (1 + 1e-12)) {
    return "one plain training step takes " + std::to_string(p.PlainRuntimeS()) + " s, more than the " +
           std::to_string(p.runtime_budget_s) + " s budget";
  }
  return "";
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

Result<int64_t> MinFeasibleRam(const Problem& problem) {
  Problem p = problem;
  auto feasible = [&](int64_t budget) {
    p.ram_budget_bytes = budget;
    if (CheckpointAll(p).replay.valid) return true;
    if (p.allow_paging && PagingOnly(p).replay.valid) return true;
    return Greedy(p).has_value();
  };
  int64_t low = MemoryLowerBound(p) - 1;  // infeasible
  int64_t high = 0;
  for (int64_t ram : p.ram_bytes) high += ram;
  high = std::max(high, low + 1);
  if (!feasible(high)) return NotFound("no schedule found at this runtime budget even with all activations in RAM");
  while (high - low > std::max<int64_t>(1, high / 1000)) {  // to 0.1%
    const int64_t mid = low + (high - low) / 2;
    (feasible(mid) ? high : low) = mid;
  }
  return high;
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
  const double start = Now();
  if (p.size() == 0) return InvalidArgument("the graph has no nodes");
  const std::string infeasible = ObviouslyInfeasible(p);
  if (!infeasible.empty()) {
    v1::Schedule s =
        NoSchedule(p, options.strategy, v1::Schedule::STATUS_INFEASIBLE, infeasible, options.search_min_ram);
    s.set_solve_time_s(Now() - start);
    return s;
  }

  std::optional<Candidate> found;
  EC_ASSIGN_OR_RETURN(const Strategy kind, ParseStrategy(options.strategy));
  const std::string strategy(StrategyName(kind));
  switch (kind) {
    case Strategy::kCheckpointAll:
      found = CheckpointAll(p);
      break;
    case Strategy::kPagingOnly:
      if (!p.allow_paging) return InvalidArgument("paging-only needs paging; drop --no-paging");
      found = PagingOnly(p);
      break;
    case Strategy::kSqrt:
      found = SqrtCheckpointing(p);
      break;
    case Strategy::kRevolve:
      found = Revolve(p);
      break;
    case Strategy::kOptimal:
      if (options.poet_formulation) break;  // POET hands CBC nothing to start from
      [[fallthrough]];
    case Strategy::kGreedy: {
      Candidate all = CheckpointAll(p);
      if (all.replay.valid) {
        found = std::move(all);
      } else {
        found = Greedy(p);
        if (!found && p.allow_paging) {
          Candidate paging = PagingOnly(p);
          if (paging.replay.valid) found = std::move(paging);
        }
      }
      break;
    }
  }
  std::string why_not = "no placement of its checkpoints fits both budgets";
  if (found && !found->replay.valid) {
    why_not = "its schedule fails: " + found->replay.violation;
    found.reset();
  }
  const double first_feasible_s = Now() - start;

  if (kind != Strategy::kOptimal) {
    if (!found) {
      v1::Schedule s =
          NoSchedule(p, strategy, v1::Schedule::STATUS_NO_SOLUTION,
                     "the " + strategy + " strategy does not meet these budgets; " + why_not, options.search_min_ram);
      s.set_solve_time_s(Now() - start);
      return s;
    }
    v1::Schedule s = FromCandidate(p, *found, strategy);
    SetGap(s);
    if (s.status() == v1::Schedule::STATUS_FEASIBLE) s.set_lower_bound_j(p.FloorJ());
    s.set_time_to_first_feasible_s(first_feasible_s);
    s.set_solve_time_s(Now() - start);
    return s;
  }

  // A heuristic schedule at the floor is already optimal: no MILP needed.
  if (found) {
    v1::Schedule s = FromCandidate(p, *found, strategy);
    SetGap(s);
    if (s.status() == v1::Schedule::STATUS_OPTIMAL) {
      s.set_message("every node computed once and nothing paged: the energy floor, optimal by definition");
      s.set_time_to_first_feasible_s(first_feasible_s);
      s.set_solve_time_s(Now() - start);
      return s;
    }
  }

  MilpOptions milp;
  milp.time_limit_s = std::max(0.5, options.time_limit_s - (Now() - start));
  milp.threads = options.threads;
  milp.incumbent = found ? &found->plan : nullptr;
  milp.poet_formulation = options.poet_formulation;
  milp.stop = options.stop;
  const MilpResult result = SolveMilp(p, milp);
  std::string message =
      "MILP: " + std::to_string(result.columns) + " variables, " + std::to_string(result.rows) + " constraints";
  if (!result.error.empty()) message += "; " + result.error;
  if (result.plan) {
    Candidate milp_candidate{*result.plan, Simulate(p, *result.plan)};
    if (!milp_candidate.replay.valid) {
      message += "; CBC's schedule failed the replay (" + milp_candidate.replay.violation + ") and was discarded";
    } else if (!found || milp_candidate.replay.energy.total_j() < found->replay.energy.total_j()) {
      found = std::move(milp_candidate);
    }
  }
  if (!found) {
    const bool infeasible_proven = result.proven_infeasible;
    v1::Schedule s =
        NoSchedule(p, strategy, infeasible_proven ? v1::Schedule::STATUS_INFEASIBLE : v1::Schedule::STATUS_NO_SOLUTION,
                   infeasible_proven ? "CBC proved that no schedule meets these budgets"
                                     : "no schedule found within the time limit; " + message,
                   options.search_min_ram);
    s.set_solve_time_s(Now() - start);
    return s;
  }
  v1::Schedule s = FromCandidate(p, *found, strategy);
  s.set_lower_bound_j(std::max(p.FloorJ(), std::min(result.lower_bound_j, s.energy().total_j())));
  SetGap(s);
  s.set_message(message);
  s.set_time_to_first_feasible_s(result.first_solution_s >= 0 && !milp.incumbent ? result.first_solution_s
                                                                                 : first_feasible_s);
  s.set_solve_time_s(Now() - start);
  return s;
}

}  // namespace edgecost::solver
