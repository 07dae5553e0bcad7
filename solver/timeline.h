// A schedule's predicted timeline: every computation, recomputation, page-out
// and page-in with a start and a duration from the cost table, and the memory
// in use over time, as the independent simulator accounts it. The schedule
// picture, the plan in words and the Chrome trace are all drawn from it.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "proto/edgecost.pb.h"
#include "solver/problem.h"

namespace edgecost::solver {

enum class StepKind { kCompute, kRecompute, kPageOut, kPageIn };
inline constexpr StepKind kStepKinds[] = {StepKind::kCompute, StepKind::kRecompute, StepKind::kPageOut,
                                          StepKind::kPageIn};
// "compute", "recompute", "page-out", "page-in".
std::string_view StepKindName(StepKind kind);

struct TimelineStep {
  StepKind kind = StepKind::kCompute;
  int stage = 0;
  int node = 0;
  double start_s = 0;
  double duration_s = 0;  // paging: 0 when the cost table has no paging times
  double energy_j = 0;
};

struct MemorySample {
  double time_s = 0;
  int64_t bytes = 0;
};

struct Timeline {
  std::vector<TimelineStep> steps;   // by stage; in a stage, computations in order, then paging
  std::vector<MemorySample> memory;  // in time order; changes at one instant in the order they happen
  std::vector<double> stage_start_s;
  double runtime_s = 0;  // when the last computation (or counted paging) ends
  int64_t peak_bytes = 0;
  int64_t budget_bytes = 0;
  // The first backward node and when it is first computed; -1 for a graph without one.
  int first_backward_node = -1;
  double backward_start_s = -1;
  // Paging overlaps computation on its own storage queue unless the problem counts
  // paging time, when it follows the stage's computations on the same clock.
  bool paging_times_known = false;
};

// Replays `schedule` (it must be valid for `problem`: an invalid one is refused
// with the simulator's first violation) and lays its operations out in time.
Result<Timeline> PredictTimeline(const Problem& problem, const v1::Schedule& schedule);

}  // namespace edgecost::solver
