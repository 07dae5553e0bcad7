// An agent with a central store ([store] central): it works on its local database
// while the store is missing, retries, and once the store is there sends everything
// it measured, once.
#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include <gtest/gtest.h>

#include "costdb/costdb.h"
#include "daemon/daemon.h"
#include "profiler/profile.h"
#include "tests/temp_dir.h"

namespace edgecost::daemon {
namespace {

namespace fs = std::filesystem;

v1::OpCost Cost(const std::string& key) {
  v1::OpCost cost;
  cost.mutable_signature()->set_key(key);
  cost.mutable_runtime()->set_median_s(0.01);
  cost.set_energy_source(v1::ENERGY_SOURCE_ESTIMATED);
  cost.set_energy_j(0.02);
  return cost;
}

// What the central store holds now: runs, op costs and devices; -1 while it cannot be read.
struct Counts {
  int64_t runs = -1, op_costs = -1, devices = -1;
  bool operator==(const Counts&) const = default;
};

Counts Read(const std::string& path) {
  auto db = costdb::CostDb::Open(path, costdb::OpenMode::kReadOnly);
  if (!db.ok()) return {};
  auto info = db->Info();
  if (!info.ok()) return {};
  return {info->row_counts.at("runs"), info->row_counts.at("op_costs"), info->row_counts.at("devices")};
}

Counts WaitFor(const std::string& path, const Counts& wanted) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  Counts now = Read(path);
  while (!(now == wanted) && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    now = Read(path);
  }
  return now;
}

class StoreSync : public edgecost::testing::TempDirTest {
 protected:
  void SetUp() override {
    TempDirTest::SetUp();
    fs::create_directories(dir_ / "sys/devices/system/cpu");
    std::ofstream(dir_ / "sys/devices/system/cpu/online") << "0-1\n";
    ::setenv("EDGECOST_SYSFS_ROOT", (dir_ / "sys").c_str(), 1);
    std::ofstream(dir_ / "token") << "0123456789abcdef0123456789abcdef\n";
  }
  void TearDown() override {
    ::unsetenv("EDGECOST_SYSFS_ROOT");
    TempDirTest::TearDown();
  }
};

TEST_F(StoreSync, TheAgentSendsWhatItMeasuredOnceTheStoreIsBackAndOnlyOnce) {
  const std::string local_path = (dir_ / "agent.db").string();
  const std::string central = (dir_ / "share" / "central.db").string();  // the share is not mounted yet
  DaemonConfig config;
  config.db_path = local_path;
  config.tcp_port = 0;
  config.token_file = (dir_ / "token").string();
  config.fingerprint_check_s = 0;
  config.concurrent_solves = 1;
  config.central_store = central;
  config.push_interval_s = 0.02;
  config.retry_max_s = 0.02;
  auto daemon = std::make_unique<Daemon>(config);
  auto started = daemon->Start();
  ASSERT_TRUE(started.ok()) << started.status().message();

  // A profile's run and op costs, in the agent's own database (it recorded this device at start).
  auto local = costdb::CostDb::Open(local_path);
  ASSERT_TRUE(local.ok());
  auto devices = local->ListDevices();
  ASSERT_TRUE(devices.ok());
  ASSERT_EQ(devices->size(), 1u);
  const std::string hash = (*devices)[0].fingerprint().hash();
  auto run = local->BeginRun(hash, profiler::kMeasuredSource, "linear");
  ASSERT_TRUE(run.ok());
  ASSERT_TRUE(local->PutOpCost(hash, *run, Cost("matmul")).ok());
  ASSERT_TRUE(local->PutOpCost(hash, *run, Cost("relu")).ok());
  ASSERT_TRUE(local->FinishRun(*run, costdb::RunStatus::kComplete).ok());

  // Attempts go on while the share is missing; none creates it.
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_FALSE(fs::exists(dir_ / "share"));

  fs::create_directories(dir_ / "share");
  ASSERT_TRUE(costdb::CostDb::Open(central).ok());
  EXPECT_EQ(WaitFor(central, {.runs = 1, .op_costs = 2, .devices = 1}), (Counts{1, 2, 1}));
  // Many more pushes later: still once.
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_EQ(Read(central), (Counts{1, 2, 1}));

  // Measured later: it follows.
  auto second = local->BeginRun(hash, profiler::kMeasuredSource, "linear");
  ASSERT_TRUE(second.ok());
  ASSERT_TRUE(local->PutOpCost(hash, *second, Cost("conv")).ok());
  ASSERT_TRUE(local->FinishRun(*second, costdb::RunStatus::kComplete).ok());
  EXPECT_EQ(WaitFor(central, {.runs = 2, .op_costs = 3, .devices = 1}), (Counts{2, 3, 1}));
  daemon.reset();
  EXPECT_EQ(Read(central), (Counts{2, 3, 1}));
}

TEST_F(StoreSync, TheStoreSectionIsReadAndCheckedByKey) {
  const fs::path file = dir_ / "edgecost.toml";
  std::ofstream(file) << "[store]\ncentral = \"postgresql://fleet@db/edgecost\"\npush_interval_s = 10\n"
                         "retry_max_s = 120\n";
  DaemonConfig config;
  ASSERT_TRUE(LoadConfigFile(file.string(), config).ok());
  EXPECT_EQ(config.central_store, "postgresql://fleet@db/edgecost");
  EXPECT_EQ(config.push_interval_s, 10);
  EXPECT_EQ(config.retry_max_s, 120);
  std::ofstream(file) << "[store]\npush_interval_s = 0\n";
  const Status bad = LoadConfigFile(file.string(), config);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.message().find("store.push_interval_s"), std::string::npos) << bad.message();
}

}  // namespace
}  // namespace edgecost::daemon
