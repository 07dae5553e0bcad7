// Models PyTorch exported to ONNX, trained by the executor: a MobileNet V2 (width 0.25, 64x64), a
// MobileNet V3 small (width 0.5: hardswish, squeeze-and-excitation's hardsigmoid and broadcast
// product), a one-block BERT (embeddings, attention, GELU, LayerNorm), a one-layer ViT (its class
// token expanded to the batch, nn.MultiheadAttention), a two-stage Swin and a one-block MaxViT (relative
// position biases, shifted-window masks, patch merging, Einsum attention), all tiny and without dropout
// (tests/graph/export_models.py). The loss falls over 80 steps on a fixed batch; schedules give
// the plain step's gradients bit for bit; and one step's gradients match PyTorch's own, computed
// in float64 with the same weights and batch (tests/train/torch_gradients.py). Skipped, with the
// reason, where Debian's PyTorch is missing.
#include <omp.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>

#include <gtest/gtest.h>

#include "graph/cost_source.h"
#include "graph/resolve.h"
#include "solver/heuristics.h"
#include "solver/plan.h"
#include "solver/problem.h"
#include "solver/simulator.h"
#include "tests/shell.h"
#include "tests/temp_dir.h"
#include "tests/train/tensor_files.h"
#include "train/data.h"
#include "train/executor.h"

namespace edgecost::train {
namespace {

constexpr char kPython[] = "/usr/bin/python3";

using Command = testing::CommandResult;
Command RunCommand(const std::string& command) { return testing::RunShell(command); }

// The full sweep (scripts/onnx_families) compares every family's smallest builder with PyTorch.
bool Heavy() {
  const char* families = std::getenv("EDGECOST_FAMILIES");
  return families && std::string(families) == "all";
}

// The families' smallest builders (tests/graph/export_families.py) without dropout and stochastic
// depth, as tests/graph/export_models.py names them; the normal run compares the first four, a
// few seconds each, the full sweep all of them (alexnet's 58 M parameters, the 224x224 Swin and MaxViT
// take tens of seconds).
constexpr std::array<const char*, 16> kFamilyModels = {
    "squeezenet1_1_nodrop", "shufflenet_v2_x0_5_nodrop", "mnasnet0_5_nodrop", "resnet18_nodrop",
    "mobilenet_v2_nodrop", "mobilenet_v3_small_nodrop", "efficientnet_b0_nodrop", "googlenet_nodrop",
    "regnet_y_400mf_nodrop", "densenet121_nodrop", "inception_v3_nodrop", "convnext_tiny_nodrop",
    "vit_b_16_nodrop", "alexnet_nodrop", "swin_t_nodrop", "maxvit_t_nodrop"};
constexpr size_t kDefaultFamilyModels = 4;

// Families whose gradients are measurably off PyTorch's at their small input, and why (the full sweep
// prints their error and fails if one starts to match, so that it leaves this list). Not a kernel's
// error: at 64x64 the last stage's batch norms normalize 8 values per channel, which carries float32
// rounding to ~4e-4 there (PyTorch's float32 forward too), and a ReLU input within that distance of 0
// lands on the other side of the kink in our float32 forward than in PyTorch's float64, switching its
// gradient on or off. With those masks flipped in the float64 backward, PyTorch's gradients are ours
// to float32 rounding (tests/train/relu_kink_flips.py, on EDGECOST_GRAD_DUMP's files).
const std::map<std::string, std::string> kKnownMismatches = {
    {"mobilenet_v2_nodrop", "1-3% off: one ReLU6 input of the last 2x2 stage at -3.0e-5 in float64, +9.2e-5 in ours "
                            "(PyTorch float32's forward error there up to 4.1e-4); that mask flipped, 1.6e-4"},
    {"regnet_y_400mf_nodrop", "13% off: two ReLU inputs of the last 2x2 stage at 9.1e-5 and 1.2e-4 in float64 "
                              "(PyTorch float32's forward error there up to 5.5e-4); those masks flipped, 9e-4"},
    {"densenet121_nodrop", "3% off, PyTorch's float32 2% (its own kink flips): two ReLU inputs within 3.4e-6 "
                           "of 0 on 4x4 maps; those masks flipped, 2.45% (PyTorch float32's 2.44%)"},
};

// Families the executor refuses to train, with the refusal's words (the full sweep fails if one trains).
// (None now: alexnet_nodrop's 6x6 adaptive pooling of a 1x1 map, a Concat of the one cell six times
// along each axis, trains since the executor adds the gradients of an input read several times.)
const std::map<std::string, std::string> kKnownRefusals = {};

// The tiny models of tests/graph/export_models.py the suite trains.
constexpr const char* kModels[] = {"mobilenet_v2_tiny", "mobilenet_v3_tiny", "bert_tiny", "lstm_tiny",
                                   "gru_tiny",          "lstm2_tiny",        "gpt_tiny",  "unet_tiny",
                                   "vit_tiny",          "swin_tiny",         "maxvit_tiny", "mlp_bn_tiny",
                                   "swin_pad_tiny"};

// The models, exported once for the suite (importing torch is most of the time).
class Exported {
 public:
  static Exported& Get() {
    static Exported exported("onnx_train", [] {
      std::string names;
      for (const char* model : kModels) names += std::string(names.empty() ? "" : " ") + model;
      return names;
    }());
    return exported;
  }
  static Exported& Families() {
    static Exported exported("onnx_train_families", FamilyModels());
    return exported;
  }
  static std::string FamilyModels() {
    std::string names;
    // EDGECOST_FAMILIES=<one model>: that family only (diagnosis).
    const char* only = std::getenv("EDGECOST_FAMILIES");
    if (only && std::string(only) != "all" && std::string(only) != "") return only;
    for (size_t i = 0; i < (Heavy() ? kFamilyModels.size() : kDefaultFamilyModels); ++i)
      names += std::string(names.empty() ? "" : " ") + kFamilyModels[i];
    return names;
  }
  const std::string& skip_reason() const { return skip_reason_; }
  const std::string& failure() const { return failure_; }
  std::string Path(const std::string& model) const { return (dir_ / (model + ".onnx")).string(); }
  const std::filesystem::path& dir() const { return dir_; }

