#include "solver/explain.h"

#include <cmath>
#include <cstdio>
#include <sstream>

#include "base/units.h"
#include "solver/timeline.h"

namespace edgecost::solver {
namespace {

std::string Stages(const std::vector<int>& stages) {
  std::string text;
  for (size_t i = 0; i < stages.size(); ++i) text += (i ? ", " : "") + std::to_string(stages[i]);
  return text;
}

std::string Joules(double j) { return FormatJoules(j); }  // "46.5 uJ", not "4.646e-05 J"

std::string Seconds(double s) {
  char buffer[48];
  if (std::fabs(s) >= 1) {
    std::snprintf(buffer, sizeof buffer, "%.3g s", s);
  } else if (std::fabs(s) >= 1e-3) {
    std::snprintf(buffer, sizeof buffer, "%.3g ms", s * 1e3);
  } else {
    std::snprintf(buffer, sizeof buffer, "%.3g us", s * 1e6);
  }
  return buffer;
}

std::string Percent(double part, double whole) {
  if (!(whole > 0)) return "";
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, " (%+.1f%%)", 100 * part / whole);
  return buffer;
}

}  // namespace

Result<PlanExplanation> ExplainPlan(const Problem& p, const v1::Schedule& schedule) {
  EC_ASSIGN_OR_RETURN(Timeline timeline, PredictTimeline(p, schedule));
  const int n = p.size();
  std::vector<LayerPlan> layers(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    layers[static_cast<size_t>(i)].node = i;
    layers[static_cast<size_t>(i)].name = p.names[static_cast<size_t>(i)];
    layers[static_cast<size_t>(i)].backward = p.backward[static_cast<size_t>(i)];
    layers[static_cast<size_t>(i)].input =
        !p.backward[static_cast<size_t>(i)] && (p.preds.size() <= static_cast<size_t>(i) || p.preds[static_cast<size_t>(i)].empty());
  }
  PlanExplanation plan;
  plan.plain_energy_j = p.FloorJ();
  plan.plain_runtime_s = p.PlainRuntimeS();
  plan.runtime_s = timeline.runtime_s;
  plan.peak_ram_bytes = timeline.peak_bytes;
  plan.activation_budget_bytes = p.activation_budget_bytes;
  for (const TimelineStep& step : timeline.steps) {
    LayerPlan& layer = layers[static_cast<size_t>(step.node)];
    plan.energy_j += step.energy_j;
    switch (step.kind) {
      case StepKind::kCompute:
        continue;
      case StepKind::kRecompute:
        layer.recompute_stages.push_back(step.stage);
        layer.extra_runtime_s += step.duration_s;
        break;
      case StepKind::kPageOut:
        layer.page_out_stages.push_back(step.stage);
        if (p.count_paging_time) layer.extra_runtime_s += step.duration_s;
        break;
      case StepKind::kPageIn:
        layer.page_in_stages.push_back(step.stage);
        if (p.count_paging_time) layer.extra_runtime_s += step.duration_s;
        break;
    }
    layer.extra_energy_j += step.energy_j;
  }
  for (LayerPlan& layer : layers) {
    if (layer.recompute_stages.empty() && layer.page_out_stages.empty() && layer.page_in_stages.empty()) {
      ++plan.plain_layers;
    } else {
      plan.layers.push_back(std::move(layer));
    }
  }
  return plan;
}

std::string PlanInWords(const PlanExplanation& plan) {
  std::ostringstream out;
  const double extra_j = plan.energy_j - plan.plain_energy_j;
  const double extra_s = plan.runtime_s - plan.plain_runtime_s;
  out << "against the plain step (every node computed once and kept): " << (extra_j >= 0 ? "+" : "") << Joules(extra_j)
      << Percent(extra_j, plan.plain_energy_j) << " energy, " << (extra_s >= 0 ? "+" : "") << Seconds(extra_s)
      << Percent(extra_s, plan.plain_runtime_s) << " time\n";
  size_t width = 0;
  for (const LayerPlan& layer : plan.layers) width = std::max(width, layer.name.size());
  for (const LayerPlan& layer : plan.layers) {
    std::string what;
    auto add = [&what](const std::string& part) { what += (what.empty() ? "" : "; ") + part; };
    if (!layer.recompute_stages.empty() && layer.input) {  // nothing to compute: the batch is read again
      const size_t times = layer.recompute_stages.size();
      add("the input, read again from the batch " + (times == 1 ? std::string("once") : std::to_string(times) + " times") +
          " (stage" + (times == 1 ? " " : "s ") + Stages(layer.recompute_stages) + "), not recomputed");
    } else if (!layer.recompute_stages.empty()) {
      const size_t times = layer.recompute_stages.size();
      add("recomputed " + (times == 1 ? std::string("once") : std::to_string(times) + " times") + " (stage" +
          (times == 1 ? " " : "s ") + Stages(layer.recompute_stages) + ")");
    }
    for (size_t i = 0; i < layer.page_out_stages.size(); ++i) {
      std::string part = "paged out in stage " + std::to_string(layer.page_out_stages[i]);
      // The page-in after this page-out, if any, brings it back for the stage after it.
      for (int in : layer.page_in_stages) {
        if (in >= layer.page_out_stages[i] &&
            (i + 1 == layer.page_out_stages.size() || in < layer.page_out_stages[i + 1])) {
          part += ", read back in stage " + std::to_string(in) + " for stage " + std::to_string(in + 1);
        }
      }
      add(part);
    }
    if (layer.page_out_stages.empty() && !layer.page_in_stages.empty()) {
      add("read back in stage" + std::string(layer.page_in_stages.size() == 1 ? " " : "s ") +
          Stages(layer.page_in_stages));
    }
    out << "  " << layer.name << std::string(width - layer.name.size(), ' ') << "  node " << layer.node
        << (layer.backward ? " (backward)" : " (forward)") << ": " << what;
    if (!layer.input || layer.extra_energy_j > 0) out << ": +" << Joules(layer.extra_energy_j);
    if (layer.extra_runtime_s > 0) out << (!layer.input || layer.extra_energy_j > 0 ? ", +" : ": +") << Seconds(layer.extra_runtime_s);
    out << "\n";
  }
  if (plan.layers.empty()) {
    out << "  every layer is computed once and kept until its last use\n";
  } else {
    out << "  the other " << plan.plain_layers << " layer" << (plan.plain_layers == 1 ? " is" : "s are")
        << " computed once and kept until their last use\n";
  }
  return out.str();
}

}  // namespace edgecost::solver
