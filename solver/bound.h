// A lower bound on a schedule's energy from memory pressure alone, in
// milliseconds where the MILP's root LP takes minutes on large graphs.
//
// When stage t computes node t, its inputs and output are in RAM; every other
// output computed earlier and read after stage t is in RAM too, unless the
// schedule lets it go, and one it lets go costs at least once more: a
// recomputation (its compute energy and time) or a page-out and page-in. So
// wherever what stage t would hold exceeds the budget, tensors of at least the
// excess must be let go. The cheapest fractional choice of which, over all
// stages at once and within the runtime budget's room for recomputation, is a
// small covering LP; the floor plus its optimum bounds every schedule.
#pragma once

#include <utility>
#include <vector>

#include "solver/problem.h"

namespace edgecost::solver {

// Stage `stage` is over budget unless tensors are let go: sum over `shares` of
// share x [tensor let go] >= 1, for every schedule (shares are bytes over the
// excess, capped at 1).
struct EvictionRow {
  int stage = 0;
  std::vector<std::pair<int, double>> shares;  // (tensor, share)
};
std::vector<EvictionRow> EvictionRows(const Problem& problem);

// Joules: at least FloorJ(), and at most the energy of any valid schedule.
// Given time, the covering problem is also solved in integers (a tensor is let
// go or not), for at most `integer_time_limit_s`; the larger bound is returned.
double EvictionLowerBoundJ(const Problem& problem, double integer_time_limit_s = 0);

}  // namespace edgecost::solver
