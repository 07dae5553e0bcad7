#include "train/executor.h"

#include <time.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <span>

#include "base/clock.h"
#include "graph/derive.h"
#include "graph/forward_graph.h"
#include "graph/step_nodes.h"
#include "kernels/layers.h"
#include "profiler/node_work.h"
#include "train/pager.h"

namespace edgecost::train {
namespace {

using profiler::Pass;

Status Unimplemented(std::string message) { return Status(ErrorCode::kUnimplemented, std::move(message)); }

bool SamePlan(const solver::Plan& a, const solver::Plan& b) {
  return a.compute == b.compute && a.resident == b.resident && a.page_in == b.page_in && a.page_out == b.page_out;
}

double ThreadCpuS() {
  timespec t{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

int64_t Elements(const kernels::Dims& dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

// The values a trained parameter's update changes: all, or a sparse tensor update's first output
// channels (its gradient's rows).
std::span<float> UpdatedValues(kernels::Layer& layer, int index) {
  std::vector<float>& values = layer.params()[static_cast<size_t>(index)]->data;
  return std::span<float>(values).first(static_cast<size_t>(Elements(layer.grad_params()[static_cast<size_t>(index)]->dims)));
}

// The backward pass a node of the profiler's pass runs, for graph::BackwardReads.
graph::BackwardPass BackwardPassOf(Pass pass) {
  return pass == Pass::kBackwardWeights ? graph::BackwardPass::kWeights
         : pass == Pass::kBackwardBias  ? graph::BackwardPass::kBias
                                        : graph::BackwardPass::kInput;
}

}  // namespace

struct Executor::NodeExec {
  enum class Kind { kNone, kInput, kLayer } kind = Kind::kNone;
  kernels::Layer* layer = nullptr;
  Pass pass = Pass::kNone;
  struct Binding {
    kernels::Tensor* tensor = nullptr;
    int node = 0;
    int64_t offset = 0;  // elements into the node's buffer (one input's part of a gradient of several)
  };
  std::vector<Binding> binds;  // tensor <- node's buffer
  // An op that reads one node twice (concat(x, x), x * x) gives it two gradients: the first
  // occurrence's dX is bound, the others' stay in the layer's own storage and are added into it
  // after the kernel, in the order of the forward node's inputs (the same adds whatever the schedule).
  struct Accumulation {
    const kernels::Tensor* from = nullptr;  // unbound: the layer's own storage
    size_t into = 0;                        // index in binds
  };
  std::vector<Accumulation> adds;
  bool zero_output = false;  // the kernel writes only part of its output
  bool loss = false;
  int team_threads = 1;  // the profiler's team for the node (NodeWork::team_threads)
};

struct Executor::State {
  kernels::Backend backend;
  std::vector<std::unique_ptr<kernels::Layer>> layers;  // by node: forward layers and gradient sums
  std::vector<NodeExec> execs;
  std::vector<std::vector<int>> succs;
  std::unique_ptr<Arena> arena;
  std::unique_ptr<Pager> pager_storage;  // started at the first schedule that pages
  Pager* pager = nullptr;                // this step's: null when its plan does not page
  solver::Plan plain;
  // The last plan stepped, its memory walk and its arena layout: laid out once per schedule.
  std::optional<solver::Plan> laid_out;
  bool laid_out_plain = false;  // laid_out is the plain plan
  bool laid_out_pages = false;  // laid_out pages a node in or out
  PlannedMemory planned;
  ArenaLayout layout;
  // The laid-out plan as lists, so that a step does not scan its n x n matrices: stage t computes
  // `computes` in order and, after the j-th, frees `releases[j]`, the inputs no later computation
  // of the stage reads and the next stage does not keep.
  struct Stage {
    std::vector<int> computes;
    std::vector<std::vector<int>> releases;
  };
  std::vector<Stage> stages;
  std::vector<int> live;  // the arena's live nodes at a stage's end (reused)
  Batch batch;
  std::vector<std::pair<int, int>> trained;  // (forward node, parameter index)
  // Updates as gradients arrive: by node, the trained parameters updated after it (indices in
  // `trained`); those updated after the step; where each one's gradient is (a node's buffer and
  // the offset in it, or node -1: the layer's own tensor).
  std::vector<std::vector<size_t>> updates_after;
  std::vector<size_t> updates_at_end;
  struct GradAt {
    int node = -1;
    int64_t offset = 0, elements = 0;
  };
  std::vector<GradAt> grad_at;
  std::vector<int> update_anchor;
  std::vector<bool> grad_in_arena_node;  // by node: its output is parameter gradients
  std::vector<std::vector<int>> weight_readers;  // by forward node: it and its backward nodes that read the weights
  std::vector<int> update_stage;                 // by anchor: the stage after whose computation of it the layer updates
  Status plan_keeps_weights = Status::Ok();  // the laid-out plan reads no weight after its update
  // Tied weights (graph/onnx/weights.cc): `node`'s weight is a copy of `owner`'s parameter
  // `owner_param`; both start equal and get the sum of their gradients, so they stay equal.
  struct Tie {
    int node = 0, owner = 0, owner_param = 0;
  };
  std::vector<Tie> ties;
  int input_node = -1, loss_node = -1;
  int64_t label_rows = 0, classes = 0;
  int64_t input_id_limit = 0;
  double origin_s = 0;
  double loss = 0;
  std::unique_ptr<Optimizer> optimizer;
  int64_t updates = 0;  // training steps completed: the step number dropout masks are drawn for
  // Per node: whether this step has folded its batch statistics into the running ones yet.
  std::vector<bool> stats_updated;
};

Executor::~Executor() = default;

// Executor::Create in steps: what the graph says (which layers train, which forward outputs need a
// gradient, where each gradient sits in its node's output), then each node's kernel and bindings,
// then the checks, the layer state and the tied weights.
struct Executor::Builder {
  const v1::TrainingGraph& graph;
  Executor& e;
  State& s;
  const int n;
  std::vector<bool> layer_trains;  // by forward node: its parameters train (last:K and bias change it)
  bool bias_only = false;
  std::vector<std::optional<graph::OpKind>> kinds;  // by forward node
  std::vector<bool> needs_grad;                     // by forward node: its output's gradient is needed
  // The gradient(s) each backward node's output holds: (forward node, offset in elements).
  std::vector<std::vector<std::pair<int, int64_t>>> slots;
  std::set<std::pair<int, int>> trained;  // (forward node, parameter index)
  std::set<std::pair<int, int>> written;  // of them or not: a backward pass writes the gradient
  // By forward node: some backward pass of its layer runs; its dX pass runs.
  std::vector<bool> has_backward = std::vector<bool>(static_cast<size_t>(n), false);
  std::vector<bool> runs_input_pass = std::vector<bool>(static_cast<size_t>(n), false);
  graph::StepNodes step_nodes;
  std::map<std::pair<int, int>, State::GradAt> grad_in_arena;  // (forward node, parameter index)

  Builder(const v1::TrainingGraph& g, Executor& executor)
      : graph(g), e(executor), s(*executor.state_), n(g.nodes_size()) {}

  Status ReadEdges() {
    e.bytes_.resize(static_cast<size_t>(n));
    e.preds_.resize(static_cast<size_t>(n));
    s.succs.resize(static_cast<size_t>(n));
    s.execs.resize(static_cast<size_t>(n));
    s.layers.resize(static_cast<size_t>(n));
    for (int v = 0; v < n; ++v) {
      for (uint32_t u : graph.nodes(v).inputs()) {
        if (u >= static_cast<uint32_t>(v)) return InvalidArgument("node " + std::to_string(v) + " reads a later node");
      }
    }
    step_nodes = graph::StepNodesOf(graph, e.options_.update_in_backward);
    e.bytes_ = step_nodes.bytes;
    e.preds_ = step_nodes.preds;
    for (int v = 0; v < n; ++v) {
      for (int u : e.preds_[static_cast<size_t>(v)]) s.succs[static_cast<size_t>(u)].push_back(v);
    }
    return Status::Ok();
  }

  // Which layers' parameters train, as graph/derive decided: under bias, the layers it gave a
  // parameter gradient (those with a bias).
  Status FindTrainedLayers() {
    EC_ASSIGN_OR_RETURN(graph::Trainable trainable, graph::Trainable::Parse(graph.trainable()));
    bias_only = trainable.mode == graph::Trainable::Mode::kBias;
    layer_trains.assign(static_cast<size_t>(n), false);
    std::vector<bool> gives_parameter_gradient(static_cast<size_t>(n), false);
    for (const v1::TrainingNode& node : graph.nodes()) {
      if (node.phase() == v1::PHASE_BACKWARD &&
          (node.role() == "grad" || node.role() == "grad_weight" || node.role() == "grad_bias")) {
        gives_parameter_gradient[node.forward_of()] = true;
      }
    }
    int remaining = trainable.last_k;
    for (int v = n - 1; v >= 0; --v) {
      const v1::TrainingNode& node = graph.nodes(v);
      if (node.phase() == v1::PHASE_BACKWARD || node.param_count() == 0) continue;
      switch (trainable.mode) {
        case graph::Trainable::Mode::kAll:
          layer_trains[static_cast<size_t>(v)] = true;
          break;
        case graph::Trainable::Mode::kBias:
          layer_trains[static_cast<size_t>(v)] = gives_parameter_gradient[static_cast<size_t>(v)];
          break;
        case graph::Trainable::Mode::kLastK:
          layer_trains[static_cast<size_t>(v)] = remaining-- > 0;
          break;
        case graph::Trainable::Mode::kLayers:
          layer_trains[static_cast<size_t>(v)] = trainable.Names(v, node.module());
          break;
      }
    }
    return Status::Ok();
  }

  // Forward kinds, which forward outputs need a gradient (as graph/derive decides: a layer whose
  // parameters get a gradient, or one that reads such an output), and the slots of each gradient.
  Status FindGradients() {
    kinds.resize(static_cast<size_t>(n));
    needs_grad.assign(static_cast<size_t>(n), false);
    for (int v = 0; v < n; ++v) {
      const v1::TrainingNode& node = graph.nodes(v);
      if (node.phase() == v1::PHASE_BACKWARD) {
        const int f = node.forward_of();
        if ((node.role() == graph::GradRoleName(graph::GradRole::kGradWeight) ||
             node.role() == graph::GradRoleName(graph::GradRole::kGradBias)) &&
            f >= 0 && f < v) {
          needs_grad[static_cast<size_t>(f)] = true;
        }
        continue;
      }
      EC_ASSIGN_OR_RETURN(graph::OpKind kind, graph::ParseOpKind(node.op_kind()));
      kinds[static_cast<size_t>(v)] = kind;
    }
    for (int v = 0; v < n; ++v) {
      if (!kinds[static_cast<size_t>(v)]) continue;
      for (uint32_t u : graph.nodes(v).inputs()) needs_grad[static_cast<size_t>(v)] = needs_grad[v] || needs_grad[u];
    }
    slots.resize(static_cast<size_t>(n));
    for (int v = 0; v < n; ++v) EC_RETURN_IF_ERROR(FindSlots(v));
    return Status::Ok();
  }

  Status FindSlots(int v) {
    const v1::TrainingNode& node = graph.nodes(v);
    if (node.phase() != v1::PHASE_BACKWARD || node.output_bytes() == 0) return Status::Ok();
    const int f = node.forward_of();
    if (f < 0 || f >= v || !kinds[static_cast<size_t>(f)]) {
      return InvalidArgument("node " + std::to_string(v) + " ('" + node.name() +
                             "') names no forward node; train graphs derived by edgecost (zoo or ONNX)");
    }
    const v1::TrainingNode& fwd = graph.nodes(f);
    auto& list = slots[static_cast<size_t>(v)];
    if (node.role() == graph::GradRoleName(graph::GradRole::kGradSum)) {
      list = {{f, 0}};
    } else if (graph::GradOfSeveralInputs(*kinds[static_cast<size_t>(f)], fwd.inputs_size())) {
      int64_t offset = 0;
      for (uint32_t u : fwd.inputs()) {
        const int t = static_cast<int>(u);
        if (!needs_grad[u] || std::any_of(list.begin(), list.end(), [&](const auto& slot) { return slot.first == t; })) {
          continue;
        }
        list.push_back({t, offset});
        offset += e.bytes_[u] / 4;
      }
      if (offset * 4 != static_cast<int64_t>(node.output_bytes())) {
        return InvalidArgument("node " + std::to_string(v) + " ('" + node.name() + "') holds " +
                               std::to_string(node.output_bytes()) + " B, but the gradients of the inputs of node " +
                               std::to_string(f) + " that need one have " + std::to_string(offset * 4) +
                               " B; derive the graph again with this edgecost");
      }
    } else if (fwd.inputs_size() > 0) {
      list = {{static_cast<int>(fwd.inputs(0)), 0}};
    }
    return Status::Ok();
  }

  // Whether the gradient of forward node t is (through views, whose dX is dY) the gradient of w.
  bool Reaches(int t, int w) const {
    if (t == w) return true;
    if (!kinds[static_cast<size_t>(t)] || !graph::GradientIsView(*kinds[static_cast<size_t>(t)])) return false;
    for (uint32_t u : graph.nodes(t).inputs()) {
      if (Reaches(static_cast<int>(u), w)) return true;
    }
    return false;
  }

  // Where, in gradient node `u` = input j of backward node c, the gradient c reads starts: c
  // differentiates (or sums the gradient of) forward node w = c.forward_of. A node that reads a
  // gradient of several inputs twice (a sum of both) takes its parts in order.
  Result<int64_t> GradOffset(int c, int j) const {
    const v1::TrainingNode& node = graph.nodes(c);
    const int u = static_cast<int>(node.inputs(j));
    const auto& list = slots[static_cast<size_t>(u)];
    if (list.size() <= 1) return int64_t{0};
    int occurrence = 0;
    for (int k = 0; k < j; ++k) occurrence += static_cast<int>(node.inputs(k)) == u;
    for (const auto& [t, offset] : list) {
      if (Reaches(t, node.forward_of()) && occurrence-- == 0) return offset;
    }
    return InvalidArgument("node " + std::to_string(c) + " ('" + node.name() + "') reads node " + std::to_string(u) +
                           " as the gradient of node " + std::to_string(node.forward_of()) +
                           ", which it does not hold");
  }

  // Every node's kernel and bindings. A layer is built with its own copies of its tensors, which the
  // arena replaces: so each forward layer is followed at once by the backward nodes that bind its
  // tensors, and the copies bound are freed before the next layer is built. Building then holds about
  // one layer's copies, not every layer's at once (four times the activations, the process's peak).
  Status BindNodes(uint32_t seed) {
    std::vector<std::vector<int>> backward_of(static_cast<size_t>(n));
    for (int v = 0; v < n; ++v) {
      const int f = graph.nodes(v).phase() == v1::PHASE_BACKWARD ? graph.nodes(v).forward_of() : -1;
      if (f >= 0 && f < v) backward_of[static_cast<size_t>(f)].push_back(v);
    }
    std::vector<bool> done(static_cast<size_t>(n), false);
    for (int v = 0; v < n; ++v) {
      if (done[static_cast<size_t>(v)]) continue;
      std::vector<int> group = {v};
      if (graph.nodes(v).phase() != v1::PHASE_BACKWARD) {
        group.insert(group.end(), backward_of[static_cast<size_t>(v)].begin(),
                     backward_of[static_cast<size_t>(v)].end());
      }
      for (int u : group) {
        EC_RETURN_IF_ERROR(BindNode(u, seed));
        done[static_cast<size_t>(u)] = true;
      }
      for (int u : group) {
        const NodeExec& exec = s.execs[static_cast<size_t>(u)];
        for (const NodeExec::Binding& b : exec.binds) exec.layer->Release(*b.tensor);
      }
    }
    return Status::Ok();
  }

  Status BindNode(int v, uint32_t seed) {
    const v1::TrainingNode& node = graph.nodes(v);
    EC_ASSIGN_OR_RETURN(profiler::NodeWork work, profiler::WorkForNode(graph, v, omp_get_max_threads()));
    NodeExec& exec = s.execs[static_cast<size_t>(v)];
    exec.pass = work.pass;
    exec.team_threads = work.team_threads;
    const std::string label = "node " + std::to_string(v) + " ('" + node.name() + "')";
    if (node.phase() != v1::PHASE_BACKWARD) return BindForward(v, work, seed, exec, label);
    switch (work.pass) {
      case Pass::kNone:
        return Status::Ok();
      case Pass::kBackwardAll:
        return InvalidArgument(label + " is POET's one gradient per layer; train graphs of the exact derivation");
      case Pass::kGradSum:
        return BindGradSum(v, work, seed, exec);
      case Pass::kForward:
      case Pass::kBackwardInput:
      case Pass::kBackwardWeights:
      case Pass::kBackwardBias:
        break;
    }
    return BindBackward(v, work, exec, label);
  }

  Status BindForward(int v, const profiler::NodeWork& work, uint32_t seed, NodeExec& exec, const std::string& label) {
    const v1::TrainingNode& node = graph.nodes(v);
    if (work.pass == Pass::kNone) {
      if (s.input_node >= 0) return Unimplemented("the executor feeds one input node; " + label + " is a second");
      s.input_node = v;
      exec.kind = NodeExec::Kind::kInput;
      return Status::Ok();
    }
    kernels::TeamScope team(work.team_threads);  // the team the profiler builds it on
    EC_ASSIGN_OR_RETURN(s.layers[static_cast<size_t>(v)],
                        kernels::MakeLayer(s.backend, work.spec, seed + static_cast<uint32_t>(v)));
    kernels::Layer& layer = *s.layers[static_cast<size_t>(v)];
    exec.kind = NodeExec::Kind::kLayer;
    exec.layer = &layer;
    if (layer.inputs().size() != static_cast<size_t>(node.inputs_size())) {
      return InvalidArgument(label + " has " + std::to_string(node.inputs_size()) + " inputs; its kernel takes " +
                             std::to_string(layer.inputs().size()));
    }
    for (int j = 0; j < node.inputs_size(); ++j) exec.binds.push_back({&layer.inputs()[j], static_cast<int>(node.inputs(j))});
    exec.binds.push_back({&layer.output(), v});
    if (kinds[static_cast<size_t>(v)] == graph::OpKind::kEmbedding &&
        node.inputs(0) == static_cast<uint32_t>(s.input_node)) {
      const auto vocabulary = node.attributes().find("vocabulary");
      if (vocabulary != node.attributes().end()) s.input_id_limit = vocabulary->second;
    }
    if (node.phase() == v1::PHASE_LOSS) {
      exec.loss = true;
      s.loss_node = v;
      s.label_rows = layer.inputs()[0].dims[0];
      s.classes = layer.inputs()[0].dims[1];
    }
    for (kernels::Tensor* p : layer.params()) e.param_bytes_ += p->bytes();
    return Status::Ok();
  }

  Status BindGradSum(int v, const profiler::NodeWork& work, uint32_t seed, NodeExec& exec) {
    const v1::TrainingNode& node = graph.nodes(v);
    kernels::TeamScope team(work.team_threads);
    EC_ASSIGN_OR_RETURN(s.layers[static_cast<size_t>(v)],
                        kernels::MakeGradSum(s.backend, work.spec.output_shape, work.sum_parts, seed));
    kernels::Layer& layer = *s.layers[static_cast<size_t>(v)];
    exec.kind = NodeExec::Kind::kLayer;
    exec.layer = &layer;
    for (int j = 0; j < node.inputs_size(); ++j) {
      EC_ASSIGN_OR_RETURN(const int64_t offset, GradOffset(v, j));
      exec.binds.push_back({&layer.inputs()[j], static_cast<int>(node.inputs(j)), offset});
    }
    exec.binds.push_back({&layer.output(), v});
    return Status::Ok();
  }

  // A backward node runs its forward node's layer in its pass: bound to what graph/op_kinds.def
  // says the kernel reads, which the node must list, and listing nothing the table does not.
  Status BindBackward(int v, const profiler::NodeWork& work, NodeExec& exec, const std::string& label) {
    const v1::TrainingNode& node = graph.nodes(v);
    const int f = node.forward_of();
    kernels::Layer* layer = s.layers[static_cast<size_t>(f)].get();
    if (!layer) return InvalidArgument(label + " differentiates node " + std::to_string(f) + ", which has no kernel");
    exec.kind = NodeExec::Kind::kLayer;
    exec.layer = layer;
    const v1::TrainingNode& fwd = graph.nodes(f);
    const graph::OpKind kind = *kinds[static_cast<size_t>(f)];
    const graph::TensorReads reads = graph::BackwardReads(kind, BackwardPassOf(work.pass), fwd.inputs_size());
    auto lists = [&](int u) { return std::find(node.inputs().begin(), node.inputs().end(), u) != node.inputs().end(); };
    auto missing = [&](const std::string& what) {
      return Unimplemented(label + ": its oneDNN kernel reads " + what +
                           " but the graph does not list it among the node's inputs; the executor cannot run it");
    };
    for (uint32_t u : node.inputs()) {
      const bool input = std::find(fwd.inputs().begin(), fwd.inputs().end(), u) != fwd.inputs().end();
      const bool read = graph.nodes(u).phase() == v1::PHASE_BACKWARD
                            ? reads.dy
                            : (input && reads.lists_x()) || (static_cast<int>(u) == f && reads.lists_y());
      if (!read) {
        return InvalidArgument(label + " lists node " + std::to_string(u) +
                               " among its inputs, which graph/op_kinds.def does not list for its pass");
      }
    }
    if (reads.x) {
      for (int j = 0; j < fwd.inputs_size(); ++j) {
        if (!lists(static_cast<int>(fwd.inputs(j)))) return missing("the layer's input");
        exec.binds.push_back({&layer->inputs()[j], static_cast<int>(fwd.inputs(j))});
      }
    }
    if (reads.y) {
      if (!lists(f)) return missing("the layer's output");
      exec.binds.push_back({&layer->output(), f});
    }
    if (reads.dy) {
      int dy = -1, dy_at = -1;
      for (int j = 0; j < node.inputs_size(); ++j) {
        const int u = static_cast<int>(node.inputs(j));
        if (graph.nodes(u).phase() != v1::PHASE_BACKWARD) continue;
        if (dy >= 0 && dy != u) return InvalidArgument(label + " reads two incoming gradients");
        if (dy < 0) dy_at = j;
        dy = u;
      }
      if (dy < 0) return missing("the incoming gradient");
      EC_ASSIGN_OR_RETURN(const int64_t offset, GradOffset(v, dy_at));
      exec.binds.push_back({&layer->grad_output(), dy, offset});
    }
    if (node.output_bytes() > 0) EC_RETURN_IF_ERROR(BindInputGradients(v, f, kind, *layer, exec, label));
    EC_ASSIGN_OR_RETURN(graph::GradRole role, graph::ParseGradRole(node.role()));
    const std::vector<int> writes = NoteTrainedParameters(f, kind, role, *layer);
    if (step_nodes.holds_parameter_gradients[static_cast<size_t>(v)]) {
      EC_RETURN_IF_ERROR(BindParameterGradients(v, f, writes, *layer, exec, label));
    }
    has_backward[static_cast<size_t>(f)] = true;
    // One primitive gives dX and the parameters' gradients: its weights pass writes dX too.
    if (role == graph::GradRole::kGrad || role == graph::GradRole::kGradInput ||
        graph::DxPassGivesParameterGradients(kind)) {
      runs_input_pass[static_cast<size_t>(f)] = true;
    }
    return Status::Ok();
  }

  // The node's output: dX of the layer's input, or of several inputs one after another.
  Status BindInputGradients(int v, int f, graph::OpKind kind, kernels::Layer& layer, NodeExec& exec,
                            const std::string& label) {
    const v1::TrainingNode& fwd = graph.nodes(f);
    if (layer.grad_inputs().empty()) return InvalidArgument(label + " has an output but its layer no input gradient");
    if (graph::GradOfSeveralInputs(kind, fwd.inputs_size())) {
      for (const auto& [t, offset] : slots[static_cast<size_t>(v)]) {
        const size_t into = exec.binds.size();
        bool first = true;
        for (int i = 0; i < fwd.inputs_size(); ++i) {
          if (static_cast<int>(fwd.inputs(i)) != t) continue;
          const kernels::Tensor* dx = &layer.grad_inputs()[static_cast<size_t>(i)];
          if (first) {
            exec.binds.push_back({&layer.grad_inputs()[static_cast<size_t>(i)], v, offset});
            first = false;
          } else if (dx->dims != exec.binds[into].tensor->dims) {
            return InvalidArgument(label + ": node " + std::to_string(f) + " reads node " + std::to_string(t) +
                                   " twice with gradients of different shapes");
          } else {
            exec.adds.push_back({dx, into});
          }
        }
        if (first) {
          return Internal(label + " holds the gradient of node " + std::to_string(t) + ", which node " +
                          std::to_string(f) + " does not read");
        }
      }
    } else {
      exec.binds.push_back({&layer.grad_inputs()[0], v});
    }
    exec.zero_output = graph::BackwardWritesPart(kind);
    return Status::Ok();
  }

  // The parameters a backward pass writes gradients for, and of those the ones that train. A layer
  // with one parameter has it as a weight (grad_weight) or as a bias (grad_bias: add or sub of a parameter).
  std::vector<int> NoteTrainedParameters(int f, graph::OpKind kind, graph::GradRole role, kernels::Layer& layer) {
    std::vector<int> writes;
    const int params = static_cast<int>(layer.params().size());
    const bool gives_weights = role == graph::GradRole::kGradWeight ||
                               (graph::DxPassGivesParameterGradients(kind) && role == graph::GradRole::kGrad);
    const bool gives_bias = gives_weights || role == graph::GradRole::kGradBias;
    for (int i = 0; i < params; ++i) {
      const bool is_bias = params == 1 ? role == graph::GradRole::kGradBias : i >= graph::FirstBiasParameter(kind);
      if (!(is_bias ? gives_bias : gives_weights)) continue;
      written.insert({f, i});
      writes.push_back(i);
      if (layer_trains[static_cast<size_t>(f)] && (is_bias || !bias_only)) trained.insert({f, i});
    }
    return writes;
  }

  // Updates as gradients arrive: a weight-gradient node's output is the gradients it writes, one
  // after another in parameter order, in the arena until its layer's update.
  Status BindParameterGradients(int v, int f, const std::vector<int>& writes, kernels::Layer& layer, NodeExec& exec,
                                const std::string& label) {
    int64_t offset = 0;
    for (int i : writes) {
      kernels::Tensor& grad = *layer.grad_params()[static_cast<size_t>(i)];
      exec.binds.push_back({&grad, v, offset});
      grad_in_arena[{f, i}] = {v, offset, Elements(grad.dims)};
      offset += Elements(grad.dims);
    }
    if (offset * 4 != e.bytes_[static_cast<size_t>(v)]) {
      return InvalidArgument(label + " holds " + std::to_string(e.bytes_[static_cast<size_t>(v)]) +
                             " B of parameter gradients, but its pass writes " + std::to_string(offset * 4) +
                             " B; derive the graph again with this edgecost");
    }
    return Status::Ok();
  }

  // Which trained parameter is updated where, and each layer's nodes, for the check of a plan.
  void PlanUpdates() {
    s.updates_after.assign(static_cast<size_t>(n), {});
    s.update_anchor = step_nodes.update_anchor;
    s.grad_in_arena_node = step_nodes.holds_parameter_gradients;
    s.weight_readers.assign(static_cast<size_t>(n), {});
    for (int v = 0; v < n; ++v) {
      const v1::TrainingNode& node = graph.nodes(v);
      const bool backward = node.phase() == v1::PHASE_BACKWARD;
      const int f = backward ? node.forward_of() : v;
      // Weight and bias passes read activations and dY alone.
      const bool reads_weights = !backward || node.role() == graph::GradRoleName(graph::GradRole::kGradInput) ||
                                 node.role() == graph::GradRoleName(graph::GradRole::kGrad);
      if (f >= 0 && f < n && reads_weights) s.weight_readers[static_cast<size_t>(f)].push_back(v);
    }
    for (size_t i = 0; i < s.trained.size(); ++i) {
      const auto [f, index] = s.trained[i];
      const int anchor = step_nodes.update_anchor[static_cast<size_t>(f)];
      (anchor >= 0 ? s.updates_after[static_cast<size_t>(anchor)] : s.updates_at_end).push_back(i);
      const auto in_arena = grad_in_arena.find({f, index});
      s.grad_at.push_back(in_arena == grad_in_arena.end() ? State::GradAt{} : in_arena->second);
    }
  }

  Status CheckBindings() const {
    if (s.input_node < 0 || s.loss_node < 0) return InvalidArgument("the graph needs an input node and a loss node");
    for (int v = 0; v < n; ++v) {
      for (const NodeExec::Binding& b : s.execs[static_cast<size_t>(v)].binds) {
        const int64_t end_bytes = (Elements(b.tensor->dims) + b.offset) * static_cast<int64_t>(sizeof(float));
        if (end_bytes > e.bytes_[static_cast<size_t>(b.node)]) {
          return InvalidArgument("node " + std::to_string(v) + " reads up to byte " + std::to_string(end_bytes) +
                                 " of node " + std::to_string(b.node) + ", whose output has " +
                                 std::to_string(e.bytes_[static_cast<size_t>(b.node)]) + " B");
        }
      }
    }
    return Status::Ok();
  }

  // Layer state: what each layer allocated for itself besides its parameters and their gradients,
  // and its tensors that no node binds to the arena (a gradient added from the layer's own storage),
  // which keep their own storage. A gradient tensor no pass of the step uses is freed: a frozen
  // layer's parameter gradients, and the dX and dY of a layer whose passes do not run.
  Status CountLayerState() {
    std::set<const kernels::Tensor*> bound, added;
    for (const NodeExec& exec : s.execs) {
      for (const NodeExec::Accumulation& add : exec.adds) added.insert(add.from);
    }
    for (const NodeExec& exec : s.execs) {
      for (const NodeExec::Binding& b : exec.binds) {
        bound.insert(b.tensor);  // the arena holds it (BindNodes freed the layer's copy)
      }
    }
    for (int v = 0; v < n; ++v) {
      for (const NodeExec::Accumulation& add : s.execs[static_cast<size_t>(v)].adds) {
        if (bound.count(add.from) || static_cast<int64_t>(add.from->data.size()) != Elements(add.from->dims)) {
          return Internal("node " + std::to_string(v) + " adds a gradient its layer does not keep in its own storage");
        }
      }
    }
    for (int f = 0; f < static_cast<int>(s.layers.size()); ++f) {
      const std::unique_ptr<kernels::Layer>& layer = s.layers[static_cast<size_t>(f)];
      if (!layer) continue;
      uint64_t state = layer->owned_bytes();
      for (kernels::Tensor* p : layer->params()) state -= p->bytes();
      for (int i = 0; i < static_cast<int>(layer->grad_params().size()); ++i) {
        kernels::Tensor* p = layer->grad_params()[static_cast<size_t>(i)];
        const auto bytes = static_cast<uint64_t>(Elements(p->dims)) * sizeof(float);  // its storage may be released
        state -= bytes;
        if (!written.contains({f, i})) {
          std::vector<float>().swap(p->data);
          continue;
        }
        if (!bound.count(p)) e.grad_param_bytes_ += bytes;  // else in the arena
      }
      std::vector<kernels::Tensor*> unused;
      if (!has_backward[static_cast<size_t>(f)]) unused.push_back(&layer->grad_output());
      if (!runs_input_pass[static_cast<size_t>(f)]) {
        for (kernels::Tensor& t : layer->grad_inputs()) unused.push_back(&t);
      }
      for (kernels::Tensor* t : unused) {
        if (!bound.count(t) && !added.count(t)) layer->Release(*t);
      }
      std::vector<kernels::Tensor*> bindable = {&layer->output(), &layer->grad_output()};
      for (kernels::Tensor& t : layer->inputs()) bindable.push_back(&t);
      for (kernels::Tensor& t : layer->grad_inputs()) bindable.push_back(&t);
      for (const kernels::Tensor* t : bindable) {
        if (!bound.count(t)) state += t->bytes();
      }
      e.layer_state_bytes_ += state;
    }
    // oneDNN's scratchpad: one buffer for every layer, the largest need (kernels::Backend).
    e.scratchpad_bytes_ = s.backend.scratchpad_bytes();
    e.layer_state_bytes_ += e.scratchpad_bytes_;
    return Status::Ok();
  }

  // Tied weights (tied_node, tied_param): a copy of the owner's parameter that trains with it.
  Status TieWeights() {
    for (int v = 0; v < n; ++v) {
      const auto& attrs = graph.nodes(v).attributes();
      const auto tied = attrs.find("tied_node"), param = attrs.find("tied_param");
      if (tied == attrs.end() || graph.nodes(v).phase() == v1::PHASE_BACKWARD) continue;
      const std::string label = "node " + std::to_string(v) + " ('" + graph.nodes(v).name() + "')";
      const int64_t owner = tied->second, owner_param = param == attrs.end() ? 0 : param->second;
      kernels::Layer* layer = s.layers[static_cast<size_t>(v)].get();
      kernels::Layer* owner_layer = owner >= 0 && owner < v ? s.layers[static_cast<size_t>(owner)].get() : nullptr;
      if (!layer || !owner_layer || layer->params().empty() || owner_param < 0 ||
          owner_param >= static_cast<int64_t>(owner_layer->params().size()) ||
          layer->params()[0]->size() != owner_layer->params()[static_cast<size_t>(owner_param)]->size()) {
        return InvalidArgument(label + " ties its weight to a parameter of node " + std::to_string(owner) +
                               " that it cannot share (no such layer or parameter, or another size)");
      }
      const bool trains = std::count(s.trained.begin(), s.trained.end(), std::pair<int, int>{v, 0}) > 0;
      const bool owner_trains =
          std::count(s.trained.begin(), s.trained.end(),
                     std::pair<int, int>{static_cast<int>(owner), static_cast<int>(owner_param)}) > 0;
      if (trains != owner_trains) {
        return InvalidArgument(label + " shares its weight with node " + std::to_string(owner) +
                               ", and only one of them trains; train both (or neither)");
      }
      layer->params()[0]->data = owner_layer->params()[static_cast<size_t>(owner_param)]->data;
      if (trains) s.ties.push_back({v, static_cast<int>(owner), static_cast<int>(owner_param)});
    }
    return Status::Ok();
  }
};

Result<std::unique_ptr<Executor>> Executor::Create(const v1::TrainingGraph& graph, const ExecutorOptions& options) {
  if (graph.derivation() != "exact") {
    return InvalidArgument("the executor runs graphs of the exact derivation (--derivation exact); '" +
                           graph.derivation() + "' has gradient nodes that are not real gradients");
  }
  std::unique_ptr<Executor> e(new Executor());
  e->graph_ = graph;
  e->options_ = options;
  e->state_ = std::make_unique<State>();
  State& s = *e->state_;
  Builder builder(e->graph_, *e);
  EC_RETURN_IF_ERROR(builder.ReadEdges());
  EC_RETURN_IF_ERROR(builder.FindTrainedLayers());
  EC_RETURN_IF_ERROR(builder.FindGradients());
  EC_RETURN_IF_ERROR(builder.BindNodes(options.seed));
  EC_RETURN_IF_ERROR(builder.CheckBindings());
  EC_RETURN_IF_ERROR(builder.CountLayerState());
  s.trained.assign(builder.trained.begin(), builder.trained.end());
  builder.PlanUpdates();
  EC_RETURN_IF_ERROR(builder.TieWeights());
  EC_RETURN_IF_ERROR(e->SetOptimizer({}));
  s.arena = std::make_unique<Arena>(builder.n);
  s.plain = PlainPlan(e->preds_);
  s.origin_s = SteadyNowS();
  return e;
}

int64_t Executor::input_elements() const { return bytes_[static_cast<size_t>(state_->input_node)] / 4; }
std::vector<int64_t> Executor::input_dims() const {
  const auto& dims = graph_.nodes(state_->input_node).output_shape().dims();
  return {dims.begin(), dims.end()};
}
int64_t Executor::label_rows() const { return state_->label_rows; }
int64_t Executor::classes() const { return state_->classes; }
int64_t Executor::input_id_limit() const { return state_->input_id_limit; }

Status Executor::SetBatch(const Batch& batch) {
  State& s = *state_;
  if (static_cast<int64_t>(batch.inputs.size()) != input_elements()) {
    return InvalidArgument("the batch has " + std::to_string(batch.inputs.size()) + " input values; the model takes " +
                           std::to_string(input_elements()));
  }
  EC_RETURN_IF_ERROR(s.execs[static_cast<size_t>(s.loss_node)].layer->SetLabels(batch.labels));
  s.batch = batch;
  return Status::Ok();
}

Status Executor::Bind(const NodeExec& exec) {
  for (const NodeExec::Binding& b : exec.binds) {
    float* data = state_->arena->Get(b.node);
    if (!data) return Internal("node " + std::to_string(b.node) + " has no buffer when it is read");
    exec.layer->Bind(*b.tensor, data + b.offset);
  }
  return Status::Ok();
}

Status Executor::Compute(int k, int stage, StepStats& stats) {
  State& s = *state_;
  const size_t ki = static_cast<size_t>(k);
  const double wait_start = SteadyNowS();
  double waited = 0;
  for (int u : preds_[ki]) {
    if (s.pager) EC_RETURN_IF_ERROR(s.pager->WaitRead(u, &waited));
    if (!s.arena->Live(u)) {
      return Internal("stage " + std::to_string(stage) + ": node " + std::to_string(k) + " reads node " +
                      std::to_string(u) + ", which is neither resident nor computed");
    }
  }
  if (s.pager) EC_RETURN_IF_ERROR(s.pager->WaitAll(k, &waited));
  if (waited > 0) {
    stats.paging_wait_s += waited;
    if (options_.trace) stats.events.push_back({k, TraceEvent::Kind::kWait, wait_start - s.origin_s, waited});
  }
  if (bytes_[ki] > 0 && !s.arena->Live(k)) {
    Result<float*> buffer = s.arena->Allocate(k, static_cast<uint64_t>(bytes_[ki]));
    if (!buffer.ok()) {
      return Internal("stage " + std::to_string(stage) + ": holding node " + std::to_string(k) +
                      " would exceed the planned peak: " + buffer.status().message());
    }
  }
  const NodeExec& exec = s.execs[ki];
  const double start = SteadyNowS();
  switch (exec.kind) {
    case NodeExec::Kind::kNone:
      break;
    case NodeExec::Kind::kInput:
      std::memcpy(s.arena->Get(k), s.batch.inputs.data(), s.batch.inputs.size() * sizeof(float));
      break;
    case NodeExec::Kind::kLayer: {
      EC_RETURN_IF_ERROR(Bind(exec));
      const kernels::TeamScope team(exec.team_threads);
      if (exec.zero_output) std::memset(s.arena->Get(k), 0, static_cast<size_t>(bytes_[ki]));
      switch (exec.pass) {
        case Pass::kForward:
          exec.layer->Forward();
          // A recomputation sees the same batch: its statistics count once per step.
          if (!s.stats_updated[ki]) {
            exec.layer->UpdateRunningStats();
            s.stats_updated[ki] = true;
          }
          break;
        case Pass::kGradSum:
          exec.layer->Forward();
          break;
        case Pass::kBackwardInput:
          exec.layer->BackwardInput();
          break;
        case Pass::kBackwardWeights:
          exec.layer->BackwardWeights();
          break;
        case Pass::kBackwardBias:
          exec.layer->BackwardBias();
          break;
        case Pass::kNone:
        case Pass::kBackwardAll:
          return Internal("node " + std::to_string(k) + " has no pass to run");
      }
      for (const NodeExec::Accumulation& add : exec.adds) {
        const NodeExec::Binding& b = exec.binds[add.into];
        float* into = s.arena->Get(b.node) + b.offset;
        const float* from = add.from->data.data();
        const size_t count = add.from->data.size();
        for (size_t i = 0; i < count; ++i) into[i] += from[i];
      }
      if (exec.loss) s.loss = static_cast<double>(s.arena->Get(k)[0]);
      break;
    }
  }
  const double end = SteadyNowS();
  stats.node_s[ki] += end - start;
  ++stats.node_runs[ki];
  if (k != stage) ++stats.recomputations;
  if (options_.trace) {
    stats.events.push_back(
        {k, k == stage ? TraceEvent::Kind::kCompute : TraceEvent::Kind::kRecompute, start - s.origin_s, end - start});
  }
  return Status::Ok();
}

Status Executor::Release(int node, StepStats& stats) {
  State& s = *state_;
  if (s.pager) {
    const double start = SteadyNowS();
    double waited = 0;
    EC_RETURN_IF_ERROR(s.pager->WaitAll(node, &waited));
    if (waited > 0) {
      stats.paging_wait_s += waited;
      if (options_.trace) stats.events.push_back({node, TraceEvent::Kind::kWait, start - s.origin_s, waited});
    }
  }
  s.arena->Free(node);
  return Status::Ok();
}

Result<StepStats> Executor::Step(const solver::Plan* plan) {
  if (options_.update_in_backward) {
    return FailedPrecondition(
        "this executor updates each layer in the backward pass and frees its gradients there: call TrainStep");
  }
  return Run(plan, std::nullopt);
}

Result<StepStats> Executor::TrainStep(const solver::Plan* plan, double lr) {
  if (options_.update_in_backward) return Run(plan, lr);
  EC_ASSIGN_OR_RETURN(StepStats stats, Run(plan, std::nullopt));
  const double start = SteadyNowS();
  Update(lr);
  stats.update_s = SteadyNowS() - start;
  if (options_.trace) stats.events.push_back({-1, TraceEvent::Kind::kUpdate, start - state_->origin_s, stats.update_s});
  return stats;
}

// Laid out once per schedule, with the check that no node reads a weight after its update.
Status Executor::LayOutPlan(const solver::Plan& plan) {
  State& s = *state_;
  const int n = plan.size();
  s.planned = PlanMemory(bytes_, preds_, plan);
  s.layout = LayOut(bytes_, preds_, plan);
  s.laid_out = plan;
  s.stages.assign(static_cast<size_t>(n), {});
  for (int t = 0; t < n; ++t) {
    State::Stage& stage = s.stages[static_cast<size_t>(t)];
    for (int k = 0; k <= t; ++k) {
      if (!plan.compute[t][k]) continue;
      stage.computes.push_back(k);
      std::vector<int>& released = stage.releases.emplace_back();
      for (int u : preds_[static_cast<size_t>(k)]) {
        if (t + 1 < n && plan.resident[t + 1][u]) continue;
        bool used_later = false;
        for (int v : s.succs[static_cast<size_t>(u)]) used_later = used_later || (v > k && v <= t && plan.compute[t][v]);
        if (!used_later) released.push_back(u);
      }
    }
  }
  s.laid_out_pages = false;
  for (int t = 0; t < n && !s.laid_out_pages; ++t) {
    for (int i = 0; i < n && !s.laid_out_pages; ++i) s.laid_out_pages = plan.page_in[t][i] || plan.page_out[t][i];
  }
  s.plan_keeps_weights = PlaceUpdates(plan);
  return s.plan_keeps_weights.ok() ? Status::Ok() : s.plan_keeps_weights;
}

// Each layer is updated after its anchor's last computation (a recomputed anchor reads the old
// weights too), where its gradient must still be held, and no node reads its weights later.
Status Executor::PlaceUpdates(const solver::Plan& plan) {
  State& s = *state_;
  const int n = plan.size();
  s.update_stage.assign(static_cast<size_t>(n), -1);
  const std::string resolve = ": solve the schedule with updates in the backward pass (--update-in-backward)";
  for (int f = 0; f < n && options_.update_in_backward; ++f) {
    const int anchor = s.update_anchor[static_cast<size_t>(f)];
    if (anchor < 0) continue;
    int last = anchor;
    for (int t = anchor + 1; t < n; ++t) last = plan.compute[t][anchor] ? t : last;
    s.update_stage[static_cast<size_t>(anchor)] = last;
    for (int g : preds_[static_cast<size_t>(anchor)]) {
      if (!s.grad_in_arena_node[static_cast<size_t>(g)]) continue;
      for (int t = anchor; t <= last; ++t) {
        if (plan.compute[t][anchor] && !plan.resident[t][g] && !plan.compute[t][g]) {
          return FailedPrecondition("stage " + std::to_string(t) + " computes node " + std::to_string(anchor) +
                                    " without the gradients of node " + std::to_string(g) + " ('" +
                                    graph_.nodes(g).name() + "'), which its layer's update needs" + resolve);
        }
      }
    }
    for (int t = last + 1; t < n; ++t) {
      for (int u : s.weight_readers[static_cast<size_t>(f)]) {
        if (!plan.compute[t][u]) continue;
        return FailedPrecondition("stage " + std::to_string(t) + " computes node " + std::to_string(u) + " ('" +
                                  graph_.nodes(u).name() + "') after its layer's update in stage " +
                                  std::to_string(last) + ", with the new weights" + resolve);
      }
    }
  }
  return Status::Ok();
}

void Executor::ApplyUpdates(const std::vector<size_t>& params, double lr, int node, StepStats& stats) {
  if (params.empty()) return;
  State& s = *state_;
  const double start = SteadyNowS();
  const auto scale = static_cast<float>(1.0 / static_cast<double>(std::max<int64_t>(1, s.label_rows)));
  for (size_t i : params) {
    const auto [f, index] = s.trained[i];
    kernels::Layer& layer = *s.layers[static_cast<size_t>(f)];
    const State::GradAt& at = s.grad_at[i];
    const std::span<const float> grad =
        at.node < 0 ? std::span<const float>(layer.grad_params()[static_cast<size_t>(index)]->data)
                    : std::span<const float>(s.arena->Get(at.node) + at.offset, static_cast<size_t>(at.elements));
    s.optimizer->Apply(i, {UpdatedValues(layer, index), grad}, scale, lr);
  }
  const double end = SteadyNowS();
  stats.update_s += end - start;
  if (options_.trace) stats.events.push_back({node, TraceEvent::Kind::kUpdate, start - s.origin_s, end - start});
}

Result<StepStats> Executor::Run(const solver::Plan* plan_or_null, std::optional<double> update_lr) {
  State& s = *state_;
  const solver::Plan& plan = plan_or_null ? *plan_or_null : s.plain;
  const int n = graph_.nodes_size();
  if (plan.size() != n) {
    return InvalidArgument("the schedule has " + std::to_string(plan.size()) + " stages for " + std::to_string(n) +
                           " nodes");
  }
  if (s.batch.inputs.empty()) return FailedPrecondition("no batch: call SetBatch first");
  // Laid out once per schedule. The plain plan never changes, so a plain step after a plain step
  // skips comparing the n x n matrices (with the paging scan, ~1 ms a step for MobileNetV2's 361
  // nodes: a fifth of a small model's step).
  const bool plain = plan_or_null == nullptr || plan_or_null == &s.plain;
  if (!(plain && s.laid_out_plain) && (!s.laid_out || !SamePlan(*s.laid_out, plan))) {
    EC_RETURN_IF_ERROR(LayOutPlan(plan));
  }
  EC_RETURN_IF_ERROR(s.plan_keeps_weights);
  s.laid_out_plain = plain;
  const bool pages = s.laid_out_pages;
  // A pager whose I/O failed is replaced: its files go with it, and the next step starts clean.
  if (s.pager_storage && !s.pager_storage->Healthy()) s.pager_storage.reset();
  if (pages && !s.pager_storage) {
    if (options_.paging_dir.empty()) return FailedPrecondition("the schedule pages but no paging directory is set");
    EC_ASSIGN_OR_RETURN(s.pager_storage, Pager::Start(options_.paging_dir, *s.arena, s.origin_s));
  }
  s.pager = pages ? s.pager_storage.get() : nullptr;
  const PlannedMemory& planned = s.planned;
  EC_RETURN_IF_ERROR(s.arena->BeginStep(s.layout));
  if (s.pager) {
    s.pager->TakeStats();
    s.pager->TakeEvents();
  }
  StepStats stats;
  stats.planned_peak_bytes = static_cast<uint64_t>(planned.peak_bytes);
  stats.node_s.assign(static_cast<size_t>(n), 0.0);
  stats.node_runs.assign(static_cast<size_t>(n), 0);
  s.loss = 0;
  const double start = SteadyNowS();  // the step's own preparations count too
  const double cpu_start = ThreadCpuS();
  for (const std::unique_ptr<kernels::Layer>& layer : s.layers) {
    if (layer) layer->SetTrainingStep(static_cast<uint64_t>(s.updates));
  }
  s.stats_updated.assign(static_cast<size_t>(n), false);
  if (update_lr) s.optimizer->BeginStep();
  Status status = Status::Ok();
  for (int t = 0; t < n && status.ok(); ++t) {
    const bool has_next = t + 1 < n;
    const std::vector<int64_t>& rest = planned.rest_peak_bytes[static_cast<size_t>(t)];
    if (s.pager) {
      s.pager->SetStage(t, static_cast<uint64_t>(rest[0]));
      for (int i = 0; i < n; ++i) {
        if (!plan.page_out[t][i]) continue;
        if (!s.arena->Live(i)) {
          status = Internal("stage " + std::to_string(t) + " pages out node " + std::to_string(i) +
                            ", which is not resident");
          break;
        }
        s.pager->PageOut(i, t);
      }
      for (int i = 0; i < n; ++i) {
        if (plan.page_in[t][i]) s.pager->PageIn(i, t, static_cast<uint64_t>(bytes_[static_cast<size_t>(i)]));
      }
    }
    const State::Stage& stage = s.stages[static_cast<size_t>(t)];
    for (size_t j = 0; j < stage.computes.size() && status.ok(); ++j) {
      const int k = stage.computes[j];
      if (s.pager) s.pager->SetReserve(static_cast<uint64_t>(rest[j]));
      status = Compute(k, t, stats);
      if (!status.ok()) break;
      if (update_lr && s.update_stage[static_cast<size_t>(k)] == t) {
        ApplyUpdates(s.updates_after[static_cast<size_t>(k)], *update_lr, k, stats);
      }
      for (int u : stage.releases[j]) {
        status = Release(u, stats);
        if (!status.ok()) break;
      }
    }
    // What the next stage does not keep. Without a pager only this thread allocates, so the live
    // nodes (a few dozen) stand for all n (each Live a lock: n^2 of them a step cost MobileNetV2 ~5%).
    if (s.pager) {
      for (int i = 0; i < n && status.ok(); ++i) {
        if (s.arena->Live(i) && !(has_next && plan.resident[t + 1][i])) status = Release(i, stats);
      }
    } else {
      s.arena->LiveNodes(s.live);
      for (int i : s.live) {
        if (!status.ok()) break;
        if (!(has_next && plan.resident[t + 1][i])) status = Release(i, stats);
      }
    }
  }
  if (s.pager) {
    double waited = 0;
    const Status drained = s.pager->Drain(&waited);
    stats.paging_wait_s += waited;
    if (status.ok()) status = drained;
  }
  // Nothing stays between steps, not even after a failure.
  for (int i = 0; i < n; ++i) s.arena->Free(i);
  if (!status.ok()) return status;
  // A tied weight's gradient is the sum over its uses, in both copies.
  for (const State::Tie& tie : s.ties) {
    std::vector<float>& a = s.layers[static_cast<size_t>(tie.owner)]->grad_params()[static_cast<size_t>(tie.owner_param)]->data;
    std::vector<float>& b = s.layers[static_cast<size_t>(tie.node)]->grad_params()[0]->data;
    for (size_t i = 0; i < a.size(); ++i) a[i] = b[i] = a[i] + b[i];
  }
  if (update_lr) {
    ApplyUpdates(s.updates_at_end, *update_lr, -1, stats);
    ++s.updates;
  }
  stats.runtime_s = SteadyNowS() - start;
  stats.cpu_s = ThreadCpuS() - cpu_start;
  stats.loss = s.loss / static_cast<double>(std::max<int64_t>(1, s.label_rows));
  stats.peak_activation_bytes = s.arena->peak_bytes();
  if (s.pager) {
    const PagerStats io = s.pager->TakeStats();
    stats.paged_out_bytes = io.paged_out_bytes;
    stats.paged_in_bytes = io.paged_in_bytes;
    stats.page_outs = io.page_outs;
    stats.page_ins = io.page_ins;
    stats.page_out_s = io.page_out_s;
    stats.page_in_s = io.page_in_s;
    if (options_.trace) {
      for (const IoEvent& io_event : s.pager->TakeEvents()) {
        stats.events.push_back({io_event.node,
                                io_event.page_out ? TraceEvent::Kind::kPageOut : TraceEvent::Kind::kPageIn,
                                io_event.start_s, io_event.duration_s});
      }
    }
  }
  return stats;
}

Status Executor::SetOptimizer(const OptimizerOptions& options) {
  EC_RETURN_IF_ERROR(ValidateOptimizer(options));
  State& s = *state_;
  std::vector<size_t> elements;
  for (const auto& [node, index] : s.trained) {
    elements.push_back(UpdatedValues(*s.layers[static_cast<size_t>(node)], index).size());
  }
  s.optimizer = std::make_unique<Optimizer>(options, elements);
  return Status::Ok();
}

void Executor::Update(double lr) {
  if (options_.update_in_backward) return;  // TrainStep updated inside the step
  State& s = *state_;
  std::vector<ParamSlot> slots;
  slots.reserve(s.trained.size());
  for (const auto& [node, index] : s.trained) {
    kernels::Layer& layer = *s.layers[static_cast<size_t>(node)];
    slots.push_back(
        {UpdatedValues(layer, index), layer.grad_params()[static_cast<size_t>(index)]->data});
  }
  s.optimizer->Step(slots, static_cast<float>(1.0 / static_cast<double>(std::max<int64_t>(1, s.label_rows))), lr);
  ++s.updates;
}

int64_t Executor::updates() const { return state_->updates; }

Optimizer& Executor::optimizer() { return *state_->optimizer; }

void Executor::RestoreUpdates(int64_t updates) {
  state_->updates = updates;
  state_->optimizer->set_steps_taken(updates);
}

uint64_t Executor::trained_param_bytes() const {
  uint64_t bytes = 0;
  for (const auto& [node, index] : state_->trained) {
    bytes += UpdatedValues(*state_->layers[static_cast<size_t>(node)], index).size_bytes();
  }
  return bytes;
}

uint64_t Executor::optimizer_state_bytes() const { return state_->optimizer->state_bytes(); }

std::vector<float>* Executor::Parameter(int node, int index) {
  const auto& trained = state_->trained;
  if (std::find(trained.begin(), trained.end(), std::pair<int, int>{node, index}) == trained.end()) return nullptr;
  return &state_->layers[static_cast<size_t>(node)]->params()[static_cast<size_t>(index)]->data;
}

kernels::Tensor* Executor::LayerParameter(int node, int index) {
  if (node < 0 || static_cast<size_t>(node) >= state_->layers.size() || !state_->layers[static_cast<size_t>(node)] ||
      index < 0) {
    return nullptr;
  }
  std::vector<kernels::Tensor*>& params = state_->layers[static_cast<size_t>(node)]->params();
  return static_cast<size_t>(index) < params.size() ? params[static_cast<size_t>(index)] : nullptr;
}

kernels::Tensor* Executor::RunningStat(int node, int index) {
  if (node < 0 || static_cast<size_t>(node) >= state_->layers.size() || !state_->layers[static_cast<size_t>(node)] ||
      index < 0) {
    return nullptr;
  }
  std::vector<kernels::Tensor*> stats = state_->layers[static_cast<size_t>(node)]->running_stats();
  return static_cast<size_t>(index) < stats.size() ? stats[static_cast<size_t>(index)] : nullptr;
}

int64_t* Executor::BatchesTracked(int node) {
  if (node < 0 || static_cast<size_t>(node) >= state_->layers.size() || !state_->layers[static_cast<size_t>(node)]) {
    return nullptr;
  }
  return state_->layers[static_cast<size_t>(node)]->batches_tracked();
}

Result<EvalStats> Executor::Evaluate(const Batch& batch, int64_t rows) {
  State& s = *state_;
  if (static_cast<int64_t>(batch.inputs.size()) != input_elements()) {
    return InvalidArgument("the held-out batch has " + std::to_string(batch.inputs.size()) +
                           " input values; the model takes " + std::to_string(input_elements()));
  }
  if (rows < 0 || rows > s.label_rows || static_cast<int64_t>(batch.labels.size()) < rows) {
    return InvalidArgument("the held-out batch counts " + std::to_string(rows) + " rows of " +
                           std::to_string(batch.labels.size()) + " labels; the model's batch has " +
                           std::to_string(s.label_rows));
  }
  // Forward nodes up to the loss's input, each on a buffer freed after its last forward reader.
  const int logits_node = static_cast<int>(graph_.nodes(s.loss_node).inputs(0));
  std::vector<int> last_reader(static_cast<size_t>(s.loss_node), -1);
  for (int v = 0; v < s.loss_node; ++v) {
    for (int u : preds_[static_cast<size_t>(v)]) last_reader[static_cast<size_t>(u)] = v;
  }
  std::vector<std::vector<float>> buffers(static_cast<size_t>(s.loss_node));
  for (int v = 0; v <= logits_node; ++v) {
    const v1::TrainingNode& node = graph_.nodes(v);
    if (node.phase() == v1::PHASE_BACKWARD) continue;
    buffers[static_cast<size_t>(v)].resize(static_cast<size_t>(bytes_[static_cast<size_t>(v)] / 4));
    const NodeExec& exec = s.execs[static_cast<size_t>(v)];
    if (exec.kind == NodeExec::Kind::kInput) {
      std::copy(batch.inputs.begin(), batch.inputs.end(), buffers[static_cast<size_t>(v)].begin());
    } else if (exec.kind == NodeExec::Kind::kLayer) {
      for (const NodeExec::Binding& b : exec.binds) {
        std::vector<float>& buffer = buffers[static_cast<size_t>(b.node)];
        if (buffer.empty())
          return Internal("node " + std::to_string(v) + " reads node " + std::to_string(b.node) +
                          ", which the forward pass has not computed");
        exec.layer->Bind(*b.tensor, buffer.data() + b.offset);
      }
      exec.layer->ForwardInference();
    }
    for (int u : preds_[static_cast<size_t>(v)]) {
      if (last_reader[static_cast<size_t>(u)] == v && u != logits_node) std::vector<float>().swap(buffers[u]);
    }
  }
  // Cross-entropy and argmax of each counted row of the logits, in double as the loss layer sums.
  const std::vector<float>& logits = buffers[static_cast<size_t>(logits_node)];
  const int64_t classes = s.classes;
  EvalStats stats;
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = logits.data() + r * classes;
    const int32_t label = batch.labels[static_cast<size_t>(r)];
    if (label < 0 || label >= classes) {
      return InvalidArgument("held-out label " + std::to_string(label) + " is outside the model's " +
                             std::to_string(classes) + " classes");
    }
    const int64_t argmax = std::max_element(row, row + classes) - row;
    double denominator = 0;
    for (int64_t c = 0; c < classes; ++c) denominator += std::exp(static_cast<double>(row[c] - row[argmax]));
    stats.loss_sum += std::log(denominator) - static_cast<double>(row[label] - row[argmax]);
    stats.correct += argmax == label;
    ++stats.rows;
  }
  return stats;
}

double Executor::ClockS() const { return SteadyNowS() - state_->origin_s; }

std::vector<ParamGradient> Executor::Gradients() const {
  std::vector<ParamGradient> out;
  for (const auto& [node, index] : state_->trained) {
    const kernels::Layer& layer = *state_->layers[static_cast<size_t>(node)];
    out.push_back({node, index, const_cast<kernels::Layer&>(layer).grad_params()[static_cast<size_t>(index)]->data});
  }
  return out;
}

}  // namespace edgecost::train
