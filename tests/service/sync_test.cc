// Agents that share (issue 33): exports carry the models, runs, schedules and training
// runs their costs need; imports and pushes identify records by content, so nothing is
// stored twice; a push to a central store that is missing or locked loses nothing and
// sends everything once it is back.
#include "service/sync.h"

#include <sqlite3.h>

#include <filesystem>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "costdb/costdb.h"
#include "graph/cost_source.h"
#include "bench/daemon_bench.h"
#include "graph/resolve.h"
#include "profiler/profile.h"
#include "proto/json.h"
#include "service/cost_export.h"
#include "service/cost_tables.h"
#include "service/models.h"
#include "tests/temp_dir.h"

namespace edgecost::service {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

constexpr char kModel[] = "mychain";  // a stored model, not a zoo one: solving needs its record

v1::OpCost Cost(const std::string& key, double median_s) {
  v1::OpCost cost;
  cost.mutable_signature()->set_key(key);
  // Several attributes: a map, whose order on the wire is not its content (a real profile has them).
  for (const char* attribute : {"kernel", "stride", "padding", "groups", "dilation", "out_features"}) {
    (*cost.mutable_signature()->mutable_attributes())[attribute] = static_cast<int64_t>(key.size());
  }
  cost.mutable_runtime()->set_median_s(median_s);
  cost.set_energy_source(v1::ENERGY_SOURCE_ESTIMATED);
  cost.set_energy_j(median_s * 2);
  return cost;
}

class Sync : public edgecost::testing::TempDirTest {
 protected:
  void SetUp() override {
    edgecost::testing::TempDirTest::SetUp();
    board_path_ = (dir_ / "board.db").string();
    auto db = costdb::CostDb::Open(board_path_);
    ASSERT_TRUE(db.ok()) << db.status().message();
    board_.emplace(std::move(*db));
    v1::Device device;
    device.set_name("board");
    device.set_kind(v1::Device::KIND_MEASURED);
    device.mutable_fingerprint()->set_hash("fp-board");
    ASSERT_TRUE(board_->UpsertDevice(device).ok());
    // An ONNX model stored under a name, as `models add` would: solving needs its record.
    auto added = AddModel(*board_, kModel, daemon::OnnxChain(6), /*replace=*/false);
    ASSERT_TRUE(added.ok()) << added.status().message();
  }

  // A profile of the stored model: a run with its op costs, then the measured table at `threads`.
  void Profile(uint32_t threads, double median_s) {
    auto run = board_->BeginRun("fp-board", profiler::kMeasuredSource, kModel);
    ASSERT_TRUE(run.ok()) << run.status().message();
    for (const char* key : {"matmul", "relu"}) {
      ASSERT_TRUE(board_->PutOpCost("fp-board", *run, Cost(std::string(key) + "/t" + std::to_string(threads), median_s))
                      .ok());
    }
    ASSERT_TRUE(board_->FinishRun(*run, costdb::RunStatus::kComplete, 1.5).ok());
    v1::GetCostTableRequest request;
    request.set_model(kModel);
    request.set_device("a72");
    auto analytic = ResolveCostTable(&*board_, request);
    ASSERT_TRUE(analytic.ok()) << analytic.status().message();
    v1::CostTable table = *analytic;
    table.set_device("board");
    table.set_fingerprint_hash("fp-board");
    table.set_cost_source(profiler::kMeasuredSource);
    table.set_threads(threads);
    table.set_note("measured at " + std::to_string(median_s));
    ASSERT_TRUE(board_->PutCostTable(table).ok());
  }

  static v1::ScheduleRequest Request(uint32_t threads) {
    v1::ScheduleRequest request;
    request.set_model(kModel);
    request.set_device("board");
    request.set_cost_source(profiler::kMeasuredSource);
    request.set_activation_budget_bytes(1ull << 30);
    request.set_runtime_budget_multiple(2);
    request.set_time_limit_s(5);
    request.set_compute_threads(threads);
    return request;
  }

  // A solve stored on the board and a training run of its schedule.
  void SolveAndTrain(uint32_t threads) {
    auto solved = SolveRequest(&*board_, Request(threads), /*store=*/true);
    ASSERT_TRUE(solved.ok()) << solved.status().message();
    v1::TrainRun run;
    run.set_model(kModel);
    run.set_device("board");
    run.set_schedule_id(static_cast<uint64_t>(solved->schedule_id));
    run.set_steps(3);
    run.set_runtime_s(0.25 * threads);
    ASSERT_TRUE(board_->PutTrainRun(run).ok());
  }

