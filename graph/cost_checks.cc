#include "graph/cost_checks.h"

#include <cmath>
#include <string>

#include "base/units.h"

namespace edgecost::graph {
namespace {

std::string Where(std::string_view origin, std::string_view field) {
  return std::string(origin) + ": " + std::string(field);
}

Status Invalid(std::string_view origin, const std::string& what) { return InvalidArgument(Where(origin, what)); }

// A cost: a finite number, not below zero.
Status NonNegative(double value, std::string_view origin, std::string_view field) {
  if (std::isfinite(value) && value >= 0) return Status::Ok();
  return InvalidArgument(Where(origin, field) + " is " + std::to_string(value) + "; costs must be finite and >= 0");
}

Status Finite(double value, std::string_view origin, std::string_view field) {
  if (std::isfinite(value)) return Status::Ok();
  return InvalidArgument(Where(origin, field) + " is not a finite number");
}

Status Size(uint64_t bytes, uint64_t max_bytes, std::string_view origin, std::string_view field) {
  if (bytes <= max_bytes) return Status::Ok();
  return InvalidArgument(Where(origin, field) + " is " + std::to_string(bytes) + " B; at most " +
                         std::to_string(max_bytes) + " B are allowed");
}

}  // namespace

Status CheckRamBudget(uint64_t bytes, std::string_view what) {
  if (bytes <= kMaxBytes) return Status::Ok();
  return InvalidArgument(std::string(what) + " of " + std::to_string(bytes) + " B is above the largest budget, " +
                         FormatBytes(static_cast<int64_t>(kMaxBytes)) + " (2^62 B)");
}

Status CheckPagingCost(const v1::PagingCost& paging, std::string_view origin) {
  EC_RETURN_IF_ERROR(NonNegative(paging.page_out_latency_s(), origin, "paging page_out_latency_s"));
  EC_RETURN_IF_ERROR(NonNegative(paging.page_in_latency_s(), origin, "paging page_in_latency_s"));
  EC_RETURN_IF_ERROR(
      NonNegative(paging.page_out_throughput_bytes_per_s(), origin, "paging page_out_throughput_bytes_per_s"));
  EC_RETURN_IF_ERROR(
      NonNegative(paging.page_in_throughput_bytes_per_s(), origin, "paging page_in_throughput_bytes_per_s"));
  EC_RETURN_IF_ERROR(NonNegative(paging.page_out_power_w(), origin, "paging page_out_power_w"));
  return NonNegative(paging.page_in_power_w(), origin, "paging page_in_power_w");
}

Status ValidateCostTable(const v1::CostTable& table, std::string_view origin) {
  const v1::TrainingGraph& graph = table.graph();
  if (graph.nodes_size() == 0) return Invalid(origin, "the graph has no nodes");
  if (graph.nodes_size() > kMaxNodes) {
    return Invalid(origin, std::to_string(graph.nodes_size()) + " nodes; at most " + std::to_string(kMaxNodes));
  }
  EC_RETURN_IF_ERROR(Size(graph.param_bytes(), kMaxBytes, origin, "param_bytes"));
  for (int i = 0; i < graph.nodes_size(); ++i) {
    const v1::TrainingNode& node = graph.nodes(i);
    const std::string label = "node " + std::to_string(i) + " ('" + node.name() + "')";
    if (node.index() != static_cast<uint32_t>(i)) {
      return Invalid(origin, label + ": index is " + std::to_string(node.index()));
    }
    for (uint32_t input : node.inputs()) {
      if (input >= static_cast<uint32_t>(i)) {
        return Invalid(origin, label + ": input " + std::to_string(input) + " does not precede it");
      }
    }
    EC_RETURN_IF_ERROR(Size(node.output_bytes(), kMaxTensorBytes, origin, label + ": 'output_bytes'"));
    EC_RETURN_IF_ERROR(NonNegative(node.flops(), origin, label + ": 'flops'"));
  }
  if (table.costs_size() != 0 && table.costs_size() != graph.nodes_size()) {
    return Invalid(origin,
                   std::to_string(table.costs_size()) + " costs for " + std::to_string(graph.nodes_size()) + " nodes");
  }
  for (int i = 0; i < table.costs_size(); ++i) {
    const v1::NodeCost& cost = table.costs(i);
    if (cost.node() != static_cast<uint32_t>(i)) {
      return Invalid(origin, "cost " + std::to_string(i) + " is for node " + std::to_string(cost.node()));
    }
    const std::string label = "node " + std::to_string(i) + " ('" + graph.nodes(i).name() + "')";
    EC_RETURN_IF_ERROR(Size(cost.ram_bytes(), kMaxTensorBytes, origin, label + ": 'ram_bytes'"));
    for (const auto& [field, value] : {std::pair{"runtime_s", cost.runtime_s()},
                                       {"compute_j", cost.compute_j()},
                                       {"page_in_j", cost.page_in_j()},
                                       {"page_out_j", cost.page_out_j()}}) {
      EC_RETURN_IF_ERROR(NonNegative(value, origin, label + ": '" + field + "'"));
    }
  }
  return CheckPagingCost(table.paging(), origin);
}

Status CheckOpCost(const v1::OpCost& cost, std::string_view origin) {
  const std::string at = "op " + cost.signature().key() + " ";
  const v1::RuntimeStats& runtime = cost.runtime();
  EC_RETURN_IF_ERROR(NonNegative(runtime.median_s(), origin, at + "runtime median_s"));
  EC_RETURN_IF_ERROR(NonNegative(runtime.stddev_s(), origin, at + "runtime stddev_s"));
  EC_RETURN_IF_ERROR(NonNegative(runtime.ci95_low_s(), origin, at + "runtime ci95_low_s"));
  EC_RETURN_IF_ERROR(NonNegative(runtime.ci95_high_s(), origin, at + "runtime ci95_high_s"));
  EC_RETURN_IF_ERROR(NonNegative(cost.energy_j(), origin, at + "energy_j"));
  // Dynamic energy is a difference of two measurements: noise may take it below zero.
  EC_RETURN_IF_ERROR(Finite(cost.dynamic_energy_j(), origin, at + "dynamic_energy_j"));
  EC_RETURN_IF_ERROR(NonNegative(cost.idle_power_w(), origin, at + "idle_power_w"));
  EC_RETURN_IF_ERROR(Size(cost.output_bytes(), kMaxTensorBytes, origin, at + "output_bytes"));
  EC_RETURN_IF_ERROR(Size(cost.workspace_bytes(), kMaxBytes, origin, at + "workspace_bytes"));
  for (const v1::DomainEnergy& domain : cost.domains()) {
    EC_RETURN_IF_ERROR(NonNegative(domain.energy_j(), origin, at + "domain " + domain.domain() + " energy_j"));
    EC_RETURN_IF_ERROR(NonNegative(domain.idle_power_w(), origin, at + "domain " + domain.domain() + " idle_power_w"));
    EC_RETURN_IF_ERROR(Finite(domain.dynamic_energy_j(), origin, at + "domain " + domain.domain() + " dynamic_energy_j"));
  }
  for (const v1::OpCounter& counter : cost.counters()) {
    EC_RETURN_IF_ERROR(NonNegative(counter.per_execution(), origin, at + "counter " + counter.event()));
  }
  for (const v1::Repetition& repetition : cost.repetitions()) {
    EC_RETURN_IF_ERROR(NonNegative(repetition.runtime_s(), origin, at + "repetition runtime_s"));
  }
  return Status::Ok();
}

Status CheckEnergyCalibration(const v1::EnergyCalibration& calibration, std::string_view origin) {
  EC_RETURN_IF_ERROR(NonNegative(calibration.idle_power_w(), origin, "calibration idle_power_w"));
  EC_RETURN_IF_ERROR(NonNegative(calibration.rms_residual_j(), origin, "calibration rms_residual_j"));
  EC_RETURN_IF_ERROR(NonNegative(calibration.relative_error(), origin, "calibration relative_error"));
  for (const v1::CounterWeight& weight : calibration.weights()) {
    // NNLS weights are never negative.
    EC_RETURN_IF_ERROR(NonNegative(weight.joules_per_count(), origin, "calibration weight " + weight.event()));
  }
  return Status::Ok();
}

}  // namespace edgecost::graph
