#include "service/update_choice.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include "base/units.h"
#include "graph/derive.h"
#include "graph/resolve.h"
#include "profiler/fingerprint.h"
#include "service/cost_tables.h"
#include "service/models.h"
#include "service/onnx_weights.h"
#include "service/step_memory.h"
#include "train/executor.h"

namespace edgecost::service {
namespace {

struct Model {
  graph::GraphSpec spec;
  std::optional<graph::OnnxModel> onnx;  // derived from its forward graph, not imported again
};

Result<v1::TrainingGraph> GraphTraining(const Model& model, const graph::Trainable& trainable) {
  if (model.onnx) return graph::DeriveTrainingGraph(model.onnx->forward, graph::Derivation::kExact, trainable);
  graph::GraphSpec spec = model.spec;
  spec.trainable = trainable;
  return graph::LoadTrainingGraph(spec);
}

std::string Joined(const std::vector<std::string>& names) {
  std::string joined;
  for (const std::string& name : names) joined += (joined.empty() ? "" : ",") + name;
  return joined;
}

Result<v1::TrainingGraph> GraphTraining(const Model& model, const std::vector<std::string>& layers) {
  EC_ASSIGN_OR_RETURN(const graph::Trainable trainable, graph::Trainable::Parse("layers:" + Joined(layers)));
  return GraphTraining(model, trainable);
}

// The layers with parameters, as --trainable layers: names them (a module, else layerN), each once.
std::vector<v1::UpdateCandidate> CandidatesOf(const v1::TrainingGraph& graph) {
  std::vector<v1::UpdateCandidate> candidates;
  std::map<std::string, size_t> at;
  for (int v = 0; v < graph.nodes_size(); ++v) {
    const v1::TrainingNode& node = graph.nodes(v);
    if (node.phase() == v1::PHASE_BACKWARD || node.param_count() == 0) continue;
    const std::string name = node.module().empty() ? "layer" + std::to_string(v) : node.module();
    auto [it, added] = at.emplace(name, candidates.size());
    if (added) candidates.emplace_back().set_layer(name);
    v1::UpdateCandidate& c = candidates[it->second];
    c.set_param_bytes(c.param_bytes() + node.param_count() * sizeof(float));
  }
  return candidates;
}

// "NAME:SHARE" beside each layer a share of output channels can update (the derivation's rule).
Status AddShares(const Model& model, const std::vector<double>& shares, std::vector<v1::UpdateCandidate>& candidates) {
  const size_t layers = candidates.size();
  for (size_t i = 0; i < layers; ++i) {
    for (double share : shares) {
      if (!(share > 0 && share < 1)) return InvalidArgument("a share is above 0 and below 1, not " + std::to_string(share));
      char name[160];
      std::snprintf(name, sizeof name, "%s:%g", candidates[i].layer().c_str(), share);
      if (!GraphTraining(model, {name}).ok()) break;  // not a convolution or linear layer
      v1::UpdateCandidate& c = candidates.emplace_back();
      c.set_layer(name);
      c.set_param_bytes(candidates[i].param_bytes());
    }
  }
  return Status::Ok();
}

// The step's memory: parameters, gradients, optimizer state, workspace and the plain step's activations.
uint64_t StepBytes(const v1::TrainingGraph& graph, const UpdateChoiceOptions& options, int state_tensors) {
  const v1::StepMemory memory =
      StepMemoryOf(graph, {.build_large = true,
                           .optimizer_state_tensors = state_tensors,
                           .update_in_backward = options.train.solve.update_in_backward()});
  return memory.fixed_bytes() + memory.activation_peak_bytes();
}

// A step's time and energy on the full update's measured costs, node by node (a sparse update's
// graph is the full one without some backward nodes).
struct StepCost {
  double s = 0, j = 0;
  bool known = false;
};
StepCost CostOf(const v1::TrainingGraph& graph, const std::map<std::string, v1::NodeCost>& costs) {
  StepCost cost{0, 0, !costs.empty()};
  for (const v1::TrainingNode& node : graph.nodes()) {
    const auto it = costs.find(node.name());
    if (it == costs.end()) return {};
    cost.s += it->second.runtime_s();
    cost.j += it->second.compute_j();
  }
  return cost;
}

Result<std::map<std::string, double>> ReadScores(const std::string& path, const std::vector<v1::UpdateCandidate>& all) {
  std::ifstream in(path);
  if (!in) return NotFound("cannot read the scores file " + path);
  std::set<std::string> names;
  for (const v1::UpdateCandidate& c : all) names.insert(c.layer());
  std::map<std::string, double> scores;
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    if (line.empty() || line[0] == '#') continue;
    const size_t comma = line.rfind(',');
    char* end = nullptr;
    const double score = comma == std::string::npos ? NAN : std::strtod(line.c_str() + comma + 1, &end);
    if (!std::isfinite(score) || end == line.c_str() + comma + 1) {
      return InvalidArgument(path + ":" + std::to_string(number) + ": a line is LAYER,SCORE, not '" + line + "'");
    }
    const std::string layer = line.substr(0, comma);
    if (!names.count(layer)) {
      std::vector<std::string> some;
      for (size_t i = 0; i < all.size() && i < 8; ++i) some.push_back(all[i].layer());
      return InvalidArgument(path + ":" + std::to_string(number) + ": '" + layer +
                             "' is no layer with parameters of the model; they include " + Joined(some) +
                             " (`edgecost graph MODEL` lists them all)");
    }
    scores[layer] = score;
  }
  return scores;
}

// The contribution probe: each candidate trained alone for a few steps from the model's weights on
// the first batches of the data, scored by the held-out loss drop.
class Probe {
 public:
  Probe(const Model& model, const UpdateChoiceOptions& options) : model_(model), options_(options) {}

