#include "graph/derive.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <optional>
#include <vector>

#include "graph/layouts.h"
#include "graph/zoo.h"

namespace edgecost::graph {
namespace {

using v1::Phase;

bool OwnsParameters(const Layer& layer) { return layer.param_count > 0; }

// Whether `name` names the layer at forward `index` from `module`: its node name's "layerN", its
// module, or a module it lies inside.
// A --trainable layers: entry's name without its share ("features.3:0.25").
std::string_view BaseName(std::string_view entry) { return entry.substr(0, entry.find(':')); }

bool NamesLayer(std::string_view entry, int index, const std::string& module) {
  const std::string_view name = BaseName(entry);
  if (name == "layer" + std::to_string(index)) return true;
  return !module.empty() && module.starts_with(name) && (module.size() == name.size() || module[name.size()] == '.');
}

// The layers with parameters that `--trainable layers:...` names; each name must name one.
Result<std::vector<bool>> NamedLayers(const ForwardGraph& forward, const std::vector<std::string>& names) {
  const auto& layers = forward.layers();
  std::vector<bool> trains(layers.size(), false);
  for (const std::string& name : names) {
    bool found = false;
    for (int i = 0; i < forward.size(); ++i) {
      if (OwnsParameters(layers[i]) && NamesLayer(name, i, layers[i].module)) trains[i] = found = true;
    }
    if (found) continue;
    std::string some;
    for (int i = 0, listed = 0; i < forward.size() && listed < 8; ++i) {
      if (!OwnsParameters(layers[i])) continue;
      some += (listed++ ? ", " : "") + (layers[i].module.empty() ? "layer" + std::to_string(i) : layers[i].module);
    }
    return InvalidArgument("--trainable layers: '" + std::string(BaseName(name)) + "' names no layer with parameters in '" +
                           forward.model() + "'; layers with parameters include " + some +
                           " (`edgecost graph MODEL` lists them all)");
  }
  return trains;
}

// Which forward layers have trainable parameters under `trainable`.
Result<std::vector<bool>> TrainableLayers(const ForwardGraph& forward, const Trainable& trainable) {
  if (trainable.mode == Trainable::Mode::kLayers) return NamedLayers(forward, trainable.layers);
  const auto& layers = forward.layers();
  std::vector<bool> trains(layers.size(), false);
  int remaining = trainable.last_k;
  for (int i = forward.size() - 1; i >= 0; --i) {
    switch (trainable.mode) {
      case Trainable::Mode::kAll:
        trains[i] = OwnsParameters(layers[i]);
        break;
      case Trainable::Mode::kBias:
        trains[i] = layers[i].bias_count > 0;
        break;
      case Trainable::Mode::kLastK:
        if (OwnsParameters(layers[i]) && remaining > 0) {
          trains[i] = true;
          --remaining;
        }
        break;
      case Trainable::Mode::kLayers:
        break;  // NamedLayers
    }
  }
  return trains;
}

std::string ForwardName(int index, const Layer& layer) {
  return "layer" + std::to_string(index) + "_" + std::string(PoetClassName(layer.kind));
}

int64_t Bytes(const Shape& shape) { return NumElements(shape) * kBytesPerElement; }

// Appends nodes to a TrainingGraph, keeping index, inputs and bytes consistent.
class GraphWriter {
 public:
  explicit GraphWriter(v1::TrainingGraph* graph) : graph_(graph) {}

  int size() const { return graph_->nodes_size(); }

  v1::TrainingNode& Add(std::string name, Phase phase, std::string_view kind, const Shape& shape, int64_t output_bytes,
                        const std::vector<int>& inputs, double flops) {
    v1::TrainingNode* node = graph_->add_nodes();
    node->set_index(static_cast<uint32_t>(graph_->nodes_size() - 1));
    node->set_name(std::move(name));
    node->set_phase(phase);
    node->set_op_kind(std::string(kind));
    for (int64_t d : shape) node->mutable_output_shape()->add_dims(d);
    node->set_output_bytes(static_cast<uint64_t>(output_bytes));
    for (int input : inputs) node->add_inputs(static_cast<uint32_t>(input));
    node->set_forward_of(-1);
    node->set_flops(flops);
    return *node;
  }

