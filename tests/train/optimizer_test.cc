// The optimizers and learning-rate schedules of train/optimizer.h. Their update rules against
// values of torch.optim in float64 (the first step of most checked by hand); the schedules against
// StepLR, CosineAnnealingLR and the warm-up's formula; their refusals; the state they hold. Then
// 20 steps in edgecost and 20 in PyTorch (tests/train/torch_optim.py), from the same weights,
// batches and hyper-parameters, end at the same weights, for SGD with Nesterov momentum and weight
// decay, Adam and AdamW, each with a schedule (three after a warm-up), on a small ResNet and a MobileNet V3
// exported by tests/graph/export_models.py (without dropout: PyTorch draws its own masks).
// Skipped, with the reason, where Debian's PyTorch is missing.
#include "train/optimizer.h"

#include <omp.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <sstream>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "graph/resolve.h"
#include "tests/shell.h"
#include "tests/temp_dir.h"
#include "tests/train/tensor_files.h"
#include "train/data.h"
#include "train/executor.h"

namespace edgecost::train {
namespace {

using ::testing::HasSubstr;

// Three steps of one optimizer on p = (1, -2), with the gradient given as a batch sum and a scale
// of 1/2 (as the executor gives it), returning p after each step.
std::vector<std::vector<float>> ThreeSteps(const OptimizerOptions& options) {
  const std::vector<std::vector<float>> mean_gradients = {{2.0f, -0.5f}, {-1.0f, 0.25f}, {0.5f, 0.0f}};
  std::vector<float> p = {1.0f, -2.0f};
  Optimizer optimizer(options, {p.size()});
  std::vector<std::vector<float>> after;
  for (const std::vector<float>& mean : mean_gradients) {
    const std::vector<float> sum = {2 * mean[0], 2 * mean[1]};
    const ParamSlot slot{p, sum};
    optimizer.Step({&slot, 1}, 0.5f, 0.1);
    after.push_back(p);
  }
  return after;
}

void ExpectSteps(const std::vector<std::vector<float>>& got, const std::vector<std::vector<double>>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t s = 0; s < want.size(); ++s) {
    for (size_t i = 0; i < want[s].size(); ++i) {
      EXPECT_NEAR(got[s][i], want[s][i], 2e-6) << "step " << s + 1 << ", element " << i;
    }
  }
}

// Expected values: torch.optim in float64 with the same arguments (lr 0.1). By hand, step 1 of
// SGD with momentum: d = g + wd p = 2 + 0.1 = 2.1, the buffer starts as d (no dampening), p = 1 - 0.21.
TEST(OptimizerRules, SgdWithMomentumDampeningAndWeightDecay) {
  ExpectSteps(ThreeSteps({.kind = OptimizerKind::kSgd, .momentum = 0.9, .dampening = 0.5, .weight_decay = 0.1}),
              {{0.79, -1.93}, {0.64705, -1.86985}, {0.49015975, -1.80636575}});
}

// By hand, step 1: d = 2, buffer 2, p = 1 - 0.1 (d + 0.9 buffer) = 1 - 0.38.
TEST(OptimizerRules, SgdWithNesterovMomentum) {
  ExpectSteps(ThreeSteps({.kind = OptimizerKind::kSgd, .momentum = 0.9, .nesterov = true}),
              {{0.62, -1.905}, {0.648, -1.912}, {0.4882, -1.8958}});
}

TEST(OptimizerRules, PlainSgdWithWeightDecay) {
  ExpectSteps(ThreeSteps({.kind = OptimizerKind::kSgd, .weight_decay = 0.2}),
              {{0.78, -1.91}, {0.8644, -1.8968}, {0.797112, -1.858864}});
}

// By hand, step 1 (element 0): g = 2 + 0.5 p = 2.5, m = 0.2 g = 0.5, v = 0.01 g^2 = 0.0625;
// p = 1 - 0.1 / 0.2 * 0.5 / (sqrt(0.0625) / sqrt(0.01) + 1e-3) = 1 - 0.25 / 2.501.
TEST(OptimizerRules, AdamWithL2WeightDecay) {
  ExpectSteps(ThreeSteps({.kind = OptimizerKind::kAdam, .weight_decay = 0.5, .beta1 = 0.8, .beta2 = 0.99, .eps = 1e-3}),
              {{0.9000399840063974, -1.900066622251832},
               {0.8554573225112755, -1.8098149486308908},
               {0.8008616150682372, -1.7184687544158903}});
}

// By hand, step 1 (element 0): p = 1 - 0.1 * 0.5 = 0.95 first, then Adam's step of the plain
// gradient 2: m = 0.4, v = 0.04, p = 0.95 - 0.5 * 0.4 / (2 + 1e-3).
TEST(OptimizerRules, AdamWDecouplesWeightDecay) {
  ExpectSteps(
      ThreeSteps({.kind = OptimizerKind::kAdamW, .weight_decay = 0.5, .beta1 = 0.8, .beta2 = 0.99, .eps = 1e-3}),
      {{0.8500499750124937, -1.8001996007984031},
       {0.7864471366501236, -1.6891292753863099},
       {0.7166773423247647, -1.5894207146183599}});
}

TEST(OptimizerRules, AdamWDefaultsToPyTorchsWeightDecay) {
  const OptimizerOptions defaults{.kind = OptimizerKind::kAdamW};
  EXPECT_EQ(WeightDecayOf(defaults), 0.01);
  EXPECT_EQ(WeightDecayOf({.kind = OptimizerKind::kAdam}), 0.0);
  ExpectSteps(ThreeSteps(defaults), {{0.8990000005, -1.898000002},
                                     {0.8714672967019315, -1.8694682987058464},
                                     {0.8365529148417407, -1.8470109006867623}});
}

TEST(OptimizerRules, StateIsOneTensorPerParameterForMomentumAndTwoForAdam) {
  const std::vector<size_t> elements = {10, 3};
  EXPECT_EQ(Optimizer({}, elements).state_bytes(), 0u);
  EXPECT_EQ(Optimizer({.momentum = 0.9}, elements).state_bytes(), 13u * 4);
  EXPECT_EQ(Optimizer({.kind = OptimizerKind::kAdam}, elements).state_bytes(), 2u * 13 * 4);
  EXPECT_EQ(OptimizerStateTensors({.kind = OptimizerKind::kAdamW}), 2);
  EXPECT_EQ(OptimizerStateTensors({.momentum = 0.5}), 1);
}

TEST(OptimizerRules, RefusesWhatPyTorchRefusesAndOptionsOfAnotherOptimizer) {
  const auto refused = [](const OptimizerOptions& options, const std::string& says) {
    const Status status = ValidateOptimizer(options);
    EXPECT_FALSE(status.ok()) << says;
    EXPECT_THAT(status.message(), HasSubstr(says));
  };
  refused({.momentum = -0.1}, "--momentum must be in [0, 1)");
  refused({.nesterov = true}, "--nesterov needs --momentum above 0");
  refused({.momentum = 0.9, .dampening = 0.1, .nesterov = true}, "--dampening 0");
  refused({.weight_decay = -0.5}, "--weight-decay");
  refused({.kind = OptimizerKind::kAdam, .beta1 = 1.0}, "--betas must both be in [0, 1)");
  refused({.kind = OptimizerKind::kAdam, .eps = -1}, "--eps");
  refused({.kind = OptimizerKind::kAdam, .momentum = 0.9}, "SGD's");
  refused({.kind = OptimizerKind::kSgd, .beta1 = 0.5}, "Adam's");
  EXPECT_FALSE(ParseOptimizerKind("rmsprop").ok());
  EXPECT_TRUE(ValidateOptimizer({.kind = OptimizerKind::kAdamW, .weight_decay = 0}).ok());
}

TEST(LrSchedules, StepDecaysAfterAWarmUp) {
  const LrScheduleOptions step{.kind = LrScheduleKind::kStep, .step_size = 3, .gamma = 0.5, .warmup_steps = 2};
  const std::vector<double> want = {0.1 / 3, 0.2 / 3, 0.1, 0.1, 0.1, 0.05, 0.05, 0.05, 0.025};
  for (size_t t = 0; t < want.size(); ++t)
    EXPECT_NEAR(LearningRateAt(step, 0.1, static_cast<int64_t>(t)), want[t], 1e-15) << t;
}

TEST(LrSchedules, CosineFallsToItsMinimumOverTMax) {
  const LrScheduleOptions cosine{.kind = LrScheduleKind::kCosine, .t_max = 4, .eta_min = 0.1};
  const std::vector<double> want = {1.0, 0.1 + 0.9 * (1 + std::sqrt(0.5)) / 2, 0.55,
                                    0.1 + 0.9 * (1 - std::sqrt(0.5)) / 2, 0.1};
  for (size_t t = 0; t < want.size(); ++t)
    EXPECT_NEAR(LearningRateAt(cosine, 1.0, static_cast<int64_t>(t)), want[t], 1e-12) << t;
  EXPECT_EQ(LearningRateAt({}, 0.3, 1000), 0.3);
}

TEST(LrSchedules, RefusesNonsense) {
  EXPECT_THAT(ValidateLrSchedule({.kind = LrScheduleKind::kStep}, 0.1).message(), HasSubstr("--lr-step-size"));
  EXPECT_THAT(ValidateLrSchedule({.kind = LrScheduleKind::kStep, .step_size = 2, .gamma = 0}, 0.1).message(),
              HasSubstr("--lr-gamma"));
  EXPECT_THAT(ValidateLrSchedule({.kind = LrScheduleKind::kCosine, .t_max = 5, .eta_min = 1}, 0.1).message(),
              HasSubstr("--lr-min must be in [0, --lr]"));
  EXPECT_THAT(ValidateLrSchedule({.warmup_steps = -1}, 0.1).message(), HasSubstr("--warmup-steps"));
  EXPECT_FALSE(ParseLrScheduleKind("exponential").ok());
}

// ---------------------------------------------------------------- against PyTorch

constexpr char kPython[] = "/usr/bin/python3";
constexpr int kSteps = 20;
constexpr int kBatch = 2;
// Weights after 20 steps, float32 against a float64 reference: per tensor, the largest difference at
// most 1e-4 plus 1% of the largest distance PyTorch moved the tensor. Measured: SGD at most 1.9e-6
// (0.14% of the move), Adam and AdamW at most 2e-4 (1.5% of the move: a MobileNet conv of 1e-2).
// MobileNet V2 tiny (width 0.25 at 64x64) is not used: its training is chaotic at batch 2, PyTorch's
// own float32 and float64 runs of 20 SGD steps end 0.3 apart for a move of 0.3.
constexpr double kWeightTolerance = 1e-4, kMovedTolerance = 1e-2;

// The two models, exported once for the suite.
class Exported {
 public:
  static Exported& Get() {
    static Exported exported;
    return exported;
  }
  std::string skip_reason, failure;
  std::string Path(const std::string& model) const { return (dir_ / (model + ".onnx")).string(); }

