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

// A graph the executor cannot build (POET's derivation, a graph file without
// op kinds), or a large one not asked for, keeps its parameters and activations
// and says what is unknown. Figures are kept per graph for the process. The optimizer keeps
// `optimizer_state_tensors` tensors per trained parameter (train::OptimizerStateTensors).
v1::StepMemory StepMemoryOf(const v1::TrainingGraph& graph, bool build_large = false, int optimizer_state_tensors = 0);

// Whether this process built `graph`'s layers before (StepMemoryOf): their kernels' code is then
// resident already, and a training step adds less to the process than in a fresh one.
bool LayersBuiltBefore(const v1::TrainingGraph& graph);

// The latest training run of `model` on `device` at this batch and thread count that measured
// what kernels and the allocator add (TrainRun.runtime_bytes), in a process that had (warm) or
// had not built the model's layers before; nullopt when none did.
std::optional<v1::TrainRun> LatestRuntimeRun(costdb::CostDb& db, const std::string& model, const std::string& device,
                                             uint32_t batch_size, uint32_t threads, bool warm);

// Adds a measured runtime_bytes (above) to `memory`'s fixed parts: a cold run's when there is one
// (a `train` in a fresh process), else a warm one's.
void AddRuntimeBytes(costdb::CostDb& db, const std::string& model, const std::string& device, uint32_t batch_size,
                     uint32_t threads, v1::StepMemory& memory);

// The activation budget that leaves a whole-process budget of `device_ram_bytes`
// (--ram-budget: the process's memory above its baseline) for the step's fixed parts;
// refused when they alone reach it.
Result<uint64_t> ActivationBudget(const v1::StepMemory& memory, uint64_t device_ram_bytes);

}  // namespace edgecost::service
