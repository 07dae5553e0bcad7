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
#include "train/arena.h"
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
BuiltGraph StepMemoryWithoutOptimizer(const v1::TrainingGraph& graph, bool build_large);

}  // namespace

bool LayersBuiltBefore(const v1::TrainingGraph& graph) {
  std::lock_guard lock(built_mutex);
  auto it = built.find(graph::GraphHash(graph));
  return it != built.end() && it->second.memory.executor_known();
}

v1::StepMemory StepMemoryOf(const v1::TrainingGraph& graph, bool build_large, int optimizer_state_tensors) {
  BuiltGraph base = StepMemoryWithoutOptimizer(graph, build_large);
  v1::StepMemory& memory = base.memory;
  memory.set_optimizer_bytes(static_cast<uint64_t>(std::max(0, optimizer_state_tensors)) * base.trained_param_bytes);
  memory.set_fixed_bytes(memory.fixed_bytes() + memory.optimizer_bytes());
  if (optimizer_state_tensors > 0 && !memory.executor_known()) {
    memory.set_note(memory.note() + "; optimizer state counted for every parameter (which ones train is unknown)");
  }
  return memory;
}

namespace {

BuiltGraph StepMemoryWithoutOptimizer(const v1::TrainingGraph& graph, bool build_large) {
  std::mutex& mutex = built_mutex;
  const std::string key = graph::GraphHash(graph);
  {
    std::lock_guard lock(mutex);
    if (auto it = built.find(key); it != built.end()) return it->second;
  }
  BuiltGraph result;
  result.trained_param_bytes = graph.param_bytes();  // all of them, unless the executor says otherwise
  v1::StepMemory& memory = result.memory;
  memory.set_param_bytes(graph.param_bytes());
  memory.set_activation_total_bytes(graph::ActivationBytes(graph));
  // The node bytes and distinct inputs as the executor sees them, for the plain step's walk.
  const int n = graph.nodes_size();
  std::vector<int64_t> bytes(static_cast<size_t>(n));
  std::vector<std::vector<int>> preds(static_cast<size_t>(n));
  for (int v = 0; v < n; ++v) {
    bytes[static_cast<size_t>(v)] = static_cast<int64_t>(graph.nodes(v).output_bytes());
    std::set<int> distinct;
    for (uint32_t u : graph.nodes(v).inputs()) {
      if (u < static_cast<uint32_t>(v) && distinct.insert(static_cast<int>(u)).second) {
        preds[static_cast<size_t>(v)].push_back(static_cast<int>(u));
      }
    }
  }
  memory.set_activation_peak_bytes(
      static_cast<uint64_t>(train::PlanMemory(bytes, preds, train::PlainPlan(preds)).peak_bytes));
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
  } else if (Result<std::unique_ptr<train::Executor>> executor = train::Executor::Create(graph, {}); executor.ok()) {
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

std::optional<v1::TrainRun> LatestRuntimeRun(costdb::CostDb& db, const std::string& model, const std::string& device,
                                             uint32_t batch_size, uint32_t threads, bool warm) {
  Result<std::vector<v1::TrainRun>> runs = db.ListTrainRuns(model, 50);
  if (!runs.ok()) return std::nullopt;
  for (auto it = runs->rbegin(); it != runs->rend(); ++it) {
    if (it->device() == device && it->batch_size() == batch_size && it->threads() == threads &&
        it->kernels_warm() == warm && it->runtime_bytes() > 0) {
      return *it;
    }
  }
  return std::nullopt;
}

void AddRuntimeBytes(costdb::CostDb& db, const std::string& model, const std::string& device, uint32_t batch_size,
                     uint32_t threads, v1::StepMemory& memory) {
  std::optional<v1::TrainRun> run = LatestRuntimeRun(db, model, device, batch_size, threads, false);
  if (!run) run = LatestRuntimeRun(db, model, device, batch_size, threads, true);
  if (!run) {
    memory.set_note(memory.note() + (memory.note().empty() ? "" : "; ") +
                    "kernels' code and the allocator's overhead not counted: no `edgecost train` of this model at "
                    "this batch and thread count on this device has measured them yet");
    return;
  }
  memory.set_runtime_bytes(run->runtime_bytes());
  memory.set_runtime_bytes_from_run(run->id());
  memory.set_fixed_bytes(memory.fixed_bytes() + run->runtime_bytes());
}

Result<uint64_t> ActivationBudget(const v1::StepMemory& memory, uint64_t device_ram_bytes) {
  const std::string parts = "parameters " + Bytes(memory.param_bytes()) + ", gradients " +
                            Bytes(memory.gradient_bytes()) + ", optimizer state " + Bytes(memory.optimizer_bytes()) +
                            ", workspace " + Bytes(memory.workspace_bytes()) +
                            (memory.runtime_bytes_from_run() ? ", kernels and allocator " + Bytes(memory.runtime_bytes())
                                                             : std::string());
  if (memory.fixed_bytes() >= device_ram_bytes) {
    return FailedPrecondition("the step's fixed parts alone take " + Bytes(memory.fixed_bytes()) + " (" + parts +
                              "), at least the RAM budget of " + Bytes(device_ram_bytes) +
                              ": no room is left for activations; give more --ram-budget, train fewer parameters "
                              "(--trainable), or a smaller model");
  }
  return device_ram_bytes - memory.fixed_bytes();
}

}  // namespace edgecost::service
