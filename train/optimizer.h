// The parameter update after a training step: SGD (momentum, dampening, Nesterov, weight decay),
// Adam and AdamW, with PyTorch 1.13's exact update rules and defaults (torch.optim.SGD, Adam,
// AdamW), and a learning-rate schedule stepped once per training step (StepLR, CosineAnnealingLR,
// a linear warm-up before either).
//
// The executor sums the loss over the batch's rows; the optimizer is given that sum's gradient and
// the scale 1 / rows, so it sees the batch-mean gradient, as PyTorch's mean-reduced
// CrossEntropyLoss gives it. State (momentum buffers, Adam's two moments) is held per trained
// parameter only: a frozen one (--trainable bias, last:K) keeps none.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"

namespace edgecost::train {

enum class OptimizerKind { kSgd, kAdam, kAdamW };

struct OptimizerOptions {
  OptimizerKind kind = OptimizerKind::kSgd;
  double momentum = 0;    // SGD
  double dampening = 0;   // SGD
  bool nesterov = false;  // SGD; needs momentum > 0 and dampening 0, as PyTorch
  // Negative: the optimizer's PyTorch default (0 for SGD and Adam, 0.01 for AdamW). SGD and Adam add
  // weight_decay * p to the gradient (L2); AdamW multiplies p by 1 - lr * weight_decay (decoupled).
  double weight_decay = -1;
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;  // Adam and AdamW
};

// "sgd", "adam" or "adamw".
Result<OptimizerKind> ParseOptimizerKind(const std::string& name);
std::string OptimizerKindName(OptimizerKind kind);
double WeightDecayOf(const OptimizerOptions& options);  // the default resolved
// Refuses what PyTorch refuses (negative momentum, betas outside [0, 1), Nesterov without momentum
// or with dampening) and options that mean nothing for the kind (momentum for Adam, betas for SGD).
Status ValidateOptimizer(const OptimizerOptions& options);
// State tensors the optimizer keeps per trained parameter: 0 for plain SGD, 1 with momentum, 2 for Adam(W).
int OptimizerStateTensors(const OptimizerOptions& options);
// For logs: "adamw (weight decay 0.01, betas 0.9,0.999, eps 1e-08)".
std::string DescribeOptimizer(const OptimizerOptions& options);

// One trained parameter and the gradient of the batch's summed loss.
struct ParamSlot {
  std::span<float> values;
  std::span<const float> grad_sum;
};

class Optimizer {
 public:
  // `param_elements`: the size of each trained parameter, in the order Step gets them.
  Optimizer(const OptimizerOptions& options, const std::vector<size_t>& param_elements);

  // One update of every parameter with learning rate `lr`; the gradient used is grad_sum * grad_scale.
  void Step(std::span<const ParamSlot> params, float grad_scale, double lr);
  // The same update one parameter at a time, as gradients arrive (graph/step_nodes.h): BeginStep
  // once, then Apply to each parameter (`index` in the constructor's order) in any order; the
  // result is Step's, bit for bit.
  void BeginStep();
  void Apply(size_t index, const ParamSlot& param, float grad_scale, double lr);

  const OptimizerOptions& options() const { return options_; }
  uint64_t state_bytes() const;
  int64_t steps_taken() const { return steps_taken_; }
  // Checkpoints: the state tensors (first moments, then second moments, per parameter), read or
  // overwritten in place, and the step count Adam's bias correction and SGD's first step depend on.
  std::vector<std::vector<float>*> state_tensors();
  void set_steps_taken(int64_t steps) { steps_taken_ = steps; }

 private:
  OptimizerOptions options_;
  double weight_decay_ = 0;
  int64_t steps_taken_ = 0;
  // Per parameter: SGD's momentum buffer, or Adam's first moment, then Adam's second moment.
  std::vector<std::vector<float>> first_, second_;
};

enum class LrScheduleKind { kNone, kStep, kCosine };

struct LrScheduleOptions {
  LrScheduleKind kind = LrScheduleKind::kNone;
  int64_t step_size = 0;  // kStep: multiply by gamma every step_size steps (StepLR)
  double gamma = 0.1;
  int64_t t_max = 0;   // kCosine: steps of the half cosine from lr to eta_min (CosineAnnealingLR)
  double eta_min = 0;  // kCosine: the lowest learning rate (--lr-min)
  // Before the schedule: steps whose lr rises linearly, lr * (t + 1) / (warmup_steps + 1) at step t
  // (LinearLR with start_factor 1 / (warmup_steps + 1), total_iters warmup_steps); the schedule then
  // starts at step warmup_steps as at its step 0 (SequentialLR with milestone warmup_steps).
  int64_t warmup_steps = 0;
};

// "none", "step" or "cosine".
Result<LrScheduleKind> ParseLrScheduleKind(const std::string& name);
std::string LrScheduleKindName(LrScheduleKind kind);
Status ValidateLrSchedule(const LrScheduleOptions& options, double base_lr);
// The learning rate of training step `step` (0-based: the update after the step'th batch).
double LearningRateAt(const LrScheduleOptions& options, double base_lr, int64_t step);

}  // namespace edgecost::train
