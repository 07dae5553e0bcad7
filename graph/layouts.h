// Channels-last activations: which 4-D tensors of a model are stored NHWC instead of NCHW.
//
// oneDNN's depthwise and 1x1 convolutions run fastest on NHWC, and on NCHW a depthwise one reorders
// its input, output and gradients in and out of a blocked layout in every pass. A model with a
// grouped convolution (MobileNets, EfficientNets, MNASNet, RegNet) therefore keeps its feature maps
// channels-last wherever every kernel that reads or writes them takes that layout
// (graph/op_kinds.def: LAYOUT), and NCHW at the rest (its input, reshapes, attention).
#pragma once

#include <vector>

#include "graph/forward_graph.h"

namespace edgecost::graph {

// The attributes that tell a layer's kernels which of its 4-D activations are channels-last: a
// bitmask over its inputs, and 1 for its output. Absent where none is (the op signature stays NCHW's).
inline constexpr char kChannelsLastInputsAttribute[] = "nhwc_inputs";
inline constexpr char kChannelsLastOutputAttribute[] = "nhwc_output";

// Whether the kernels of a layer of `kind` with these shapes take channels-last maps: its kind's
// LAYOUT is not kPlain, and for POET's residual add of a smaller tensor into a larger one (flat
// prefixes, which only NCHW lines up) and products the shapes say so: squeeze-excite's map times a
// scale per channel and image, (N, C, 1, 1), or two maps alike.
bool TakesChannelsLast(OpKind kind, const std::vector<Shape>& inputs, const Shape& output);

// Per layer, whether its output is stored channels-last. A tensor is, when the model has a grouped
// convolution and every layer that shares its layout (joined through kShared kinds) is a 4-D tensor
// whose producer and consumers all take channels-last; a map of 1x1 pixels is the same bytes in
// either layout and never stands in the way.
std::vector<bool> ChannelsLastOutputs(const ForwardGraph& forward);

// Sets the two attributes above on the attributes of layer `index`, from ChannelsLastOutputs'
// answer, where its kernels take channels-last maps (a kernel of NCHW alone reads a 1x1 map as NCHW).
void SetChannelsLastAttributes(const ForwardGraph& forward, int index, const std::vector<bool>& channels_last,
                               std::map<std::string, int64_t>& attributes);

}  // namespace edgecost::graph
