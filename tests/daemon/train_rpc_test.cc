// Train jobs over RPC on data the agent's config allows: a data set inside [train] data_dirs
// trains, reports loss and held-out accuracy as job progress, and leaves the trained model for
// download (the same bytes a local run of the same seed writes); a path outside the allowed
// directories, by `..` or by a symlink, is refused before the job is queued.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "daemon/client.h"
#include "daemon/config.h"
#include "daemon/jobs.h"
#include "proto/edgecost.pb.h"
#include "tests/daemon/serve_process.h"

namespace edgecost {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;
using namespace test_support;

std::string ReadAll(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

class TrainRpcTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = fs::temp_directory_path() / ("edgecost_train_rpc_test_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "sys/devices/system/cpu");
    std::ofstream(dir_ / "sys/devices/system/cpu/online") << "0-1\n";
    fs::create_directories(dir_ / "data");
    fs::create_directories(dir_ / "outside");
    fs::copy_file("examples/digits/finetune.npz", dir_ / "data/finetune.npz");
    fs::copy_file("examples/digits/heldout.npz", dir_ / "data/heldout.npz");
    fs::copy_file("examples/digits/heldout.npz", dir_ / "outside/secret.npz");
    fs::create_symlink(dir_ / "outside/secret.npz", dir_ / "data/escape.npz");
    std::ofstream(dir_ / "serve.toml") << "[train]\ndata_dirs = [\"" << (dir_ / "data").string() << "\"]\n";
    pid_ = SpawnServe({"--db", (dir_ / "store/costs.db").string(), "serve", "--config", (dir_ / "serve.toml").string(),
                       "--socket", Socket()},
                      Socket(), dir_ / "sys", dir_ / "serve.log");
    v1::AddModelRequest add;
    add.set_name("digits");
    add.set_model(ReadAll("examples/digits/digits_cnn.onnx"));
    v1::AddModelResponse added;
    ASSERT_TRUE(daemon::CallRemote(Remote(), "CostService/AddModel", add, added).ok());
  }
  static void TearDownTestSuite() {
    StopProcess(pid_);
    fs::remove_all(dir_);
  }

  static std::string Socket() { return (dir_ / "edgecost.sock").string(); }
  static std::string Remote() { return "unix:" + Socket(); }

  static v1::StartTrainRequest DigitsRequest(const std::string& data) {
    v1::StartTrainRequest request;
    request.set_model("digits");
    request.set_batch_size(32);
    request.set_threads(1);
    request.set_data(data);
    request.set_val_data("heldout.npz");  // relative: from the first data directory
    request.set_epochs(1);
    request.set_lr(0.05);
    request.set_seed(3);
    return request;
  }

  static fs::path dir_;
  static pid_t pid_;
};

fs::path TrainRpcTest::dir_;
pid_t TrainRpcTest::pid_ = 0;

TEST_F(TrainRpcTest, DataInsideTheAllowedDirectoryTrainsReportsAccuracyAndTheModelDownloads) {
  v1::StartTrainRequest request = DigitsRequest((dir_ / "data/finetune.npz").string());
  request.set_keep_model(true);
  v1::Job job;
  ASSERT_TRUE(daemon::CallRemote(Remote(), "JobService/StartTrain", request, job).ok());
  // Every event of the job, until it ends (bounded: not a timing assertion).
  bool step_loss = false, epoch_accuracy = false;
  uint64_t after = 0;
  for (int polls = 0; polls < 600 && (job.state() == v1::Job::STATE_QUEUED || job.state() == v1::Job::STATE_RUNNING);
       ++polls) {
    v1::WatchEventsRequest watch;
    watch.set_after_sequence(after);
    watch.set_wait_s(1);
    watch.set_job_id(job.id());
    v1::WatchEventsResponse events;
    ASSERT_TRUE(daemon::CallRemote(Remote(), "JobService/WatchEvents", watch, events).ok());
    for (const v1::Event& event : events.events()) {
      after = std::max(after, event.sequence());
      job = event.job();
      const v1::TrainJobProgress& progress = job.train_progress();
      step_loss = step_loss || (progress.step() > 0 && progress.steps() == 31 && progress.loss() > 0);
      if (progress.has_epoch()) {
        EXPECT_EQ(progress.epoch().epoch(), 1u);
        EXPECT_GT(progress.epoch().held_out_loss(), 0);
        EXPECT_GT(progress.epoch().held_out_accuracy(), 0.5);  // pretrained to about 87%
        EXPECT_EQ(progress.held_out_records(), 300u);
        if (job.state() == v1::Job::STATE_RUNNING) {
          EXPECT_THAT(job.message(), HasSubstr("held-out loss"));
        }
        epoch_accuracy = true;
      }
    }
  }
  ASSERT_EQ(job.state(), v1::Job::STATE_SUCCEEDED) << job.message();
  EXPECT_TRUE(step_loss);
  EXPECT_TRUE(epoch_accuracy);
  const v1::TrainRun& run = job.train_run();
  EXPECT_EQ(run.steps(), 31u);  // 997 records at batch 32, the partial batch dropped
  ASSERT_FALSE(run.trained_onnx_path().empty());
  EXPECT_EQ(fs::path(run.trained_onnx_path()).parent_path(), dir_ / "store/trained");

  std::string onnx, npz;
  ASSERT_TRUE(daemon::FetchRemote(Remote(), "/trained/" + std::to_string(run.id()) + ".onnx", onnx).ok());
  ASSERT_TRUE(daemon::FetchRemote(Remote(), "/trained/" + std::to_string(run.id()) + ".npz", npz).ok());
  EXPECT_EQ(onnx, ReadAll(run.trained_onnx_path()));
  EXPECT_NE(onnx, ReadAll("examples/digits/digits_cnn.onnx"));  // the trained weights, not the initial ones
  EXPECT_EQ(npz.substr(0, 2), "PK");                            // a zip, as np.load reads

  // A local run of the same model, data, seed and hyper-parameters writes the same state dict, bit for bit.
  const fs::path local = dir_ / "local";
  fs::create_directories(local);
  const testing::CommandResult trained =
      testing::RunShell(std::string(EDGECOST_BIN) + " --db " + (local / "costs.db").string() +
                        " train --model examples/digits/digits_cnn.onnx --batch-size 32 --threads 1 --epochs 1 --lr "
                        "0.05 --seed 3 --data " +
                        (dir_ / "data/finetune.npz").string() + " --val-data " + (dir_ / "data/heldout.npz").string() +
                        " --out " + (local / "model.onnx").string());
  ASSERT_EQ(trained.exit_code, 0) << trained.output;
  EXPECT_TRUE(ReadAll(local / "model.npz") == npz) << "the npz over RPC differs from the local run's";

  // The training run's page links both downloads.
  std::string page;
  ASSERT_TRUE(daemon::FetchRemote(Remote(), "/train_run?id=" + std::to_string(run.id()), page).ok());
  EXPECT_THAT(page, HasSubstr("/trained/" + std::to_string(run.id()) + ".onnx"));
  EXPECT_THAT(page, HasSubstr("/trained/" + std::to_string(run.id()) + ".npz"));
  // It shows the process's memory and each epoch's held-out figures.
  EXPECT_THAT(page, HasSubstr("peak (VmHWM)"));
  EXPECT_THAT(page, HasSubstr("id=\"epoch-table\""));
  EXPECT_THAT(page, HasSubstr("held out: 300 records"));
  char accuracy[32];
  std::snprintf(accuracy, sizeof accuracy, "<td>%.1f%%</td>", 100 * run.epochs(0).held_out_accuracy());
  EXPECT_THAT(page, HasSubstr(accuracy));
  // A run that kept no model has nothing to download.
  Status none = daemon::FetchRemote(Remote(), "/trained/999999.onnx", page);
  EXPECT_EQ(none.code(), ErrorCode::kNotFound) << none.message();
}

TEST_F(TrainRpcTest, TheCliTrainsRemotelyPrintsProgressAndFetchesTheModel) {
  const fs::path out = dir_ / "cli/model.onnx";
  fs::create_directories(out.parent_path());
  const testing::CommandResult trained = testing::RunShell(
      std::string(EDGECOST_BIN) + " --remote " + Remote() +
      " train --model digits --batch-size 32 --threads 1 --epochs 1 --data finetune.npz --val-data heldout.npz --out " +
      out.string());
  ASSERT_EQ(trained.exit_code, 0) << trained.output;
  EXPECT_THAT(trained.output, HasSubstr("step 31/31  loss "));
  EXPECT_THAT(trained.output, HasSubstr("epoch 1: train loss "));
  EXPECT_THAT(trained.output, HasSubstr("held out       300 records after epoch 1"));
  EXPECT_GT(fs::file_size(out), 1000u);
  EXPECT_EQ(ReadAll(dir_ / "cli/model.npz").substr(0, 2), "PK");
}

// A remote train that solves for a budget first: its solver runs in a child of the job's process,
// which must leave the database alone (SQLite's state does not survive a fork, and the agent holds
// the same database: the child's open failed with "locking protocol").
TEST_F(TrainRpcTest, ARemoteTrainSolvesForItsActivationBudget) {
  const std::string cli = std::string(EDGECOST_BIN) + " --remote " + Remote();
  const testing::CommandResult profiled = testing::RunShell(
      cli + " profile --model digits --batch-size 32 --threads 1 --min-window-s 0.005 --accept-noisy");
  ASSERT_EQ(profiled.exit_code, 0) << profiled.output;
  const testing::CommandResult trained =
      testing::RunShell(cli + " train --model digits --batch-size 32 --threads 1 --steps 2 --activation-budget 50%");
  ASSERT_EQ(trained.exit_code, 0) << trained.output;
  EXPECT_THAT(trained.output, HasSubstr("50% of the plain step's activation peak"));
  EXPECT_THAT(trained.output, Not(HasSubstr("locking protocol")));
}

TEST_F(TrainRpcTest, DataOutsideTheAllowedDirectoriesIsRefused) {
  for (const std::string& path : {(dir_ / "outside/secret.npz").string(), std::string("../outside/secret.npz"),
                                  (dir_ / "data/../outside/secret.npz").string(), std::string("escape.npz"),
                                  std::string("/etc/passwd"), std::string("/no/such/file.npz")}) {
    SCOPED_TRACE(path);
    v1::Job job;
    const Status refused = daemon::CallRemote(Remote(), "JobService/StartTrain", DigitsRequest(path), job);
    EXPECT_EQ(refused.code(), ErrorCode::kPermissionDenied) << refused.message();
    EXPECT_THAT(refused.message(), HasSubstr((dir_ / "data").string()));  // the allowed directories are named
    EXPECT_THAT(refused.message(), HasSubstr("[train] data_dirs"));
    EXPECT_THAT(refused.message(), Not(HasSubstr("EDGECOST_TOKEN")));  // no token lets a data set in
  }
  // Issue 40 #2: a name the loader would split otherwise than the check (a folder named "y.npy," in
  // the data directory makes "x.npy,y.npy,z.npy" read labels from "y.npy,/..."): refused whole.
  fs::create_directories(dir_ / "data/y.npy,");
  for (const char* name : {"x.npy", "y.npy", "z.npy"}) std::ofstream(dir_ / "data" / name) << "x";
  {
    v1::Job job;
    const Status refused =
        daemon::CallRemote(Remote(), "JobService/StartTrain", DigitsRequest("x.npy,y.npy,z.npy"), job);
    EXPECT_EQ(refused.code(), ErrorCode::kInvalidArgument) << refused.message();
    EXPECT_THAT(refused.message(), HasSubstr("one comma"));
  }
  v1::StartTrainRequest held_out_outside = DigitsRequest("finetune.npz");
  held_out_outside.set_val_data("../outside/secret.npz");
  v1::Job job;
  EXPECT_EQ(daemon::CallRemote(Remote(), "JobService/StartTrain", held_out_outside, job).code(),
            ErrorCode::kPermissionDenied);
  // A zoo model has no file to keep trained weights in: refused before it is queued.
  v1::StartTrainRequest zoo;
  zoo.set_model("linear");
  zoo.set_steps(1);
  zoo.set_keep_model(true);
  const Status no_file = daemon::CallRemote(Remote(), "JobService/StartTrain", zoo, job);
  EXPECT_EQ(no_file.code(), ErrorCode::kInvalidArgument) << no_file.message();
  EXPECT_THAT(no_file.message(), HasSubstr("zoo model"));
  // Inside, but missing: said so.
  const Status missing = daemon::CallRemote(Remote(), "JobService/StartTrain", DigitsRequest("gone.npz"), job);
  EXPECT_EQ(missing.code(), ErrorCode::kNotFound) << missing.message();
}

TEST(TrainData, NoDataDirectoriesRefuseEveryDataSetAndNameTheKey) {
  Result<std::string> refused = daemon::ResolveTrainData("/tmp/x.npz", {});
  EXPECT_EQ(refused.status().code(), ErrorCode::kPermissionDenied);
  EXPECT_THAT(refused.status().message(), HasSubstr("[train] data_dirs"));
}

TEST(TrainData, ADirectoryIsNotAPrefixOfItsSibling) {
  const fs::path dir = fs::temp_directory_path() / ("edgecost_train_data_" + std::to_string(::getpid()));
  fs::create_directories(dir / "data");
  fs::create_directories(dir / "data2");
  std::ofstream(dir / "data2/x.npz") << "x";
  std::ofstream(dir / "data/y.npz") << "y";
  EXPECT_EQ(daemon::ResolveTrainData((dir / "data2/x.npz").string(), {(dir / "data").string()}).status().code(),
            ErrorCode::kPermissionDenied);
  Result<std::string> inside = daemon::ResolveTrainData("y.npz", {(dir / "data").string()});
  ASSERT_TRUE(inside.ok()) << inside.status().message();
  EXPECT_EQ(*inside, fs::canonical(dir / "data/y.npz").string());
  // What the loader reads besides the path: a folder's files, and the labels .npy beside an inputs .npy.
  fs::create_directories(dir / "data/images/cat");
  std::ofstream(dir / "data/images/cat/a.png") << "png";
  EXPECT_TRUE(daemon::ResolveTrainData("images", {(dir / "data").string()}).ok());
  fs::create_symlink(dir / "data2/x.npz", dir / "data/images/cat/b.png");
  EXPECT_EQ(daemon::ResolveTrainData("images", {(dir / "data").string()}).status().code(),
            ErrorCode::kPermissionDenied);
  fs::create_directories(dir / "data/arrays");
  std::ofstream(dir / "data/arrays/x.npy") << "x";
  EXPECT_TRUE(daemon::ResolveTrainData("arrays/x.npy", {(dir / "data").string()}).ok());
  fs::create_symlink(dir / "data2/x.npz", dir / "data/arrays/y.npy");
  EXPECT_EQ(daemon::ResolveTrainData("arrays/x.npy", {(dir / "data").string()}).status().code(),
            ErrorCode::kPermissionDenied);
  std::ofstream(dir / "data2/x.npy") << "x";
  EXPECT_EQ(daemon::ResolveTrainData("arrays/x.npy," + (dir / "data2/x.npy").string(), {(dir / "data").string()})
                .status()
                .code(),
            ErrorCode::kPermissionDenied);
  EXPECT_EQ(daemon::ResolveTrainData("arrays/x.npy," + (dir / "data2/x.npz").string(), {(dir / "data").string()})
                .status()
                .code(),
            ErrorCode::kInvalidArgument);  // not a pair of .npy files
  // The config's list, checked at start.
  std::ofstream(dir / "serve.toml") << "[train]\ndata_dirs = [\"" << (dir / "data").string() << "\"]\n";
  daemon::DaemonConfig config;
  ASSERT_TRUE(daemon::LoadConfigFile((dir / "serve.toml").string(), config).ok());
  EXPECT_EQ(config.train_data_dirs, std::vector<std::string>{(dir / "data").string()});
  config.socket_path = (dir / "s.sock").string();
  EXPECT_TRUE(daemon::ValidateConfig(config).ok());
  config.train_data_dirs = {(dir / "data2/x.npz").string()};
  EXPECT_THAT(daemon::ValidateConfig(config).message(), HasSubstr("train.data_dirs"));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace edgecost