  // A backward node differentiating forward node `of`.
  int AddGrad(std::string name, std::string_view kind, GradRole role, const Shape& shape, int64_t output_bytes,
              const std::vector<int>& inputs, int of, double flops) {
    v1::TrainingNode& node = Add(std::move(name), v1::PHASE_BACKWARD, kind, shape, output_bytes, inputs, flops);
    node.set_forward_of(of);
    node.set_role(std::string(GradRoleName(role)));
    return static_cast<int>(node.index());
  }

 private:
  v1::TrainingGraph* graph_;
};

void AddForwardNodes(const ForwardGraph& forward, GraphWriter& out, v1::TrainingGraph& graph) {
  uint64_t param_count = 0;
  const std::vector<bool> channels_last = ChannelsLastOutputs(forward);
  for (int i = 0; i < forward.size(); ++i) {
    const Layer& layer = forward.layers()[i];
    const bool loss = layer.kind == OpKind::kCrossEntropyLoss;
    v1::TrainingNode& node =
        out.Add(ForwardName(i, layer), loss ? v1::PHASE_LOSS : v1::PHASE_FORWARD, OpKindName(layer.kind),
                layer.output_shape, Bytes(layer.output_shape), layer.inputs, layer.flops);
    node.set_param_count(static_cast<uint64_t>(layer.param_count));
    node.set_module(layer.module);
    std::map<std::string, int64_t> attributes = layer.attributes;
    SetChannelsLastAttributes(forward, i, channels_last, attributes);
    for (const auto& [key, value] : attributes) (*node.mutable_attributes())[key] = value;
    param_count += static_cast<uint64_t>(layer.param_count);
  }
  graph.set_param_bytes(param_count * kBytesPerElement);
}

// POET: GradientLayer(out_layer=L_j, inputs=[L_{j+1}], grad_outputs=previous node) for j = n-2 .. 0.
// Training everything keeps POET's chain down to the input layer; otherwise it stops below the
// lowest trainable layer.
void AddPoetBackward(const ForwardGraph& forward, const std::vector<bool>& trains, bool train_all, GraphWriter& out) {
  int lowest = train_all ? 0 : forward.size();
  for (int i = 0; i < lowest; ++i) {
    if (trains[i]) {
      lowest = i;
      break;
    }
  }
  const auto& layers = forward.layers();
  int previous = forward.last();
  for (int j = forward.size() - 2; j >= lowest; --j) {
    const Shape& shape = layers[j + 1].output_shape;
    previous = out.AddGrad("layer" + std::to_string(out.size()) + "_GradientLayer", OpKindName(layers[j].kind),
                           GradRole::kGrad, shape, Bytes(shape), {j, j + 1, previous}, j, 2.0 * layers[j].flops);
  }
}

void AddExactBackward(const ForwardGraph& forward, const std::vector<bool>& trains,
                      const std::vector<int64_t>& updated_channels, bool bias_only, GraphWriter& out) {
  const auto& layers = forward.layers();
  const int n = forward.size();
  // needs_grad[v]: v's output depends on a trainable parameter, so its gradient is needed.
  std::vector<bool> needs_grad(n, false);
  for (int v = 0; v < n; ++v) {
    needs_grad[v] = trains[v];
    for (int in : layers[v].inputs) needs_grad[v] = needs_grad[v] || needs_grad[in];
  }
  // contributions[v]: nodes whose outputs sum to the gradient of v's output.
  std::vector<std::vector<int>> contributions(n);

  const int loss = forward.last();
  const Layer& loss_layer = layers[loss];
  const int logits = loss_layer.inputs.at(0);
  if (needs_grad[logits]) {
    contributions[logits].push_back(out.AddGrad(
        ForwardName(loss, loss_layer) + ".grad", OpKindName(loss_layer.kind), GradRole::kGrad,
        layers[logits].output_shape, Bytes(layers[logits].output_shape), {logits}, loss, 2.0 * loss_layer.flops));
  }

  for (int v = loss - 1; v >= 0; --v) {
    const std::vector<int>& parts = contributions[v];
    if (!needs_grad[v] || parts.empty()) continue;
    const Layer& layer = layers[v];
    const std::string name = ForwardName(v, layer);
    const Shape& y_shape = layer.output_shape;
    const double y_elements = static_cast<double>(NumElements(y_shape));
    const int dy = parts.size() == 1
                       ? parts[0]
                       : out.AddGrad(name + ".grad_sum", "sum", GradRole::kGradSum, y_shape, Bytes(y_shape), parts, v,
                                     y_elements * static_cast<double>(parts.size() - 1));
    if (layer.inputs.empty()) continue;
    const int x = layer.inputs[0];
    const Shape& x_shape = layers[x].output_shape;
    const bool x_needs_grad = needs_grad[x];
    const std::string_view kind = OpKindName(layer.kind);
    // The nodes a backward pass's kernel reads (graph/op_kinds.def), in the order X..., Y, dY.
    auto reads = [&](BackwardPass pass) {
      const TensorReads r = BackwardReads(layer.kind, pass, static_cast<int>(layer.inputs.size()));
      std::vector<int> nodes;
      if (r.lists_x()) nodes = layer.inputs;
      if (r.lists_y()) nodes.push_back(v);
      if (r.dy) nodes.push_back(dy);
      return nodes;
    };
    // One backward node computing dX from `reads`, feeding x's gradient.
    auto grad_input = [&](GradRole role, const std::vector<int>& reads, double flops) {
      contributions[x].push_back(out.AddGrad(name + "." + std::string(GradRoleName(role)), kind, role, x_shape,
                                             Bytes(x_shape), reads, v, flops));
    };

    // One backward node computing the gradients of all inputs that need one (ops of several
    // activations: one oneDNN pass gives them together); its output is all of them.
    auto grad_all_inputs = [&](const std::vector<int>& reads, double flops) {
      std::vector<int> targets;
      int64_t bytes = 0;
      for (int in : layer.inputs) {
        if (!needs_grad[in] || std::find(targets.begin(), targets.end(), in) != targets.end()) continue;
        targets.push_back(in);
        bytes += Bytes(layers[in].output_shape);
      }
      if (targets.empty()) return;
      const int node =
          out.AddGrad(name + ".grad", kind, GradRole::kGrad, layers[targets[0]].output_shape, bytes, reads, v, flops);
      for (int in : targets) contributions[in].push_back(node);
    };

    if (GradientIsView(layer.kind)) {  // dX is dY itself: no node
      for (int in : layer.inputs) {
        if (needs_grad[in]) contributions[in].push_back(dy);
      }
      continue;
    }
    if (DxPassGivesParameterGradients(layer.kind)) {
      // One primitive gives dX and every parameter's gradient (batch and layer norm; recurrent
      // layers backward through time, from X, the hidden states Y and the forward's gates); only dX
      // is an activation. Without dX, a pass of the parameters alone: the biases' where the kind
      // has a bias pass and only biases train.
      if (x_needs_grad) {
        grad_input(GradRole::kGrad, reads(BackwardPass::kInput), 2.0 * layer.flops);
      } else if (trains[v]) {
        const bool bias = bias_only && BackwardReads(layer.kind, BackwardPass::kBias, 1) != TensorReads{};
        out.AddGrad(name + (bias ? ".grad_bias" : ".grad_weight"), kind,
                    bias ? GradRole::kGradBias : GradRole::kGradWeight, {layer.param_count}, 0,
                    reads(bias ? BackwardPass::kBias : BackwardPass::kWeights), v, 2.0 * layer.flops);
      }
      continue;
    }
    switch (layer.kind) {
      case OpKind::kInput:
        break;
      case OpKind::kConv2d:
      case OpKind::kLinear:
      case OpKind::kQkvProjection:
      case OpKind::kLinearRelu: {
        const double relu_flops = layer.kind == OpKind::kLinearRelu ? y_elements : 0.0;
        if (trains[v] && bias_only) {
          out.AddGrad(name + ".grad_bias", kind, GradRole::kGradBias, {layer.bias_count}, 0,
                      reads(BackwardPass::kBias), v, y_elements + relu_flops);
        } else if (trains[v]) {
          // A sparse tensor update computes and holds the gradient of its share of the output channels.
          const int64_t channels = layer.kind == OpKind::kConv2d ? layer.output_shape[1] : layer.output_shape.back();
          const int64_t share = updated_channels[static_cast<size_t>(v)] > 0 ? updated_channels[static_cast<size_t>(v)]
                                                                               : channels;
          out.AddGrad(name + ".grad_weight", kind, GradRole::kGradWeight, {layer.param_count / channels * share}, 0,
                      reads(BackwardPass::kWeights), v,
                      (layer.flops + relu_flops) * static_cast<double>(share) / static_cast<double>(channels));
        }
        if (x_needs_grad) grad_input(GradRole::kGradInput, reads(BackwardPass::kInput), layer.flops + relu_flops);
        break;
      }
      case OpKind::kCrossEntropyLoss:
        break;  // only the last layer is a loss
      // Linear in X: the backward costs one forward.
      case OpKind::kAffine:
      case OpKind::kReduceMean:
      case OpKind::kTranspose:
      case OpKind::kSlice:
      case OpKind::kPad:  // dX is dY's middle
      case OpKind::kResize:      // dX sums dY over the outputs each input reaches, with their weights
      case OpKind::kCausalMask:  // dX = dY where the mask keeps X, else 0
        grad_input(GradRole::kGrad, reads(BackwardPass::kInput), layer.flops);
        break;
      case OpKind::kConcat:
        grad_all_inputs(reads(BackwardPass::kInput), layer.flops);
        break;
      case OpKind::kAddBroadcast:
      case OpKind::kSub:
      case OpKind::kMul:
      case OpKind::kDiv: {
        if (layer.inputs.size() == 2) {  // two activations: one kernel gives both gradients
          grad_all_inputs(reads(BackwardPass::kInput), 2.0 * layer.flops);
          break;
        }
        // An activation and a parameter P: one node for dX, one for dP.
        if (trains[v]) {
          const bool bias = layer.bias_count > 0;
          out.AddGrad(name + (bias ? ".grad_bias" : ".grad_weight"), kind,
                      bias ? GradRole::kGradBias : GradRole::kGradWeight, {layer.param_count}, 0,
                      reads(bias ? BackwardPass::kBias : BackwardPass::kWeights), v, 2.0 * layer.flops);
        }
        if (x_needs_grad) grad_input(GradRole::kGradInput, reads(BackwardPass::kInput), layer.flops);
        break;
      }
      case OpKind::kMatMul:
        grad_all_inputs(reads(BackwardPass::kInput), 2.0 * layer.flops);
        break;
      case OpKind::kEmbedding:
        // Integer ids have no gradient; the table's gradient adds dY's rows at the ids.
        if (trains[v]) {
          out.AddGrad(name + ".grad_weight", kind, GradRole::kGradWeight, {layer.param_count}, 0,
                      reads(BackwardPass::kWeights), v, layer.flops);
        }
        break;
      default:  // one node for dX, costing twice the forward
        grad_input(GradRole::kGrad, reads(BackwardPass::kInput), 2.0 * layer.flops);
        break;
    }
  }
}

}  // namespace

std::string_view GradRoleName(GradRole role) {
  switch (role) {
    case GradRole::kGrad:
      return "grad";
    case GradRole::kGradInput:
      return "grad_input";
    case GradRole::kGradWeight:
      return "grad_weight";
    case GradRole::kGradBias:
      return "grad_bias";
    case GradRole::kGradSum:
      return "grad_sum";
  }
  return "grad";
}

Result<GradRole> ParseGradRole(std::string_view name) {
  for (GradRole role :
       {GradRole::kGrad, GradRole::kGradInput, GradRole::kGradWeight, GradRole::kGradBias, GradRole::kGradSum}) {
    if (GradRoleName(role) == name) return role;
  }
  return InvalidArgument("unknown gradient role '" + std::string(name) + "'");
}

Result<Derivation> ParseDerivation(std::string_view text) {
  if (text == "poet") return Derivation::kPoet;
  if (text == "exact") return Derivation::kExact;
  return InvalidArgument("unknown derivation '" + std::string(text) + "'; use poet or exact");
}

std::string_view DerivationName(Derivation derivation) { return derivation == Derivation::kPoet ? "poet" : "exact"; }

uint64_t ActivationBytes(const v1::TrainingGraph& graph) {
  uint64_t bytes = 0;
  for (const v1::TrainingNode& node : graph.nodes()) {
    if (node.phase() != v1::PHASE_BACKWARD) bytes += node.output_bytes();
  }
  return bytes;
}

namespace {

// The share after a layers: entry's colon: a number in (0, 1]; 1 without one.
Result<double> ParseShare(std::string_view entry) {
  const size_t colon = entry.find(':');
  if (colon == std::string_view::npos) return 1.0;
  const std::string text(entry.substr(colon + 1));
  char* end = nullptr;
  const double share = std::strtod(text.c_str(), &end);
  if (text.empty() || end != text.c_str() + text.size() || !(share > 0 && share <= 1)) {
    return InvalidArgument("--trainable layers: '" + std::string(entry) +
                           "': after the colon, the share of the layer's output channels to update, above 0 and at "
                           "most 1 (features.3:0.25)");
  }
  return share;
}

}  // namespace

Result<Trainable> Trainable::Parse(std::string_view text) {
  if (text == "all") return Trainable{};
  if (text == "bias") return Trainable{Mode::kBias, 0};
  if (text.starts_with("layers:")) {
    Trainable named{Mode::kLayers, 0};
    for (size_t start = 7, comma; start <= text.size(); start = comma + 1) {
      comma = std::min(text.find(',', start), text.size());
      const std::string_view entry = text.substr(start, comma - start);
      const std::string_view name = BaseName(entry);
      if (name.empty() || name.find_first_of(" \t") != std::string_view::npos) {
        return InvalidArgument("--trainable layers: needs module or layer names separated by commas, as in "
                               "layers:classifier,features.12 or layers:layer17; got '" + std::string(text) + "'");
      }
      EC_ASSIGN_OR_RETURN(const double share, ParseShare(entry));
      named.layers.push_back(std::string(name) + (share < 1 ? std::string(entry.substr(name.size())) : ""));
    }
    std::sort(named.layers.begin(), named.layers.end());
    named.layers.erase(std::unique(named.layers.begin(), named.layers.end()), named.layers.end());
    return named;
  }
  if (text.starts_with("last:")) {
    const std::string_view digits = text.substr(5);
    int k = 0;
    const auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), k);
    if (error == std::errc() && end == digits.data() + digits.size() && k >= 1) return Trainable{Mode::kLastK, k};
  }
  return InvalidArgument("unknown --trainable value '" + std::string(text) +
                         "'; use all, last:K (K >= 1 layers with parameters), bias, or layers:NAME,... (modules "
                         "or layerN)");
}

