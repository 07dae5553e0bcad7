// The executor: real training steps on the oneDNN layers of kernels/, stage by
// stage as a schedule says (compute, keep, free, recompute, page out, page in),
// then the optimizer's update (train/optimizer.h). Every activation lives in the arena, which counts every
// live byte and refuses to hold more than the schedule planned; layers are bound
// to the arena's buffers before each pass (kernels::Layer::Bind), so outputs are
// shared between the layers that produce and read them, as in a framework.
//
// Batch norms train on each batch's statistics and fold them into running ones once per
// step (PyTorch's momentum 0.1, unbiased variance), however often a schedule recomputes
// them; Evaluate runs the forward pass alone in inference mode with those running ones.
//
// What stays outside the arena: parameters and their gradients (outside the RAM
// budget, as in POET; with update_in_backward the weight gradients are in the arena), and layer state: batch-norm statistics (the batch's and the running ones), max-pooling's
// argmax workspace, dropout masks (drawn per step from the seed, the step and the node, so that
// a recomputation within a step uses the same mask), the oneDNN
// scratchpad all layers share (the largest one need), the temporaries of some backward kernels (a product's dY * B
// before its reduction over broadcast axes) and the tensors no node binds (the dX of an input that needs no gradient).
// Layer state is reported as layer_state_bytes; the optimizer's state (momentum, Adam's moments,
// for trained parameters only) as optimizer_state_bytes.
//
// Only graphs of the `exact` derivation can be run: POET's derivation has one
// gradient node per layer whose output shape is not the gradient's.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "proto/edgecost.pb.h"
#include "solver/plan.h"
#include "train/arena.h"
#include "train/optimizer.h"

namespace edgecost::kernels {
struct Tensor;
}

namespace edgecost::train {

// One batch: the input node's tensor (row-major, f32) and one class label per row of the logits.
struct Batch {
  std::vector<float> inputs;
  std::vector<int32_t> labels;
};

// A node execution or an I/O operation as it ran, for traces (seconds from the executor's start).
struct TraceEvent {
  int node = 0;
  enum class Kind { kCompute, kRecompute, kPageOut, kPageIn, kWait, kUpdate } kind = Kind::kCompute;
  double start_s = 0, duration_s = 0;
};

struct StepStats {
  double loss = 0;  // mean over the batch
  double runtime_s = 0;
  double cpu_s = 0;  // CPU time of the calling thread: the step without waiting for a core (one thread)
  double update_s = 0;
  uint64_t planned_peak_bytes = 0;
  uint64_t peak_activation_bytes = 0;  // the arena's peak live bytes
  uint64_t paged_out_bytes = 0, paged_in_bytes = 0;
  uint32_t page_outs = 0, page_ins = 0, recomputations = 0;
  double page_out_s = 0, page_in_s = 0;  // time the I/O thread spent
  double paging_wait_s = 0;              // time computation waited for I/O: paging on the critical path
  std::vector<double> node_s;            // per node: seconds summed over its executions in the step
  std::vector<uint32_t> node_runs;       // per node: executions in the step
  std::vector<TraceEvent> events;        // with ExecutorOptions::trace
};

struct ExecutorOptions {
  uint32_t seed = 1;       // parameter initialisation (node i's layer gets seed + i)
  std::string paging_dir;  // needed for schedules that page
  bool trace = false;      // keep every node's timing as TraceEvents
  // Updates as gradients arrive (graph/step_nodes.h): TrainStep updates each layer after its last
  // backward node, and its weight gradients live in the arena only until then. Plans must be
  // solved for it (ScheduleRequest.update_in_backward): a weight gradient is a node output there.
  bool update_in_backward = false;
};

// A trained parameter's gradient, for comparisons.
struct ParamGradient {
  int node = 0;   // the forward node that owns it
  int index = 0;  // 0: weights (or batch-norm scale), 1: bias (or shift)
  std::vector<float> values;
};

// A forward-only pass in inference mode over one batch (Executor::Evaluate).
struct EvalStats {
  double loss_sum = 0;  // cross-entropy summed over the rows counted
  int64_t correct = 0;  // rows counted whose logits' argmax is their label
  int64_t rows = 0;     // rows counted
};

class Executor {
 public:
  static Result<std::unique_ptr<Executor>> Create(const v1::TrainingGraph& graph, const ExecutorOptions& options);
  ~Executor();

