// A model's own weights in, trained weights out (service/onnx_weights.h): a small CNN PyTorch
// exports with seeded random weights (conv without bias and its batch norm, a depthwise conv with
// bias, a Linear and a MatMul by an (in, out) weight; tests/train/torch_weights.py). `train` starts
// from the file's weights, and its first loss is PyTorch's on the same batch; after two steps with
// --out, the .npz loads into the PyTorch module and holds what PyTorch's own SGD reaches, the ONNX
// checker accepts the written model, and edgecost's loss from it is PyTorch's with the .npz. The
// loader refuses float64 weights and a shape that is not the layer's, naming the initializer.
// Skipped, with the reason, where Debian's PyTorch is missing.
#include "service/onnx_weights.h"

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include "graph/resolve.h"
#include "service/train_job.h"
#include "tests/shell.h"
#include "tests/temp_dir.h"
#include "train/data.h"
#include "train/executor.h"
#include "train/numpy_files.h"

namespace edgecost::service {
namespace {

using ::testing::HasSubstr;

constexpr char kPython[] = "/usr/bin/python3";
constexpr char kHelper[] = "tests/train/torch_weights.py";

class OnnxWeightsTest : public testing::TempDirTest {
 protected:
  void SetUp() override {
    TempDirTest::SetUp();
    const testing::CommandResult exported =
        testing::RunShell(std::string(kPython) + " " + kHelper + " export " + dir_.string());
    if (exported.exit_code == 3 || exported.exit_code == 127) {
      GTEST_SKIP() << "Debian's PyTorch is not installed (apt-get install python3-torch python3-onnx): "
                   << exported.output.substr(0, 300);
    }
    ASSERT_EQ(exported.exit_code, 0) << exported.output;
  }

  std::string Path(const std::string& name) const { return (dir_ / name).string(); }
  void TearDown() override {
    store_.reset();
    TempDirTest::TearDown();
  }

  TrainJobOptions Options(const std::string& model) {
    if (!store_) store_ = std::make_unique<costdb::Store>(Path("db.sqlite"), costdb::OpenMode::kReadWrite);
    TrainJobOptions options;
    options.database = store_.get();
    options.graph.model_or_file = model;
    options.graph.batch_size = 4;
    options.steps = 1;
    options.lr = 0.1;
    options.threads = 1;
    options.store = false;
    options.paging_dir = Path("paging");
    return options;
  }

  static Result<TrainJobResult> Run(const TrainJobOptions& options) {
    return RunTrainJob(options, nullptr, nullptr, [](const std::string&) {});
  }

