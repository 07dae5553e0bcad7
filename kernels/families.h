// Each kernel family builds the layers of its op kinds; MakeLayer picks the family.
#pragma once

#include <cstdint>
#include <memory>

#include "graph/forward_graph.h"
#include "kernels/layers.h"

namespace edgecost::kernels::detail {

// Null when `kind` is not the family's.
std::unique_ptr<Layer> MakeCoreLayer(graph::OpKind kind, Backend& backend, const LayerSpec& spec, uint32_t seed);
std::unique_ptr<Layer> MakeOnnxLayer(graph::OpKind kind, Backend& backend, const LayerSpec& spec, uint32_t seed);
std::unique_ptr<Layer> MakeRecurrentLayer(graph::OpKind kind, Backend& backend, const LayerSpec& spec, uint32_t seed);
std::unique_ptr<Layer> MakeMaskLayer(graph::OpKind kind, Backend& backend, const LayerSpec& spec, uint32_t seed);
std::unique_ptr<Layer> MakeResizeLayer(graph::OpKind kind, Backend& backend, const LayerSpec& spec, uint32_t seed);
std::unique_ptr<Layer> MakeGradSumLayer(Backend& backend, const Dims& shape, int parts, uint32_t seed);

}  // namespace edgecost::kernels::detail
