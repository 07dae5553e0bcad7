#include "service/step_memory.h"

#include <algorithm>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <vector>

#include "base/units.h"
#include "graph/derive.h"
#include "graph/resolve.h"
#include "graph/step_nodes.h"
#include "train/arena.h"
#include "solver/plan.h"
#include "train/executor.h"

namespace edgecost::service {
namespace {

std::string Bytes(uint64_t bytes) {
  return FormatBytes(static_cast<double>(bytes)) + " (" + std::to_string(bytes) + " B)";
}

// Solves, --compare and the daemon ask again for the same graph: its layers are built once.
// With each graph's memory (without optimizer state), the bytes of its trained parameters.
struct BuiltGraph {
  v1::StepMemory memory;
  uint64_t trained_param_bytes = 0;
};
std::mutex built_mutex;
std::map<std::string, BuiltGraph> built;

// The step's memory without optimizer state, and the bytes of the parameters that train.
BuiltGraph StepMemoryWithoutOptimizer(const v1::TrainingGraph& graph, bool build_large, bool update_in_backward);

}  // namespace

v1::StepMemory StepMemoryOf(const v1::TrainingGraph& graph, const StepMemoryOptions& options) {
  const int optimizer_state_tensors = options.optimizer_state_tensors;
  BuiltGraph base = StepMemoryWithoutOptimizer(graph, options.build_large, options.update_in_backward);
  v1::StepMemory& memory = base.memory;
  memory.set_optimizer_bytes(static_cast<uint64_t>(std::max(0, optimizer_state_tensors)) * base.trained_param_bytes);
  memory.set_fixed_bytes(memory.fixed_bytes() + memory.optimizer_bytes());
  if (optimizer_state_tensors > 0 && !memory.executor_known()) {
    memory.set_note(memory.note() + "; optimizer state counted for every parameter (which ones train is unknown)");
  }
  return memory;
}

namespace {

BuiltGraph StepMemoryWithoutOptimizer(const v1::TrainingGraph& graph, bool build_large, bool update_in_backward) {
  std::mutex& mutex = built_mutex;
  const std::string key = graph::GraphHash(graph) + (update_in_backward ? "+update-in-backward" : "");
  {
    std::lock_guard lock(mutex);
    if (auto it = built.find(key); it != built.end()) return it->second;
  }
  BuiltGraph result;
  result.trained_param_bytes = graph.param_bytes();  // all of them, unless the executor says otherwise
  v1::StepMemory& memory = result.memory;
  memory.set_param_bytes(graph.param_bytes());
  memory.set_activation_total_bytes(graph::ActivationBytes(graph));
  const graph::StepNodes nodes = graph::StepNodesOf(graph, update_in_backward);
  for (size_t v = 0; v < nodes.bytes.size(); ++v) {
    if (!nodes.holds_parameter_gradients[v]) continue;
    memory.set_gradient_in_activations_bytes(memory.gradient_in_activations_bytes() + static_cast<uint64_t>(nodes.bytes[v]));
  }
  memory.set_activation_peak_bytes(static_cast<uint64_t>(
      train::PlanMemory(nodes.bytes, nodes.preds, train::PlainPlan(nodes.preds)).peak_bytes));
  // The executor's own figures: what `train` allocates outside the arena.
  if (graph.derivation() == "poet") {
    memory.set_note(
        "gradients and workspace unknown: POET's derivation has one gradient node per layer, not the kernels "
        "`train` runs (--derivation exact gives them)");
  } else if (graph.derivation() != "exact") {
    memory.set_note("gradients and workspace unknown: a graph file's nodes carry no layers to build");
  } else if (!build_large && graph.param_bytes() + memory.activation_total_bytes() > kMaxLayersBuiltUnasked) {
    memory.set_note(
        "gradients and workspace not measured: building the layers of a graph this large takes seconds "
        "(`solve --ram-budget` builds them; `edgecost train` reports them as layer state)");
  } else if (Result<std::unique_ptr<train::Executor>> executor = train::Executor::Create(graph, {.update_in_backward = update_in_backward});
             executor.ok()) {
    memory.set_executor_known(true);
    memory.set_param_bytes((*executor)->param_bytes());
    memory.set_gradient_bytes((*executor)->grad_param_bytes());
    memory.set_workspace_bytes((*executor)->layer_state_bytes());
    memory.set_scratchpad_bytes((*executor)->scratchpad_bytes());
    result.trained_param_bytes = (*executor)->trained_param_bytes();
  } else {
    memory.set_note("gradients and workspace unknown: " + executor.status().message());
  }
  memory.set_fixed_bytes(memory.param_bytes() + memory.gradient_bytes() + memory.workspace_bytes());
  if (!memory.executor_known() && graph.derivation() == "exact" && !build_large) return result;  // not built yet
  std::lock_guard lock(mutex);
  if (built.size() >= 64) built.clear();  // a bound, not an LRU: graphs are few
  built[key] = result;
  return result;
}

}  // namespace

uint64_t ArenaRegionBytes(const v1::TrainingGraph& graph, const v1::Schedule& schedule) {
  const graph::StepNodes nodes = graph::StepNodesOf(graph, schedule.request().update_in_backward());
  return train::LayOut(nodes.bytes, nodes.preds, solver::PlanFromStages(schedule, graph.nodes_size())).region_bytes;
}

std::optional<v1::TrainRun> LatestProcessRun(costdb::CostDb& db, const std::string& model, const std::string& device,
                                             uint32_t batch_size, uint32_t threads, bool pages) {
  Result<std::vector<v1::TrainRun>> runs = db.ListTrainRuns(model, 50);
  if (!runs.ok()) return std::nullopt;
  std::optional<v1::TrainRun> other;  // the latest that paged otherwise
  for (auto it = runs->rbegin(); it != runs->rend(); ++it) {
    if (it->device() != device || it->batch_size() != batch_size || it->threads() != threads ||
        it->process_rest_bytes() == 0) {
      continue;
    }
    if ((it->page_outs() > 0) == pages) return *it;
    if (!other) other = *it;
  }
  return other;
}

void AddProcessRest(costdb::CostDb& db, const std::string& model, const std::string& device, uint32_t batch_size,
                    uint32_t threads, v1::StepMemory& memory) {
  const std::optional<v1::TrainRun> run = LatestProcessRun(db, model, device, batch_size, threads);
  if (!run) {
    memory.set_note(memory.note() + (memory.note().empty() ? "" : "; ") +
                    "the rest of the process (binary, libraries, kernels' code, the heap's overhead) not counted: no "
                    "training run of this model at this batch and thread count on this device has measured it yet "
                    "(`edgecost profile` runs one)");
    return;
  }
  memory.set_process_rest_bytes(run->process_rest_bytes());
  memory.set_process_rest_from_run(run->id());
  memory.set_fixed_bytes(memory.fixed_bytes() + run->process_rest_bytes());
}

std::string FixedPartsText(const v1::StepMemory& memory) {
  std::string text = "parameters " + Bytes(memory.param_bytes());
  if (memory.executor_known()) {
    text += " + gradients " + Bytes(memory.gradient_bytes());
    if (memory.gradient_in_activations_bytes() > 0) {
      text += " (and " + FormatBytes(static_cast<double>(memory.gradient_in_activations_bytes())) +
              " held with the activations until each layer's update)";
    }
    text += " + optimizer state " + Bytes(memory.optimizer_bytes()) +
            " + workspace " + Bytes(memory.workspace_bytes());
  }
  if (memory.process_rest_from_run() != 0) {
    text += " + rest of the process " + Bytes(memory.process_rest_bytes()) + " (measured by training run #" +
            std::to_string(memory.process_rest_from_run()) + ")";
  }
  return text;
}

Result<uint64_t> ActivationBudget(const v1::StepMemory& memory, uint64_t process_ram_budget_bytes) {
  if (memory.fixed_bytes() >= process_ram_budget_bytes) {
    return FailedPrecondition("the step's fixed parts alone take " + Bytes(memory.fixed_bytes()) + " (" +
                              FixedPartsText(memory) + "), at least the RAM budget of " + Bytes(process_ram_budget_bytes) +
                              ": no room is left for activations; give more --ram-budget, train fewer parameters "
                              "(--trainable), or a smaller model");
  }
  return process_ram_budget_bytes - memory.fixed_bytes();
}

}  // namespace edgecost::service
