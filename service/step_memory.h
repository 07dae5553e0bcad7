// The whole memory of a training step, for `costs`, `solve` and
// `solve --device-ram`: the fixed parts the executor (train/) holds outside
// its arena (parameters, their gradients, optimizer state, layer workspace),
// and the activations, whose plain-step peak is the arena's. Figures come
// from the executor itself, built on the graph, so they are what `train` holds.
#pragma once

#include <cstdint>

#include "base/status.h"
#include "proto/edgecost.pb.h"

namespace edgecost::service {

// Building the layers initialises every tensor they hold: seconds and hundreds
// of MB for VGG16 or BERT (measured: 5.9 s for vgg16_cifar, 43 s and 3.3 GB for
// bert). Above this many parameter and activation bytes they are built only
// when asked (`build_large`, as --device-ram does).
inline constexpr uint64_t kMaxLayersBuiltUnasked = uint64_t{32} << 20;

// A graph the executor cannot build (POET's derivation, a graph file without
// op kinds), or a large one not asked for, keeps its parameters and activations
// and says what is unknown. Figures are kept per graph for the process.
v1::StepMemory StepMemoryOf(const v1::TrainingGraph& graph, bool build_large = false);

// Whether this process built `graph`'s layers before (StepMemoryOf): their kernels' code is then
// resident already, and a training step adds less to the process than in a fresh one.
bool LayersBuiltBefore(const v1::TrainingGraph& graph);

// The activation budget that leaves a whole-process budget of `device_ram_bytes`
// for the step's fixed parts; refused when they alone reach it.
Result<uint64_t> ActivationBudget(const v1::StepMemory& memory, uint64_t device_ram_bytes);

}  // namespace edgecost::service
