#include "graph/op_kinds.h"

#include <array>
#include <string>

namespace edgecost::graph {
namespace {

struct OpKindRow {
  std::string_view name, poet_class;
  TensorReads input, weights, bias;
  GradientForm gradient;
  bool partial_dx;
  ParameterLayout params;
  ActivationLayouts layouts;
};

constexpr TensorReads NONE{}, X{.x = true}, Y{.y = true}, DY{.dy = true}, KEEP_X{.keep_x = true},
    KEEP_Y{.keep_y = true};
constexpr TensorReads operator|(TensorReads a, TensorReads b) {
  return {a.x || b.x, a.y || b.y, a.dy || b.dy, a.keep_x || b.keep_x, a.keep_y || b.keep_y};
}

using enum GradientForm;
using enum ParameterLayout;
using enum ActivationLayouts;
constexpr std::array<OpKindRow, kOpKindCount> kRows = {{
#define OP_KIND(kind, name, poet_class, input, weights, bias, gradient, partial_dx, params, layouts) \
  {name, poet_class, input, weights, bias, gradient, partial_dx, params, layouts},
#include "graph/op_kinds.def"
#undef OP_KIND
}};

const OpKindRow* RowOf(OpKind kind) {
  const auto k = static_cast<size_t>(kind);
  return k < kRows.size() ? &kRows[k] : nullptr;
}

}  // namespace

std::string_view OpKindName(OpKind kind) {
  const OpKindRow* row = RowOf(kind);
  return row ? row->name : "unknown";
}

Result<OpKind> ParseOpKind(std::string_view name) {
  for (size_t k = 0; k < kRows.size(); ++k) {
    if (kRows[k].name == name) return static_cast<OpKind>(k);
  }
  return InvalidArgument("unknown op kind '" + std::string(name) + "'");
}

std::string_view PoetClassName(OpKind kind) {
  const OpKindRow* row = RowOf(kind);
  return row ? row->poet_class : "Unknown";
}

TensorReads BackwardReads(OpKind kind, BackwardPass pass, int activation_inputs) {
  const OpKindRow* row = RowOf(kind);
  if (!row) return NONE;
  switch (pass) {
    case BackwardPass::kInput:
      // dX of an activation and a parameter P is dY, dY * P or dY / P: P is the layer's own.
      return row->gradient == kBinary && activation_inputs < 2 ? DY : row->input;
    case BackwardPass::kWeights:
      return row->weights;
    case BackwardPass::kBias:
      return row->bias;
  }
  return NONE;
}

GradientForm GradientFormOf(OpKind kind) {
  const OpKindRow* row = RowOf(kind);
  return row ? row->gradient : kPerInput;
}

bool BackwardWritesPart(OpKind kind) {
  const OpKindRow* row = RowOf(kind);
  return row && row->partial_dx;
}

ParameterLayout ParameterLayoutOf(OpKind kind) {
  const OpKindRow* row = RowOf(kind);
  return row ? row->params : kWeightThenBias;
}

ActivationLayouts ActivationLayoutsOf(OpKind kind) {
  const OpKindRow* row = RowOf(kind);
  return row ? row->layouts : kPlain;
}

bool GradOfSeveralInputs(OpKind kind, int activation_inputs) {
  const GradientForm form = GradientFormOf(kind);
  return form == kSeveral || (form == kBinary && activation_inputs == 2);
}

}  // namespace edgecost::graph
