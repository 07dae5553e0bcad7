#include "solver/timeline.h"

#include <algorithm>

#include "solver/plan.h"
#include "solver/simulator.h"

namespace edgecost::solver {

std::string_view StepKindName(StepKind kind) {
  switch (kind) {
    case StepKind::kCompute:
      return "compute";
    case StepKind::kRecompute:
      return "recompute";
    case StepKind::kPageOut:
      return "page-out";
    case StepKind::kPageIn:
      return "page-in";
  }
  return "?";
}

Result<Timeline> PredictTimeline(const Problem& p, const v1::Schedule& schedule) {
  const Replay replay = Simulate(p, schedule, {.record_memory = true});
  if (!replay.valid) return InvalidArgument("the schedule does not replay: " + replay.violation);
  const int n = p.size();
  const Plan plan = PlanFromStages(schedule, n);
  Timeline timeline;
  timeline.budget_bytes = p.activation_budget_bytes;
  timeline.paging_times_known = !p.page_in_s.empty() && !p.page_out_s.empty();
  for (int i = 0; i < n; ++i) {
    if (p.backward[static_cast<size_t>(i)]) {
      timeline.first_backward_node = i;
      break;
    }
  }

  // When each computation of each stage starts and ends on the compute clock.
  std::vector<std::vector<double>> compute_start(static_cast<size_t>(n)), compute_end(static_cast<size_t>(n));
  double now_s = 0;
  double storage_free_s = 0;  // the storage queue, when paging overlaps computation
  for (int t = 0; t < n; ++t) {
    const size_t ts = static_cast<size_t>(t);
    timeline.stage_start_s.push_back(now_s);
    compute_start[ts].assign(static_cast<size_t>(n), -1);
    compute_end[ts].assign(static_cast<size_t>(n), -1);
    const double stage_start_s = now_s;
    for (int k = 0; k <= t; ++k) {
      if (!plan.compute[ts][static_cast<size_t>(k)]) continue;
      const size_t u = static_cast<size_t>(k);
      TimelineStep step{
          k == t ? StepKind::kCompute : StepKind::kRecompute, t, k, now_s, p.runtime_s[u], p.compute_j[u]};
      compute_start[ts][u] = now_s;
      now_s += p.runtime_s[u];
      compute_end[ts][u] = now_s;
      if (k == timeline.first_backward_node && k == t) timeline.backward_start_s = step.start_s;
      timeline.steps.push_back(step);
    }
    // Page-outs first (they free nothing before the next stage, but the storage is one queue), then page-ins.
    double& paging_clock_s = p.count_paging_time ? now_s : storage_free_s;
    if (!p.count_paging_time) paging_clock_s = std::max(paging_clock_s, stage_start_s);
    for (StepKind kind : {StepKind::kPageOut, StepKind::kPageIn}) {
      const Matrix& m = kind == StepKind::kPageOut ? plan.page_out : plan.page_in;
      for (int i = 0; i < n; ++i) {
        if (!m[ts][static_cast<size_t>(i)]) continue;
        const size_t u = static_cast<size_t>(i);
        const double duration_s =
            timeline.paging_times_known ? (kind == StepKind::kPageOut ? p.page_out_s[u] : p.page_in_s[u]) : 0;
        timeline.steps.push_back(
            {kind, t, i, paging_clock_s, duration_s, kind == StepKind::kPageOut ? p.page_out_j[u] : p.page_in_j[u]});
        paging_clock_s += duration_s;
      }
    }
  }
  timeline.runtime_s = now_s;

  // Memory: a stage's resident set at its start, each output allocated when its
  // computation starts, inputs freed when the computation that last read them ends.
  for (const MemoryPoint& point : replay.memory) {
    const size_t ts = static_cast<size_t>(point.stage);
    double time_s = timeline.stage_start_s[ts];
    switch (point.when) {
      case MemoryPoint::When::kStageStart:
        break;
      case MemoryPoint::When::kAfterCompute:
        time_s = compute_start[ts][static_cast<size_t>(point.node)];
        break;
      case MemoryPoint::When::kAfterFree:
        time_s = compute_end[ts][static_cast<size_t>(point.node)];
        break;
    }
    // Changes at one instant (a node that takes no time) are all kept, in order, so the peak stays visible.
    timeline.memory.push_back({time_s, point.bytes});
    timeline.peak_bytes = std::max(timeline.peak_bytes, point.bytes);
  }
  timeline.memory.push_back({timeline.runtime_s, 0});  // the step ends; activations are released
  return timeline;
}

}  // namespace edgecost::solver
