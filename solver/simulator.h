// An independent replay of a schedule against a problem, in POET's accounting:
// every input of a computation resident or computed earlier in the stage; memory
// (resident at the stage's start, plus each output as it is computed, minus each
// input freed after its last use in the stage unless kept) never above the
// budget; runtime within the budget; and the energy recomputed from scratch.
// Every schedule the solver returns has passed it.
#pragma once

#include <string>
#include <vector>

#include "base/status.h"
#include "solver/plan.h"
#include "solver/problem.h"

namespace edgecost::solver {

// Memory in use at one point of the replay: at a stage's start (node -1), right
// after a computation allocated its output, and after the inputs it was the last
// reader of were freed. Recorded when asked, for timelines and pictures.
struct MemoryPoint {
  enum class When { kStageStart, kAfterCompute, kAfterFree };
  int stage = 0;
  int node = -1;
  When when = When::kStageStart;
  int64_t bytes = 0;
};

struct Replay {
  bool valid = false;
  std::string violation;  // the first one: "stage 12, node 7 (name): what"
  int violation_stage = -1;
  int violation_node = -1;
  v1::EnergyBreakdown energy;
  int64_t peak_ram_bytes = 0;
  double runtime_s = 0;  // compute time (plus paging time when the problem counts it)
  uint32_t recomputations = 0, page_ins = 0, page_outs = 0;
  std::vector<MemoryPoint> memory;  // filled only when asked (SimulateOptions::record_memory)
};

struct SimulateOptions {
  bool record_memory = false;
};

Replay Simulate(const Problem& problem, const Plan& plan, SimulateOptions options = {});

// The step's time as the executor (train/) runs `plan`, with paging on an I/O thread of its own:
// each stage's page-outs, then page-ins, queued in node order on one FIFO; the compute thread
// runs the stage's nodes in order and waits for a page-in a node reads, for a page-out before the
// node's buffer is released, and for every request at the step's end. Paging is on the critical
// path only where compute waits for it, which a serial sum (count_paging_time) overstates when
// reads run ahead and understates nothing. Without paging times: the compute time.
double OverlappedRuntimeS(const Problem& problem, const Plan& plan);
// Checks the message's shape (stage count, node ranges) before replaying it.
Replay Simulate(const Problem& problem, const v1::Schedule& schedule, SimulateOptions options = {});

}  // namespace edgecost::solver
