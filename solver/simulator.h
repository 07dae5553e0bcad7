// An independent replay of a schedule against a problem, in POET's accounting:
// every input of a computation resident or computed earlier in the stage; memory
// (resident at the stage's start, plus each output as it is computed, minus each
// input freed after its last use in the stage unless kept) never above the
// budget; runtime within the budget; and the energy recomputed from scratch.
// Every schedule the solver returns has passed it.
#pragma once

#include <string>

#include "base/status.h"
#include "solver/plan.h"
#include "solver/problem.h"

namespace edgecost::solver {

struct Replay {
  bool valid = false;
  std::string violation;  // the first one: "stage 12, node 7 (name): what"
  int violation_stage = -1;
  int violation_node = -1;
  v1::EnergyBreakdown energy;
  int64_t peak_ram_bytes = 0;
  double runtime_s = 0;  // compute time (plus paging time when the problem counts it)
  uint32_t recomputations = 0, page_ins = 0, page_outs = 0;
};

Replay Simulate(const Problem& problem, const Plan& plan);
// Checks the message's shape (stage count, node ranges) before replaying it.
Replay Simulate(const Problem& problem, const v1::Schedule& schedule);

}  // namespace edgecost::solver