  const v1::TrainingGraph& graph() const { return graph_; }
  int64_t input_elements() const;           // the input node's elements: what Batch::inputs holds
  std::vector<int64_t> input_dims() const;  // the input node's shape, batch rows first
  int64_t label_rows() const;               // rows of the logits: what Batch::labels holds
  int64_t classes() const;
  // Token ids: the vocabulary of the embedding the input node feeds (inputs are ids in
  // [0, limit) as floats), or 0 when the input is features.
  int64_t input_id_limit() const;
  uint64_t layer_state_bytes() const { return layer_state_bytes_; }
  // Of the layer state: the oneDNN scratchpad every layer shares, the largest one primitive needs.
  uint64_t scratchpad_bytes() const { return scratchpad_bytes_; }
  uint64_t param_bytes() const { return param_bytes_; }
  uint64_t grad_param_bytes() const { return grad_param_bytes_; }  // the parameters' gradient tensors
  uint64_t trained_param_bytes() const;                            // of param_bytes: those that train
  uint64_t optimizer_state_bytes() const;
  // Node bytes and distinct inputs, as the simulator sees the graph.
  const std::vector<int64_t>& node_bytes() const { return bytes_; }
  const std::vector<std::vector<int>>& preds() const { return preds_; }

  Status SetBatch(const Batch& batch);
  // One forward, loss and backward pass under `plan` (the plain step when null),
  // leaving the parameter gradients; no update. A plan is checked for shape here;
  // its validity against budgets is the caller's (the solver's simulator).
  Result<StepStats> Step(const solver::Plan* plan);
  // A training step and its update with learning rate `lr`: Step then Update, or with
  // update_in_backward each layer's update inside the step, bit for bit the same parameters.
  // StepStats.update_s is the time the updates took.
  Result<StepStats> TrainStep(const solver::Plan* plan, double lr);
  // Replaces the optimizer (plain SGD until then) and its state; before the first update.
  Status SetOptimizer(const OptimizerOptions& options);
  // The optimizer's update from the last step's gradients with learning rate `lr`, on the batch-mean
  // gradient (the loss is summed over rows). Ends the training step: the next Step draws new dropout
  // masks, while Steps without an Update in between (the same step under other schedules) reuse them.
  // With update_in_backward, TrainStep updates and Update does nothing.
  void Update(double lr);
  int64_t updates() const;
  // Checkpoints: the optimizer, whose state is saved and restored with the parameters, and the
  // steps completed (the optimizer's count too), set when a run resumes so that the next step
  // draws the dropout masks and takes the update the uninterrupted run would have.
  Optimizer& optimizer();
  void RestoreUpdates(int64_t updates);
  // With update_in_backward, a gradient held in the arena is gone after the step: its values are empty.
  std::vector<ParamGradient> Gradients() const;
  // The forward pass alone in inference mode (batch norm with its running statistics, no dropout),
  // on buffers of its own outside the arena: held-out loss and accuracy. `batch` is a full batch;
  // only its first `rows` rows count (a last batch padded with repeats). Leaves gradients and
  // running statistics as they were.
  Result<EvalStats> Evaluate(const Batch& batch, int64_t rows);
  // The values of a trained parameter (as Gradients() lists them), to read or to set before a
  // step: weights copied from another framework, or a finite-difference probe. Null if it does not train.
  std::vector<float>* Parameter(int node, int index);
  // Any parameter of a node's layer, trained or frozen, with its dims (a conv's OIHW, a linear
  // layer's (out, in), a batch norm's scale then shift): to load a model's own weights before the
  // first step, or to write them out. Null when the node has no such parameter.
  kernels::Tensor* LayerParameter(int node, int index);
  // A batch norm's running statistics (index 0: mean, 1: variance), updated by every step once per
  // node and loaded or written with the model's weights; null for other nodes.
  kernels::Tensor* RunningStat(int node, int index);
  // A batch norm's num_batches_tracked; null for other nodes.
  int64_t* BatchesTracked(int node);
  // Seconds since the executor was created: the clock of TraceEvents.
  double ClockS() const;

 private:
  struct NodeExec;
  struct Builder;  // Create's steps
  Executor() = default;
  // Step and TrainStep: the step under `plan`, with the updates inside it when `update_lr` is set.
  Result<StepStats> Run(const solver::Plan* plan, std::optional<double> update_lr);
  Status LayOutPlan(const solver::Plan& plan);
  Status PlaceUpdates(const solver::Plan& plan);
  // Updates the trained parameters `params` (indices in State::trained) from their gradients.
  void ApplyUpdates(const std::vector<size_t>& params, double lr, int node, StepStats& stats);
  Status Compute(int node, int stage, StepStats& stats);
  Status Release(int node, StepStats& stats);
  Status Bind(const NodeExec& exec);

  v1::TrainingGraph graph_;
  ExecutorOptions options_;
  std::vector<int64_t> bytes_;
  std::vector<std::vector<int>> preds_;
  struct State;
  std::unique_ptr<State> state_;
  uint64_t layer_state_bytes_ = 0, scratchpad_bytes_ = 0, param_bytes_ = 0, grad_param_bytes_ = 0;
};

}  // namespace edgecost::train
