// From a forward graph to a training graph: the loss, then the backward nodes
// with their dependencies, in a topological order (every input precedes its user).
//
// Two derivations:
//
// `poet` reproduces POET's construction (poet/architectures/*.py): walking the
// forward layers backwards, one "GradientLayer" node per forward layer L_j,
// reading L_j's output, L_{j+1}'s output and the previous gradient node; its
// output has L_{j+1}'s shape and its FLOPs are twice L_j's.
//
// `exact` uses what each op's backward kernel really reads, as graph/op_kinds.def lists it per kind
// and pass: dX (grad_input, or grad when one primitive also gives the parameters' gradients, as
// batch and layer norm, LSTM and GRU do), dW (grad_weight) and the bias's alone (grad_bias, under
// --trainable bias). Ops whose dX is dY (add, flatten, reshape) get no node.
//
// A node differentiating several inputs has all their gradients as its output.
//   a tensor read by   grad_sum (sum of the         each consumer's gradient
//   several ops        consumers' gradients)
//
// Gradient nodes are only created where needed: a tensor's gradient is needed
// iff it depends on a trainable parameter. Weight-gradient outputs live in the
// parameter-gradient buffers (with the parameters, outside the activation
// budget, as in POET), so their output_bytes is 0.
//
// Trainable parameters (--trainable): `all`; `last:K`, the last K layers that own
// parameters; `bias`, biases only (plus batch-norm shifts), as sparse on-device
// fine-tuning does; `layers:NAME,...`, the layers of the named modules (an ONNX
// import's PyTorch module, "features.12" with every module inside it) or node
// names' layers ("layer17"), a sparse layer update; "NAME:0.25" updates the first quarter of a
// convolution's (not grouped) or linear layer's output channels alone (a sparse tensor update, the
// forward node's attribute update_channels: its weight-gradient node's output and FLOPs are that
// share of the layer's). Frozen layers get no
// weight-gradient node, and gradients stop below the lowest trainable layer. The poet derivation cannot split a
// layer's gradient, so `bias` keeps its whole chain and `last:K` truncates it.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "graph/forward_graph.h"
#include "proto/edgecost.pb.h"

namespace edgecost::graph {

inline constexpr int64_t kBytesPerElement = 4;  // f32 activations, as POET's TYPE

// What a backward node computes, stored as TrainingNode.role: the gradient of
// an op's input(s), of its weights, of its bias, or the sum of the gradient
// contributions a tensor read by several ops receives. POET's derivation has
// one kGrad node per layer, for all of them at once.
enum class GradRole { kGrad, kGradInput, kGradWeight, kGradBias, kGradSum };
std::string_view GradRoleName(GradRole role);
Result<GradRole> ParseGradRole(std::string_view name);

enum class Derivation { kPoet, kExact };
Result<Derivation> ParseDerivation(std::string_view text);
std::string_view DerivationName(Derivation derivation);
// One default everywhere (graph, costs, profile, solve, RPC): the graph the kernels
// really run. `poet` is asked for by name, to compare with POET's own numbers.
inline constexpr Derivation kDefaultDerivation = Derivation::kExact;

// The bytes a plain step holds at the turn from forward to backward when it keeps
// everything: the outputs of the forward nodes and the loss.
uint64_t ActivationBytes(const v1::TrainingGraph& graph);

struct Trainable {
  enum class Mode { kAll, kLastK, kBias, kLayers };
  Mode mode = Mode::kAll;
  int last_k = 0;
  // kLayers: module names or "layerN", sorted, each once; "NAME:SHARE" updates the first SHARE
  // (0 < SHARE < 1) of the layer's output channels alone, a sparse tensor update.
  std::vector<std::string> layers;

  static Result<Trainable> Parse(std::string_view text);  // "all", "last:K", "bias", "layers:A,B:0.25"
  std::string ToString() const;
  // kLayers: whether a name in `layers` names the layer at forward `index` from `module`.
  bool Names(int index, const std::string& module) const;
  // kLayers: the share of that layer's output channels updated (the largest of the names naming it), 1 for all.
  double ChannelShare(int index, const std::string& module) const;
};

Result<v1::TrainingGraph> DeriveTrainingGraph(const ForwardGraph& forward, Derivation derivation,
                                              const Trainable& trainable = {});

// The zoo model's training graph in one call.
Result<v1::TrainingGraph> ZooTrainingGraph(std::string_view model, int batch_size, Derivation derivation,
                                           const Trainable& trainable = {});

}  // namespace edgecost::graph
