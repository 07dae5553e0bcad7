// The models edge devices train, exported from PyTorch during the test run (random weights,
// nothing downloaded, tests/graph/export_models.py): each imports, derives, profiles on oneDNN and
// solves at half of its checkpoint-all peak (SqueezeNet, whose floor is above that, at its floor), then
// trains one step under that schedule with the plain step's gradients. Skipped, with the
// reason, where Debian's PyTorch is missing (scripts/deps installs it).
#include <omp.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>

#include <gtest/gtest.h>

#include "graph/derive.h"
#include "graph/onnx/import.h"
#include "graph/resolve.h"
#include "profiler/paging.h"
#include "profiler/power_model.h"
#include "profiler/profile.h"
#include "solver/heuristics.h"
#include "solver/solve.h"
#include "tests/shell.h"
#include "tests/temp_dir.h"
#include "train/data.h"
#include "train/executor.h"

namespace edgecost {
namespace {

constexpr char kPython[] = "/usr/bin/python3";

using Command = testing::CommandResult;
Command Run(const std::string& command) { return testing::RunShell(command); }

// The full sweep (scripts/onnx_families) also runs the models that take tens of CPU seconds.
bool Heavy() {
  const char* families = std::getenv("EDGECOST_FAMILIES");
  return families && std::string(families) == "all";
}

// Exports every model once for the suite (one Python run: importing torch is most of its time);
// empty with the reason when PyTorch is missing.
class Exported {
 public:
  static Exported& Get() {
    static Exported exported;
    return exported;
  }
  const std::string& skip_reason() const { return skip_reason_; }
  // An export that failed with PyTorch present: the tests fail with it.
  const std::string& failure() const { return failure_; }
  // `variant`: "" (opset 13, training mode), "opset17" (the transformers) or "eval" (mobilenet_v2).
  std::string Path(const std::string& model, const std::string& variant = "") const {
    return (dir_ / variant / (model + ".onnx")).string();
  }