  static std::map<std::string, int64_t> Rows(costdb::CostDb& db) {
    auto info = db.Info();
    EXPECT_TRUE(info.ok()) << info.status().message();
    return info.ok() ? info->row_counts : std::map<std::string, int64_t>{};
  }

  std::string board_path_;
  std::optional<costdb::CostDb> board_;
};

TEST_F(Sync, AnExportCarriesItsModelRunsSchedulesInEveryForm) {
  Profile(1, 0.01);
  SolveAndTrain(1);
  auto exported = ExportDevice(*board_, "board");
  ASSERT_TRUE(exported.ok()) << exported.status().message();
  ASSERT_EQ(exported->models_size(), 1);
  EXPECT_EQ(exported->models(0).name(), kModel);
  EXPECT_EQ(exported->runs_size(), 1);
  EXPECT_EQ(exported->runs(0).op_keys_size(), 2);
  ASSERT_EQ(exported->schedules_size(), 1);
  EXPECT_TRUE(exported->schedules(0).has_cost_table());
  EXPECT_EQ(exported->train_runs_size(), 1);

  // Without its model the importing side cannot solve: what `db import` said before.
  {
    v1::CostExport bare = *exported;
    bare.clear_models();
    auto host = costdb::CostDb::Open((dir_ / "bare.db").string());
    ASSERT_TRUE(host.ok());
    ASSERT_TRUE(ImportDevice(*host, bare, {}).ok());
    auto solved = SolveRequest(&*host, Request(1), /*store=*/false);
    ASSERT_FALSE(solved.ok());
    EXPECT_THAT(solved.status().message(), HasSubstr(kModel));
  }

  std::map<ExportFormat, size_t> sizes;
  for (ExportFormat format : {ExportFormat::kBinary, ExportFormat::kProtobuf, ExportFormat::kJson}) {
    SCOPED_TRACE(static_cast<int>(format));
    auto bytes = EncodeExport(*exported, format);
    ASSERT_TRUE(bytes.ok()) << bytes.status().message();
    sizes[format] = bytes->size();
    auto read = DecodeExport(*bytes, "the export");
    ASSERT_TRUE(read.ok()) << read.status().message();
    const fs::path path = dir_ / ("host" + std::to_string(static_cast<int>(format)) + ".db");
    auto host = costdb::CostDb::Open(path.string());
    ASSERT_TRUE(host.ok());
    auto imported = ImportDevice(*host, *read, {});
    ASSERT_TRUE(imported.ok()) << imported.status().message();
    EXPECT_EQ(imported->models, 1);
    EXPECT_EQ(imported->runs, 1);
    EXPECT_EQ(imported->op_costs, 2);
    EXPECT_EQ(imported->cost_tables, 1);
    EXPECT_EQ(imported->schedules, 1);
    EXPECT_EQ(imported->train_runs, 1);
    EXPECT_EQ(imported->unchanged, 0);

    auto record = host->GetModelRecord(kModel);
    ASSERT_TRUE(record.ok() && record->has_value());
    EXPECT_EQ((*record)->bytes, (*board_->GetModelRecord(kModel))->bytes);
    // The run keeps its times and still provides the op costs it measured.
    auto runs = host->ListRuns();
    ASSERT_TRUE(runs.ok());
    ASSERT_EQ(runs->size(), 1u);
    EXPECT_EQ((*runs)[0].started_at, (*board_->ListRuns())[0].started_at);
    EXPECT_EQ((*runs)[0].idle_power_w, std::optional<double>(1.5));
    EXPECT_EQ(host->ListRunOpCosts((*runs)[0].id)->size(), 2u);
    // The training run points at this database's copy of its schedule.
    auto schedules = host->ListSchedules();
    ASSERT_TRUE(schedules.ok());
    ASSERT_EQ(schedules->size(), 1u);
    EXPECT_NE((*schedules)[0].cost_table_id, 0);
    EXPECT_NE((*board_->ListSchedules())[0].cost_table_id, 0);
    auto train_runs = host->ListTrainRuns();
    ASSERT_TRUE(train_runs.ok());
    ASSERT_EQ(train_runs->size(), 1u);
    EXPECT_EQ((*train_runs)[0].schedule_id(), static_cast<uint64_t>((*schedules)[0].id));
    // And it solves without `models add`.
    auto solved = SolveRequest(&*host, Request(1), /*store=*/false);
    EXPECT_TRUE(solved.ok()) << solved.status().message();
  }
  EXPECT_LT(sizes[ExportFormat::kBinary], sizes[ExportFormat::kProtobuf]);
  EXPECT_LT(sizes[ExportFormat::kProtobuf], sizes[ExportFormat::kJson]);

  EXPECT_FALSE(DecodeExport("\x1f\x8b\x08 not gzip", "damaged.costs").ok());
  EXPECT_THAT(DecodeExport("{\"device\": 5}", "bad.json").status().message(), HasSubstr("bad.json"));
}

TEST_F(Sync, ImportingTwiceOrAnOverlappingExportAddsNothingTwice) {
  Profile(1, 0.01);
  SolveAndTrain(1);
  auto first = ExportDevice(*board_, "board");
  ASSERT_TRUE(first.ok()) << first.status().message();
  auto host = costdb::CostDb::Open((dir_ / "host.db").string());
  ASSERT_TRUE(host.ok());
  ASSERT_TRUE(ImportDevice(*host, *first, {}).ok());
  const auto rows = Rows(*host);
  const int64_t version = *host->CostsVersion();

  auto again = ImportDevice(*host, *first, {});
  ASSERT_TRUE(again.ok()) << again.status().message();
  EXPECT_EQ(again->Added(), 0) << DescribeImport(*again);
  EXPECT_GT(again->unchanged, 0);
  EXPECT_EQ(Rows(*host), rows);
  EXPECT_EQ(*host->CostsVersion(), version);  // not even rewritten

  // A later export overlaps the first: only what is new arrives.
  Profile(2, 0.02);
  SolveAndTrain(2);
  auto second = ExportDevice(*board_, "board");
  ASSERT_TRUE(second.ok());
  auto overlapping = ImportDevice(*host, *second, {});
  ASSERT_TRUE(overlapping.ok()) << overlapping.status().message();
  EXPECT_EQ(overlapping->runs, 1);
  EXPECT_EQ(overlapping->op_costs, 2);
  EXPECT_EQ(overlapping->cost_tables, 1);
  EXPECT_EQ(overlapping->schedules, 1);
  EXPECT_EQ(overlapping->train_runs, 1);
  EXPECT_EQ(overlapping->models, 0);
  const auto after = Rows(*host);
  EXPECT_EQ(after.at("runs"), 2);
  EXPECT_EQ(after.at("cost_tables"), 2);
  EXPECT_EQ(after.at("schedules"), 2);
  EXPECT_EQ(after.at("train_runs"), 2);
  EXPECT_EQ(after.at("model_records"), 1);
  // Both again, in either order: nothing.
  for (const v1::CostExport* exported : {&*first, &*second}) {
    auto repeat = ImportDevice(*host, *exported, {});
    ASSERT_TRUE(repeat.ok()) << repeat.status().message();
    EXPECT_EQ(repeat->Added(), 0) << DescribeImport(*repeat);
  }
  EXPECT_EQ(Rows(*host), after);

  // A newer table of the same key supersedes the first's there; the first export again does not
  // bring the old one back.
  Profile(1, 0.03);
  auto third = ExportDevice(*board_, "board");
  ASSERT_TRUE(third.ok());
  auto newer = ImportDevice(*host, *third, {});
  ASSERT_TRUE(newer.ok()) << newer.status().message();
  EXPECT_EQ(newer->cost_tables, 1);
  const auto now = Rows(*host);
  auto old = ImportDevice(*host, *first, {});
  ASSERT_TRUE(old.ok()) << old.status().message();
  EXPECT_EQ(old->Added(), 0) << DescribeImport(*old);
  EXPECT_EQ(Rows(*host), now);
  auto current = host->ListCostTables("board");
  ASSERT_TRUE(current.ok());
  ASSERT_EQ(current->size(), 2u);  // one per thread count
  EXPECT_THAT(host->GetCostTableById((*current)[1].id)->note(), HasSubstr("0.03"));

  // A model of the same name with other bytes is not overwritten: the costs were measured on the export's.
  auto other = costdb::CostDb::Open((dir_ / "other.db").string());
  ASSERT_TRUE(other.ok());
  costdb::ModelRecord clash{.name = kModel, .kind = "training-graph", .content_hash = "0123", .bytes = "{}"};
  ASSERT_TRUE(other->PutModelRecord(clash).ok());
  auto refused = ImportDevice(*other, *first, {});
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(refused.status().message(), HasSubstr("another model named 'mychain'"));
  EXPECT_FALSE(other->GetDevice("board").ok());  // all or nothing
}

TEST_F(Sync, AMissingStoreLosesNothingAndGetsEverythingOnceWhenBack) {
  Profile(1, 0.01);
  SolveAndTrain(1);
  const std::string central = (dir_ / "share" / "central.db").string();  // the share is not mounted
  auto missing = PushToStore(*board_, central, {});
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), ErrorCode::kUnavailable);
  EXPECT_THAT(missing.status().message(), HasSubstr("does not exist"));
  EXPECT_FALSE(fs::exists(dir_ / "share"));  // not created behind the user's back
  Profile(2, 0.02);                          // the agent keeps working meanwhile

  fs::create_directories(dir_ / "share");
  ASSERT_TRUE(costdb::CostDb::Open(central).ok());
  std::vector<std::string> progress;
  auto pushed = PushToStore(*board_, central, {.progress = [&](const std::string& l) { progress.push_back(l); }});
  ASSERT_TRUE(pushed.ok()) << pushed.status().message();
  ASSERT_EQ(pushed->sent.size(), 1u);
  EXPECT_EQ(pushed->sent[0].runs, 2);
  EXPECT_EQ(pushed->sent[0].cost_tables, 2);
  EXPECT_EQ(pushed->sent[0].op_costs, 4);
  EXPECT_EQ(pushed->sent[0].models, 1);
  ASSERT_EQ(progress.size(), 1u);
  EXPECT_THAT(progress[0], HasSubstr("board: "));
  EXPECT_THAT(progress[0], HasSubstr("2 runs"));

  // Nothing new: the store is not even opened (here it could not be).
  fs::rename(central, central + ".away");
  auto idle = PushToStore(*board_, central, {});
  ASSERT_TRUE(idle.ok()) << idle.status().message();
  EXPECT_TRUE(idle->sent.empty());
  EXPECT_EQ(idle->up_to_date, 1);
  fs::rename(central + ".away", central);

  auto store = costdb::CostDb::Open(central);
  ASSERT_TRUE(store.ok());
  const auto rows = Rows(*store);
  EXPECT_EQ(rows.at("runs"), 2);
  EXPECT_EQ(rows.at("op_costs"), 4);
  EXPECT_EQ(rows.at("schedules"), 1);
  EXPECT_EQ(rows.at("train_runs"), 1);
  EXPECT_EQ(rows.at("model_records"), 1);

  // Any planner solves for the board on the central store, with the model it carried.
  auto solved = SolveRequest(&*store, Request(2), /*store=*/false);
  EXPECT_TRUE(solved.ok()) << solved.status().message();
}

