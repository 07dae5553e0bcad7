// Issue 26: ONNX files that crash ONNX's shape inference, sent to a real
// `edgecost serve` with AddModel and to `edgecost models add`. Each is one error
// for its request; the daemon lives, answers, and keeps what it had stored.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "daemon/client.h"
#include "proto/edgecost.pb.h"
#include "tests/daemon/serve_process.h"
#include "tests/hostile_onnx.h"
#include "tests/shell.h"

namespace edgecost {
namespace {

namespace fs = std::filesystem;
using ::testing::EndsWith;
using ::testing::HasSubstr;
using ::testing::Not;
using namespace test_support;
using testing::HostileOnnx;
using testing::kHostileOnnxModels;

class HostileModelsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = fs::temp_directory_path() / ("edgecost_hostile_models_test_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    pid_ =
        SpawnServe({"--db", Db(), "serve", "--socket", Socket()}, Socket(), "/nonexistent-sysfs", dir_ / "serve.log");
    // What the daemon holds before the attack: a stored schedule and a stored model.
    const std::string stored =
        CallJson(Socket(), "SolverService/Solve", R"({"model":"linear","device":"a72","ramBudgetBytes":"4000"})");
    ASSERT_THAT(stored, EndsWith(" 200"));
    baseline_id_ = stored.substr(stored.find("\"id\":\"") + 6);
    baseline_id_ = baseline_id_.substr(0, baseline_id_.find('"'));
    std::ifstream file("tests/graph/data/mlp.onnx", std::ios::binary);
    v1::AddModelRequest add;
    add.set_name("kept-mlp");
    add.set_model(std::string(std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>()));
    v1::AddModelResponse added;
    const Status s = daemon::CallRemote("unix:" + Socket(), "CostService/AddModel", add, added);
    ASSERT_TRUE(s.ok()) << s.message();
  }
  static void TearDownTestSuite() {
    StopProcess(pid_);
    fs::remove_all(dir_);
  }
  static std::string Socket() { return (dir_ / "edgecost.sock").string(); }
  static std::string Db() { return (dir_ / "costs.db").string(); }

  static Status AddModel(const std::string& name, const std::string& bytes) {
    v1::AddModelRequest add;
    add.set_name(name);
    add.set_model(bytes);
    v1::AddModelResponse response;
    return daemon::CallRemote("unix:" + Socket(), "CostService/AddModel", add, response);
  }

  static void ExpectStillServing() {
    ASSERT_EQ(::waitpid(pid_, nullptr, WNOHANG), 0) << "the daemon died; its log:\n"
                                                    << Shell("cat " + (dir_ / "serve.log").string());
    EXPECT_TRUE(Serving(Socket()));
    EXPECT_THAT(CallJson(Socket(), "CostService/GetCostTable", R"({"model":"linear","device":"a72"})"),
                EndsWith(" 200"));
    EXPECT_THAT(CallJson(Socket(), "SolverService/GetSchedule", R"({"id":")" + baseline_id_ + R"("})"),
                EndsWith(" 200"));
    v1::ListModelsResponse models;
    ASSERT_TRUE(daemon::CallRemote("unix:" + Socket(), "CostService/ListModels", v1::ListModelsRequest(), models).ok());
    EXPECT_TRUE(std::any_of(models.models().begin(), models.models().end(),
                            [](const v1::ModelInfo& m) { return m.name() == "kept-mlp" && m.stored(); }));
    for (const v1::ModelInfo& m : models.models()) EXPECT_THAT(m.name(), Not(HasSubstr("hostile"))) << "stored";
    EXPECT_THAT(CallJson(Socket(), "CostService/GetCostTable", R"({"model":"kept-mlp","device":"a72"})"),
                EndsWith(" 200"));
  }

  static fs::path dir_;
  static pid_t pid_;
  static std::string baseline_id_;
};

fs::path HostileModelsTest::dir_;
pid_t HostileModelsTest::pid_ = 0;
std::string HostileModelsTest::baseline_id_;

TEST_F(HostileModelsTest, TheReproductionsAreRefusedAndTheDaemonLives) {
  const Status gathernd = AddModel("hostile-gathernd", HostileOnnx("hostile_gathernd"));
  EXPECT_EQ(gathernd.code(), ErrorCode::kInvalidArgument) << gathernd.message();
  EXPECT_THAT(gathernd.message(), HasSubstr("GatherND: node 0"));
  ExpectStillServing();
  const Status gemm = AddModel("hostile-gemm", HostileOnnx("hostile_gemm_opset6"));
  EXPECT_EQ(gemm.code(), ErrorCode::kInvalidArgument) << gemm.message();
  EXPECT_THAT(gemm.message(), HasSubstr("uses opset 6; the importer reads opsets 9 to 17"));
  ExpectStillServing();
}

// Past the op and opset checks, ONNX's inference still crashes on this one: in the import's child.
TEST_F(HostileModelsTest, ACrashInTheImporterIsOneErrorForTheRequest) {
  for (int attempt = 0; attempt < 3; ++attempt) {
    const Status s = AddModel("hostile-maxpool", HostileOnnx("hostile_maxpool_stride0"));
    EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument) << s.message();
    EXPECT_THAT(s.message(), HasSubstr("the ONNX importer crashed (SIGFPE) on this file"));
    ExpectStillServing();
  }
  // The same over JSON, as curl sends it.
  const fs::path file = dir_ / "maxpool.onnx";
  std::ofstream(file, std::ios::binary) << HostileOnnx("hostile_maxpool_stride0");
  const std::string json =
      CallJson(Socket(), "CostService/AddModel",
               R"({"name":"hostile-maxpool","model":")" + Shell("base64 -w0 " + file.string()) + R"("})");
  EXPECT_THAT(json, HasSubstr("invalid_argument"));
  ExpectStillServing();
}

// `edgecost models add` and `edgecost graph` run the same import: exit 1 with the error.
TEST_F(HostileModelsTest, TheCliExitsWithTheError) {
  for (const std::string& name : kHostileOnnxModels) {
    const fs::path file = dir_ / (name + ".onnx");
    std::ofstream(file, std::ios::binary) << HostileOnnx(name);
    const std::string db = "EDGECOST_DB='" + (dir_ / "cli.db").string() + "' ";
    const testing::CommandResult add =
        testing::RunShell(db + EDGECOST_BIN + " models add " + file.string() + " --name " + name);
    EXPECT_EQ(add.exit_code, 1) << name << ": " << add.output;
    EXPECT_THAT(add.output, HasSubstr("model '" + name + "'")) << name;
    const testing::CommandResult graph = testing::RunShell(db + EDGECOST_BIN + " graph " + file.string());
    EXPECT_EQ(graph.exit_code, 1) << name << ": " << graph.output;
    EXPECT_THAT(graph.output, HasSubstr(file.string())) << name;
    if (name == "hostile_maxpool_stride0") {
      EXPECT_THAT(add.output, HasSubstr(": the ONNX importer crashed (SIGFPE) on this file\n"));
      EXPECT_THAT(graph.output, HasSubstr(": the ONNX importer crashed (SIGFPE) on this file\n"));
    }
  }
}

}  // namespace
}  // namespace edgecost