bool Trainable::Names(int index, const std::string& module) const {
  return std::any_of(layers.begin(), layers.end(),
                     [&](const std::string& name) { return NamesLayer(name, index, module); });
}

double Trainable::ChannelShare(int index, const std::string& module) const {
  double share = 0;
  for (const std::string& entry : layers) {
    const Result<double> parsed = ParseShare(entry);  // checked by Parse
    if (NamesLayer(entry, index, module)) share = std::max(share, parsed.ok() ? *parsed : 1.0);
  }
  return share > 0 ? share : 1.0;
}

std::string Trainable::ToString() const {
  switch (mode) {
    case Mode::kAll:
      return "all";
    case Mode::kBias:
      return "bias";
    case Mode::kLastK:
      return "last:" + std::to_string(last_k);
    case Mode::kLayers: {
      std::string text = "layers:";
      for (size_t i = 0; i < layers.size(); ++i) text += (i ? "," : "") + layers[i];
      return text;
    }
  }
  return "all";
}

namespace {

// A sparse tensor update: by forward layer, the output channels whose weights update (0: all). The
// forward node says how many (update_channels), which its kernel's weights pass and gradient node follow.
Result<std::vector<int64_t>> UpdatedChannels(const ForwardGraph& forward, const std::vector<bool>& trains,
                                             const Trainable& trainable, Derivation derivation) {
  std::vector<int64_t> updated_channels(static_cast<size_t>(forward.size()), 0);
  for (int i = 0; i < forward.size(); ++i) {
    const Layer& layer = forward.layers()[i];
    const double share = trains[i] ? trainable.ChannelShare(i, layer.module) : 1.0;
    if (share >= 1) continue;
    const auto groups = layer.attributes.find("groups");
    const bool grouped = groups != layer.attributes.end() && groups->second != 1;
    if (derivation != Derivation::kExact || layer.attributes.count("tied_node") ||
        !((layer.kind == OpKind::kConv2d && !grouped) || layer.kind == OpKind::kLinear ||
          layer.kind == OpKind::kLinearRelu)) {
      return InvalidArgument("--trainable layers: a share of output channels updates a convolution (not grouped) or "
                             "a linear layer whose weight is its own, in the exact derivation; layer " + std::to_string(i) + " ('" +
                             layer.module + "') is " + std::string(OpKindName(layer.kind)));
    }
    const int64_t channels = layer.kind == OpKind::kConv2d ? layer.output_shape[1] : layer.output_shape.back();
    const auto updated = std::max<int64_t>(1, static_cast<int64_t>(std::ceil(share * static_cast<double>(channels))));
    if (updated < channels) updated_channels[static_cast<size_t>(i)] = updated;
  }
  return updated_channels;
}

}  // namespace

