#include "train/optimizer.h"

#include <cmath>
#include <numbers>
#include <sstream>

namespace edgecost::train {
namespace {

std::string Number(double value) {
  std::ostringstream out;
  out << value;
  return out.str();
}

// Elementwise updates: vectorized, and split between the run's threads for tensors large enough to
// pay for waking them. Each element's arithmetic is the same either way (no sum across elements),
// so the weights do not depend on the thread count.
constexpr size_t kParallelElements = size_t{1} << 15;

// SGD, PyTorch 1.13's _single_tensor_sgd: d = g + wd p; the buffer starts as d (no dampening on
// the first step), then b = momentum b + (1 - dampening) d; Nesterov steps along d + momentum b.
void SgdStep(std::span<float> p, std::span<const float> g_sum, float* buffer, bool first, float scale, float lr,
             float wd, float momentum, float keep_of_new, bool nesterov) {
  const size_t n = p.size();
  float* __restrict values = p.data();
  const float* __restrict grad = g_sum.data();
  if (!buffer) {
#pragma omp parallel for simd schedule(static) if (n >= kParallelElements)
    for (size_t i = 0; i < n; ++i) values[i] -= lr * (grad[i] * scale + wd * values[i]);
    return;
  }
  float* __restrict b = buffer;
#pragma omp parallel for simd schedule(static) if (n >= kParallelElements)
  for (size_t i = 0; i < n; ++i) {
    const float d = grad[i] * scale + wd * values[i];
    b[i] = first ? d : momentum * b[i] + keep_of_new * d;
    values[i] -= lr * (nesterov ? d + momentum * b[i] : b[i]);
  }
}

// Adam and AdamW, PyTorch 1.13's _single_tensor_adam(w): m = beta1 m + (1 - beta1) g,
// v = beta2 v + (1 - beta2) g^2, p -= lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps).
// Adam adds wd p to g; AdamW first multiplies p by 1 - lr wd.
void AdamStep(std::span<float> p, std::span<const float> g_sum, float* m_state, float* v_state, float scale,
              float l2_decay, float decoupled_keep, float beta1, float beta2, float step_size,
              float bias_correction2_sqrt, float eps) {
  const size_t n = p.size();
  float* __restrict values = p.data();
  const float* __restrict grad = g_sum.data();
  float* __restrict m = m_state;
  float* __restrict v = v_state;
#pragma omp parallel for simd schedule(static) if (n >= kParallelElements)
  for (size_t i = 0; i < n; ++i) {
    const float value = values[i] * decoupled_keep;
    const float g = grad[i] * scale + l2_decay * value;
    m[i] = m[i] * beta1 + (1.0f - beta1) * g;
    v[i] = v[i] * beta2 + (1.0f - beta2) * g * g;
    values[i] = value - step_size * (m[i] / (std::sqrt(v[i]) / bias_correction2_sqrt + eps));
  }
}

}  // namespace

Result<OptimizerKind> ParseOptimizerKind(const std::string& name) {
  if (name == "sgd") return OptimizerKind::kSgd;
  if (name == "adam") return OptimizerKind::kAdam;
  if (name == "adamw") return OptimizerKind::kAdamW;
  return InvalidArgument("--optimizer must be sgd, adam or adamw, not '" + name + "'");
}

std::string OptimizerKindName(OptimizerKind kind) {
  switch (kind) {
    case OptimizerKind::kSgd:
      return "sgd";
    case OptimizerKind::kAdam:
      return "adam";
    case OptimizerKind::kAdamW:
      return "adamw";
  }
  return "?";
}

double WeightDecayOf(const OptimizerOptions& options) {
  if (options.weight_decay >= 0) return options.weight_decay;
  return options.kind == OptimizerKind::kAdamW ? 0.01 : 0.0;  // PyTorch's defaults
}

Status ValidateOptimizer(const OptimizerOptions& options) {
  const auto finite = [](double x) { return std::isfinite(x); };
  if (!finite(options.weight_decay) || (options.weight_decay < 0 && options.weight_decay != -1)) {
    return InvalidArgument("--weight-decay must be a number at least 0, not " + Number(options.weight_decay));
  }
  if (options.kind == OptimizerKind::kSgd) {
    if (!finite(options.momentum) || options.momentum < 0 || options.momentum >= 1) {
      return InvalidArgument("--momentum must be in [0, 1), not " + Number(options.momentum));
    }
    if (!finite(options.dampening) || options.dampening < 0 || options.dampening > 1) {
      return InvalidArgument("--dampening must be in [0, 1], not " + Number(options.dampening));
    }
    if (options.nesterov && (options.momentum == 0 || options.dampening != 0)) {
      return InvalidArgument("--nesterov needs --momentum above 0 and --dampening 0 (as torch.optim.SGD)");
    }
    if (options.beta1 != 0.9 || options.beta2 != 0.999 || options.eps != 1e-8) {
      return InvalidArgument("--betas and --eps are Adam's and AdamW's; SGD takes --momentum, --dampening, --nesterov");
    }
    return Status::Ok();
  }
  if (options.momentum != 0 || options.dampening != 0 || options.nesterov) {
    return InvalidArgument("--momentum, --dampening and --nesterov are SGD's; " + OptimizerKindName(options.kind) +
                           " takes --betas B1,B2 and --eps");
  }
  for (const double beta : {options.beta1, options.beta2}) {
    if (!finite(beta) || beta < 0 || beta >= 1) {
      return InvalidArgument("--betas must both be in [0, 1), not " + Number(beta));
    }
  }
  if (!finite(options.eps) || options.eps < 0) {
    return InvalidArgument("--eps must be a number at least 0, not " + Number(options.eps));
  }
  return Status::Ok();
}

int OptimizerStateTensors(const OptimizerOptions& options) {
  if (options.kind != OptimizerKind::kSgd) return 2;
  return options.momentum != 0 ? 1 : 0;
}

std::string DescribeOptimizer(const OptimizerOptions& options) {
  std::string text = OptimizerKindName(options.kind) + " (weight decay " + Number(WeightDecayOf(options));
  if (options.kind == OptimizerKind::kSgd) {
    if (options.momentum != 0) {
      text += ", momentum " + Number(options.momentum) + ", dampening " + Number(options.dampening) +
              (options.nesterov ? ", Nesterov" : "");
    }
  } else {
    text += ", betas " + Number(options.beta1) + "," + Number(options.beta2) + ", eps " + Number(options.eps);
  }
  return text + ")";
}

Optimizer::Optimizer(const OptimizerOptions& options, const std::vector<size_t>& param_elements)
    : options_(options), weight_decay_(WeightDecayOf(options)) {
  const int tensors = OptimizerStateTensors(options);
  if (tensors >= 1) {
    for (size_t n : param_elements) first_.emplace_back(n, 0.0f);
  }
  if (tensors >= 2) {
    for (size_t n : param_elements) second_.emplace_back(n, 0.0f);
  }
}

uint64_t Optimizer::state_bytes() const {
  uint64_t bytes = 0;
  for (const auto* state : {&first_, &second_}) {
    for (const std::vector<float>& t : *state) bytes += t.size() * sizeof(float);
  }
  return bytes;
}

std::vector<std::vector<float>*> Optimizer::state_tensors() {
  std::vector<std::vector<float>*> tensors;
  for (auto* state : {&first_, &second_}) {
    for (std::vector<float>& t : *state) tensors.push_back(&t);
  }
  return tensors;
}

void Optimizer::Step(std::span<const ParamSlot> params, float grad_scale, double lr) {
  BeginStep();
  for (size_t i = 0; i < params.size(); ++i) Apply(i, params[i], grad_scale, lr);
}

void Optimizer::BeginStep() { ++steps_taken_; }

void Optimizer::Apply(size_t index, const ParamSlot& param, float grad_scale, double lr) {
  const auto wd = static_cast<float>(weight_decay_);
  if (options_.kind == OptimizerKind::kSgd) {
    SgdStep(param.values, param.grad_sum, first_.empty() ? nullptr : first_[index].data(), steps_taken_ == 1,
            grad_scale, static_cast<float>(lr), wd, static_cast<float>(options_.momentum),
            static_cast<float>(1.0 - options_.dampening), options_.nesterov);
    return;
  }
  // Scalars as PyTorch computes them: in double, used in float.
  const auto t = static_cast<double>(steps_taken_);
  const double bias_correction1 = 1.0 - std::pow(options_.beta1, t);
  const double bias_correction2 = 1.0 - std::pow(options_.beta2, t);
  const bool decoupled = options_.kind == OptimizerKind::kAdamW;
  AdamStep(param.values, param.grad_sum, first_[index].data(), second_[index].data(), grad_scale,
           decoupled ? 0.0f : wd, decoupled ? static_cast<float>(1.0 - lr * weight_decay_) : 1.0f,
           static_cast<float>(options_.beta1), static_cast<float>(options_.beta2),
           static_cast<float>(lr / bias_correction1), static_cast<float>(std::sqrt(bias_correction2)),
           static_cast<float>(options_.eps));
}

Result<LrScheduleKind> ParseLrScheduleKind(const std::string& name) {
  if (name == "none") return LrScheduleKind::kNone;
  if (name == "step") return LrScheduleKind::kStep;
  if (name == "cosine") return LrScheduleKind::kCosine;
  return InvalidArgument("--lr-schedule must be none, step or cosine, not '" + name + "'");
}

std::string LrScheduleKindName(LrScheduleKind kind) {
  switch (kind) {
    case LrScheduleKind::kNone:
      return "none";
    case LrScheduleKind::kStep:
      return "step";
    case LrScheduleKind::kCosine:
      return "cosine";
  }
  return "?";
}

Status ValidateLrSchedule(const LrScheduleOptions& options, double base_lr) {
  if (options.warmup_steps < 0) return InvalidArgument("--warmup-steps must be at least 0");
  switch (options.kind) {
    case LrScheduleKind::kNone:
      break;
    case LrScheduleKind::kStep:
      if (options.step_size < 1) return InvalidArgument("--lr-schedule step needs --lr-step-size of at least 1");
      if (!std::isfinite(options.gamma) || options.gamma <= 0 || options.gamma > 1) {
        return InvalidArgument("--lr-gamma must be in (0, 1], not " + Number(options.gamma));
      }
      break;
    case LrScheduleKind::kCosine:
      if (options.t_max < 1) {
        return InvalidArgument(
            "--lr-schedule cosine needs --lr-t-max of at least 1 (by default the steps after warm-up)");
      }
      if (!std::isfinite(options.eta_min) || options.eta_min < 0 || options.eta_min > base_lr) {
        return InvalidArgument("--lr-min must be in [0, --lr], not " + Number(options.eta_min));
      }
      break;
  }
  return Status::Ok();
}

double LearningRateAt(const LrScheduleOptions& options, double base_lr, int64_t step) {
  if (step < options.warmup_steps) {
    return base_lr * static_cast<double>(step + 1) / static_cast<double>(options.warmup_steps + 1);
  }
  const int64_t t = step - options.warmup_steps;
  switch (options.kind) {
    case LrScheduleKind::kNone:
      return base_lr;
    case LrScheduleKind::kStep:
      return base_lr * std::pow(options.gamma, static_cast<double>(t / options.step_size));
    case LrScheduleKind::kCosine:
      return options.eta_min +
             (base_lr - options.eta_min) *
                 (1 + std::cos(std::numbers::pi * static_cast<double>(t) / static_cast<double>(options.t_max))) / 2;
  }
  return base_lr;
}

}  // namespace edgecost::train