 private:
  Exported(const std::string& prefix, const std::string& models) {
    dir_ = std::filesystem::temp_directory_path() / ("edgecost_" + prefix + "_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
    const Command exported =
        RunCommand(std::string(kPython) + " tests/graph/export_models.py " + dir_.string() + " " + models);
    if (exported.exit_code == 3 || exported.exit_code == 127) {
      skip_reason_ =
          "Debian's PyTorch is not installed (apt-get install python3-torch python3-torchvision "
          "python3-onnx): " +
          exported.output.substr(0, 300);
    } else if (exported.exit_code != 0) {
      failure_ = "export_models.py failed: " + exported.output;
    }
  }
  ~Exported() {
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }

  std::filesystem::path dir_;
  std::string skip_reason_;
  std::string failure_;
};

class OnnxTrainTest : public testing::TempDirTest, public ::testing::WithParamInterface<const char*> {
 protected:
  void SetUp() override {
    if (!Exported::Get().skip_reason().empty()) GTEST_SKIP() << Exported::Get().skip_reason();
    ASSERT_EQ(Exported::Get().failure(), "");
    TempDirTest::SetUp();
    omp_set_num_threads(1);
    auto graph = graph::LoadTrainingGraph({Exported::Get().Path(GetParam()), 2, graph::Derivation::kExact, {}});
    ASSERT_TRUE(graph.ok()) << graph.status().message();
    graph_ = *graph;
    auto e = Executor::Create(graph_, {.seed = 3, .paging_dir = (dir_ / "paging").string()});
    ASSERT_TRUE(e.ok()) << e.status().message();
    executor_ = std::move(*e);
    DataSource data = DataSource::Synthetic(executor_->input_elements(), executor_->label_rows(), executor_->classes(),
                                            9, executor_->input_id_limit());
    batch_ = *data.BatchFor(0);
    ASSERT_TRUE(executor_->SetBatch(batch_).ok());
  }