  // The held-out loss after `steps` steps training `graph` (0 steps: the model's own).
  Result<double> HeldOutLoss(const v1::TrainingGraph& graph, int steps, std::vector<std::string>& notes) {
    EC_ASSIGN_OR_RETURN(std::unique_ptr<train::Executor> executor,
                        train::Executor::Create(graph, {.seed = options_.train.seed,
                                                        .update_in_backward = options_.train.solve.update_in_backward()}));
    if (model_.onnx && options_.train.init == "file") EC_RETURN_IF_ERROR(LoadOnnxWeights(*model_.onnx, *executor, notes));
    EC_ASSIGN_OR_RETURN(const train::OptimizerOptions optimizer, OptimizerOptionsOf(options_.train.optimizer));
    EC_RETURN_IF_ERROR(executor->SetOptimizer(optimizer));
    if (!data_) {
      EC_ASSIGN_OR_RETURN(train::DataSource data, OpenTrainingData(options_.train, *executor, notes));
      if (data.held_out_batches() == 0) {
        return InvalidArgument("the probe scores each layer by the held-out loss: give --val-split (e.g. 0.2) or --val-data");
      }
      data_.emplace(std::move(data));
    }
    for (int s = 0; s < steps; ++s) {
      EC_ASSIGN_OR_RETURN(const train::Batch batch, data_->BatchFor(s));
      EC_RETURN_IF_ERROR(executor->SetBatch(batch));
      EC_RETURN_IF_ERROR(executor->TrainStep(nullptr, options_.train.lr).status());
    }
    v1::EpochStats held_out;
    EC_RETURN_IF_ERROR(EvaluateHeldOut(*data_, *executor, held_out));
    return held_out.held_out_loss();
  }

 private:
  const Model& model_;
  const UpdateChoiceOptions& options_;
  std::optional<train::DataSource> data_;  // opened once, for the first executor's input shape
};

// The full update's measured costs on this device, by node name; empty when none are measured.
std::map<std::string, v1::NodeCost> MeasuredCosts(costdb::CostDb& db, const std::string& model,
                                                  const v1::TrainingGraph& full, int threads, std::string& note) {
  v1::GetCostTableRequest request;
  request.set_model(model);
  request.set_device("this");
  request.set_cost_source("measured");
  request.set_batch_size(full.batch_size());
  request.set_derivation("exact");
  request.set_trainable("all");
  request.set_threads(static_cast<uint32_t>(threads));
  Result<v1::CostTable> table = ResolveCostTable(&db, request);
  std::map<std::string, v1::NodeCost> costs;
  if (!table.ok() || table->graph().nodes_size() != table->costs_size()) {
    note = "step time and energy unknown (" + (table.ok() ? std::string("a table of other nodes") : table.status().message()) +
           "): `edgecost profile` measures them";
    return costs;
  }
  for (int i = 0; i < table->costs_size(); ++i) costs[table->graph().nodes(i).name()] = table->costs(i);
  return costs;
}

}  // namespace

