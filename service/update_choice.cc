#include "service/update_choice.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <optional>
#include <set>

#include "base/clock.h"
#include "base/units.h"
#include "graph/derive.h"
#include "graph/resolve.h"
#include "service/cost_tables.h"
#include "service/models.h"
#include "service/onnx_weights.h"
#include "service/step_memory.h"
#include "solver/problem.h"
#include "solver/solve.h"
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

// The full update's measured cost table on this device; nullopt (and why, in `note`) when there is none.
std::optional<v1::CostTable> MeasuredTable(costdb::CostDb& db, const std::string& model, const v1::TrainingGraph& full,
                                           int threads, std::string& note) {
  v1::GetCostTableRequest request;
  request.set_model(model);
  request.set_device("this");
  request.set_cost_source("measured");
  request.set_batch_size(full.batch_size());
  request.set_derivation("exact");
  request.set_trainable("all");
  request.set_threads(static_cast<uint32_t>(threads));
  Result<v1::CostTable> table = ResolveCostTable(&db, request);
  if (!table.ok()) {
    note = "step time and energy unknown (" + table.status().message() + "): `edgecost profile` measures them";
    return std::nullopt;
  }
  return *table;
}

// What a set of trained layers costs: the step's memory (parameters, gradients, optimizer state,
// workspace, activations) and, on measured costs, its time and energy. With a runtime budget the
// activations are the least a schedule holds within it (recomputation and paging, as `solve
// --min-ram` finds them) and the step is that schedule's; else the plain step's.
class SetCosts {
 public:
  struct Cost {
    uint64_t bytes = 0, activation_bytes = 0;
    double step_s = 0, step_j = 0;  // 0: unknown
  };

  SetCosts(const UpdateChoiceOptions& options, int state_tensors, std::optional<v1::CostTable> full)
      : options_(options), state_tensors_(state_tensors), full_(std::move(full)) {
    for (int i = 0; full_ && i < full_->costs_size(); ++i) {
      const v1::TrainingNode& node = full_->graph().nodes(i);
      by_name_[node.name()] = i;
      const auto [at, added] = dearest_backward_.emplace(node.forward_of(), i);
      if (!added && full_->graph().nodes(at->second).flops() < node.flops()) at->second = i;
    }
  }
  bool measured() const { return full_.has_value(); }
  void set_runtime_budget_s(double s) { runtime_budget_s_ = s; }

  Result<Cost> Of(const v1::TrainingGraph& graph) const {
    const v1::StepMemory memory = StepMemoryOf(graph, {.build_large = true,
                                                       .optimizer_state_tensors = state_tensors_,
                                                       .update_in_backward = options_.train.solve.update_in_backward()});
    Cost cost{memory.fixed_bytes() + memory.activation_peak_bytes(), memory.activation_peak_bytes()};
    const std::optional<v1::CostTable> table = TableOf(graph);
    if (!table) return cost;
    for (const v1::NodeCost& node : table->costs()) {
      cost.step_s += node.runtime_s();
      cost.step_j += node.compute_j();
    }
    if (runtime_budget_s_ <= 0) return cost;
    v1::ScheduleRequest request;
    request.set_activation_budget_bytes(1);
    request.set_runtime_budget_s(runtime_budget_s_);
    request.set_update_in_backward(options_.train.solve.update_in_backward());
    request.set_count_paging_time(table->paging().page_in_throughput_bytes_per_s() > 0);
    EC_ASSIGN_OR_RETURN(solver::Problem problem, solver::ProblemFromCostTable(*table, request));
    const Result<int64_t> least = solver::MinFeasibleRam(problem, solver::Deadline{SteadyNowS() + 5});
    if (!least.ok()) return cost;  // no schedule within the budget: the plain step, refused by its time
    problem.activation_budget_bytes = *least;
    Result<v1::Schedule> schedule =
        solver::Solve(problem, {.strategy = "greedy", .time_limit_s = 5, .search_min_ram = false});
    if (!schedule.ok() || schedule->stages_size() == 0) return cost;
    cost.activation_bytes = std::min<uint64_t>(memory.activation_peak_bytes(), schedule->peak_ram_bytes());
    cost.bytes = memory.fixed_bytes() + cost.activation_bytes;
    cost.step_s = schedule->runtime_s();
    cost.step_j = schedule->energy().total_j();
    return cost;
  }

