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
// `exact` uses what each op's backward really reads (dY is the incoming gradient,
// X the op's input, Y its output; parameters are not activations and are not listed):
//
//   op kind            node(s)                      reads
//   conv2d, linear,    grad_input  (dX = dY W)      dY
//   qkv_projection     grad_weight (dW = dY^T X)    X, dY
//                      grad_bias   (db = sum dY)    dY            (bias-only training)
//   linear_relu        grad_input                   Y, dY         (ReLU mask from Y)
//                      grad_weight                  X, Y, dY
//                      grad_bias                    Y, dY
//   batchnorm2d        grad (dX, dgamma, dbeta;     X, dY         (one oneDNN primitive;
//                      one primitive)                              batch statistics from X)
//   relu, dropout      grad                         Y, dY         (mask from Y)
//   maxpool2d          grad                         X, dY         (argmax re-derived from X)
//   avgpool2d          grad                         dY
//   attention_scores,  grad                         X, dY
//   attention_context
//   cross_entropy_loss grad                         X             (softmax(X) - labels)
//   add, flatten,      none: dX is dY (a view)      -
//   reshape
//   relu6, hardswish,  grad                         X, dY
//   gelu, silu, pow
//   sigmoid, tanh,     grad                         Y, dY         (derivative from Y)
//   sqrt, hardsigmoid,
//   softmax
//   affine, slice,     grad                         dY
//   reduce_mean,
//   transpose
//   concat             grad (all inputs)            dY
//   add_broadcast, sub grad (both inputs)           dY            (broadcast axes summed)
//   mul, div           grad (both inputs)           A, B, dY
//   matmul             grad (both inputs)           A, B, dY      (dA = dY B^T, dB = A^T dY)
//     ... of an activation X and a parameter P:
//   add_broadcast, sub grad_input                   dY
//                      grad_bias                    dY
//   mul, div           grad_input                   dY            (dY * P, dY / P)
//                      grad_weight                  X, dY
//   layernorm          grad (dX, dgamma, dbeta;     X, dY         (as batchnorm2d)
//                      one primitive)
//   batchnorm2d,       grad_bias (dbeta alone,      dY            (bias-only training, input
//   layernorm          a sum of dY)                                without a gradient)
//   embedding          grad_weight                  X, dY         (ids have no gradient)
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
// fine-tuning does. Frozen layers get no weight-gradient node, and gradients
// stop below the first trainable layer. The poet derivation cannot split a
// layer's gradient, so `bias` keeps its whole chain and `last:K` truncates it.
#pragma once

#include <string>
#include <string_view>

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
  enum class Mode { kAll, kLastK, kBias };
  Mode mode = Mode::kAll;
  int last_k = 0;

  static Result<Trainable> Parse(std::string_view text);  // "all", "last:K", "bias"
  std::string ToString() const;
};

Result<v1::TrainingGraph> DeriveTrainingGraph(const ForwardGraph& forward, Derivation derivation,
                                              const Trainable& trainable = {});

// The zoo model's training graph in one call.
Result<v1::TrainingGraph> ZooTrainingGraph(std::string_view model, int batch_size, Derivation derivation,
                                           const Trainable& trainable = {});

}  // namespace edgecost::graph
