// The op kinds and what each one's kernels need, from the one table graph/op_kinds.def.
#pragma once

#include <string_view>

#include "base/status.h"

namespace edgecost::graph {

enum class OpKind {
#define OP_KIND(kind, ...) kind,
#include "graph/op_kinds.def"
#undef OP_KIND
};

inline constexpr int kOpKindCount = 0
#define OP_KIND(...) +1
#include "graph/op_kinds.def"
#undef OP_KIND
    ;
inline constexpr OpKind kLastOpKind = static_cast<OpKind>(kOpKindCount - 1);

// Stable lower-case name used in graphs, op signatures and the database.
std::string_view OpKindName(OpKind kind);
// The kind a name stands for; InvalidArgument names the unknown one.
Result<OpKind> ParseOpKind(std::string_view name);
// POET's class name, used for node names ("layer3_ReLULayer") so graphs line up with POET's.
std::string_view PoetClassName(OpKind kind);

// The tensors a backward pass's kernel reads: the forward node's inputs X, its output Y, the
// incoming gradient dY, and what is kept alive for PyTorch's kernel. Derivation lists exactly
// these as the backward node's inputs and the executor binds what its kernel reads, so the two
// cannot disagree.
struct TensorReads {
  bool x = false, y = false, dy = false;
  bool keep_x = false, keep_y = false;  // kept alive for PyTorch's kernel, which reads it; edgecost's does not
  bool lists_x() const { return x || keep_x; }  // what derivation lists as the backward node's inputs
  bool lists_y() const { return y || keep_y; }
  bool operator==(const TensorReads&) const = default;
};
enum class BackwardPass {
  kInput,    // dX (and, for kinds one primitive does whole, the parameters' gradients)
  kWeights,  // dW, with the bias's
  kBias,     // the bias's gradient alone (--trainable bias)
};
// `activation_inputs`: how many activations the forward node reads (a binary op of an activation
// and a parameter reads one, and its dX reads dY alone).
TensorReads BackwardReads(OpKind kind, BackwardPass pass, int activation_inputs);

// How an op's input gradients come out of its backward nodes (graph/op_kinds.def: GRADIENT).
enum class GradientForm { kPerInput, kView, kSeveral, kBinary };
GradientForm GradientFormOf(OpKind kind);
// The backward kernel writes only part of its output: the rest must read as zero.
bool BackwardWritesPart(OpKind kind);
// dX is dY itself: derivation gives the op no backward node.
inline bool GradientIsView(OpKind kind) { return GradientFormOf(kind) == GradientForm::kView; }
// A layer's parameters, and whether the dX pass gives their gradients (graph/op_kinds.def: PARAMS).
enum class ParameterLayout { kWeightThenBias, kScaleShiftWithDx, kRecurrentWithDx };
ParameterLayout ParameterLayoutOf(OpKind kind);
// One primitive gives dX and every parameter's gradient: no pass of their own when dX is needed.
inline bool DxPassGivesParameterGradients(OpKind kind) {
  return ParameterLayoutOf(kind) != ParameterLayout::kWeightThenBias;
}
// The index of a layer's first bias among its `count` parameters (a lone parameter: by its pass).
inline int FirstBiasParameter(OpKind kind) {
  return ParameterLayoutOf(kind) == ParameterLayout::kRecurrentWithDx ? 2 : 1;
}
// The layouts an op's kernels take for its 4-D activations (graph/op_kinds.def: LAYOUT).
enum class ActivationLayouts { kPlain, kShared, kEach };
ActivationLayouts ActivationLayoutsOf(OpKind kind);
// One backward node gives the gradients of every activation input, one after another in the
// order of the op's inputs.
bool GradOfSeveralInputs(OpKind kind, int activation_inputs);

}  // namespace edgecost::graph