 private:
  // The full update's costs of `graph`'s nodes (a sparse update's graph is the full one with fewer
  // backward nodes, and a share's weight pass costs its share of the whole one's).
  std::optional<v1::CostTable> TableOf(const v1::TrainingGraph& graph) const {
    if (!full_) return std::nullopt;
    v1::CostTable table = *full_;
    *table.mutable_graph() = graph;
    table.clear_costs();
    for (const v1::TrainingNode& node : graph.nodes()) {
      // A node the full update does not have (a layer's weights pass alone, where the full update's
      // one pass gives dX too): its layer's dearest backward node, by FLOPs.
      int from = -1;
      if (const auto named = by_name_.find(node.name()); named != by_name_.end()) {
        from = named->second;
      } else if (const auto dearest = dearest_backward_.find(node.forward_of()); dearest != dearest_backward_.end()) {
        from = dearest->second;
      }
      if (from < 0) return std::nullopt;
      v1::NodeCost& cost = *table.add_costs() = full_->costs(from);
      cost.set_node(static_cast<uint32_t>(node.index()));
      const v1::TrainingNode& whole = full_->graph().nodes(from);
      if (whole.flops() > 0 && node.flops() < whole.flops()) {
        const double share = node.flops() / whole.flops();
        cost.set_runtime_s(cost.runtime_s() * share);
        cost.set_compute_j(cost.compute_j() * share);
      }
      cost.set_ram_bytes(node.output_bytes());
    }
    return table;
  }

  const UpdateChoiceOptions& options_;
  const int state_tensors_;
  const std::optional<v1::CostTable> full_;
  std::map<std::string, int> by_name_;
  std::map<int, int> dearest_backward_;  // by forward node: its backward node of most FLOPs
  double runtime_budget_s_ = 0;
};

}  // namespace

Status ParseUpdateBudget(const std::string& text, UpdateChoiceOptions& options) {
  if (!text.empty() && text.back() == '%') {
    char* end = nullptr;
    const double percent = std::strtod(text.c_str(), &end);
    if (end != text.c_str() + text.size() - 1 || !(percent > 0 && percent <= 100)) {
      return InvalidArgument("--memory-budget " + text + ": a share is a number above 0 and at most 100, then %");
    }
    options.budget_fraction = percent / 100;
    return Status::Ok();
  }
  EC_ASSIGN_OR_RETURN(const int64_t bytes, ParseBytes(text));
  if (bytes <= 0) return InvalidArgument("--memory-budget must be positive");
  options.budget_bytes = static_cast<uint64_t>(bytes);
  return Status::Ok();
}