  // What loading `file`'s weights into the model's executor (`into`, or a new one) says.
  Status Load(const std::string& file, train::Executor* into = nullptr) {
    auto model = graph::LoadOnnxModel({Path("cnn.onnx"), 4, graph::Derivation::kExact, {}});
    if (!model.ok()) return model.status();
    auto graph = graph::DeriveTrainingGraph((*model)->forward, graph::Derivation::kExact, {});
    if (!graph.ok()) return graph.status();
    auto executor = train::Executor::Create(*graph, {.seed = 1, .paging_dir = Path("paging")});
    if (!executor.ok()) return executor.status();
    if (!into) into = executor->get();
    std::ifstream in(file, std::ios::binary);
    if (!(*model)->model->ParseFromIstream(&in)) return InvalidArgument(file + " does not parse");
    (*model)->origin = file;
    std::vector<std::string> notes;
    return LoadOnnxWeights(**model, *into, notes);
  }
  std::unique_ptr<costdb::Store> store_;
};

TEST_F(OnnxWeightsTest, TrainsFromTheFilesWeightsAndWritesWhatPyTorchTrains) {
  constexpr int kSteps = 2;
  TrainJobOptions options = Options(Path("cnn.onnx"));
  options.steps = kSteps;
  options.out_onnx = Path("trained.onnx");
  auto trained = Run(options);
  ASSERT_TRUE(trained.ok()) << trained.status().message();
  EXPECT_EQ(trained->written_npz, Path("trained.npz"));
  ASSERT_TRUE(std::filesystem::exists(Path("trained.npz")));
  EXPECT_THAT(::testing::PrintToString(trained->notes), HasSubstr("2 batch-norm running statistics"));
  // No temporary file is left beside them.
  for (const auto& entry : std::filesystem::directory_iterator(dir_)) {
    EXPECT_EQ(entry.path().string().find(".tmp."), std::string::npos) << entry.path();
  }

  // Edgecost's loss from the written model, on the same (synthetic, fixed) batch.
  auto again = Run(Options(Path("trained.onnx")));
  ASSERT_TRUE(again.ok()) << again.status().message();

  // The batch every step used, for PyTorch.
  auto graph = graph::LoadTrainingGraph({Path("cnn.onnx"), 4, graph::Derivation::kExact, {}});
  ASSERT_TRUE(graph.ok()) << graph.status().message();
  auto executor = train::Executor::Create(*graph, {.seed = 1, .paging_dir = Path("paging")});
  ASSERT_TRUE(executor.ok()) << executor.status().message();
  const train::Batch batch = *train::DataSource::Synthetic((*executor)->input_elements(), (*executor)->label_rows(),
                                                           (*executor)->classes(), options.seed)
                                  .BatchFor(0);
  // Edgecost's inference-mode loss and accuracy on it, from the written model's weights and running statistics.
  ASSERT_TRUE(Load(Path("trained.onnx"), executor->get()).ok());
  auto evaluated = (*executor)->Evaluate(batch, (*executor)->label_rows());
  ASSERT_TRUE(evaluated.ok()) << evaluated.status().message();
  {
    std::ofstream out(Path("batch.bin"), std::ios::binary);
    const auto put = [&](const std::vector<float>& values) {
      const auto count = static_cast<uint32_t>(values.size());
      out.write(reinterpret_cast<const char*>(&count), sizeof count);
      out.write(reinterpret_cast<const char*>(values.data()), static_cast<std::streamsize>(values.size() * 4));
    };
    put(batch.inputs);
    put(std::vector<float>(batch.labels.begin(), batch.labels.end()));
  }
  char numbers[128];
  std::snprintf(numbers, sizeof numbers, " %.9g %d %.9g %.9g %.9g %lld", trained->run.first_loss(), kSteps, options.lr,
                again->run.first_loss(), evaluated->loss_sum / static_cast<double>(evaluated->rows),
                static_cast<long long>(evaluated->correct));
  const testing::CommandResult checked = testing::RunShell(std::string(kPython) + " " + kHelper + " check " +
                                                           dir_.string() + " " + Path("batch.bin") + numbers);
  EXPECT_EQ(checked.exit_code, 0) << checked.output;
}

TEST_F(OnnxWeightsTest, InitRandomDrawsFromTheSeed) {
  auto file = Run(Options(Path("cnn.onnx")));
  ASSERT_TRUE(file.ok()) << file.status().message();
  TrainJobOptions options = Options(Path("cnn.onnx"));
  options.init = "random";
  auto random = Run(options);
  ASSERT_TRUE(random.ok()) << random.status().message();
  EXPECT_NE(file->run.first_loss(), random->run.first_loss());
  EXPECT_THAT(::testing::PrintToString(random->notes), HasSubstr("--init random"));
  options.init = "zeros";
  auto refused = Run(options);
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(refused.status().message(), HasSubstr("--init must be file"));
}

TEST_F(OnnxWeightsTest, ZooModelsDrawTheirWeightsAndHaveNothingToWrite) {
  TrainJobOptions options = Options("linear");
  options.graph.batch_size = 2;
  auto zoo = Run(options);
  ASSERT_TRUE(zoo.ok()) << zoo.status().message();
  EXPECT_THAT(::testing::PrintToString(zoo->notes), HasSubstr("zoo model, with no file of weights"));
  options.out_onnx = Path("linear.onnx");
  auto refused = Run(options);
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(refused.status().message(), HasSubstr("is not an ONNX model"));
}

TEST_F(OnnxWeightsTest, RefusesFloat64AndAnotherShapeNamingTheInitializer) {
  EXPECT_TRUE(Load(Path("cnn.onnx")).ok());
  const Status f64 = Load(Path("cnn_f64.onnx"));
  EXPECT_THAT(f64.message(), HasSubstr("initializer 'conv1.weight' is float64"));
  EXPECT_THAT(f64.message(), HasSubstr("loads float32 weights only"));
  const Status shape = Load(Path("cnn_badshape.onnx"));
  EXPECT_THAT(shape.message(), HasSubstr("initializer 'conv1.weight' has shape (3, 8, 3, 3)"));
  EXPECT_THAT(shape.message(), HasSubstr("needs (8, 3, 3, 3)"));
}

TEST(NpzTest, StoredZipOfNpyFiles) {
  auto bytes = NpzBytes({{"a.weight", {2, 3}, {1, 2, 3, 4, 5, 6}}, {"b", {2}, {7, 8}}, {"s", {}, {9}}});
  ASSERT_TRUE(bytes.ok());
  EXPECT_EQ(bytes->substr(0, 4), std::string("PK\x03\x04", 4));
  EXPECT_NE(bytes->find("a.weight.npy"), std::string::npos);
  EXPECT_NE(bytes->find("'shape': (2, 3), }"), std::string::npos);
  EXPECT_NE(bytes->find("'shape': (2,), }"), std::string::npos);
  EXPECT_NE(bytes->find("'shape': (), }"), std::string::npos);
  EXPECT_FALSE(NpzBytes({{"x", {2, 2}, {1, 2, 3}}}).ok());
  // What is written reads back member for member, and the same arrays give the same bytes.
  auto members = train::ReadZip(*bytes, "written.npz");
  ASSERT_TRUE(members.ok()) << members.status().message();
  ASSERT_EQ(members->size(), 3u);
  auto b = train::ParseNpy(members->at("b.npy"), "b");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->shape, std::vector<int64_t>{2});
  EXPECT_EQ(b->At(1), 8.0);
  EXPECT_EQ(*NpzBytes({{"a.weight", {2, 3}, {1, 2, 3, 4, 5, 6}}, {"b", {2}, {7, 8}}, {"s", {}, {9}}}), *bytes);
}

}  // namespace
}  // namespace edgecost::service
