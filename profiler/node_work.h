// What profiling one training-graph node means: which layer to build, which of
// its passes to time, and the op signature under which the cost is stored, so
// that identical ops (a ResNet repeats its blocks) are measured once.
#pragma once

#include <string>
#include <string_view>

#include "base/status.h"
#include "kernels/layers.h"
#include "proto/edgecost.pb.h"

namespace edgecost::profiler {

enum class Pass {
  kNone,  // no work: the input layer, a gradient of the input
  kForward,
  kBackwardInput,
  kBackwardWeights,
  kBackwardBias,
  kBackwardAll,  // POET's one gradient node per layer: dX and, with parameters, dW
  kGradSum,
};

struct NodeWork {
  Pass pass = Pass::kNone;
  kernels::LayerSpec spec;     // the forward layer the pass belongs to
  int sum_parts = 0;  // kGradSum: how many gradients are added
  v1::OpSignature signature;
  // Threads the op runs on: `threads`, or 1 for an op too small to repay a
  // team (a 200-float ReLU on two threads is mostly barrier, and a busy core
  // stalls that barrier for a whole time slice) and for a weight gradient that
  // a team slows down (kernels::WeightGradientRepaysTeam).
  int team_threads = 1;
};

// What decides whether a node repays a team: its FLOPs plus the bytes it writes. Memory-bound ops
// (batch norm, elementwise) do a few FLOPs per value but take as long per value written as a
// convolution per few FLOPs: counted by FLOPs alone, MobileNetV2's batch norms at batch 8 ran on
// one thread beside a free core.
double TeamWork(const v1::TrainingNode& node);
// Below this much TeamWork an op runs on one thread, as a training runtime with a grain size runs it.
inline constexpr double kTeamMinWork = 1e6;

// The work of node `index`; `threads` enters the signature (costs differ per thread count).
Result<NodeWork> WorkForNode(const v1::TrainingGraph& graph, int index, int threads);
// The thread count an op key (OpSignature.key) was measured at; 0 for a key of another form.
int OpKeyThreads(std::string_view key);
// The thread count of the first op key of a cost table that has one; 0 when none does (an
// analytic table). For tables that do not say theirs (CostTable.threads 0: older files).
int CostTableOpKeyThreads(const v1::CostTable& table);

// Builds the layer and returns a callable that runs the node's pass once.
class NodeRunner {
 public:
  static Result<NodeRunner> Create(kernels::Backend& backend, const NodeWork& work, uint32_t seed = 1);
  void Run();
  uint64_t scratchpad_bytes() const;
  uint64_t workspace_bytes() const;

 private:
  Pass pass_ = Pass::kNone;
  std::unique_ptr<kernels::Layer> layer_;
};

}  // namespace edgecost::profiler