 private:
  Exported() {
    dir_ = std::filesystem::temp_directory_path() / ("edgecost_optimizer_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
    const testing::CommandResult exported = testing::RunShell(std::string(kPython) + " tests/graph/export_models.py " +
                                                              dir_.string() + " resnet_tiny mobilenet_v3_tiny");
    if (exported.exit_code == 3 || exported.exit_code == 127) {
      skip_reason =
          "Debian's PyTorch is not installed (apt-get install python3-torch python3-torchvision "
          "python3-onnx): " +
          exported.output.substr(0, 300);
    } else if (exported.exit_code != 0) {
      failure = "export_models.py failed: " + exported.output;
    }
  }
  ~Exported() {
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }
  std::filesystem::path dir_;
};

struct Training {
  std::string name;
  OptimizerOptions optimizer;
  LrScheduleOptions schedule;
  double lr = 0;
};

void PrintTo(const Training& t, std::ostream* out) { *out << t.name; }

// The configuration torch_optim.py reads: torch.optim's and lr_scheduler's argument names.
std::string TorchConfig(const Training& t) {
  std::ostringstream json;
  json.precision(17);
  json << "{\"optimizer\": \"" << OptimizerKindName(t.optimizer.kind) << "\", \"lr\": " << t.lr
       << ", \"weight_decay\": " << WeightDecayOf(t.optimizer) << ", \"steps\": " << kSteps;
  if (t.optimizer.kind == OptimizerKind::kSgd) {
    json << ", \"momentum\": " << t.optimizer.momentum << ", \"dampening\": " << t.optimizer.dampening
         << ", \"nesterov\": " << (t.optimizer.nesterov ? "true" : "false");
  } else {
    json << ", \"betas\": [" << t.optimizer.beta1 << ", " << t.optimizer.beta2 << "], \"eps\": " << t.optimizer.eps;
  }
  json << ", \"schedule\": \"" << LrScheduleKindName(t.schedule.kind) << "\", \"step_size\": " << t.schedule.step_size
       << ", \"gamma\": " << t.schedule.gamma << ", \"t_max\": " << t.schedule.t_max
       << ", \"eta_min\": " << t.schedule.eta_min << ", \"warmup_steps\": " << t.schedule.warmup_steps << "}";
  return json.str();
}

// Adam's eps is 1e-6 here, not PyTorch's 1e-8: elements whose gradient is rounding noise in float32
// (channels a ReLU or hard-swish left dead for the batch, about 1e-9) step by noise / (noise + eps)
// x lr, a tenth of lr at 1e-8 against nothing in PyTorch's float64; at 1e-6 a thousandth.
const std::vector<Training>& Trainings() {
  static const std::vector<Training> trainings = {
      {"sgd_nesterov_momentum_weight_decay_step",
       {.kind = OptimizerKind::kSgd, .momentum = 0.9, .nesterov = true, .weight_decay = 0.01},
       {.kind = LrScheduleKind::kStep, .step_size = 5, .gamma = 0.5, .warmup_steps = 3},
       0.005},
      {"sgd_dampened_momentum_cosine",
       {.kind = OptimizerKind::kSgd, .momentum = 0.8, .dampening = 0.3, .weight_decay = 0.001},
       {.kind = LrScheduleKind::kCosine, .t_max = 20, .eta_min = 0.001},
       0.005},
      {"adam_weight_decay_cosine",
       {.kind = OptimizerKind::kAdam, .weight_decay = 0.001, .beta1 = 0.85, .beta2 = 0.995, .eps = 1e-6},
       {.kind = LrScheduleKind::kCosine, .t_max = 16, .eta_min = 1e-4, .warmup_steps = 4},
       0.002},
      {"adamw_step",
       {.kind = OptimizerKind::kAdamW, .eps = 1e-6},
       {.kind = LrScheduleKind::kStep, .step_size = 7, .gamma = 0.3, .warmup_steps = 2},
       0.002},
  };
  return trainings;
}

class AgainstPyTorch : public testing::TempDirTest,
                       public ::testing::WithParamInterface<std::tuple<const char*, Training>> {
 protected:
  void SetUp() override {
    if (!Exported::Get().skip_reason.empty()) GTEST_SKIP() << Exported::Get().skip_reason;
    ASSERT_EQ(Exported::Get().failure, "");
    TempDirTest::SetUp();
    omp_set_num_threads(1);
  }
};

TEST_P(AgainstPyTorch, TwentyStepsEndAtPyTorchsWeights) {
  const auto& [model, training] = GetParam();
  auto graph = graph::LoadTrainingGraph({Exported::Get().Path(model), kBatch, graph::Derivation::kExact, {}});
  ASSERT_TRUE(graph.ok()) << graph.status().message();
  auto created = Executor::Create(*graph, {.seed = 3, .paging_dir = (dir_ / "paging").string()});
  ASSERT_TRUE(created.ok()) << created.status().message();
  Executor& executor = **created;
  ASSERT_TRUE(executor.SetOptimizer(training.optimizer).ok());
  EXPECT_EQ(executor.optimizer_state_bytes(),
            static_cast<uint64_t>(OptimizerStateTensors(training.optimizer)) * executor.trained_param_bytes());
  ASSERT_TRUE(ValidateLrSchedule(training.schedule, training.lr).ok());

  // Edgecost's starting weights and every step's batch, for PyTorch; then edgecost's 20 steps.
  const std::vector<ParamGradient> trained = executor.Gradients();  // which parameters train, in order
  std::vector<std::vector<float>> in;
  for (const ParamGradient& g : trained) in.push_back(*executor.Parameter(g.node, g.index));
  DataSource data = DataSource::Synthetic(executor.input_elements(), executor.label_rows(), executor.classes(), 9);
  std::vector<double> lrs;
  for (int step = 0; step < kSteps; ++step) {
    auto drawn = data.BatchFor(step);
    ASSERT_TRUE(drawn.ok()) << drawn.status().message();
    const Batch& batch = *drawn;
    in.push_back(batch.inputs);
    in.emplace_back(batch.labels.begin(), batch.labels.end());
    ASSERT_TRUE(executor.SetBatch(batch).ok());
    auto stats = executor.Step(nullptr);
    ASSERT_TRUE(stats.ok()) << stats.status().message();
    lrs.push_back(LearningRateAt(training.schedule, training.lr, step));
    executor.Update(lrs.back());
  }
  testing::WriteTensors(dir_ / "in.bin", in);
  const testing::CommandResult torch =
      testing::RunShell(std::string(kPython) + " tests/train/torch_optim.py " + model + " '" + TorchConfig(training) +
                        "' " + (dir_ / "in.bin").string() + " " + (dir_ / "out.bin").string());
  ASSERT_EQ(torch.exit_code, 0) << torch.output;
  const std::vector<std::vector<float>> reference = testing::ReadTensors(dir_ / "out.bin");
  ASSERT_EQ(reference.size(), trained.size() + 2);
  const std::vector<float>& torch_lrs = reference[trained.size()];
  const std::vector<float>& first_gradient_max = reference[trained.size() + 1];

  // The schedule: PyTorch's learning rate at every step.
  ASSERT_EQ(torch_lrs.size(), lrs.size());
  for (size_t t = 0; t < lrs.size(); ++t) EXPECT_NEAR(torch_lrs[t], lrs[t], 1e-6 * lrs[t]) << "step " << t;

  // The weights: per tensor, the largest difference from PyTorch's, against how far PyTorch moved them.
  // Adam(W) normalizes the gradient by its root mean square: a parameter whose gradient is zero in
  // exact arithmetic (a batch norm's shift before a convolution and another batch norm) steps by
  // rounding noise over noise + eps, about 1e-9 / (1e-9 + eps) x lr in float32 against nothing in
  // PyTorch's float64. Those are left out (PyTorch's float64 gradient below 1e-10), and counted.
  const bool normalizes = training.optimizer.kind != OptimizerKind::kSgd;
  int left_out = 0;
  double worst_abs = 0, worst_relative = 0;
  std::string worst_at;
  for (size_t i = 0; i < trained.size(); ++i) {
    if (normalizes && first_gradient_max[i] < 1e-10) {
      ++left_out;
      continue;
    }
    const std::vector<float>& ours = *executor.Parameter(trained[i].node, trained[i].index);
    ASSERT_EQ(ours.size(), reference[i].size()) << "parameter " << i;
    double diff = 0, moved = 0;
    for (size_t k = 0; k < ours.size(); ++k) {
      diff = std::max(diff, std::fabs(static_cast<double>(ours[k]) - reference[i][k]));
      moved = std::max(moved, std::fabs(static_cast<double>(reference[i][k]) - in[i][k]));
    }
    const std::string at = "node " + std::to_string(trained[i].node) + " ('" + graph->nodes(trained[i].node).name() +
                           "') parameter " + std::to_string(trained[i].index);
    EXPECT_LE(diff, kWeightTolerance + kMovedTolerance * moved) << at << ": moved " << moved;
    if (diff > worst_abs) {
      worst_abs = diff;
      worst_at = at;
    }
    worst_relative = std::max(worst_relative, moved > 0 ? diff / moved : 0.0);
  }
  EXPECT_LE(left_out, static_cast<int>(trained.size()) / 10) << "too many parameters without a gradient";
  std::printf(
      "%s %s: %zu tensors (%d without a gradient left out), largest |edgecost - PyTorch| %.3g (%s), largest "
      "relative to the move %.3g\n",
      model, training.name.c_str(), trained.size(), left_out, worst_abs, worst_at.c_str(), worst_relative);
}

INSTANTIATE_TEST_SUITE_P(Optimizers, AgainstPyTorch,
                         ::testing::Combine(::testing::Values("resnet_tiny", "mobilenet_v3_tiny"),
                                            ::testing::ValuesIn(Trainings())),
                         [](const auto& info) {
                           return std::string(std::get<0>(info.param)) + "_" + std::get<1>(info.param).name;
                         });

}  // namespace
}  // namespace edgecost::train
