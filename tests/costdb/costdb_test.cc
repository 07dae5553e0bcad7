#include "costdb/costdb.h"

#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <google/protobuf/util/message_differencer.h>

#include "graph/cost_source.h"
#include "graph/derive.h"

namespace edgecost::costdb {
namespace {

using ::testing::HasSubstr;
using google::protobuf::util::MessageDifferencer;

class CostDbTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("edgecost_costdb_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    path_ = (dir_ / "costs.db").string();
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  static v1::CostTable Table(const std::string& model, const std::string& platform) {
    auto source = graph::MakePoetFlopsSource(platform);
    return *(*source)->CostTableFor(*graph::ZooTrainingGraph(model, 1, graph::Derivation::kPoet));
  }

  static std::string Bytes(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::stringstream out;
    out << in.rdbuf();
    return out.str();
  }

  static v1::Device MeasuredDevice(const std::string& hash) {
    v1::Device device;
    device.set_name("pi4");
    device.set_kind(v1::Device::KIND_MEASURED);
    device.mutable_fingerprint()->set_cpu_model("Cortex-A72");
    device.mutable_fingerprint()->set_online_cores(4);
    device.mutable_fingerprint()->set_hash(hash);
    return device;
  }

  std::filesystem::path dir_;
  std::string path_;
};

TEST_F(CostDbTest, MigratesAnEmptyFileToTheLatestSchema) {
  std::ofstream(path_).close();  // an empty file is a new database
  auto db = CostDb::Open(path_);
  ASSERT_TRUE(db.ok()) << db.status().message();
  auto info = db->Info();
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->schema_version, kSchemaVersion);
  EXPECT_EQ(info->journal_mode, "wal");
  EXPECT_EQ(info->row_counts.size(), 11u);
  EXPECT_EQ(info->row_counts.at("node_costs"), 0);
}

TEST_F(CostDbTest, CreatesItsFolder) {
  const std::string nested = (dir_ / "a" / "b" / "costs.db").string();
  ASSERT_TRUE(CostDb::Open(nested).ok());
  EXPECT_TRUE(std::filesystem::exists(nested));
}

TEST_F(CostDbTest, CostTableRoundTripAndSupersede) {
  auto db = CostDb::Open(path_);
  ASSERT_TRUE(db.ok());
  const v1::CostTable table = Table("resnet18_cifar", "a72");
  auto first = db->PutCostTable(table);
  ASSERT_TRUE(first.ok()) << first.status().message();
  const CostTableKey key{"resnet18_cifar", "a72", "poet-flops", 1, "poet", "all"};
  auto back = db->GetCostTable(key);
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_TRUE(MessageDifferencer::Equals(*back, table)) << back->ShortDebugString().substr(0, 200);

  auto second = db->PutCostTable(table);
  ASSERT_TRUE(second.ok());
  EXPECT_NE(*first, *second);
  EXPECT_EQ(db->GetCostTableById(*first)->costs_size(), 133);  // kept, not deleted
  auto info = db->Info();
  EXPECT_EQ(info->row_counts.at("cost_tables"), 2);
  EXPECT_EQ(info->row_counts.at("node_costs"), 266);
  EXPECT_EQ(info->row_counts.at("model_graphs"), 1);

  const auto missing = db->GetCostTable({"resnet18_cifar", "m0", "poet-flops", 1, "poet", "all"});
  EXPECT_EQ(missing.status().code(), ErrorCode::kNotFound);
  EXPECT_THAT(missing.status().message(), HasSubstr("edgecost costs resnet18_cifar --platform m0 --store"));
}

TEST_F(CostDbTest, DeviceFingerprintChangeKeepsHistory) {
  auto db = CostDb::Open(path_);
  ASSERT_TRUE(db.ok());
  ASSERT_TRUE(db->UpsertDevice(MeasuredDevice("aaa")).ok());
  ASSERT_TRUE(db->UpsertDevice(MeasuredDevice("aaa")).ok());  // idempotent
  ASSERT_TRUE(db->UpsertDevice(MeasuredDevice("bbb")).ok());
  auto device = db->GetDevice("pi4");
  ASSERT_TRUE(device.ok());
  EXPECT_EQ(device->fingerprint().hash(), "bbb");
  ASSERT_EQ(device->history_size(), 1);
  EXPECT_EQ(device->history(0).hash(), "aaa");
  EXPECT_EQ(device->fingerprint().online_cores(), 4u);
  EXPECT_EQ(db->ListDevices()->size(), 1u);
  EXPECT_EQ(db->GetDevice("nope").status().code(), ErrorCode::kNotFound);
}

TEST_F(CostDbTest, OpCostsRunsAndPaging) {
  auto db = CostDb::Open(path_);
  ASSERT_TRUE(db.ok());
  ASSERT_TRUE(db->UpsertDevice(MeasuredDevice("fp1")).ok());
  auto run = db->BeginRun("fp1", "measured");
  ASSERT_TRUE(run.ok()) << run.status().message();
  v1::OpCost cost;
  cost.mutable_signature()->set_key("conv2d/fwd/1x3x32x32/k3s1p1");
  cost.mutable_runtime()->set_median_s(1.5e-4);
  cost.mutable_runtime()->set_repetitions(31);
  cost.set_energy_j(0.002);
  cost.set_energy_source(v1::ENERGY_SOURCE_ESTIMATED);
  cost.set_output_bytes(65536);
  ASSERT_TRUE(db->PutOpCost("fp1", *run, cost).ok());
  ASSERT_TRUE(db->FinishRun(*run, "complete").ok());
  auto back = db->GetOpCost("fp1", cost.signature().key());
  ASSERT_TRUE(back.ok() && back->has_value());
  EXPECT_TRUE(MessageDifferencer::Equals(**back, cost));
  EXPECT_FALSE(db->GetOpCost("fp1", "other")->has_value());
  EXPECT_EQ(db->ListOpCosts("fp1")->size(), 1u);
  EXPECT_EQ(db->PutOpCost("unknown-fingerprint", 0, cost).code(), ErrorCode::kNotFound);

  v1::PagingCost paging;
  paging.set_storage_path("/var/tmp");
  paging.set_page_in_latency_s(1e-4);
  paging.set_page_in_throughput_bytes_per_s(4e8);
  ASSERT_TRUE(db->PutPagingCost("fp1", paging).ok());
  EXPECT_TRUE(MessageDifferencer::Equals(**db->GetPagingCost("fp1"), paging));
}

TEST_F(CostDbTest, SchedulesAndRequests) {
  auto db = CostDb::Open(path_);
  ASSERT_TRUE(db.ok());
  v1::ScheduleRequest request;
  request.set_model("resnet18_cifar");
  request.set_device("a72");
  request.set_ram_budget_bytes(3000000);
  request.set_runtime_budget_multiple(7.6);
  auto id = db->PutScheduleRequest(request);
  ASSERT_TRUE(id.ok());
  EXPECT_EQ(*db->PutScheduleRequest(request), *id);  // stored once
  v1::Schedule schedule;
  schedule.set_status(v1::Schedule::STATUS_OPTIMAL);
  schedule.mutable_energy()->set_total_j(7.88951);
  auto first = db->PutSchedule(*id, 0, schedule);
  auto second = db->PutSchedule(*id, 0, schedule);
  ASSERT_TRUE(first.ok() && second.ok());
  auto list = db->ListSchedules("resnet18_cifar");
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->size(), 2u);
  EXPECT_TRUE((*list)[0].superseded);
  EXPECT_FALSE((*list)[1].superseded);
  EXPECT_DOUBLE_EQ((*list)[1].energy_j, 7.88951);
  EXPECT_TRUE(db->ListSchedules("vgg16")->empty());
  EXPECT_EQ(db->GetSchedule(*second)->status(), v1::Schedule::STATUS_OPTIMAL);
  EXPECT_EQ(db->ListScheduleRequests()->size(), 1u);
}