Result<v1::TrainingGraph> DeriveTrainingGraph(const ForwardGraph& forward, Derivation derivation,
                                              const Trainable& trainable) {
  if (forward.size() < 2 || forward.layers().back().kind != OpKind::kCrossEntropyLoss) {
    return InvalidArgument("model '" + forward.model() + "' must end in a loss layer to be trained");
  }
  v1::TrainingGraph graph;
  graph.set_model(forward.model());
  graph.set_derivation(std::string(DerivationName(derivation)));
  graph.set_trainable(trainable.ToString());
  graph.set_batch_size(static_cast<uint32_t>(forward.batch_size()));
  GraphWriter out(&graph);
  AddForwardNodes(forward, out, graph);
  EC_ASSIGN_OR_RETURN(const std::vector<bool> trains, TrainableLayers(forward, trainable));
  EC_ASSIGN_OR_RETURN(const std::vector<int64_t> updated_channels,
                      UpdatedChannels(forward, trains, trainable, derivation));
  for (int i = 0; i < forward.size(); ++i) {
    if (updated_channels[static_cast<size_t>(i)] > 0) {
      (*graph.mutable_nodes(i)->mutable_attributes())["update_channels"] = updated_channels[static_cast<size_t>(i)];
    }
  }
  if (derivation == Derivation::kPoet) {
    AddPoetBackward(forward, trains, trainable.mode == Trainable::Mode::kAll, out);
  } else {
    AddExactBackward(forward, trains, updated_channels, trainable.mode == Trainable::Mode::kBias, out);
  }
  for (v1::TrainingNode& node : *graph.mutable_nodes()) {
    if (node.forward_of() >= 0) node.set_module(graph.nodes(node.forward_of()).module());
  }
  return graph;
}

Result<v1::TrainingGraph> ZooTrainingGraph(std::string_view model, int batch_size, Derivation derivation,
                                           const Trainable& trainable) {
  EC_ASSIGN_OR_RETURN(ForwardGraph forward, BuildZooModel(model, batch_size));
  return DeriveTrainingGraph(forward, derivation, trainable);
}

}  // namespace edgecost::graph