TEST_F(Sync, ALockedStoreIsRetriedAndAPushWhoseAcknowledgementWasLostAddsNothing) {
  Profile(1, 0.01);
  SolveAndTrain(1);
  const std::string central = (dir_ / "central.db").string();
  ASSERT_TRUE(costdb::CostDb::Open(central).ok());
  // Another writer holds the store.
  sqlite3* writer = nullptr;
  ASSERT_EQ(sqlite3_open(central.c_str(), &writer), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(writer, "BEGIN IMMEDIATE", nullptr, nullptr, nullptr), SQLITE_OK);
  auto locked = PushToStore(*board_, central, {.busy_timeout_ms = 50});
  ASSERT_FALSE(locked.ok());
  EXPECT_EQ(locked.status().code(), ErrorCode::kUnavailable);
  ASSERT_EQ(sqlite3_exec(writer, "ROLLBACK", nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_close(writer);

  // A copy of the agent's database as it was before the push: the push's marks never got there.
  sqlite3* copier = nullptr;
  ASSERT_EQ(sqlite3_open(board_path_.c_str(), &copier), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(copier, ("VACUUM INTO '" + (dir_ / "before.db").string() + "'").c_str(), nullptr, nullptr,
                         nullptr),
            SQLITE_OK);
  sqlite3_close(copier);
  auto pushed = PushToStore(*board_, central, {});
  ASSERT_TRUE(pushed.ok()) << pushed.status().message();
  ASSERT_EQ(pushed->sent.size(), 1u);
  EXPECT_GT(pushed->Added(), 0);
  auto store = costdb::CostDb::Open(central);
  ASSERT_TRUE(store.ok());
  const auto rows = Rows(*store);

  auto before = costdb::CostDb::Open((dir_ / "before.db").string());
  ASSERT_TRUE(before.ok());
  auto resent = PushToStore(*before, central, {});
  ASSERT_TRUE(resent.ok()) << resent.status().message();
  ASSERT_EQ(resent->sent.size(), 1u);  // sent again, as it must be without the marks ...
  EXPECT_EQ(resent->Added(), 0) << DescribeImport(resent->sent[0]);  // ... and nothing doubled
  EXPECT_EQ(Rows(*store), rows);

  // New work after the push: only that goes.
  Profile(2, 0.02);
  auto next = PushToStore(*board_, central, {});
  ASSERT_TRUE(next.ok()) << next.status().message();
  ASSERT_EQ(next->sent.size(), 1u);
  EXPECT_EQ(next->sent[0].runs, 1);
  EXPECT_EQ(next->sent[0].cost_tables, 1);
  EXPECT_EQ(next->sent[0].models, 0);
  EXPECT_EQ(Rows(*store).at("runs"), 2);
}

TEST_F(Sync, ARunStillRunningIsSentOnceItFinished) {
  Profile(1, 0.01);
  auto running = board_->BeginRun("fp-board", profiler::kMeasuredSource, kModel);
  ASSERT_TRUE(running.ok());
  ASSERT_TRUE(board_->PutOpCost("fp-board", *running, Cost("conv/t1", 0.03)).ok());
  const std::string central = (dir_ / "central.db").string();
  auto first = PushToStore(*board_, central, {.create = true});
  ASSERT_TRUE(first.ok()) << first.status().message();
  auto store = costdb::CostDb::Open(central);
  ASSERT_TRUE(store.ok());
  EXPECT_EQ(store->ListRuns()->size(), 1u);  // the finished one
  ASSERT_TRUE(board_->FinishRun(*running, costdb::RunStatus::kComplete).ok());
  auto second = PushToStore(*board_, central, {});
  ASSERT_TRUE(second.ok()) << second.status().message();
  auto runs = store->ListRuns();
  ASSERT_EQ(runs->size(), 2u);
  EXPECT_EQ(store->ListRunOpCosts((*runs)[1].id)->size(), 1u);  // conv, with its run
}

// Forty boards of one kind: a second board with the first one's hardware (fingerprint) pushes
// into the first one's device in the store, so its measurements serve both and nothing is refused.
TEST_F(Sync, ABoardOfHardwareTheStoreKnowsJoinsThatDevice) {
  Profile(1, 0.01);
  const std::string central = (dir_ / "central.db").string();
  ASSERT_TRUE(PushToStore(*board_, central, {.create = true}).ok());

  auto twin = costdb::CostDb::Open((dir_ / "twin.db").string());
  ASSERT_TRUE(twin.ok()) << twin.status().message();
  v1::Device device;
  device.set_name("board-2");
  device.set_kind(v1::Device::KIND_MEASURED);
  device.mutable_fingerprint()->set_hash("fp-board");
  ASSERT_TRUE(twin->UpsertDevice(device).ok());
  ASSERT_TRUE(AddModel(*twin, kModel, daemon::OnnxChain(6), /*replace=*/false).ok());
  auto run = twin->BeginRun("fp-board", profiler::kMeasuredSource, kModel);
  ASSERT_TRUE(run.ok()) << run.status().message();
  ASSERT_TRUE(twin->PutOpCost("fp-board", *run, Cost("conv/t4", 0.03)).ok());
  ASSERT_TRUE(twin->FinishRun(*run, costdb::RunStatus::kComplete, 1.5).ok());
  v1::TrainRun trained;
  trained.set_model(kModel);
  trained.set_device("board-2");
  trained.set_steps(3);
  ASSERT_TRUE(twin->PutTrainRun(trained).ok());

  std::vector<std::string> progress;
  auto pushed = PushToStore(*twin, central, {.progress = [&](const std::string& l) { progress.push_back(l); }});
  ASSERT_TRUE(pushed.ok()) << pushed.status().message();
  ASSERT_FALSE(progress.empty());
  EXPECT_THAT(progress[0], HasSubstr("board-2 has the hardware of board"));
  auto again = PushToStore(*twin, central, {});
  ASSERT_TRUE(again.ok()) << again.status().message();
  EXPECT_EQ(again->up_to_date, 1);

  auto store = costdb::CostDb::Open(central);
  ASSERT_TRUE(store.ok());
  const auto rows = Rows(*store);
  EXPECT_EQ(rows.at("devices"), 1);
  EXPECT_EQ(rows.at("runs"), 2);
  EXPECT_EQ(rows.at("op_costs"), 3);  // the first board's two and the twin's one, once each
  EXPECT_EQ(rows.at("train_runs"), 1);
  auto runs = store->ListTrainRuns(kModel);
  ASSERT_TRUE(runs.ok()) << runs.status().message();
  ASSERT_EQ(runs->size(), 1u);
  EXPECT_EQ(runs->front().device(), "board");
}

}  // namespace
}  // namespace edgecost::service