  v1::TrainingGraph graph_;
  std::unique_ptr<Executor> executor_;
  Batch batch_;
};

TEST_P(OnnxTrainTest, LossFallsOverEightyStepsOnAFixedBatch) {
  double first = 0, last = 0;
  for (int step = 0; step < 80; ++step) {
    auto stats = executor_->Step(nullptr);
    ASSERT_TRUE(stats.ok()) << stats.status().message();
    ASSERT_TRUE(std::isfinite(stats->loss)) << "step " << step;
    if (step == 0) first = stats->loss;
    last = stats->loss;
    executor_->Update(0.05);
  }
  EXPECT_LT(last, 0.25 * first) << "first " << first << ", last " << last;
}

TEST_P(OnnxTrainTest, SchedulesGiveThePlainGradientsBitForBit) {
  auto plain_stats = executor_->Step(nullptr);
  ASSERT_TRUE(plain_stats.ok()) << plain_stats.status().message();
  const std::vector<ParamGradient> plain = executor_->Gradients();
  auto source = graph::MakePoetFlopsSource("a72");
  ASSERT_TRUE(source.ok());
  auto table = (*source)->CostTableFor(graph_);
  ASSERT_TRUE(table.ok()) << table.status().message();
  v1::ScheduleRequest request;
  request.set_activation_budget_bytes(uint64_t{1} << 40);
  request.set_runtime_budget_multiple(1000);
  auto problem = solver::ProblemFromCostTable(*table, request);
  ASSERT_TRUE(problem.ok()) << problem.status().message();
  std::vector<solver::Plan> plans = {solver::PagingOnly(*problem).plan};
  std::mt19937 rng(31);
  std::uniform_int_distribution<int> policy(0, 3);
  for (int i = 0; i < 3; ++i) {
    std::vector<solver::Policy> policies(static_cast<size_t>(problem->size()));
    for (auto& p : policies) p = static_cast<solver::Policy>(policy(rng));
    plans.push_back(solver::BuildPlan(*problem, policies));
  }
  for (size_t k = 0; k < plans.size(); ++k) {
    SCOPED_TRACE("schedule " + std::to_string(k));
    const solver::Replay replay = solver::Simulate(*problem, plans[k]);
    ASSERT_TRUE(replay.valid) << replay.violation;
    auto stats = executor_->Step(&plans[k]);
    ASSERT_TRUE(stats.ok()) << stats.status().message();
    EXPECT_LE(stats->peak_activation_bytes, static_cast<uint64_t>(replay.peak_ram_bytes));
    EXPECT_LT(stats->peak_activation_bytes, plain_stats->peak_activation_bytes);
    const std::vector<ParamGradient> got = executor_->Gradients();
    ASSERT_EQ(got.size(), plain.size());
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_EQ(0, std::memcmp(got[i].values.data(), plain[i].values.data(), got[i].values.size() * sizeof(float)))
          << "gradient of node " << got[i].node << " parameter " << got[i].index << " differs";
    }
  }
}

using testing::ReadTensors;
using testing::WriteTensors;

// float32 kernels against a float64 reference: the L2 norm of the difference, per gradient tensor,
// at most 1e-3 of the reference's. What is left is float32 rounding (different summation orders),
// amplified through 52 batch norms whose last statistics are over 8 values; measured here: 2.6e-4
// at worst on mobilenet_v2_tiny (a batch norm's scale), 2.8e-6 on bert_tiny.
constexpr double kTorchTolerance = 1e-3;
// Deep torchvision models at batch 2 and small inputs amplify float32 rounding past 1e-3: PyTorch's own
// float32 step, with the same weights and batch, is 0.033 from its float64 one on GoogLeNet and 1.0 on
// Inception v3 (its 1x1 last stage: batch norms over 2 values). Where it is, ours may be as far as
// kFloat32Multiple times PyTorch's float32 error on the same tensor, and no farther (measured: 1.03 and
// 1.9 times).
constexpr double kFloat32Multiple = 10;

// One plain step's parameter gradients against PyTorch's (tests/train/torch_gradients.py) with the
// executor's weights and batch; returns the worst relative L2 error. `check` false: measured and
// printed, not expected (a known mismatch).
double ExpectGradientsMatchPyTorch(const std::string& model, const v1::TrainingGraph& graph_, Executor* executor_,
                                   const Batch& batch_, const std::filesystem::path& dir_, bool check = true) {
  auto stats = executor_->Step(nullptr);
  EXPECT_TRUE(stats.ok()) << stats.status().message();
  if (!stats.ok()) return INFINITY;
  // A tied weight (gpt_tiny's LM head, tied to its token embedding) is one parameter in PyTorch: its
  // copy is left out, and the embedding's gradient must be the sum over both uses.
  std::vector<ParamGradient> ours;
  const std::vector<ParamGradient> all = executor_->Gradients();
  int tied = 0;
  for (const ParamGradient& g : all) {
    const auto& attrs = graph_.nodes(g.node).attributes();
    if (g.index == 0 && attrs.count("tied_node")) {
      ++tied;
      const int owner = static_cast<int>(attrs.at("tied_node")), owner_param = static_cast<int>(attrs.at("tied_param"));
      EXPECT_EQ(*executor_->Parameter(g.node, 0), *executor_->Parameter(owner, owner_param));
      for (const ParamGradient& o : all) {
        if (o.node == owner && o.index == owner_param) {
          EXPECT_EQ(g.values, o.values) << "tied gradients differ";
        }
      }
      continue;
    }
    ours.push_back(g);
  }
  if (model == "gpt_tiny") {
    EXPECT_EQ(tied, 1);
  }
  std::vector<std::vector<float>> in;
  for (const ParamGradient& g : ours) in.push_back(*executor_->Parameter(g.node, g.index));
  in.push_back(batch_.inputs);
  in.emplace_back(batch_.labels.begin(), batch_.labels.end());
  WriteTensors(dir_ / "in.bin", in);
  // EDGECOST_GRAD_DUMP=<directory>: the step's weights, batch and our gradients kept there for
  // tests/train/relu_kink_flips.py (MODEL_in.bin, MODEL_ours.bin).
  const char* dump = std::getenv("EDGECOST_GRAD_DUMP");
  if (dump) WriteTensors(std::filesystem::path(dump) / (model + "_in.bin"), in);
  const Command torch = RunCommand(std::string(kPython) + " tests/train/torch_gradients.py " + model + " " +
                                   (dir_ / "in.bin").string() + " " + (dir_ / "out.bin").string() + " " +
                                   (dir_ / "out32.bin").string());
  EXPECT_EQ(torch.exit_code, 0) << torch.output;
  if (torch.exit_code != 0) return INFINITY;
  const std::vector<std::vector<float>> reference = ReadTensors(dir_ / "out.bin");
  const std::vector<std::vector<float>> float32 = ReadTensors(dir_ / "out32.bin");
  EXPECT_EQ(reference.size(), ours.size() + 1);
  EXPECT_EQ(float32.size(), ours.size() + 1);
  if (reference.size() != ours.size() + 1 || float32.size() != ours.size() + 1) return INFINITY;
  const double rows = static_cast<double>(executor_->label_rows());
  if (dump) {
    std::vector<std::vector<float>> mine;
    for (const ParamGradient& g : ours) mine.push_back(g.values);
    WriteTensors(std::filesystem::path(dump) / (model + "_ours.bin"), mine);
  }
  // The loss, within 1e-4 or kFloat32Multiple times PyTorch float32's own distance from it.
  const double loss_error32 = std::fabs(static_cast<double>(float32.back()[0]) - reference.back()[0]);
  EXPECT_NEAR(stats->loss * rows, reference.back()[0],
              std::max(1e-4 * std::fabs(reference.back()[0]), kFloat32Multiple * loss_error32))
      << "PyTorch's float32 loss: " << float32.back()[0];
  // L2 norms of each reference tensor, and of the difference from ours and from PyTorch's float32.
  std::vector<double> diff(ours.size()), diff32(ours.size()), norm(ours.size());
  for (size_t i = 0; i < ours.size(); ++i) {
    EXPECT_EQ(ours[i].values.size(), reference[i].size()) << "parameter " << i;
    if (ours[i].values.size() != reference[i].size() || float32[i].size() != reference[i].size()) return INFINITY;
    for (size_t k = 0; k < reference[i].size(); ++k) {
      const double d = static_cast<double>(ours[i].values[k]) - reference[i][k];
      const double d32 = static_cast<double>(float32[i][k]) - reference[i][k];
      diff[i] += d * d;
      diff32[i] += d32 * d32;
      norm[i] += static_cast<double>(reference[i][k]) * reference[i][k];
    }
    diff[i] = std::sqrt(diff[i]);
    diff32[i] = std::sqrt(diff32[i]);
    norm[i] = std::sqrt(norm[i]);
  }
  double worst = 0, worst32 = 0, worst_multiple = 0;
  std::string worst_at;
  for (size_t i = 0; i < ours.size(); ++i) {
    // A batch norm's shift before a linear convolution and another batch norm has a gradient of
    // zero in exact arithmetic (the next normalization removes any constant per channel): ours is
    // float32 rounding around zero. A bias is measured against its layer's weight gradient too.
    double scale = norm[i];
    if (ours[i].index == 1 && i > 0 && ours[i - 1].node == ours[i].node) scale = std::max(scale, norm[i - 1]);
    const double relative = diff[i] / std::max(scale, 1e-12);
    const double relative32 = diff32[i] / std::max(scale, 1e-12);
    const std::string at = "tensor " + std::to_string(i) + ", node " + std::to_string(ours[i].node) + " ('" +
                           graph_.nodes(ours[i].node).name() + "') parameter " + std::to_string(ours[i].index);
    if (check) {
      EXPECT_LE(relative, std::max(kTorchTolerance, kFloat32Multiple * relative32))
          << at << ": |ours - torch| = " << diff[i] << ", |torch| = " << norm[i]
          << ", |torch float32 - torch| = " << diff32[i];
    }
    // EDGECOST_GRAD_VERBOSE: every tensor's error, and the worst elements of those past 1e-3.
    if (std::getenv("EDGECOST_GRAD_VERBOSE")) {
      std::printf("  %s: relative %.3g, float32 %.3g, size %zu\n", at.c_str(), relative, relative32, reference[i].size());
      if (relative > 1e-3) {
        std::vector<std::pair<double, size_t>> e;
        for (size_t k = 0; k < reference[i].size(); ++k) e.push_back({std::fabs(ours[i].values[k] - reference[i][k]), k});
        std::sort(e.rbegin(), e.rend());
        for (size_t t = 0; t < std::min<size_t>(8, e.size()); ++t)
          std::printf("    [%zu] ours %.6g torch %.6g\n", e[t].second, ours[i].values[e[t].second], reference[i][e[t].second]);
      }
    }
    if (relative > kTorchTolerance) worst_multiple = std::max(worst_multiple, relative / std::max(relative32, 1e-12));
    worst32 = std::max(worst32, relative32);
    if (relative > worst) {
      worst = relative;
      worst_at = at;
    }
  }
  std::printf(
      "%s: %zu gradient tensors, worst relative L2 error %.3g (%s); PyTorch's float32 %.3g; past 1e-3, at most "
      "%.3g times PyTorch float32's\n",
      model.c_str(), ours.size(), worst, worst_at.c_str(), worst32, worst_multiple);
  return worst;
}

TEST_P(OnnxTrainTest, GradientsMatchPyTorchsWithTheSameWeightsAndBatch) {
  ExpectGradientsMatchPyTorch(GetParam(), graph_, executor_.get(), batch_, dir_);
}

INSTANTIATE_TEST_SUITE_P(Models, OnnxTrainTest, ::testing::ValuesIn(kModels));

// Issue 31: the smallest builder of every torchvision family, at the input tests/graph/export_families.py
// exports it at, gives PyTorch's gradients within the same tolerance (dropout and stochastic depth off).
class OnnxFamilyGradientsTest : public testing::TempDirTest, public ::testing::WithParamInterface<const char*> {
 protected:
  void SetUp() override {
    const std::string model = GetParam();
    if (!Heavy() && Exported::FamilyModels().find(model) == std::string::npos) {
      GTEST_SKIP() << model << " is compared in scripts/onnx_families only (EDGECOST_FAMILIES=all)";
    }
    if (!Exported::Families().skip_reason().empty()) GTEST_SKIP() << Exported::Families().skip_reason();
    ASSERT_EQ(Exported::Families().failure(), "");
    TempDirTest::SetUp();
    omp_set_num_threads(1);
  }
};

TEST_P(OnnxFamilyGradientsTest, GradientsMatchPyTorchs) {
  const std::string model = GetParam();
  const auto start = std::chrono::steady_clock::now();
  auto graph = graph::LoadTrainingGraph({Exported::Families().Path(model), 2, graph::Derivation::kExact, {}});
  ASSERT_TRUE(graph.ok()) << graph.status().message();
  auto executor = Executor::Create(*graph, {.seed = 3, .paging_dir = (dir_ / "paging").string()});
  if (const auto refusal = kKnownRefusals.find(model); refusal != kKnownRefusals.end()) {
    ASSERT_FALSE(executor.ok()) << model << " now trains: take it off kKnownRefusals";
    EXPECT_NE(executor.status().message().find(refusal->second), std::string::npos) << executor.status().message();
    std::printf("%s: not compared, the executor refuses it (known): %s\n", model.c_str(),
                std::string(executor.status().message()).c_str());
    return;
  }
  ASSERT_TRUE(executor.ok()) << executor.status().message();
  DataSource data = DataSource::Synthetic((*executor)->input_elements(), (*executor)->label_rows(),
                                          (*executor)->classes(), 9, (*executor)->input_id_limit());
  const Batch batch = *data.BatchFor(0);
  ASSERT_TRUE((*executor)->SetBatch(batch).ok());
  const auto known = kKnownMismatches.find(model);
  const bool mismatch = known != kKnownMismatches.end();
  const double worst = ExpectGradientsMatchPyTorch(model, *graph, executor->get(), batch, dir_, !mismatch);
  std::printf("%s: worst relative gradient error %.3g, compared in %.1f s%s\n", model.c_str(), worst,
              std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(),
              mismatch ? (" (known mismatch: " + known->second + ")").c_str() : "");
  if (mismatch) {
    EXPECT_GT(worst, kTorchTolerance) << model << " now matches PyTorch: take it off kKnownMismatches";
  }
}

INSTANTIATE_TEST_SUITE_P(Families, OnnxFamilyGradientsTest, ::testing::ValuesIn(kFamilyModels),
                         [](const auto& info) { return std::string(info.param); });

}  // namespace
}  // namespace edgecost::train