TEST_F(CostDbTest, RefusesAFileThatIsNotSqliteAndLeavesItAlone) {
  std::ofstream(path_) << "these are my notes, not a database\n";
  const std::string before = Bytes(path_);
  for (OpenMode mode : {OpenMode::kReadWrite, OpenMode::kReadOnly}) {
    auto db = CostDb::Open(path_, mode);
    ASSERT_FALSE(db.ok());
    EXPECT_EQ(db.status().code(), ErrorCode::kInvalidArgument);
    EXPECT_THAT(db.status().message(), HasSubstr("not an edgecost database"));
  }
  EXPECT_EQ(Bytes(path_), before);
  EXPECT_FALSE(std::filesystem::exists(path_ + "-wal"));
}

TEST_F(CostDbTest, RefusesANewerSchemaAndLeavesItAlone) {
  { ASSERT_TRUE(CostDb::Open(path_).ok()); }
  {
    auto raw = Db::Open(path_, false, 1000);
    ASSERT_TRUE(raw.ok());
    ASSERT_TRUE(raw->Exec("PRAGMA user_version = 99").ok());
  }
  const std::string before = Bytes(path_);
  const auto mtime = std::filesystem::last_write_time(path_);
  auto db = CostDb::Open(path_);
  ASSERT_FALSE(db.ok());
  EXPECT_EQ(db.status().code(), ErrorCode::kFailedPrecondition);
  EXPECT_THAT(db.status().message(), HasSubstr("newer edgecost (schema 99 > 1)"));
  EXPECT_EQ(Bytes(path_), before);
  EXPECT_EQ(std::filesystem::last_write_time(path_), mtime);
}

