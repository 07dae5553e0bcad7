#include "solver/problem.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "graph/cost_checks.h"
#include "graph/step_nodes.h"

namespace edgecost::solver {

double Problem::PlainRuntimeS() const { return std::accumulate(runtime_s.begin(), runtime_s.end(), 0.0); }

double Problem::FloorJ() const { return std::accumulate(compute_j.begin(), compute_j.end(), 0.0); }

namespace {

// Weight gradients held as activations: their bytes, and paging priced per byte as the table's
// largest node pages, where throughput outweighs latency (their own costs were measured for an
// output of 0 bytes).
void HoldGradients(const graph::StepNodes& step, Problem& p) {
  const auto largest = static_cast<size_t>(std::max_element(p.ram_bytes.begin(), p.ram_bytes.end()) - p.ram_bytes.begin());
  const double reference = std::max<double>(1, static_cast<double>(p.ram_bytes[largest]));
  const double in_j_per_byte = p.page_in_j[largest] / reference, out_j_per_byte = p.page_out_j[largest] / reference;
  const double in_s_per_byte = p.page_in_s.empty() ? 0 : p.page_in_s[largest] / reference;
  const double out_s_per_byte = p.page_out_s.empty() ? 0 : p.page_out_s[largest] / reference;
  for (int i = 0; i < p.size(); ++i) {
    const auto at = static_cast<size_t>(i);
    if (!step.holds_parameter_gradients[at]) continue;
    p.ram_bytes[at] = step.bytes[at];
    const auto b = static_cast<double>(step.bytes[at]);
    p.page_in_j[at] = b * in_j_per_byte;
    p.page_out_j[at] = b * out_j_per_byte;
    if (!p.page_in_s.empty()) {
      p.page_in_s[at] = b * in_s_per_byte;
      p.page_out_s[at] = b * out_s_per_byte;
    }
  }
}

}  // namespace

Result<Problem> ProblemFromCostTable(const v1::CostTable& table, const v1::ScheduleRequest& request) {
  const v1::TrainingGraph& graph = table.graph();
  if (table.costs_size() != graph.nodes_size() || graph.nodes_size() == 0) {
    return InvalidArgument("the cost table has " + std::to_string(table.costs_size()) + " costs for " +
                           std::to_string(graph.nodes_size()) + " nodes");
  }
  // Whatever path a table came by (a file, the database, a request), the solver
  // never sees a negative or non-finite cost: its searches assume a floor.
  EC_RETURN_IF_ERROR(graph::ValidateCostTable(table, "the cost table of " + graph.model()));
  EC_RETURN_IF_ERROR(graph::CheckRamBudget(request.activation_budget_bytes(), "an activation budget"));
  EC_RETURN_IF_ERROR(graph::CheckRamBudget(request.process_ram_budget_bytes(), "the device's RAM"));
  Problem p;
  const int n = graph.nodes_size();
  const v1::PagingCost& paging = table.paging();
  const bool paging_times = paging.page_in_throughput_bytes_per_s() > 0 && paging.page_out_throughput_bytes_per_s() > 0;
  for (int i = 0; i < n; ++i) {
    const v1::TrainingNode& node = graph.nodes(i);
    const v1::NodeCost& cost = table.costs(i);
    p.names.push_back(node.module().empty() ? node.name() : node.module() + " (" + node.name() + ")");
    p.backward.push_back(node.phase() == v1::PHASE_BACKWARD);
    p.runtime_s.push_back(cost.runtime_s());
    p.compute_j.push_back(cost.compute_j());
    p.ram_bytes.push_back(static_cast<int64_t>(cost.ram_bytes()));
    p.page_in_j.push_back(cost.page_in_j());
    p.page_out_j.push_back(cost.page_out_j());
    if (paging_times) {
      const double bytes = static_cast<double>(cost.ram_bytes());
      p.page_in_s.push_back(paging.page_in_latency_s() + bytes / paging.page_in_throughput_bytes_per_s());
      p.page_out_s.push_back(paging.page_out_latency_s() + bytes / paging.page_out_throughput_bytes_per_s());
    }
  }
  // Edges deduplicated (POET lists some twice); with updates in the backward pass, a weight
  // gradient is an activation read by its layer's anchor (graph/step_nodes.h).
  const graph::StepNodes step = graph::StepNodesOf(graph, request.update_in_backward());
  p.preds = step.preds;
  if (request.update_in_backward()) {
    HoldGradients(step, p);
    p.recomputable.assign(static_cast<size_t>(n), true);
    for (int i = 0; i < n; ++i) p.recomputable[static_cast<size_t>(i)] = !p.backward[static_cast<size_t>(i)];
  }
  if (request.activation_budget_bytes() == 0) return InvalidArgument("an activation budget is required");
  p.activation_budget_bytes = static_cast<int64_t>(request.activation_budget_bytes());
  switch (request.runtime_budget_case()) {
    case v1::ScheduleRequest::kRuntimeBudgetMultiple:
      if (!(request.runtime_budget_multiple() > 0) || !std::isfinite(request.runtime_budget_multiple())) {
        return InvalidArgument("the runtime budget must be a positive number");  // NaN and infinity included
      }
      p.runtime_budget_s = request.runtime_budget_multiple() * p.PlainRuntimeS();
      break;
    case v1::ScheduleRequest::kRuntimeBudgetS:
      if (!(request.runtime_budget_s() > 0) || !std::isfinite(request.runtime_budget_s())) {
        return InvalidArgument("the runtime budget must be a positive number");
      }
      p.runtime_budget_s = request.runtime_budget_s();
      break;
    default:
      p.runtime_budget_s = kDefaultRuntimeBudgetMultiple * p.PlainRuntimeS();
  }
  p.allow_paging = !request.disable_paging();
  p.allow_remat = !request.disable_remat();
  p.count_paging_time = request.count_paging_time();
  if (p.count_paging_time && p.page_in_s.empty()) {
    return InvalidArgument(
        "counting paging time (--count-paging-time, the default on measured costs) needs paging times, which this "
        "cost table does not have: profile the device's paging, or give --no-count-paging-time");
  }
  return p;
}

}  // namespace edgecost::solver
