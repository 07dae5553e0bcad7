#include "solver/plan.h"

namespace edgecost::solver {

void PlanToStages(const Plan& plan, v1::Schedule& schedule) {
  schedule.clear_stages();
  const int n = plan.size();
  for (int t = 0; t < n; ++t) {
    v1::Stage& stage = *schedule.add_stages();
    for (int i = 0; i < n; ++i) {
      const uint32_t node = static_cast<uint32_t>(i);
      if (plan.compute[t][i]) stage.add_compute(node);
      if (plan.page_out[t][i]) stage.add_page_out(node);
      if (plan.page_in[t][i]) stage.add_page_in(node);
      if (t + 1 < n && plan.resident[t + 1][i]) stage.add_keep(node);
      if (t + 1 < n && plan.stored[t + 1][i]) stage.add_on_storage(node);
    }
  }
}

Plan PlanFromStages(const v1::Schedule& schedule, int n) {
  Plan plan(n);
  auto in_range = [n](uint32_t i) { return i < static_cast<uint32_t>(n); };  // unsigned: ids of 2^31 and more too
  for (int t = 0; t < n && t < schedule.stages_size(); ++t) {
    const v1::Stage& stage = schedule.stages(t);
    for (uint32_t i : stage.compute()) {
      if (in_range(i)) plan.compute[t][i] = 1;
    }
    for (uint32_t i : stage.page_out()) {
      if (in_range(i)) plan.page_out[t][i] = 1;
    }
    for (uint32_t i : stage.page_in()) {
      if (in_range(i)) plan.page_in[t][i] = 1;
    }
    if (t + 1 < n) {
      for (uint32_t i : stage.keep()) {
        if (in_range(i)) plan.resident[t + 1][i] = 1;
      }
      for (uint32_t i : stage.on_storage()) {
        if (in_range(i)) plan.stored[t + 1][i] = 1;
      }
    }
  }
  return plan;
}

}  // namespace edgecost::solver