namespace {

// Each candidate's score: the user's, or the probe's held-out loss drop.
Status Score(const Model& model, const UpdateChoiceOptions& options, const v1::TrainingGraph& full,
             std::vector<v1::UpdateCandidate>& candidates, v1::UpdateChoice& choice, std::vector<std::string>& notes,
             const std::function<void(const std::string&)>& log) {
  if (!options.scores_file.empty()) {
    EC_ASSIGN_OR_RETURN(const auto scores, ReadScores(options.scores_file, candidates));
    for (v1::UpdateCandidate& c : candidates) {
      const auto it = scores.find(c.layer());
      c.set_score(it == scores.end() ? 0 : it->second);
      if (it == scores.end()) c.set_reason("no score in " + options.scores_file);
    }
    choice.set_score_source(options.scores_file);
    return Status::Ok();
  }
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
  return Status::Ok();
}

// Best score per byte first, each kept while the set fits its budgets; a layer once, whole or at one share.
Result<std::vector<std::string>> Select(const Model& model, const UpdateChoiceOptions& options, const SetCosts& costs,
                                        std::vector<v1::UpdateCandidate>& candidates, v1::UpdateChoice& choice) {
  for (v1::UpdateCandidate& c : candidates) {
    EC_ASSIGN_OR_RETURN(const v1::TrainingGraph graph, GraphTraining(model, {c.layer()}));
    EC_ASSIGN_OR_RETURN(const SetCosts::Cost alone, costs.Of(graph));
    c.set_alone_bytes(alone.bytes);
  }
  std::stable_sort(candidates.begin(), candidates.end(), [](const v1::UpdateCandidate& a, const v1::UpdateCandidate& b) {
    return a.score() / static_cast<double>(a.alone_bytes()) > b.score() / static_cast<double>(b.alone_bytes());
  });
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
    EC_ASSIGN_OR_RETURN(const SetCosts::Cost cost, costs.Of(graph));
    c.set_with_bytes(cost.bytes);
    c.set_with_step_s(cost.step_s);
    c.set_with_step_j(cost.step_j);
    if (cost.bytes > choice.budget_bytes()) {
      c.set_reason("the step would hold " + FormatBytes(static_cast<double>(cost.bytes)) + ", over the budget");
    } else if (options.runtime_budget_multiple > 0 && cost.step_s > options.runtime_budget_multiple * choice.full_step_s()) {
      c.set_reason("the step would take " + FormatSeconds(cost.step_s) + ", over the runtime budget");
    } else if (options.energy_budget_multiple > 0 && cost.step_j > options.energy_budget_multiple * choice.full_step_j()) {
      c.set_reason("the step would spend " + FormatJoules(cost.step_j) + ", over the energy budget");
    } else {
      c.set_chosen(true);
      chosen = trial;
      chosen_as[layer] = c.layer();
      choice.set_chosen_bytes(cost.bytes);
      choice.set_activation_bytes(cost.activation_bytes);
      choice.set_chosen_step_s(cost.step_s);
      choice.set_chosen_step_j(cost.step_j);
    }
  }
  return chosen;
}

}  // namespace

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

  v1::UpdateChoice choice;
  EC_ASSIGN_OR_RETURN(const v1::TrainingGraph full, GraphTraining(model, graph::Trainable{}));
  std::vector<v1::UpdateCandidate> candidates = CandidatesOf(full);
  if (candidates.empty()) return InvalidArgument("'" + full.model() + "' has no layer with parameters");
  EC_RETURN_IF_ERROR(AddShares(model, options.shares, candidates));
  std::string note;
  SetCosts costs(options, train::OptimizerStateTensors(optimizer),
                 MeasuredTable(*db, model.spec.model_or_file, full, threads, note));
  if (!costs.measured() && (options.runtime_budget_multiple > 0 || options.energy_budget_multiple > 0)) {
    return FailedPrecondition("a runtime or energy budget needs the device's measured costs: " + note);
  }
  EC_ASSIGN_OR_RETURN(const SetCosts::Cost whole, costs.Of(full));  // the plain full update
  choice.set_full_update_bytes(whole.bytes);
  choice.set_full_step_s(whole.step_s);
  choice.set_full_step_j(whole.step_j);
  choice.set_budget_bytes(options.budget_bytes > 0 ? options.budget_bytes
                                                   : static_cast<uint64_t>(options.budget_fraction *
                                                                           static_cast<double>(whole.bytes)));
  costs.set_runtime_budget_s(options.runtime_budget_multiple * whole.step_s);
  choice.set_runtime_budget_s(options.runtime_budget_multiple * whole.step_s);
  std::vector<std::string> notes = {note};
  EC_RETURN_IF_ERROR(Score(model, options, full, candidates, choice, notes, log));
  EC_ASSIGN_OR_RETURN(std::vector<std::string> chosen, Select(model, options, costs, candidates, choice));
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
    if (!n.empty() && said.insert(n).second) choice.set_note(choice.note() + (choice.note().empty() ? "" : "; ") + n);
  }
  return choice;
}

}  // namespace edgecost::service
