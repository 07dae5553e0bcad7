// The scheduling problem of POET (ICML 2022), in plain arrays: a training graph
// of n nodes in topological order with per-node costs, a RAM budget and a
// runtime budget. Semantics: docs/design/scheduling.md.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "proto/edgecost.pb.h"

namespace edgecost::solver {

// The runtime budget of a request that names none, the same in `solve`, `train` and over RPC:
// 1.5 plain steps, room for recomputation without doubling the step.
inline constexpr double kDefaultRuntimeBudgetMultiple = 1.5;

struct Problem {
  std::vector<std::string> names;
  std::vector<bool> backward;
  std::vector<double> runtime_s;   // seconds to compute node i once
  std::vector<double> compute_j;   // joules to compute node i once
  std::vector<int64_t> ram_bytes;  // bytes of node i's output while resident
  std::vector<double> page_in_j;   // joules to read node i's output from storage
  std::vector<double> page_out_j;  // joules to write it to storage
  std::vector<double> page_in_s;   // seconds to page in (empty when unknown)
  std::vector<double> page_out_s;  // seconds to page out (empty when unknown)
  // preds[v]: distinct nodes whose output v reads; every u in preds[v] has u < v.
  std::vector<std::vector<int>> preds;

  int64_t activation_budget_bytes = 0;
  double runtime_budget_s = 0;
  bool allow_paging = true;
  bool allow_remat = true;
  bool count_paging_time = false;  // paging time counts against the runtime budget
  // By node, when not empty: whether a stage after its own may compute it again. With updates in
  // the backward pass no backward node may: its recomputation would read weights already updated
  // (forward nodes are recomputed for backward nodes above their layers, whose updates come later).
  std::vector<bool> recomputable;

  int size() const { return static_cast<int>(names.size()); }
  bool Recomputable(int i) const { return allow_remat && (recomputable.empty() || recomputable[static_cast<size_t>(i)]); }
  // Runtime of one plain training step: every node computed once.
  double PlainRuntimeS() const;
  // Energy of computing every node once: no schedule can cost less.
  double FloorJ() const;
};

// Builds the problem from a cost table and the request's budgets and switches.
// Edges are deduplicated (POET's graphs list some twice). Paging times come from
// the table's PagingCost when it has one, else stay empty.
Result<Problem> ProblemFromCostTable(const v1::CostTable& table, const v1::ScheduleRequest& request);

}  // namespace edgecost::solver
