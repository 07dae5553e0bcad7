#include "service/words.h"

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "base/units.h"

namespace edgecost::service {

std::string_view JobStateText(v1::Job::State state) {
  switch (state) {
    case v1::Job::STATE_QUEUED:
      return "queued";
    case v1::Job::STATE_RUNNING:
      return "running";
    case v1::Job::STATE_SUCCEEDED:
      return "succeeded";
    case v1::Job::STATE_FAILED:
      return "failed";
    case v1::Job::STATE_CANCELLED:
      return "cancelled";
    case v1::Job::STATE_UNSPECIFIED:
    default:  // proto enums hold any number
      return "unknown";
  }
}

std::string_view ScheduleStatusText(v1::Schedule::Status status) {
  switch (status) {
    case v1::Schedule::STATUS_OPTIMAL:
      return "optimal (proven)";
    case v1::Schedule::STATUS_FEASIBLE:
      return "feasible";
    case v1::Schedule::STATUS_INFEASIBLE:
      return "infeasible (proven)";
    case v1::Schedule::STATUS_NO_SOLUTION:
      return "no schedule found";
    case v1::Schedule::STATUS_UNSPECIFIED:
    default:  // proto enums hold any number
      return "unknown";
  }
}

std::string CountText(uint64_t count, std::string_view noun) {
  return std::to_string(count) + " " + std::string(noun) + (count == 1 ? "" : "s");
}

std::string OperationsText(uint64_t recomputations, uint64_t page_outs, uint64_t page_ins) {
  return CountText(recomputations, "recomputation") + ", " + CountText(page_outs, "page-out") + ", " +
         CountText(page_ins, "page-in");
}

std::string GapText(const v1::Schedule& s) {
  const double unproven_j = std::max(0.0, s.energy().total_j() - s.lower_bound_j());
  const double relative = s.lower_bound_j() > 0 ? unproven_j / s.lower_bound_j() : 0;
  char text[160];
  std::snprintf(text, sizeof text, "at most %.2f%% above optimal (%s); %.1f%% of the energy above the floor unproven",
                relative * 100, FormatJoules(unproven_j).c_str(), s.gap() * 100);
  return text;
}

std::string UpdatesText(const v1::Schedule& s) {
  if (!s.request().update_in_backward()) return "after the step: every gradient held until then";
  std::string text = "in the backward pass: each layer right after its last backward node, its gradients freed then";
  if (s.memory().gradient_in_activations_bytes() > 0) {
    text += " (weight gradients of " + FormatBytes(static_cast<double>(s.memory().gradient_in_activations_bytes())) +
            " in all, held with the activations while in flight)";
  }
  return text;
}

std::string PercentText(double percent) {
  std::ostringstream text;
  text << percent << "%";
  return text.str();
}

std::string BudgetAsGiven(uint64_t process_ram_budget_bytes, uint64_t activation_budget_bytes,
                          double activation_budget_percent) {
  if (process_ram_budget_bytes > 0) return "RAM " + FormatBytes(static_cast<double>(process_ram_budget_bytes));
  if (activation_budget_percent > 0) return "activations " + PercentText(activation_budget_percent);
  if (activation_budget_bytes > 0) return "activations " + FormatBytes(static_cast<double>(activation_budget_bytes));
  return "-";
}

std::string BudgetAsGiven(const v1::ScheduleRequest& request) {
  return BudgetAsGiven(request.process_ram_budget_bytes(), request.activation_budget_bytes(),
                       request.activation_budget_percent());
}

std::string BudgetAsGiven(const v1::TrainRun& run) {
  return BudgetAsGiven(run.process_ram_budget_bytes(), run.activation_budget_bytes(), run.activation_budget_percent());
}

}  // namespace edgecost::service