Status ParseUpdateBudget(const std::string& text, UpdateChoiceOptions& options) {
  if (!text.empty() && text.back() == '%') {
    char* end = nullptr;
    const double percent = std::strtod(text.c_str(), &end);
    if (end != text.c_str() + text.size() - 1 || !(percent > 0 && percent <= 100)) {
      return InvalidArgument("--ram-budget " + text + ": a share is a number above 0 and at most 100, then %");
    }
    options.budget_fraction = percent / 100;
    return Status::Ok();
  }
  EC_ASSIGN_OR_RETURN(const int64_t bytes, ParseBytes(text));
  if (bytes <= 0) return InvalidArgument("--ram-budget must be positive");
  options.budget_bytes = static_cast<uint64_t>(bytes);
  return Status::Ok();
}

Result<v1::UpdateChoice> ChooseUpdate(const UpdateChoiceOptions& options,
                                      const std::function<void(const std::string&)>& log) {
  if ((options.budget_bytes > 0) == (options.budget_fraction > 0)) {
    return InvalidArgument("give the budget once: bytes of the step's memory, or a share of the full update's (25%)");
  }
  if (options.probe_steps < 1 && options.scores_file.empty()) return InvalidArgument("--probe-steps must be at least 1");
  EC_ASSIGN_OR_RETURN(costdb::CostDb * db, options.train.database->Db());
  Model model;
  EC_ASSIGN_OR_RETURN(model.spec, ResolveModel(db, options.train.graph));
  if (graph::CarriesCosts(model.spec)) return InvalidArgument("'" + model.spec.model_or_file + "' has no layers to train");
  EC_ASSIGN_OR_RETURN(model.onnx, graph::LoadOnnxModel(model.spec));
  const int threads = options.train.threads > 0 ? options.train.threads : omp_get_num_procs();
  omp_set_num_threads(threads);
  EC_ASSIGN_OR_RETURN(const train::OptimizerOptions optimizer, OptimizerOptionsOf(options.train.optimizer));
  const int state_tensors = train::OptimizerStateTensors(optimizer);

  v1::UpdateChoice choice;
  EC_ASSIGN_OR_RETURN(const v1::TrainingGraph full, GraphTraining(model, graph::Trainable{}));
  std::vector<v1::UpdateCandidate> candidates = CandidatesOf(full);
  if (candidates.empty()) return InvalidArgument("'" + full.model() + "' has no layer with parameters");
  EC_RETURN_IF_ERROR(AddShares(model, options.shares, candidates));
  choice.set_full_update_bytes(StepBytes(full, options, state_tensors));
  choice.set_budget_bytes(options.budget_bytes > 0 ? options.budget_bytes
                                                   : static_cast<uint64_t>(options.budget_fraction *
                                                                           static_cast<double>(choice.full_update_bytes())));
  std::string note;
  const std::map<std::string, v1::NodeCost> costs = MeasuredCosts(*db, model.spec.model_or_file, full, threads, note);
  if (costs.empty() && (options.runtime_budget_multiple > 0 || options.energy_budget_multiple > 0)) {
    return FailedPrecondition("a runtime or energy budget needs the device's measured costs: " + note);
  }
  choice.set_note(note);
  const StepCost full_cost = CostOf(full, costs);
  choice.set_full_step_s(full_cost.s);
  choice.set_full_step_j(full_cost.j);

  // Scores: the user's, or the probe's.
  std::vector<std::string> notes;
  if (!options.scores_file.empty()) {
    EC_ASSIGN_OR_RETURN(const auto scores, ReadScores(options.scores_file, candidates));
    for (v1::UpdateCandidate& c : candidates) {
      const auto it = scores.find(c.layer());
      c.set_score(it == scores.end() ? 0 : it->second);
      if (it == scores.end()) c.set_reason("no score in " + options.scores_file);
    }
    choice.set_score_source(options.scores_file);
  } else {
    Probe probe(model, options);
    EC_ASSIGN_OR_RETURN(const double before, probe.HeldOutLoss(full, 0, notes));
    choice.set_held_out_loss(before);
    for (size_t i = 0; i < candidates.size(); ++i) {
      v1::UpdateCandidate& c = candidates[i];
      log("probe " + std::to_string(i + 1) + "/" + std::to_string(candidates.size()) + ": " + c.layer() + " alone, " +
          std::to_string(options.probe_steps) + " steps ...");
      EC_ASSIGN_OR_RETURN(const v1::TrainingGraph graph, GraphTraining(model, {c.layer()}));
      EC_ASSIGN_OR_RETURN(const double after, probe.HeldOutLoss(graph, options.probe_steps, notes));
      c.set_score(before - after);
    }
    choice.set_score_source("probe: the held-out loss drop of " + std::to_string(options.probe_steps) +
                            " steps training each layer alone from the model's weights");
  }
  for (v1::UpdateCandidate& c : candidates) {
    EC_ASSIGN_OR_RETURN(const v1::TrainingGraph graph, GraphTraining(model, {c.layer()}));
    c.set_alone_bytes(StepBytes(graph, options, state_tensors));
  }
  std::stable_sort(candidates.begin(), candidates.end(), [](const v1::UpdateCandidate& a, const v1::UpdateCandidate& b) {
    return a.score() / static_cast<double>(a.alone_bytes()) > b.score() / static_cast<double>(b.alone_bytes());
  });

  // Best score per byte first, each kept while the set fits; a layer once, whole or at one share.
  std::vector<std::string> chosen;
  std::map<std::string, std::string> chosen_as;  // layer -> the candidate that chose it
  for (v1::UpdateCandidate& c : candidates) {
    const std::string layer = c.layer().substr(0, c.layer().find(':'));
    if (c.score() <= 0) {
      if (c.reason().empty()) c.set_reason("its update alone did not lower the held-out loss");
      continue;
    }
    if (chosen_as.count(layer)) {
      c.set_reason("chosen as " + chosen_as[layer]);
      continue;
    }
    std::vector<std::string> trial = chosen;
    trial.push_back(c.layer());
    EC_ASSIGN_OR_RETURN(const v1::TrainingGraph graph, GraphTraining(model, trial));
    c.set_with_bytes(StepBytes(graph, options, state_tensors));
    const StepCost cost = CostOf(graph, costs);
    c.set_with_step_s(cost.s);
    c.set_with_step_j(cost.j);
    if (c.with_bytes() > choice.budget_bytes()) {
      c.set_reason("the step would hold " + FormatBytes(static_cast<double>(c.with_bytes())) + ", over the budget");
    } else if (options.runtime_budget_multiple > 0 && cost.known &&
               cost.s > options.runtime_budget_multiple * full_cost.s) {
      c.set_reason("the step would take " + FormatSeconds(cost.s) + ", over the runtime budget");
    } else if (options.energy_budget_multiple > 0 && cost.known &&
               cost.j > options.energy_budget_multiple * full_cost.j) {
      c.set_reason("the step would spend " + FormatJoules(cost.j) + ", over the energy budget");
    } else {
      c.set_chosen(true);
      chosen = trial;
      chosen_as[layer] = c.layer();
      choice.set_chosen_bytes(c.with_bytes());
      choice.set_chosen_step_s(cost.s);
      choice.set_chosen_step_j(cost.j);
    }
  }
  *choice.mutable_candidates() = {candidates.begin(), candidates.end()};
  if (chosen.empty()) {
    uint64_t least = UINT64_MAX;
    for (const v1::UpdateCandidate& c : candidates) least = std::min(least, c.alone_bytes());
    return FailedPrecondition("no layer whose update lowers the held-out loss fits " +
                              FormatBytes(static_cast<double>(choice.budget_bytes())) +
                              " of step memory; the least any layer alone needs is " +
                              FormatBytes(static_cast<double>(least)));
  }
  std::sort(chosen.begin(), chosen.end());
  EC_ASSIGN_OR_RETURN(const v1::TrainingGraph graph, GraphTraining(model, chosen));
  choice.set_trainable(graph.trainable());
  std::set<std::string> said;  // each probe's executor says the same about its weights and data
  for (const std::string& n : notes) {
    if (said.insert(n).second) choice.set_note(choice.note() + (choice.note().empty() ? "" : "; ") + n);
  }
  return choice;
}

}  // namespace edgecost::service
