// The whole memory of a training step, for `costs`, `solve` and
// `solve --ram-budget`: the fixed parts the executor (train/) holds outside
// its arena (parameters, their gradients, optimizer state, layer workspace),
// and the activations, whose plain-step peak is the arena's. Figures come
// from the executor itself, built on the graph, so they are what `train` holds.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "base/status.h"
#include "costdb/costdb.h"
#include "proto/edgecost.pb.h"

namespace edgecost::service {

// Building the layers initialises every tensor they hold: seconds and hundreds
// of MB for VGG16 or BERT (measured: 5.9 s for vgg16_cifar, 43 s and 3.3 GB for
// bert). Above this many parameter and activation bytes they are built only
// when asked (`build_large`, as --ram-budget does).
inline constexpr uint64_t kMaxLayersBuiltUnasked = uint64_t{32} << 20;

struct StepMemoryOptions {
  bool build_large = false;  // build a graph above kMaxLayersBuiltUnasked
  // State tensors the optimizer keeps per trained parameter (train::OptimizerStateTensors).
  int optimizer_state_tensors = 0;
  bool update_in_backward = false;  // weight gradients as activations (graph/step_nodes.h)
};

// A graph the executor cannot build (POET's derivation, a graph file without
// op kinds), or a large one not asked for, keeps its parameters and activations
// and says what is unknown. Figures are kept per graph for the process.
v1::StepMemory StepMemoryOf(const v1::TrainingGraph& graph, const StepMemoryOptions& options = {});

// The bytes of the activation arena's region under `schedule` (train::LayOut): at least its peak.
// Weight gradients count as the schedule's request says (update_in_backward).
uint64_t ArenaRegionBytes(const v1::TrainingGraph& graph, const v1::Schedule& schedule);

// The latest training run of `model` on `device` at this batch and thread count that measured
// the rest of its process (TrainRun.process_rest_bytes), one that paged or not as `pages` says
// when there is one (paging keeps a thread and its buffers); nullopt when none did.
std::optional<v1::TrainRun> LatestProcessRun(costdb::CostDb& db, const std::string& model, const std::string& device,
                                             uint32_t batch_size, uint32_t threads, bool pages = false);

// Adds that run's process_rest_bytes to `memory`'s fixed parts, or says in its note that none is known.
void AddProcessRest(costdb::CostDb& db, const std::string& model, const std::string& device, uint32_t batch_size,
                    uint32_t threads, v1::StepMemory& memory);

// The activation budget that leaves a training process's peak RSS of `process_ram_budget_bytes`
// (--ram-budget) for the step's fixed parts; refused when they alone reach it.
Result<uint64_t> ActivationBudget(const v1::StepMemory& memory, uint64_t process_ram_budget_bytes);

// "parameters 1.2 MB + gradients ... + rest of the process 30 MB": the fixed parts, which add up
// to memory.fixed_bytes.
std::string FixedPartsText(const v1::StepMemory& memory);

}  // namespace edgecost::service