 private:
  Exported() {
    dir_ = std::filesystem::temp_directory_path() / ("edgecost_onnx_models_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
    const Command exported = Run(std::string(kPython) + " tests/graph/export_models.py " + dir_.string() + " --suite" +
                                 (Heavy() ? " --heavy" : ""));
    if (exported.exit_code == 3 || exported.exit_code == 127) {  // no PyTorch, or no Debian Python
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

std::map<std::string, int> KindCounts(const graph::ForwardGraph& g) {
  std::map<std::string, int> counts;
  for (const graph::Layer& layer : g.layers()) ++counts[std::string(graph::OpKindName(layer.kind))];
  return counts;
}

class OnnxModelsTest : public edgecost::testing::TempDirTest, public ::testing::WithParamInterface<const char*> {
 protected:
  void SetUp() override {
    if (!Exported::Get().skip_reason().empty()) GTEST_SKIP() << Exported::Get().skip_reason();
    ASSERT_EQ(Exported::Get().failure(), "");
    TempDirTest::SetUp();
  }
};

// What each model must contain: the op kinds that make it what it is.
const std::map<std::string, std::set<std::string>> kSignatureKinds = {
    {"mobilenet_v2", {"conv2d", "batchnorm2d_relu6", "batchnorm2d", "add"}},
    {"mobilenet_v3_small", {"conv2d", "batchnorm2d_hardswish", "hardswish", "hardsigmoid", "mul"}},
    {"efficientnet_b0", {"conv2d", "batchnorm2d_silu", "silu", "sigmoid", "mul"}},
    {"shufflenet_v2_x0_5", {"concat", "transpose", "reshape", "slice", "reduce_mean"}},
    {"squeezenet1_1", {"concat", "maxpool2d"}},
    {"densenet121", {"concat", "batchnorm2d_relu", "avgpool2d", "maxpool2d"}},
    {"convnext_tiny", {"conv2d", "layernorm", "gelu", "mul", "transpose"}},
    {"inception_v3", {"conv2d", "concat", "avgpool2d", "maxpool2d"}},
    {"vit_b_16", {"conv2d", "concat", "add_broadcast", "layernorm", "gelu", "matmul", "softmax"}},
    {"swin_t", {"conv2d", "slice", "concat", "add_broadcast", "layernorm", "gelu", "matmul", "softmax"}},
    {"maxvit_t", {"conv2d", "batchnorm2d", "add_broadcast", "layernorm", "gelu", "matmul", "softmax", "dropout"}},
    {"alexnet", {"conv2d", "relu", "maxpool2d", "concat", "dropout", "linear"}},
    {"googlenet", {"conv2d", "batchnorm2d_relu", "concat", "maxpool2d", "dropout", "linear"}},
    {"mnasnet0_5", {"conv2d", "batchnorm2d_relu", "batchnorm2d", "add", "dropout"}},
    {"regnet_y_400mf", {"conv2d", "batchnorm2d", "sigmoid", "mul", "add"}},
    {"resnet18_tv", {"conv2d", "batchnorm2d_relu", "batchnorm2d", "maxpool2d", "add", "linear"}},
    {"transformer_encoder", {"matmul", "softmax", "layernorm", "transpose", "dropout", "reduce_mean"}},
    {"kws_lstm", {"conv2d", "batchnorm2d_relu", "maxpool2d", "transpose", "lstm", "slice"}},
    {"sensor_gru", {"relu", "gru", "slice", "concat"}},
    {"small_gpt", {"embedding", "causal_mask", "softmax", "layernorm", "gelu", "matmul", "dropout"}},
    {"small_unet", {"conv2d", "maxpool2d", "resize", "concat", "transpose"}},
    {"small_bert", {"embedding", "add_broadcast", "layernorm", "gelu", "matmul", "softmax", "tanh", "slice"}},
};

TEST_P(OnnxModelsTest, ImportsDerivesProfilesAndSolvesAtHalfItsPeak) {
  const std::string model = GetParam();
  if ((model == "swin_t" || model == "maxvit_t") && !Heavy()) {
    GTEST_SKIP() << model << " (224x224) runs in scripts/onnx_families only";
  }
  if (model == "alexnet" && !Heavy()) {  // 58 M parameters: half a minute of profiling and training
    GTEST_SKIP() << model << " runs in scripts/onnx_families only";
  }
  const auto import_start = std::chrono::steady_clock::now();
  auto forward = graph::ImportOnnx(Exported::Get().Path(model));
  const double import_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - import_start).count();
  ASSERT_TRUE(forward.ok()) << forward.status().message();
  EXPECT_EQ(forward->batch_size(), 2);
  const auto kinds = KindCounts(*forward);
  for (const std::string& kind : kSignatureKinds.at(model))
    EXPECT_TRUE(kinds.count(kind)) << model << " lacks " << kind;
  if (model == "mobilenet_v2" || model == "shufflenet_v2_x0_5") {
    bool depthwise = false;
    for (const graph::Layer& layer : forward->layers()) {
      auto groups = layer.attributes.find("groups");
      depthwise =
          depthwise || (groups != layer.attributes.end() && groups->second == layer.attributes.at("in_channels"));
    }
    EXPECT_TRUE(depthwise) << "no depthwise convolution";
  }

  if (model == "mobilenet_v3_small") {  // its batch norms' epsilon is 1e-3, not PyTorch's default
    for (const graph::Layer& layer : forward->layers()) {
      if (layer.kind == graph::OpKind::kBatchNorm2d) {
        EXPECT_EQ(layer.attributes.at("epsilon_e9"), 1000000);
      }
    }
  }

  auto graph = graph::DeriveTrainingGraph(*forward, graph::Derivation::kExact);
  ASSERT_TRUE(graph.ok()) << graph.status().message();
  int backward = 0;
  for (const v1::TrainingNode& node : graph->nodes()) backward += node.phase() == v1::PHASE_BACKWARD;
  EXPECT_GT(backward, forward->size() / 2);

  auto db = costdb::CostDb::Open((dir_ / "costs.db").string());
  ASSERT_TRUE(db.ok()) << db.status().message();
  v1::Device device;
  device.set_name("test-device");
  device.set_kind(v1::Device::KIND_MEASURED);
  device.mutable_fingerprint()->set_hash("fp");
  ASSERT_TRUE(db->UpsertDevice(device).ok());
  kernels::Backend backend;
  profiler::EstimatedMeter meter{probes::EstimateModel{}};
  profiler::ProfileOptions options;
  options.threads = 1;
  options.measure.min_window_s = 0.0002;
  options.measure.max_window_s = 0.05;
  options.measure.warmup_runs = 1;
  options.measure.warmup_s = 0;
  options.measure.min_repetitions = 1;
  auto run = db->BeginRun("fp", profiler::kMeasuredSource);
  ASSERT_TRUE(run.ok());
  const auto start = std::chrono::steady_clock::now();
  auto summary = profiler::ProfileGraph(*db, backend, *graph, "fp", *run, &meter, options);
  const double profile_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_TRUE(summary.ok()) << summary.status().message();
  EXPECT_EQ(summary->measured, summary->distinct_ops);
  std::printf("%s: imported in %.3f s, %d forward ops, %d training nodes, %d distinct ops profiled in %.1f s\n",
              model.c_str(), import_s, forward->size(), graph->nodes_size(), summary->distinct_ops, profile_s);

  profiler::PagingOptions paging_options;
  paging_options.dir = dir_.string();
  paging_options.sizes_bytes = {4096, 65536, 1u << 20};
  paging_options.repetitions = 2;
  auto paging = profiler::MeasurePaging(paging_options);
  ASSERT_TRUE(paging.ok()) << paging.status().message();
  paging->cost.set_page_in_power_w(3);  // this VM has no storage power sensor: an estimate
  paging->cost.set_page_out_power_w(3);
  ASSERT_TRUE(db->PutPagingCost("fp", paging->cost).ok());
  auto table = profiler::MeasuredCostTable(*db, *graph, "test-device", "fp", 1);
  ASSERT_TRUE(table.ok()) << table.status().message();
  v1::ScheduleRequest request;
  request.set_runtime_budget_multiple(2.0);
  request.set_activation_budget_bytes(uint64_t{1} << 50);  // replaced below, by half the checkpoint-all peak
  auto problem = solver::ProblemFromCostTable(*table, request);
  ASSERT_TRUE(problem.ok()) << problem.status().message();
  const int64_t peak = solver::CheckpointAll(*problem).replay.peak_ram_bytes;
  const int64_t floor = solver::MemoryLowerBound(*problem);
  problem->activation_budget_bytes = peak / 2;
  if (model == "squeezenet1_1") {
    // Its first ReLU's backward reads Y and dY and writes dX, three 2x64x31x31 tensors: 58% of the
    // checkpoint-all peak, which no schedule goes below (PyTorch runs that ReLU in place).
    EXPECT_GT(floor, peak / 2);
    problem->activation_budget_bytes = floor + floor / 20;
  }
  if (model == "alexnet" || model == "kws_lstm") {
    // The same: alexnet's first ReLU's backward holds three 2x64x15x15 tensors, 55% of the peak;
    // kws_lstm's first batch norm's (its ReLU fused) three 2x16x50x10 tensors, 56%.
    EXPECT_GT(floor, peak / 2);
    problem->activation_budget_bytes = floor + floor / 20;
  }
  ASSERT_GE(problem->activation_budget_bytes, floor);
  std::printf("%s: checkpoint-all peak %lld bytes, budget %lld bytes\n", model.c_str(), static_cast<long long>(peak),
              static_cast<long long>(problem->activation_budget_bytes));
  solver::SolveOptions solve;
  solve.strategy = "greedy";  // the MILP over hundreds of nodes takes minutes, not test seconds
  solve.time_limit_s = 2;
  auto schedule = solver::Solve(*problem, solve);
  ASSERT_TRUE(schedule.ok()) << schedule.status().message();
  ASSERT_TRUE(solver::FillFromReplay(*problem, *schedule).ok());
  EXPECT_LE(schedule->peak_ram_bytes(), static_cast<uint64_t>(problem->activation_budget_bytes));
  EXPECT_GT(schedule->peak_ram_bytes(), 0u);

  // The schedule runs: one real training step under it holds no more than the budget and gives
  // the plain step's parameter gradients bit for bit.
  omp_set_num_threads(1);
  auto executor = train::Executor::Create(*graph, {.seed = 1, .paging_dir = (dir_ / "paging").string()});
  ASSERT_TRUE(executor.ok()) << executor.status().message();
  train::Executor& e = **executor;
  train::DataSource data =
      train::DataSource::Synthetic(e.input_elements(), e.label_rows(), e.classes(), 1, e.input_id_limit());
  ASSERT_TRUE(e.SetBatch(*data.BatchFor(0)).ok());
  auto plain = e.Step(nullptr);
  ASSERT_TRUE(plain.ok()) << plain.status().message();
  EXPECT_TRUE(std::isfinite(plain->loss));
  const std::vector<train::ParamGradient> plain_gradients = e.Gradients();
  EXPECT_FALSE(plain_gradients.empty());
  const solver::Plan plan = solver::PlanFromStages(*schedule, problem->size());
  auto scheduled = e.Step(&plan);
  ASSERT_TRUE(scheduled.ok()) << scheduled.status().message();
  EXPECT_LE(scheduled->peak_activation_bytes, static_cast<uint64_t>(problem->activation_budget_bytes));
  const std::vector<train::ParamGradient> gradients = e.Gradients();
  ASSERT_EQ(gradients.size(), plain_gradients.size());
  for (size_t i = 0; i < gradients.size(); ++i) {
    EXPECT_EQ(gradients[i].values, plain_gradients[i].values)
        << "gradient of node " << gradients[i].node << " parameter " << gradients[i].index;
  }
  std::printf("%s: trained one step under the schedule: peak %llu bytes, %u page-outs, %u recomputations\n",
              model.c_str(), static_cast<unsigned long long>(scheduled->peak_activation_bytes), scheduled->page_outs,
              scheduled->recomputations);
}

INSTANTIATE_TEST_SUITE_P(Models, OnnxModelsTest,
                         ::testing::Values("mobilenet_v2", "mobilenet_v3_small", "efficientnet_b0",
                                           "shufflenet_v2_x0_5", "squeezenet1_1", "densenet121", "convnext_tiny",
                                           "inception_v3", "vit_b_16", "swin_t", "maxvit_t", "alexnet", "googlenet",
                                           "mnasnet0_5", "regnet_y_400mf", "resnet18_tv", "transformer_encoder",
                                           "small_bert", "kws_lstm", "sensor_gru", "small_gpt", "small_unet"),
                         [](const auto& info) { return std::string(info.param); });

// LayerNormalization and the other opset-17 spellings import too.
TEST(OnnxModelsOpsets, TransformersAtOpset17) {
  if (!Exported::Get().skip_reason().empty()) GTEST_SKIP() << Exported::Get().skip_reason();
  ASSERT_EQ(Exported::Get().failure(), "");
  for (const char* model : {"transformer_encoder", "small_bert"}) {
    auto g = graph::ImportOnnx(Exported::Get().Path(model, "opset17"));
    ASSERT_TRUE(g.ok()) << g.status().message();
    EXPECT_TRUE(KindCounts(*g).count("layernorm")) << model;
    // The same model as at opset 13: the same graph.
    auto g13 = graph::ImportOnnx(Exported::Get().Path(model));
    ASSERT_TRUE(g13.ok());
    EXPECT_EQ(KindCounts(*g), KindCounts(*g13)) << model;
  }
}

// Every layer names the nn.Module it came from (from the export's scopes), as PyTorch names it;
// backward nodes name their forward node's; the graph's hash does not depend on the names.
TEST(OnnxModelsNames, LayersNameTheirModules) {
  if (!Exported::Get().skip_reason().empty()) GTEST_SKIP() << Exported::Get().skip_reason();
  ASSERT_EQ(Exported::Get().failure(), "");
  for (const char* model : {"mobilenet_v2", "transformer_encoder"}) {
    auto g = graph::ImportOnnx(Exported::Get().Path(model));
    ASSERT_TRUE(g.ok()) << g.status().message();
    std::string path = Exported::Get().Path(model);
    std::ifstream list(path.replace(path.size() - 5, 5, ".modules"));
    std::set<std::string> modules;
    for (std::string line; std::getline(list, line);) modules.insert(line);
    ASSERT_GT(modules.size(), 10u) << model;
    int named = 0;
    for (const graph::Layer& layer : g->layers()) {
      if (layer.module.empty()) continue;
      ++named;
      EXPECT_TRUE(modules.count(layer.module)) << model << ": '" << layer.module << "' is not a module of the model";
    }
    EXPECT_GT(named, g->size() / 2) << model;
    auto training = graph::DeriveTrainingGraph(*g, graph::Derivation::kExact, graph::Trainable{});
    ASSERT_TRUE(training.ok());
    for (const v1::TrainingNode& node : training->nodes()) {
      if (node.forward_of() >= 0) {
        EXPECT_EQ(node.module(), training->nodes(node.forward_of()).module());
      }
    }
    v1::TrainingGraph unnamed = *training;
    for (v1::TrainingNode& node : *unnamed.mutable_nodes()) node.clear_module();
    EXPECT_EQ(graph::GraphHash(unnamed), graph::GraphHash(*training));
  }
  auto g = graph::ImportOnnx(Exported::Get().Path("mobilenet_v2"));
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(g->layers()[1].module, "features.0.0");  // the first convolution (layer 0 is the input)
}

// An eval-mode export folds batch norms into the convolutions: refused with the fix.
TEST(OnnxModelsOpsets, EvalModeExportIsRefusedWithTheFix) {
  if (!Exported::Get().skip_reason().empty()) GTEST_SKIP() << Exported::Get().skip_reason();
  ASSERT_EQ(Exported::Get().failure(), "");
  auto g = graph::ImportOnnx(Exported::Get().Path("mobilenet_v2", "eval"));
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("TrainingMode.TRAINING"), std::string::npos) << g.status().message();
  EXPECT_NE(g.status().message().find("folded"), std::string::npos) << g.status().message();
}

}  // namespace
}  // namespace edgecost