TEST_F(CostDbTest, RefusesSomeoneElsesSqliteDatabase) {
  {
    auto raw = Db::Open(path_, false, 1000);
    ASSERT_TRUE(raw->Exec("CREATE TABLE songs(title TEXT)").ok());
  }
  const std::string before = Bytes(path_);
  auto db = CostDb::Open(path_);
  ASSERT_FALSE(db.ok());
  EXPECT_THAT(db.status().message(), HasSubstr("not an edgecost one"));
  EXPECT_EQ(Bytes(path_), before);
}

TEST_F(CostDbTest, ReadOnlyLocationsAndModes) {
  // /proc accepts no new files, even for root.
  auto nowhere = CostDb::Open("/proc/edgecost-test/costs.db");
  ASSERT_FALSE(nowhere.ok());
  EXPECT_EQ(nowhere.status().code(), ErrorCode::kPermissionDenied);
  EXPECT_THAT(nowhere.status().message(), HasSubstr("--db"));

  EXPECT_EQ(CostDb::Open(path_, OpenMode::kReadOnly).status().code(), ErrorCode::kNotFound);
  { ASSERT_TRUE(CostDb::Open(path_)->PutCostTable(Table("linear", "m4")).ok()); }
  auto reader = CostDb::Open(path_, OpenMode::kReadOnly);
  ASSERT_TRUE(reader.ok());
  const Result<int64_t> write = reader->PutCostTable(Table("linear", "m4"));
  ASSERT_FALSE(write.ok());
  EXPECT_EQ(write.status().code(), ErrorCode::kPermissionDenied);
  EXPECT_THAT(write.status().message(), HasSubstr("read-only"));
}

TEST_F(CostDbTest, LockedDatabaseFailsClearlyAndChangesNothing) {
  { ASSERT_TRUE(CostDb::Open(path_).ok()); }
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  int release[2];
  ASSERT_EQ(::pipe(release), 0);
  const pid_t child = ::fork();
  if (child == 0) {
    // Another process holds the write lock until told to let go.
    auto raw = Db::Open(path_, false, 1000);
    if (!raw.ok() || !raw->Exec("BEGIN IMMEDIATE").ok()) ::_exit(1);
    char byte = 1;
    if (::write(ready[1], &byte, 1) != 1) ::_exit(1);
    if (::read(release[0], &byte, 1) != 1) ::_exit(1);
    ::_exit(raw->Exec("ROLLBACK").ok() ? 0 : 1);
  }
  char byte = 0;
  ASSERT_EQ(::read(ready[0], &byte, 1), 1);
  {
    auto db = CostDb::Open(path_, OpenOptions{OpenMode::kReadWrite, /*busy_timeout_ms=*/50});
    ASSERT_TRUE(db.ok()) << db.status().message();  // already migrated: opening needs no write
    const Result<int64_t> put = db->PutCostTable(Table("linear", "a72"));
    ASSERT_FALSE(put.ok());
    EXPECT_EQ(put.status().code(), ErrorCode::kUnavailable);
    EXPECT_THAT(put.status().message(), HasSubstr("locked by another process"));
    EXPECT_EQ(db->Info()->row_counts.at("cost_tables"), 0);
  }
  ASSERT_EQ(::write(release[1], &byte, 1), 1);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

// A reader in another process always sees whole cost tables while a writer adds them.
TEST_F(CostDbTest, ConcurrentReaderSeesOnlyCompleteTables) {
  { ASSERT_TRUE(CostDb::Open(path_).ok()); }
  const pid_t child = ::fork();
  if (child == 0) {
    auto db = CostDb::Open(path_);
    if (!db.ok()) ::_exit(1);
    const v1::CostTable table = Table("resnet18_cifar", "a72");
    for (int i = 0; i < 20; ++i) {
      if (!db->PutCostTable(table).ok()) ::_exit(2);
    }
    ::_exit(0);
  }
  auto reader = CostDb::Open(path_, OpenMode::kReadOnly);
  ASSERT_TRUE(reader.ok()) << reader.status().message();
  int status = 0;
  int reads = 0;
  while (::waitpid(child, &status, WNOHANG) == 0 || reads == 0) {
    auto info = reader->Info();
    ASSERT_TRUE(info.ok()) << info.status().message();
    // Each table commits with all 133 node rows or not at all.
    ASSERT_EQ(info->row_counts.at("node_costs"), 133 * info->row_counts.at("cost_tables"));
    ++reads;
  }
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "writer failed";
  EXPECT_EQ(reader->Info()->row_counts.at("cost_tables"), 20);
}

}  // namespace
}  // namespace edgecost::costdb
