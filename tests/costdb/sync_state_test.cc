// Records copied from another database keep their identity (a run, a training run), and
// the sync's marks are kept beside the costs counter without moving it.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "costdb/costdb.h"
#include "tests/costdb/test_support.h"

namespace edgecost::costdb {
namespace {

using test_support::MeasuredDevice;
using ::testing::HasSubstr;

class SyncState : public test_support::TempDirTest {};

TEST_F(SyncState, ACopiedRunIsStoredOnceWithItsOwnTimes) {
  auto db = CostDb::Open(path_);
  ASSERT_TRUE(db.ok()) << db.status().message();
  ASSERT_TRUE(db->UpsertDevice(MeasuredDevice("board", "fp1")).ok());
  const StoredRun run{.fingerprint_hash = "fp1",
                      .cost_source = "measured",
                      .status = RunStatus::kComplete,
                      .started_at = "2026-01-02T03:04:05.678Z",
                      .finished_at = "2026-01-02T03:14:05.000Z",
                      .idle_power_w = 2.5,
                      .model = "linear"};
  auto first = db->CopyRun(run);
  ASSERT_TRUE(first.ok()) << first.status().message();
  EXPECT_TRUE(first->added);
  auto again = db->CopyRun(run);
  ASSERT_TRUE(again.ok());
  EXPECT_FALSE(again->added);
  EXPECT_EQ(again->id, first->id);
  auto stored = db->GetRun(first->id);
  ASSERT_TRUE(stored.ok());
  EXPECT_EQ(stored->started_at, run.started_at);
  EXPECT_EQ(stored->finished_at, run.finished_at);
  EXPECT_EQ(stored->idle_power_w, std::optional<double>(2.5));
  // Another model at the same instant is another run.
  StoredRun other = run;
  other.model = "resnet18";
  EXPECT_TRUE(db->CopyRun(other)->added);
  EXPECT_EQ(db->ListRuns()->size(), 2u);

  StoredRun running = run;
  running.status = RunStatus::kRunning;
  EXPECT_THAT(db->CopyRun(running).status().message(), HasSubstr("still running"));
  StoredRun unknown = run;
  unknown.fingerprint_hash = "fp-nowhere";
  EXPECT_EQ(db->CopyRun(unknown).status().code(), ErrorCode::kNotFound);
}

TEST_F(SyncState, ACopiedTrainingRunKeepsItsCreationTimeAndIsStoredOnce) {
  auto db = CostDb::Open(path_);
  ASSERT_TRUE(db.ok());
  v1::TrainRun run;
  run.set_model("linear");
  run.set_device("board");
  run.set_steps(4);
  EXPECT_EQ(db->CopyTrainRun(run).status().code(), ErrorCode::kInvalidArgument);  // no identity
  run.set_created_at("2026-01-02T03:04:05.678Z");
  run.set_id(77);  // the other database's
  auto first = db->CopyTrainRun(run);
  ASSERT_TRUE(first.ok()) << first.status().message();
  EXPECT_TRUE(first->added);
  EXPECT_FALSE(db->CopyTrainRun(run)->added);
  auto runs = db->ListTrainRuns();
  ASSERT_EQ(runs->size(), 1u);
  EXPECT_EQ((*runs)[0].created_at(), run.created_at());
  EXPECT_EQ((*runs)[0].id(), static_cast<uint64_t>(first->id));
}

TEST_F(SyncState, MarksStartAtZeroAndLeaveTheCostsCounterAlone) {
  auto db = CostDb::Open(path_);
  ASSERT_TRUE(db.ok());
  EXPECT_EQ(*db->GetSyncMark("store:board:runs"), 0);
  const int64_t version = *db->CostsVersion();
  ASSERT_TRUE(db->SetSyncMark("store:board:runs", 42).ok());
  ASSERT_TRUE(db->SetSyncMark("store:board:runs", 43).ok());
  EXPECT_EQ(*db->GetSyncMark("store:board:runs"), 43);
  EXPECT_EQ(*db->GetSyncMark("store:other:runs"), 0);
  EXPECT_EQ(*db->CostsVersion(), version);
  EXPECT_FALSE(db->SetSyncMark("", 1).ok());
  auto read_only = CostDb::Open(path_, OpenMode::kReadOnly);
  ASSERT_TRUE(read_only.ok());
  EXPECT_FALSE(read_only->SetSyncMark("store:board:runs", 1).ok());
}

}  // namespace
}  // namespace edgecost::costdb
