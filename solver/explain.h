// A schedule in plain words, layer by layer: which layers are recomputed and
// how often, which are paged out and when they come back, and what that costs
// in energy and time against the plain step (every node computed once and kept).
#pragma once

#include <string>
#include <vector>

#include "base/status.h"
#include "proto/edgecost.pb.h"
#include "solver/problem.h"

namespace edgecost::solver {

struct LayerPlan {
  int node = 0;
  std::string name;
  bool backward = false;
  bool input = false;                 // a forward node that reads nothing: the batch, read again, not recomputed
  std::vector<int> recompute_stages;  // stages that compute the node again
  std::vector<int> page_out_stages;   // stages that write it to storage
  std::vector<int> page_in_stages;    // stages that read it back (resident from the next stage)
  double extra_energy_j = 0;          // its recomputations, page-outs and page-ins
  double extra_runtime_s = 0;         // its recomputations (and paging, when the problem counts it)
};

struct PlanExplanation {
  std::vector<LayerPlan> layers;  // only the layers the schedule recomputes or pages, in node order
  int plain_layers = 0;           // the others: computed once, kept until their last use
  double plain_energy_j = 0;      // the plain step: every node computed once
  double plain_runtime_s = 0;
  double energy_j = 0;  // the schedule
  double runtime_s = 0;
  int64_t peak_ram_bytes = 0;
  int64_t activation_budget_bytes = 0;
};

// Refuses a schedule that does not replay on `problem`.
Result<PlanExplanation> ExplainPlan(const Problem& problem, const v1::Schedule& schedule);

// The listing `edgecost solve` prints: a summary line, then a line per layer.
std::string PlanInWords(const PlanExplanation& plan);

}  // namespace edgecost::solver
