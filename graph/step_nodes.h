// The nodes of a training graph as a step holds them: each node's output bytes and the distinct
// earlier nodes it reads. The executor, the solver's problem and the step's memory all read them
// here, so that they agree on what lives in the activations.
//
// Updates as gradients arrive (--update-in-backward): each trained layer's parameters are updated
// right after the layer's last backward node (its update anchor), where its gradient is complete
// and no later node of the step reads the old weights, and the gradient is freed at once. A
// weight-gradient node's output (grad_weight, grad_bias of a layer whose parameters are a weight
// and a bias) is then its gradient, held in the activations from that node to the anchor, which
// reads it: the solver schedules it as any activation, and a step holds the gradients of the layers
// in flight, not all of them. Tied weights (one parameter of two layers, graph/onnx/weights.cc)
// sum both layers' gradients first and keep the update after the step; the gradients batch and
// layer norm and recurrent layers get with dX stay in their own buffers and are updated at the anchor.
#pragma once

#include <cstdint>
#include <vector>

#include "proto/edgecost.pb.h"

namespace edgecost::graph {

struct StepNodes {
  std::vector<int64_t> bytes;             // by node: bytes of its output while resident
  std::vector<std::vector<int>> preds;    // by node: the distinct earlier nodes it reads, ascending
  // By forward node: the backward node after which its parameters are updated in the step, or -1
  // (no parameter of it trains, a tied weight, or updates after the step).
  std::vector<int> update_anchor;
  // By node: true for a weight-gradient node whose output is its layer's parameter gradients.
  std::vector<bool> holds_parameter_gradients;
};

// Nodes reading a later node are left out of preds (the executor refuses such graphs itself).
StepNodes StepNodesOf(const v1::TrainingGraph& graph, bool update_in_backward);

}  // namespace edgecost::graph
