#include "profiler/node_work.h"

#include <algorithm>
#include <cstdlib>
#include <map>
#include <sstream>

#include "graph/derive.h"
#include "graph/forward_graph.h"

namespace edgecost::profiler {
namespace {

kernels::Dims ShapeOf(const v1::TrainingNode& node) {
  return kernels::Dims(node.output_shape().dims().begin(), node.output_shape().dims().end());
}

std::string DimsText(const kernels::Dims& dims) {
  std::ostringstream out;
  for (size_t i = 0; i < dims.size(); ++i) out << (i ? "x" : "") << dims[i];
  return out.str();
}

kernels::LayerSpec SpecOf(const v1::TrainingGraph& graph, const v1::TrainingNode& forward) {
  kernels::LayerSpec spec;
  spec.kind = forward.op_kind();
  spec.attributes = {forward.attributes().begin(), forward.attributes().end()};
  for (uint32_t input : forward.inputs()) spec.input_shapes.push_back(ShapeOf(graph.nodes(static_cast<int>(input))));
  spec.output_shape = ShapeOf(forward);
  return spec;
}

Pass PassForRole(graph::GradRole role, bool poet) {
  switch (role) {
    case graph::GradRole::kGradWeight:
      return Pass::kBackwardWeights;
    case graph::GradRole::kGradBias:
      return Pass::kBackwardBias;
    case graph::GradRole::kGradSum:
      return Pass::kGradSum;
    case graph::GradRole::kGrad:
    case graph::GradRole::kGradInput:
      return poet ? Pass::kBackwardAll : Pass::kBackwardInput;
  }
  return Pass::kNone;
}

const char* PassName(Pass pass) {
  switch (pass) {
    case Pass::kNone:
      return "none";
    case Pass::kForward:
      return "fwd";
    case Pass::kBackwardInput:
      return "bwd_input";
    case Pass::kBackwardWeights:
      return "bwd_weights";
    case Pass::kBackwardBias:
      return "bwd_bias";
    case Pass::kBackwardAll:
      return "bwd_all";
    case Pass::kGradSum:
      return "grad_sum";
  }
  return "?";
}

}  // namespace

double TeamWork(const v1::TrainingNode& node) { return node.flops() + static_cast<double>(node.output_bytes()); }

Result<NodeWork> WorkForNode(const v1::TrainingGraph& graph, int index, int threads) {
  if (index < 0 || index >= graph.nodes_size()) return InvalidArgument("no node " + std::to_string(index));
  const v1::TrainingNode& node = graph.nodes(index);
  NodeWork work;
  if (node.phase() != v1::PHASE_BACKWARD) {
    work.pass = node.op_kind() == graph::OpKindName(graph::OpKind::kInput) ? Pass::kNone : Pass::kForward;
    work.spec = SpecOf(graph, node);
  } else if (node.role() == graph::GradRoleName(graph::GradRole::kGradSum)) {
    work.pass = Pass::kGradSum;
    work.spec.kind = "sum";
    work.spec.output_shape = ShapeOf(node);
    work.sum_parts = node.inputs_size();
  } else {
    if (node.forward_of() < 0 || node.forward_of() >= index) {
      return InvalidArgument("backward node " + std::to_string(index) + " ('" + node.name() +
                             "') names no forward node; profile graphs derived by edgecost (zoo or ONNX)");
    }
    const v1::TrainingNode& forward = graph.nodes(node.forward_of());
    EC_ASSIGN_OR_RETURN(graph::GradRole role, graph::ParseGradRole(node.role()));
    work.spec = SpecOf(graph, forward);
    work.pass = forward.op_kind() == graph::OpKindName(graph::OpKind::kInput)
                    ? Pass::kNone
                    : PassForRole(role, graph.derivation() == "poet");
  }
  if (work.spec.kind.empty() && work.pass != Pass::kNone) {
    return InvalidArgument(
        "node " + std::to_string(index) + " ('" + node.name() +
        "') has no op kind: graphs imported from files carry costs, not ops, and cannot be profiled");
  }

  v1::OpSignature& sig = work.signature;
  sig.set_kind(work.spec.kind);
  sig.set_phase(node.phase());
  for (const kernels::Dims& shape : work.spec.input_shapes) {
    v1::Shape* s = sig.add_input_shapes();
    for (int64_t d : shape) s->add_dims(d);
  }
  for (int64_t d : work.pass == Pass::kGradSum ? ShapeOf(node) : work.spec.output_shape) {
    sig.mutable_output_shape()->add_dims(d);
  }
  for (const auto& [key, value] : work.spec.attributes) (*sig.mutable_attributes())[key] = value;
  if (work.pass == Pass::kGradSum) (*sig.mutable_attributes())["parts"] = work.sum_parts;
  sig.set_dtype("f32");
  sig.set_backend("onednn");
  sig.set_threads(static_cast<uint32_t>(threads));
  // The key: every field above in a fixed order, readable in `edgecost costs`.
  std::ostringstream key;
  key << work.spec.kind << "/" << PassName(work.pass) << "/in=";
  for (size_t i = 0; i < work.spec.input_shapes.size(); ++i)
    key << (i ? "," : "") << DimsText(work.spec.input_shapes[i]);
  key << "/out=" << DimsText(work.pass == Pass::kGradSum ? ShapeOf(node) : work.spec.output_shape);
  for (const auto& [name, value] : std::map<std::string, int64_t>(sig.attributes().begin(), sig.attributes().end())) {
    key << "/" << name << "=" << value;
  }
  key << "/f32/onednn/t" << threads;
  sig.set_key(key.str());
  const bool repays_team =
      TeamWork(node) >= kTeamMinWork &&
      (work.pass != Pass::kBackwardWeights || kernels::WeightGradientRepaysTeam(work.spec, threads));
  work.team_threads = repays_team ? std::max(1, threads) : 1;
  return work;
}

Result<NodeRunner> NodeRunner::Create(kernels::Backend& backend, const NodeWork& work, uint32_t seed) {
  NodeRunner runner;
  runner.pass_ = work.pass;
  if (work.pass == Pass::kNone) return runner;
  if (work.pass == Pass::kGradSum) {
    EC_ASSIGN_OR_RETURN(runner.layer_, kernels::MakeGradSum(backend, work.spec.output_shape, work.sum_parts, seed));
  } else {
    EC_ASSIGN_OR_RETURN(runner.layer_, kernels::MakeLayer(backend, work.spec, seed));
  }
  return runner;
}

void NodeRunner::Run() {
  switch (pass_) {
    case Pass::kNone:
      break;
    case Pass::kForward:
    case Pass::kGradSum:
      layer_->Forward();
      break;
    case Pass::kBackwardInput:
      layer_->BackwardInput();
      break;
    case Pass::kBackwardWeights:
      layer_->BackwardWeights();
      break;
    case Pass::kBackwardBias:
      layer_->BackwardBias();
      break;
    case Pass::kBackwardAll:
      layer_->BackwardInput();
      if (layer_->HasParameters()) layer_->BackwardWeights();
      break;
  }
}

uint64_t NodeRunner::scratchpad_bytes() const { return layer_ ? layer_->scratchpad_bytes() : 0; }
uint64_t NodeRunner::workspace_bytes() const { return layer_ ? layer_->workspace_bytes() : 0; }

int OpKeyThreads(std::string_view key) {
  constexpr std::string_view kSuffix = "/onednn/t";  // how WorkForNode ends a key
  const size_t at = key.rfind(kSuffix);
  return at == std::string_view::npos ? 0 : std::atoi(std::string(key.substr(at + kSuffix.size())).c_str());
}

int CostTableOpKeyThreads(const v1::CostTable& table) {
  for (const v1::NodeCost& cost : table.costs()) {
    if (const int threads = OpKeyThreads(cost.op_key()); threads > 0) return threads;
  }
  return 0;
}

}  // namespace edgecost::profiler
