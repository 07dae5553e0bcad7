#include "costdb/costdb.h"

#include <grp.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <string>

#include <gmock/gmock.h>
#include <google/protobuf/util/message_differencer.h>
#include <gtest/gtest.h>

#include "costdb/postgres.h"
#include "costdb/sqlite.h"
#include "tests/costdb/test_support.h"

namespace edgecost::costdb {
namespace {

using google::protobuf::util::MessageDifferencer;
using test_support::Graph;
using test_support::InChild;
using test_support::MeasuredDevice;
using test_support::PresetDevice;
using test_support::PutPresetTable;
using test_support::Snapshot;
using test_support::Table;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

namespace fs = std::filesystem;

const CostTableKey kKey{"net", "a72", "poet-flops", 1, "poet", "all"};

class CostDbTest : public test_support::TempDirTest {
 protected:
  CostDb OpenOrDie(OpenMode mode = OpenMode::kReadWrite) {
    auto db = CostDb::Open(path_, mode);
    EXPECT_TRUE(db.ok()) << db.status().message();
    return std::move(*db);
  }
  // Writes PRAGMA user_version behind edgecost's back.
  void SetUserVersion(int version) {
    auto raw = Db::Open(path_, Db::Access::kReadWrite, 1000);
    ASSERT_TRUE(raw.ok());
    ASSERT_TRUE(raw->Exec("PRAGMA user_version = " + std::to_string(version)).ok());
  }
  // Undoes schema 9 (a profile run's model) and 8 (cost tables keyed by thread count) as edgecost
  // of schema 7 left its files; a thread count that is current beside another must be superseded
  // first by the caller.
  static void RewindToSchema7(Db& raw) {
    ASSERT_TRUE(raw.Exec("ALTER TABLE runs DROP COLUMN model").ok());
    ASSERT_TRUE(raw.Exec("DROP INDEX cost_tables_current").ok());
    ASSERT_TRUE(raw.Exec("ALTER TABLE cost_tables DROP COLUMN threads").ok());
    ASSERT_TRUE(raw.Exec("CREATE UNIQUE INDEX cost_tables_current ON cost_tables(model_id, fingerprint_id, "
                         "cost_source_id) WHERE superseded_at IS NULL")
                    .ok());
    ASSERT_TRUE(raw.Exec("PRAGMA user_version = 7").ok());
  }
  // Expects both open modes to refuse the file with `code` and `message`, leaving it untouched.
  void ExpectRefusedUntouched(ErrorCode code, const std::string& message) {
    const test_support::FileSnapshot before = Snapshot(path_);
    for (OpenMode mode : {OpenMode::kReadWrite, OpenMode::kReadOnly}) {
      auto db = CostDb::Open(path_, mode);
      ASSERT_FALSE(db.ok());
      EXPECT_EQ(db.status().code(), code) << db.status().message();
      EXPECT_THAT(db.status().message(), HasSubstr(message));
      EXPECT_THAT(db.status().message(), ::testing::Not(HasSubstr("\n")));
    }
    EXPECT_TRUE(Snapshot(path_) == before) << "the refused file was modified";
  }
};

// The tests of what the API does run against both backends: SQLite in a temporary file, and
// PostgreSQL in a schema of its own in the database $EDGECOST_TEST_PG_URL names (scripts/test
// and .ci/run start one; without it the PostgreSQL variants are skipped, saying why).
class StoreTest : public CostDbTest, public ::testing::WithParamInterface<Backend> {
 protected:
  void SetUp() override {
    CostDbTest::SetUp();
    if (GetParam() != Backend::kPostgres) return;
    const char* url = std::getenv("EDGECOST_TEST_PG_URL");
    if (!url || !*url) {
      GTEST_SKIP() << "EDGECOST_TEST_PG_URL is not set: no PostgreSQL to test against (scripts/test starts one "
                      "with scripts/pg_test_server)";
    }
    static int counter = 0;
    schema_ = "t" + std::to_string(::getpid()) + "_" + std::to_string(++counter);
    base_url_ = url;
    auto admin = OpenPostgres(base_url_, false, 5000);
    ASSERT_TRUE(admin.ok()) << admin.status().message();
    ASSERT_TRUE(admin->Exec("DROP SCHEMA IF EXISTS " + schema_ + " CASCADE; CREATE SCHEMA " + schema_).ok());
    path_ = base_url_ + (base_url_.find('?') == std::string::npos ? "?" : "&") + "options=-csearch_path%3D" + schema_;
  }
  void TearDown() override {
    if (!schema_.empty()) {
      auto admin = OpenPostgres(base_url_, false, 5000);
      if (admin.ok()) (void)admin->Exec("DROP SCHEMA IF EXISTS " + schema_ + " CASCADE");
    }
    CostDbTest::TearDown();
  }
  bool Postgres() const { return GetParam() == Backend::kPostgres; }
  // A connection behind the API's back, to the same store.
  Db RawDb() {
    auto raw = Postgres() ? OpenPostgres(path_, false, 1000) : Db::Open(path_, Db::Access::kReadWrite, 1000);
    EXPECT_TRUE(raw.ok()) << raw.status().message();
    return std::move(*raw);
  }
  // What a refused or read-only open must leave as it was.
  std::string StoreState() {
    if (!Postgres()) return Snapshot(path_).bytes;
    auto db = CostDb::Open(path_, OpenMode::kReadOnly);
    if (!db.ok()) return db.status().message();
    auto version = db->CostsVersion();
    auto info = db->Info();
    if (!version.ok() || !info.ok()) return "unreadable";
    std::string state = std::to_string(*version);
    for (const auto& [table, rows] : info->row_counts) state += " " + table + "=" + std::to_string(rows);
    return state;
  }

  std::string schema_;
  std::string base_url_;
};

INSTANTIATE_TEST_SUITE_P(Backends, StoreTest, ::testing::Values(Backend::kSqlite, Backend::kPostgres),
                         [](const ::testing::TestParamInfo<Backend>& info) { return BackendName(info.param); });

TEST_F(CostDbTest, MigratesAnEmptyFileFromZeroToTheLatestSchema) {
  std::ofstream(path_).close();
  EXPECT_EQ(*Db::Open(path_, Db::Access::kReadOnly, 1000)->QueryInt("PRAGMA user_version"), 0);
  {
    CostDb db = OpenOrDie();
    auto info = db.Info();
    ASSERT_TRUE(info.ok());
    EXPECT_EQ(info->schema_version, kSchemaVersion);
    EXPECT_EQ(info->journal_mode, "wal");
    EXPECT_EQ(info->row_counts.size(), 17u);
    for (const auto& [table, rows] : info->row_counts) EXPECT_EQ(rows, 0) << table;
  }
  auto raw = Db::Open(path_, Db::Access::kReadOnly, 1000);
  EXPECT_EQ(*raw->QueryInt("PRAGMA user_version"), kSchemaVersion);
  auto tables = raw->Prepare("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name");
  std::set<std::string> names;
  while (*tables->Step()) names.insert(tables->Text(0));
  EXPECT_EQ(names, (std::set<std::string>{"change_counters", "cost_sources", "cost_tables", "devices",
                                          "energy_calibrations", "fingerprints", "jobs", "model_records", "models",
                                          "node_costs", "op_costs", "op_counters", "op_domain_energy", "paging_costs",
                                          "runs", "schedule_requests", "schedules", "train_runs"}));
  // Opening again is a no-op migration.
  EXPECT_EQ(OpenOrDie().Info()->schema_version, kSchemaVersion);
}

// Schema 9: a profile run names the model it profiled; the runs of older files list none.
TEST_P(StoreTest, AProfileRunNamesItsModel) {
  {
    CostDb db = OpenOrDie();
    ASSERT_TRUE(db.UpsertDevice(MeasuredDevice("vm", "fp1")).ok());
    ASSERT_TRUE(db.BeginRun("fp1", "measured").ok());
    ASSERT_TRUE(db.BeginRun("fp1", "measured", "resnet18_cifar").ok());
  }
  CostDb db = OpenOrDie();
  auto runs = db.ListRuns();
  ASSERT_TRUE(runs.ok());
  ASSERT_EQ(runs->size(), 2u);
  EXPECT_EQ((*runs)[0].model, "");
  EXPECT_EQ((*runs)[1].model, "resnet18_cifar");
  EXPECT_EQ(db.GetRun((*runs)[1].id)->model, "resnet18_cifar");
  auto counted = db.ListRunsWithOpCounts();
  ASSERT_TRUE(counted.ok());
  EXPECT_EQ(counted->front().first.model, "resnet18_cifar");  // newest first
}

TEST_P(StoreTest, TrainingRunRecordsAreKeptAndListedNewestLast) {
  CostDb db = OpenOrDie();
  for (const char* model : {"linear", "resnet18_cifar", "linear"}) {
    v1::TrainRun run;
    run.set_model(model);
    run.set_device("vm");
    run.set_steps(3);
    run.add_step_stats()->set_loss(2.5);
    ASSERT_TRUE(db.PutTrainRun(run).ok());
  }
  auto all = db.ListTrainRuns();
  ASSERT_TRUE(all.ok()) << all.status().message();
  ASSERT_EQ(all->size(), 3u);
  EXPECT_EQ((*all)[0].id(), 1u);
  EXPECT_EQ((*all)[2].id(), 3u);
  EXPECT_FALSE((*all)[0].created_at().empty());
  EXPECT_EQ((*all)[1].step_stats_size(), 0);  // a listing is of summaries: the steps grow with the run
  ASSERT_EQ(db.GetTrainRun(2)->step_stats_size(), 1);
  EXPECT_EQ(db.GetTrainRun(2)->step_stats(0).loss(), 2.5);
  EXPECT_EQ((*db.ListTrainRuns("", 0, /*steps=*/true))[1].step_stats(0).loss(), 2.5);
  auto linear = db.ListTrainRuns("linear", 1);  // the newest one of the model
  ASSERT_TRUE(linear.ok());
  ASSERT_EQ(linear->size(), 1u);
  EXPECT_EQ((*linear)[0].id(), 3u);
}

TEST_P(StoreTest, ListsTheModelsMeasuredOnAFingerprint) {
  CostDb db = OpenOrDie();
  ASSERT_TRUE(db.UpsertDevice(MeasuredDevice("pi4", "aaa")).ok());
  ASSERT_TRUE(db.PutCostTable(Table("net", "pi4", 3, 0, "aaa")).ok());
  ASSERT_TRUE(db.PutCostTable(Table("alpha", "pi4", 2, 0, "aaa")).ok());
  ASSERT_TRUE(db.PutCostTable(Table("net", "pi4", 3, 1, "aaa")).ok());  // supersedes the first: listed once
  ASSERT_TRUE(PutPresetTable(db, Table("analytic", "a72", 2)).ok());
  ASSERT_TRUE(db.UpsertDevice(MeasuredDevice("pi4", "bbb")).ok());
  EXPECT_THAT(*db.ListModelsWithCosts("aaa", "measured"), ElementsAre("alpha", "net"));
  EXPECT_TRUE(db.ListModelsWithCosts("bbb", "measured")->empty());
  EXPECT_TRUE(db.ListModelsWithCosts("aaa", "poet-flops")->empty());
}

TEST_P(StoreTest, JobsAreKeptAndReplacedById) {
  CostDb db = OpenOrDie();
  StoredJob profile;
  profile.job.set_id(1);
  profile.job.set_kind("profile");
  profile.job.set_state(v1::Job::STATE_RUNNING);
  profile.profile_request.set_model("linear");
  ASSERT_TRUE(db.PutJob(profile).ok());
  StoredJob regenerate;
  regenerate.job.set_id(2);
  regenerate.job.set_kind("regenerate");
  ASSERT_TRUE(db.PutJob(regenerate).ok());
  profile.job.set_state(v1::Job::STATE_SUCCEEDED);
  ASSERT_TRUE(db.PutJob(profile).ok());

  auto jobs = db.ListJobs();
  ASSERT_TRUE(jobs.ok()) << jobs.status().message();
  ASSERT_EQ(jobs->size(), 2u);
  EXPECT_EQ((*jobs)[0].job.state(), v1::Job::STATE_SUCCEEDED);
  EXPECT_EQ((*jobs)[0].profile_request.model(), "linear");
  EXPECT_EQ((*jobs)[1].job.kind(), "regenerate");
}

TEST_F(CostDbTest, CreatesItsFolder) {
  const std::string nested = (dir_ / "a" / "b" / "costs.db").string();
  ASSERT_TRUE(CostDb::Open(nested).ok());
  EXPECT_TRUE(fs::exists(nested));
}

TEST_F(CostDbTest, DefaultPathHonoursTheEnvironment) {
  const auto saved = [](const char* name) {
    const char* value = std::getenv(name);
    return value ? std::optional<std::string>(value) : std::nullopt;
  };
  const auto restore = [](const char* name, const std::optional<std::string>& value) {
    value ? ::setenv(name, value->c_str(), 1) : ::unsetenv(name);
  };
  const auto db = saved("EDGECOST_DB"), xdg = saved("XDG_DATA_HOME"), home = saved("HOME");
  ::setenv("EDGECOST_DB", "/x/costs.db", 1);
  ::setenv("XDG_DATA_HOME", "/xdg", 1);
  ::setenv("HOME", "/home/pi", 1);
  EXPECT_EQ(DefaultDbPath(), "/x/costs.db");
  ::unsetenv("EDGECOST_DB");
  EXPECT_EQ(DefaultDbPath(), "/xdg/edgecost/edgecost.db");
  ::unsetenv("XDG_DATA_HOME");
  EXPECT_EQ(DefaultDbPath(), "/home/pi/.local/share/edgecost/edgecost.db");
  restore("EDGECOST_DB", db);
  restore("XDG_DATA_HOME", xdg);
  restore("HOME", home);
}

TEST_P(StoreTest, DeviceFingerprintChangesKeepHistory) {
  CostDb db = OpenOrDie();
  const auto first = db.UpsertDevice(MeasuredDevice("pi4", "aaa"));
  ASSERT_TRUE(first.ok()) << first.status().message();
  EXPECT_EQ(*db.UpsertDevice(MeasuredDevice("pi4", "aaa")), *first);  // idempotent
  ASSERT_TRUE(db.UpsertDevice(MeasuredDevice("pi4", "bbb")).ok());
  ASSERT_TRUE(db.UpsertDevice(MeasuredDevice("pi4", "ccc")).ok());
  auto device = db.GetDevice("pi4");
  ASSERT_TRUE(device.ok()) << device.status().message();
  EXPECT_TRUE(MessageDifferencer::Equals(*device->mutable_fingerprint(), MeasuredDevice("pi4", "ccc").fingerprint()));
  EXPECT_EQ(device->kind(), v1::Device::KIND_MEASURED);
  ASSERT_EQ(device->history_size(), 2);
  EXPECT_EQ(device->history(0).hash(), "bbb");  // newest first
  EXPECT_EQ(device->history(1).hash(), "aaa");

  // The hardware went back to an earlier state: that fingerprint is current again.
  ASSERT_TRUE(db.UpsertDevice(MeasuredDevice("pi4", "aaa")).ok());
  EXPECT_EQ(db.GetDevice("pi4")->fingerprint().hash(), "aaa");
  EXPECT_EQ(db.GetDevice("pi4")->history_size(), 2);

  // The database holds no rule that invents devices: a preset is recorded by its caller first.
  EXPECT_EQ(db.PutCostTable(Table("net", "a72", 3)).status().code(), ErrorCode::kNotFound);
  ASSERT_TRUE(PutPresetTable(db, Table("net", "a72", 3)).ok());
  auto devices = db.ListDevices();
  ASSERT_TRUE(devices.ok());
  ASSERT_EQ(devices->size(), 2u);
  EXPECT_EQ((*devices)[0].name(), "a72");
  EXPECT_EQ((*devices)[0].kind(), v1::Device::KIND_PRESET);
  EXPECT_EQ((*devices)[0].fingerprint().hash(), "preset:a72");
  EXPECT_EQ((*devices)[1].name(), "pi4");

  EXPECT_EQ(db.GetDevice("nope").status().code(), ErrorCode::kNotFound);
  EXPECT_EQ(db.UpsertDevice(MeasuredDevice("pi5", "aaa")).status().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(db.UpsertDevice(MeasuredDevice("a72", "zzz")).status().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(db.UpsertDevice(MeasuredDevice("pi4", "")).status().code(), ErrorCode::kInvalidArgument);
  v1::Device no_kind = MeasuredDevice("pi6", "kkk");
  no_kind.set_kind(v1::Device::KIND_UNSPECIFIED);
  EXPECT_EQ(db.UpsertDevice(no_kind).status().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(db.Info()->row_counts.at("fingerprints"), 4);
}

TEST_P(StoreTest, ModelGraphsAreIdempotentAndVersioned) {
  CostDb db = OpenOrDie();
  const v1::TrainingGraph graph = Graph("net", 4);
  const auto id = db.PutModelGraph(graph);
  ASSERT_TRUE(id.ok()) << id.status().message();
  EXPECT_EQ(*db.PutModelGraph(graph), *id);
  v1::TrainingGraph other_batch = graph;
  other_batch.set_batch_size(8);
  EXPECT_NE(*db.PutModelGraph(other_batch), *id);

  v1::TrainingGraph rederived = graph;  // same key, different graph: a newer derivation
  rederived.set_param_bytes(1);
  const auto new_id = db.PutModelGraph(rederived);
  ASSERT_TRUE(new_id.ok());
  EXPECT_NE(*new_id, *id);
  auto graphs = db.ListModelGraphs();
  ASSERT_TRUE(graphs.ok());
  ASSERT_EQ(graphs->size(), 2u);  // current graphs only
  EXPECT_TRUE(MessageDifferencer::Equals((*graphs)[0], rederived));
  EXPECT_TRUE(MessageDifferencer::Equals((*graphs)[1], other_batch));
  EXPECT_EQ(db.Info()->row_counts.at("models"), 3);
}

// Models as records: one per name, listed without their bytes; replacing or removing one
// retires the cost tables of the old model, which stay stored.
TEST_P(StoreTest, OlderJobsAreReadByIdAndNewestFirstUnderABound) {
  CostDb db = OpenOrDie();
  for (uint64_t id = 1; id <= 5; ++id) {
    StoredJob stored;
    stored.job.set_id(id);
    stored.job.set_kind("profile");
    stored.job.set_state(v1::Job::STATE_SUCCEEDED);
    stored.profile_request.set_model("net" + std::to_string(id));
    ASSERT_TRUE(db.PutJob(stored).ok());
  }
  auto three = db.GetJob(3);
  ASSERT_TRUE(three.ok() && three->has_value()) << three.status().message();
  EXPECT_EQ((*three)->profile_request.model(), "net3");
  EXPECT_FALSE(db.GetJob(6)->has_value());
  EXPECT_FALSE(db.GetJob(UINT64_MAX)->has_value());

  auto below_four = db.ListJobs(4, 2);  // the newest two at or below 4, oldest first
  ASSERT_TRUE(below_four.ok()) << below_four.status().message();
  ASSERT_EQ(below_four->size(), 2u);
  EXPECT_EQ((*below_four)[0].job.id(), 3u);
  EXPECT_EQ((*below_four)[1].job.id(), 4u);
  EXPECT_EQ(db.ListJobs(UINT64_MAX, 100)->size(), 5u);
  EXPECT_TRUE(db.ListJobs(0, 100)->empty());
}

// A stored model's summary is what listing shows: stored with it, replaced with it, and stored
// later only over the bytes it describes.
TEST_P(StoreTest, ModelRecordsKeepTheirSummaryWithTheirBytes) {
  CostDb db = OpenOrDie();
  ModelRecord record{"net", "onnx", "h1", 0, "", "bytes one", std::nullopt};
  record.summary.emplace();
  record.summary->set_training_nodes(7);
  ASSERT_TRUE(db.PutModelRecord(record).ok());
  auto listed = db.ListModelRecords();
  ASSERT_TRUE(listed.ok() && listed->size() == 1u);
  ASSERT_TRUE((*listed)[0].summary.has_value());
  EXPECT_EQ((*listed)[0].summary->training_nodes(), 7u);
  EXPECT_EQ((*db.GetModelRecord("net"))->summary->training_nodes(), 7u);

  // Replaced by other bytes without a summary: the old one is not theirs.
  ASSERT_TRUE(db.PutModelRecord({"net", "onnx", "h2", 0, "", "bytes two", std::nullopt}).ok());
  EXPECT_FALSE((*db.ListModelRecords())[0].summary.has_value());
  v1::ModelInfo summary;
  summary.set_training_nodes(9);
  EXPECT_FALSE(*db.PutModelSummary("net", "h1", summary));  // described from the replaced bytes
  EXPECT_FALSE((*db.GetModelRecord("net"))->summary.has_value());
  EXPECT_TRUE(*db.PutModelSummary("net", "h2", summary));
  EXPECT_EQ((*db.ListModelRecords())[0].summary->training_nodes(), 9u);
  EXPECT_FALSE(*db.PutModelSummary("gone", "h2", summary));
  EXPECT_EQ(OpenOrDie(OpenMode::kReadOnly).PutModelSummary("net", "h2", summary).status().code(),
            ErrorCode::kPermissionDenied);

  // A summary that does not decode is absent (described again), not a failed listing.
  {
    Db raw = RawDb();
    auto update = raw.Prepare("UPDATE model_records SET summary = ? WHERE name = 'net'");
    ASSERT_TRUE(update.ok());
    ASSERT_TRUE(update->BindBlob(1, "\xff\xff").Run().ok());
  }
  listed = db.ListModelRecords();
  ASSERT_TRUE(listed.ok()) << listed.status().message();
  EXPECT_FALSE((*listed)[0].summary.has_value());
}

// The costs version moves with every write a cost table read from the database depends on, by any
// connection, and with nothing else.
TEST_P(StoreTest, TheCostsVersionMovesWithWhatStoredTablesAreReadFrom) {
  CostDb db = OpenOrDie();
  CostDb other = OpenOrDie();  // another connection, as another process would have
  auto version = [&] {
    auto v = db.CostsVersion();
    EXPECT_TRUE(v.ok()) << v.status().message();
    return v.ok() ? *v : -1;
  };
  int64_t before = version();
  auto expect_moved = [&](const std::string& what) {
    const int64_t now = version();
    EXPECT_GT(now, before) << what;
    before = now;
  };
  ASSERT_TRUE(other.UpsertDevice(MeasuredDevice("pi4", "fp1")).ok());
  expect_moved("a device and its fingerprint");
  v1::OpCost op;
  op.mutable_signature()->set_key("conv");
  op.mutable_runtime()->set_median_s(1e-3);
  ASSERT_TRUE(other.PutOpCost("fp1", 0, op).ok());
  expect_moved("a new op cost");
  op.mutable_runtime()->set_median_s(2e-3);
  ASSERT_TRUE(other.PutOpCost("fp1", 0, op).ok());
  expect_moved("an op cost measured again");
  ASSERT_TRUE(other.PutCostTable(Table("net", "pi4", 5, 1, "fp1")).ok());
  expect_moved("a cost table");
  ASSERT_TRUE(other.UpsertDevice(MeasuredDevice("pi4", "fp2")).ok());
  expect_moved("a changed fingerprint");
  ASSERT_TRUE(other.PutModelRecord({"rec", "onnx", "h1", 0, "", "bytes", std::nullopt}).ok());
  expect_moved("a model record");
  ASSERT_TRUE(other.PutModelRecord({"rec", "onnx", "h2", 0, "", "other bytes", std::nullopt}).ok());
  expect_moved("a replaced model record");
  ASSERT_TRUE(other.DeleteModelRecord("rec").ok());
  expect_moved("a removed model record");

  // Nothing a table is read from: the version stays.
  ASSERT_TRUE(other.PutModelRecord({"rec", "onnx", "h1", 0, "", "bytes", std::nullopt}).ok());
  before = version();
  ASSERT_TRUE(*other.PutModelSummary("rec", "h1", v1::ModelInfo()));
  StoredJob job;
  job.job.set_id(1);
  ASSERT_TRUE(other.PutJob(job).ok());
  EXPECT_EQ(version(), before);
  EXPECT_EQ(*OpenOrDie(OpenMode::kReadOnly).CostsVersion(), before);
}

// A file at schema 6 (before summaries and the costs version): its records keep their bytes and
// have no summary yet, and the version starts.
TEST_F(CostDbTest, MigratesSchemaSixRecordsWithoutASummary) {
  ASSERT_TRUE(OpenOrDie().PutModelRecord({"old", "onnx", "h1", 0, "", "old bytes", std::nullopt}).ok());
  {  // back to schema 6, as edgecost of that schema left it
    auto raw = Db::Open(path_, Db::Access::kReadWrite, 1000);
    ASSERT_TRUE(raw.ok());
    RewindToSchema7(*raw);
    auto triggers = raw->Prepare("SELECT name FROM sqlite_master WHERE type = 'trigger'");
    std::vector<std::string> names;
    while (*triggers->Step()) names.push_back(triggers->Text(0));
    triggers = Statement();
    EXPECT_EQ(names.size(), 18u);
    for (const std::string& name : names) ASSERT_TRUE(raw->Exec("DROP TRIGGER " + name).ok());
    ASSERT_TRUE(raw->Exec("DROP TABLE change_counters").ok());
    ASSERT_TRUE(raw->Exec("ALTER TABLE model_records DROP COLUMN summary").ok());
    ASSERT_TRUE(raw->Exec("PRAGMA user_version = 6").ok());
  }
  CostDb db = OpenOrDie();
  EXPECT_EQ(db.Info()->schema_version, kSchemaVersion);
  auto record = db.GetModelRecord("old");
  ASSERT_TRUE(record.ok() && record->has_value()) << record.status().message();
  EXPECT_EQ((*record)->bytes, "old bytes");
  EXPECT_FALSE((*record)->summary.has_value());
  const auto version = db.CostsVersion();
  ASSERT_TRUE(version.ok()) << version.status().message();
  ASSERT_TRUE(db.DeleteModelRecord("old").ok());
  EXPECT_GT(*db.CostsVersion(), *version);
}

TEST_P(StoreTest, ModelRecordsAreKeptByNameAndRetireTheirTablesWhenReplaced) {
  CostDb db = OpenOrDie();
  ASSERT_TRUE(PutPresetTable(db, Table("net", "a72", 5, 1)).ok());
  ModelRecord record{"net", "onnx", "h1", 0, "", std::string("\x08\x07onnx\0bytes", 13)};
  ASSERT_TRUE(db.PutModelRecord(record).ok());
  auto back = db.GetModelRecord("net");
  ASSERT_TRUE(back.ok() && back->has_value()) << back.status().message();
  EXPECT_EQ((*back)->bytes, record.bytes);  // binary, NUL included
  EXPECT_EQ((*back)->size_bytes, 13);
  EXPECT_EQ((*back)->kind, "onnx");
  EXPECT_FALSE((*back)->added_at.empty());
  EXPECT_TRUE(db.GetCostTable(kKey).ok()) << "the same name stored first keeps its table";

  ASSERT_TRUE(db.PutModelRecord(record).ok());  // the same bytes again: nothing retired
  EXPECT_TRUE(db.GetCostTable(kKey).ok());
  record.content_hash = "h2";
  record.bytes = "other";
  ASSERT_TRUE(db.PutModelRecord(record).ok());
  EXPECT_EQ(db.GetCostTable(kKey).status().code(), ErrorCode::kNotFound);
  EXPECT_EQ(db.Info()->row_counts.at("cost_tables"), 1);  // kept, no longer served

  ASSERT_TRUE(db.PutModelRecord({"another", "node-link", "h3", 0, "", "{}"}).ok());
  auto listed = db.ListModelRecords();
  ASSERT_TRUE(listed.ok());
  ASSERT_EQ(listed->size(), 2u);
  EXPECT_EQ((*listed)[0].name, "another");
  EXPECT_EQ((*listed)[1].content_hash, "h2");
  EXPECT_TRUE((*listed)[1].bytes.empty());
  EXPECT_EQ((*listed)[1].size_bytes, 5);

  ASSERT_TRUE(db.DeleteModelRecord("net").ok());
  EXPECT_FALSE(db.GetModelRecord("net")->has_value());
  const Status again = db.DeleteModelRecord("net");
  EXPECT_EQ(again.code(), ErrorCode::kNotFound);
  EXPECT_THAT(again.message(), HasSubstr("edgecost models"));
  EXPECT_EQ(OpenOrDie(OpenMode::kReadOnly).PutModelRecord(record).code(), ErrorCode::kPermissionDenied);
}

TEST_P(StoreTest, CostTablesRoundTripAndSupersede) {
  CostDb db = OpenOrDie();
  const v1::CostTable first = Table("net", "a72", 50, 1);
  const auto first_id = PutPresetTable(db, first);
  ASSERT_TRUE(first_id.ok()) << first_id.status().message();
  auto back = db.GetCostTable(kKey);
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_TRUE(MessageDifferencer::Equals(*back, first));

  v1::CostTable second = Table("net", "a72", 50, 2);
  second.mutable_paging()->set_storage_path("/sd");
  second.mutable_paging()->set_page_in_latency_s(1e-4);
  const auto second_id = PutPresetTable(db, second);
  ASSERT_TRUE(second_id.ok());
  EXPECT_EQ(db.GetCostTable(kKey)->note(), "generation 2");
  EXPECT_EQ(db.GetCostTable(kKey)->paging().storage_path(), "/sd");
  EXPECT_EQ(db.GetCostTableById(*first_id)->note(), "generation 1");  // kept, not deleted
  auto info = db.Info();
  EXPECT_EQ(info->row_counts.at("cost_tables"), 2);
  EXPECT_EQ(info->row_counts.at("node_costs"), 100);
  EXPECT_EQ(info->row_counts.at("models"), 1);

  const auto missing = db.GetCostTable({"net", "m0", "poet-flops", 1, "poet", "all"});
  EXPECT_EQ(missing.status().code(), ErrorCode::kNotFound);
  EXPECT_THAT(missing.status().message(), HasSubstr("edgecost costs net --platform m0 --store"));

  // A new graph for the same key retires the tables computed for the old one.
  v1::TrainingGraph rederived = first.graph();
  rederived.set_param_bytes(1);
  ASSERT_TRUE(db.PutModelGraph(rederived).ok());
  EXPECT_EQ(db.GetCostTable(kKey).status().code(), ErrorCode::kNotFound);
  EXPECT_TRUE(db.GetCostTableById(*second_id).ok());
}

TEST_P(StoreTest, MeasuredCostTablesNeedTheirFingerprintAndFollowIt) {
  CostDb db = OpenOrDie();
  const v1::CostTable table = Table("net", "pi4", 5, 1, "fp1");
  const auto unknown = db.PutCostTable(table);
  EXPECT_EQ(unknown.status().code(), ErrorCode::kNotFound);
  EXPECT_THAT(unknown.status().message(), HasSubstr("profile the device"));
  ASSERT_TRUE(db.UpsertDevice(MeasuredDevice("pi4", "fp1")).ok());
  ASSERT_TRUE(db.PutCostTable(table).ok());
  const CostTableKey key{"net", "pi4", "measured", 1, "poet", "all"};
  EXPECT_TRUE(MessageDifferencer::Equals(*db.GetCostTable(key), table));
  EXPECT_EQ(db.PutCostTable(Table("net", "other", 5, 1, "fp1")).status().code(), ErrorCode::kInvalidArgument);

  // A changed fingerprint starts a new set of costs: the old table is no longer served.
  ASSERT_TRUE(db.UpsertDevice(MeasuredDevice("pi4", "fp2")).ok());
  EXPECT_EQ(db.GetCostTable(key).status().code(), ErrorCode::kNotFound);
  ASSERT_TRUE(db.UpsertDevice(MeasuredDevice("pi4", "fp1")).ok());
  EXPECT_TRUE(db.GetCostTable(key).ok());
}

// A measured table whose op keys end as the profiler writes them, at `threads`.
v1::CostTable ThreadsTable(int generation, uint32_t threads) {
  v1::CostTable table = Table("net", "pi4", 5, generation, "fp1");
  table.set_threads(threads);
  for (v1::NodeCost& cost : *table.mutable_costs()) {
    cost.set_op_key("relu/fwd/in=1x8/out=1x8/f32/onednn/t" + std::to_string(threads) + "/n" +
                    std::to_string(cost.node()));
  }
  return table;
}

// Issue 27: `profile --threads 1` replaced the 2-thread table, and a 2-thread run predicted from it.
TEST_P(StoreTest, TablesOfEachThreadCountStayCurrent) {
  CostDb db = OpenOrDie();
  ASSERT_TRUE(db.UpsertDevice(MeasuredDevice("pi4", "fp1")).ok());
  ASSERT_TRUE(db.PutCostTable(ThreadsTable(2, 2)).ok());
  ASSERT_TRUE(db.PutCostTable(ThreadsTable(1, 1)).ok());
  CostTableKey key{"net", "pi4", "measured", 1, "poet", "all"};
  EXPECT_THAT(*db.CostTableThreads(key), ElementsAre(1u, 2u));
  key.threads = 2;
  EXPECT_EQ(db.GetCostTable(key)->note(), "generation 2");
  EXPECT_EQ(db.GetCostTable(key)->threads(), 2u);
  key.threads = 1;
  EXPECT_EQ(db.GetCostTable(key)->note(), "generation 1");
  key.threads = 4;
  const auto missing = db.GetCostTable(key);
  EXPECT_EQ(missing.status().code(), ErrorCode::kNotFound);
  EXPECT_THAT(missing.status().message(), HasSubstr("4 threads"));

  // Storing a thread count again supersedes only that count's table.
  ASSERT_TRUE(db.PutCostTable(ThreadsTable(3, 1)).ok());
  key.threads = 1;
  EXPECT_EQ(db.GetCostTable(key)->note(), "generation 3");
  key.threads = 2;
  EXPECT_EQ(db.GetCostTable(key)->note(), "generation 2");
  const auto listed = db.ListCostTables("pi4");
  ASSERT_EQ(listed->size(), 2u);
  EXPECT_EQ((*listed)[0].key.threads, 2u);
  EXPECT_EQ((*listed)[1].key.threads, 1u);
  EXPECT_EQ(db.Info()->row_counts.at("cost_tables"), 3);
}

// A file at schema 7, where the 1-thread profile superseded the 2-thread table: both tables are
// kept, each gets its thread count from its op keys, the 2-thread one is current again, and a
// table without measured op keys has an unknown count (0).
TEST_F(CostDbTest, MigratesSchemaSevenTablesWithTheirThreadCounts) {
  int64_t two = 0, one = 0, preset = 0;
  {
    CostDb db = OpenOrDie();
    ASSERT_TRUE(db.UpsertDevice(MeasuredDevice("pi4", "fp1")).ok());
    two = *db.PutCostTable(ThreadsTable(2, 2));
    one = *db.PutCostTable(ThreadsTable(1, 1));
    preset = *PutPresetTable(db, Table("net", "a72", 5, 7));
  }
  {  // back to schema 7, as edgecost of that schema left it: one current table per model, fingerprint and source
    auto raw = Db::Open(path_, Db::Access::kReadWrite, 1000);
    ASSERT_TRUE(raw.ok());
    ASSERT_TRUE(
        raw->Exec("UPDATE cost_tables SET superseded_at = '2024-01-01T00:00:00Z' WHERE id = " + std::to_string(two))
            .ok());
    RewindToSchema7(*raw);
  }
  CostDb db = OpenOrDie();
  EXPECT_EQ(db.Info()->schema_version, kSchemaVersion);
  EXPECT_EQ(db.GetCostTableById(two)->threads(), 2u);
  EXPECT_EQ(db.GetCostTableById(one)->threads(), 1u);
  EXPECT_EQ(db.GetCostTableById(preset)->threads(), 0u);
  CostTableKey key{"net", "pi4", "measured", 1, "poet", "all", 2};
  EXPECT_THAT(*db.CostTableThreads(key), ElementsAre(1u, 2u));
  EXPECT_EQ(db.GetCostTable(key)->note(), "generation 2");
  key.threads = 1;
  EXPECT_EQ(db.GetCostTable(key)->note(), "generation 1");
  EXPECT_EQ(db.GetCostTable(kKey)->note(), "generation 7");  // unknown count: threads 0
  // The new unique index holds: a second current 2-thread table cannot be written behind the API.
  ASSERT_TRUE(db.PutCostTable(ThreadsTable(3, 2)).ok());
  auto raw = Db::Open(path_, Db::Access::kReadWrite, 1000);
  EXPECT_FALSE(raw->Exec("UPDATE cost_tables SET superseded_at = NULL WHERE id = " + std::to_string(two)).ok());
}

TEST_P(StoreTest, AFailedCostTableLeavesNothingBehind) {
  CostDb db = OpenOrDie();
  ASSERT_TRUE(db.UpsertDevice(PresetDevice("a72")).ok());
  v1::CostTable table = Table("net", "a72", 20);
  table.mutable_costs(19)->set_node(3);  // a duplicate node, found only at the last insert
  const auto put = db.PutCostTable(table);
  ASSERT_FALSE(put.ok());
  EXPECT_EQ(put.status().code(), ErrorCode::kInvalidArgument) << put.status().message();
  const auto info = db.Info();  // kept alive: the loop reads from it
  for (const auto& [name, rows] : info->row_counts) {
    if (name != "devices" && name != "fingerprints") {
      EXPECT_EQ(rows, 0) << name;
    }
  }

  table.mutable_costs(19)->set_node(20);
  EXPECT_EQ(db.PutCostTable(table).status().code(), ErrorCode::kInvalidArgument);
  table.mutable_costs()->RemoveLast();
  EXPECT_EQ(db.PutCostTable(table).status().code(), ErrorCode::kInvalidArgument);
}

v1::OpCost Conv(double median_s) {
  v1::OpCost cost;
  v1::OpSignature& signature = *cost.mutable_signature();
  signature.set_kind("conv2d");
  signature.set_phase(v1::PHASE_FORWARD);
  signature.set_dtype("f32");
  signature.set_backend("onednn");
  signature.set_threads(4);
  (*signature.mutable_attributes())["stride"] = 1;
  signature.set_key("conv2d/fwd/1x3x32x32/k3s1p1");
  cost.mutable_runtime()->set_median_s(median_s);
  cost.mutable_runtime()->set_stddev_s(1e-6);
  cost.mutable_runtime()->set_ci95_low_s(median_s - 2e-6);
  cost.mutable_runtime()->set_ci95_high_s(median_s + 2e-6);
  cost.mutable_runtime()->set_repetitions(31);
  cost.set_energy_j(0.002);
  cost.set_dynamic_energy_j(0.0015);
  cost.set_idle_power_w(2.5);
  cost.set_energy_source(v1::ENERGY_SOURCE_COUNTER);
  cost.set_energy_probe("rapl:package-0");
  cost.set_output_bytes(65536);
  cost.set_workspace_bytes(4096);
  cost.set_rss_growth_bytes(-8192);
  return cost;
}

TEST_P(StoreTest, CountersAreQueryablePerEventAndCalibrationsKeptPerFingerprint) {
  CostDb db = OpenOrDie();
  ASSERT_TRUE(db.UpsertDevice(MeasuredDevice("pi4", "fp1")).ok());
  v1::OpCost op = Conv(1e-4);
  for (const auto& [event, value] : {std::pair{"task-clock", 2e5}, std::pair{"page-faults", 3.0}}) {
    v1::OpCounter* c = op.add_counters();
    c->set_event(event);
    c->set_per_execution(value);
    c->set_running_fraction(1);
  }
  ASSERT_TRUE(db.PutOpCost("fp1", 0, op).ok());
  auto rows = db.ListOpCounter("fp1", "task-clock");
  ASSERT_TRUE(rows.ok()) << rows.status().message();
  ASSERT_EQ(rows->size(), 1u);
  EXPECT_DOUBLE_EQ((*rows)[0].second, 2e5);
  op.mutable_counters()->RemoveLast();  // measured again without page faults: the old row goes
  ASSERT_TRUE(db.PutOpCost("fp1", 0, op).ok());
  EXPECT_TRUE(db.ListOpCounter("fp1", "page-faults")->empty());
  EXPECT_EQ(db.ListOpCounter("fp1", "task-clock")->size(), 1u);

  EXPECT_FALSE(db.LatestCalibration("fp1")->has_value());
  v1::EnergyCalibration first;
  first.set_fingerprint_hash("fp1");
  first.set_probe("rapl package-0");
  first.set_calibrated_at("2026-11-24T10:00:00Z");
  first.set_idle_power_w(3);
  v1::EnergyCalibration second = first;
  second.set_calibrated_at("2026-11-25T10:00:00Z");
  second.set_idle_power_w(2.5);
  ASSERT_TRUE(db.PutCalibration(second).ok());
  ASSERT_TRUE(db.PutCalibration(first).ok());
  auto latest = db.LatestCalibration("fp1");
  ASSERT_TRUE(latest.ok() && latest->has_value());
  EXPECT_DOUBLE_EQ((*latest)->idle_power_w(), 2.5);  // the newest calibration, not the last stored
  EXPECT_EQ(db.ListCalibrations("fp1")->size(), 2u);
  v1::EnergyCalibration nowhere = first;
  nowhere.set_fingerprint_hash("unknown");
  EXPECT_EQ(db.PutCalibration(nowhere).status().code(), ErrorCode::kNotFound);
  nowhere.set_fingerprint_hash("fp1");
  nowhere.clear_probe();
  EXPECT_EQ(db.PutCalibration(nowhere).status().code(), ErrorCode::kInvalidArgument);
}

TEST_P(StoreTest, RunsAndOpCostsRoundTrip) {
  CostDb db = OpenOrDie();
  ASSERT_TRUE(db.UpsertDevice(MeasuredDevice("pi4", "fp1")).ok());
  ASSERT_TRUE(db.UpsertDevice(MeasuredDevice("pi5", "fp9")).ok());
  const auto run = db.BeginRun("fp1", "measured");
  ASSERT_TRUE(run.ok()) << run.status().message();
  auto started = db.GetRun(*run);
  ASSERT_TRUE(started.ok());
  EXPECT_EQ(started->status, RunStatus::kRunning);
  EXPECT_EQ(started->fingerprint_hash, "fp1");
  EXPECT_EQ(started->cost_source, "measured");
  EXPECT_FALSE(started->started_at.empty());
  EXPECT_TRUE(started->finished_at.empty());
  EXPECT_EQ(started->idle_power_w, std::nullopt);

  ASSERT_TRUE(db.PutOpCost("fp1", *run, Conv(1.5e-4)).ok());
  auto back = db.GetOpCost("fp1", Conv(0).signature().key());
  ASSERT_TRUE(back.ok() && back->has_value());
  EXPECT_TRUE(MessageDifferencer::Equals(**back, Conv(1.5e-4)));
  ASSERT_TRUE(db.PutOpCost("fp1", *run, Conv(2e-4)).ok());  // measured again: replaces
  v1::OpCost relu = Conv(1e-5);
  relu.mutable_signature()->set_key("a-relu");
  ASSERT_TRUE(db.PutOpCost("fp1", 0, relu).ok());  // no run: imported
  auto listed = db.ListOpCosts("fp1");
  ASSERT_TRUE(listed.ok());
  ASSERT_EQ(listed->size(), 2u);
  EXPECT_EQ((*listed)[0].signature().key(), "a-relu");
  EXPECT_DOUBLE_EQ((*listed)[1].runtime().median_s(), 2e-4);
  EXPECT_FALSE(db.GetOpCost("fp1", "other")->has_value());
  EXPECT_TRUE(db.ListOpCosts("fp9")->empty());

  EXPECT_EQ(db.PutOpCost("unknown", 0, relu).code(), ErrorCode::kNotFound);
  EXPECT_EQ(db.PutOpCost("fp9", *run, relu).code(), ErrorCode::kInvalidArgument);  // run of another device
  EXPECT_EQ(db.PutOpCost("fp1", 999, relu).code(), ErrorCode::kNotFound);
  EXPECT_EQ(db.PutOpCost("fp1", 0, v1::OpCost()).code(), ErrorCode::kInvalidArgument);

  ASSERT_TRUE(db.FinishRun(*run, RunStatus::kComplete, 2.25).ok());
  auto finished = db.GetRun(*run);
  EXPECT_EQ(finished->status, RunStatus::kComplete);
  EXPECT_FALSE(finished->finished_at.empty());
  EXPECT_EQ(finished->idle_power_w, 2.25);
  EXPECT_EQ(db.FinishRun(999, RunStatus::kFailed).code(), ErrorCode::kNotFound);
  EXPECT_EQ(db.FinishRun(*run, RunStatus::kRunning).code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(db.BeginRun("unknown", "measured").status().code(), ErrorCode::kNotFound);
}

TEST_P(StoreTest, PagingCostsRoundTrip) {
  CostDb db = OpenOrDie();
  ASSERT_TRUE(db.UpsertDevice(MeasuredDevice("pi4", "fp1")).ok());
  EXPECT_FALSE(db.GetPagingCost("fp1")->has_value());
  v1::PagingCost sd;
  sd.set_storage_path("/sd");
  sd.set_page_out_latency_s(2e-4);
  sd.set_page_out_throughput_bytes_per_s(2e7);
  sd.set_page_in_latency_s(1e-4);
  sd.set_page_in_throughput_bytes_per_s(4e7);
  sd.set_page_out_power_w(0.8);
  sd.set_page_in_power_w(0.6);
  sd.set_energy_source(v1::ENERGY_SOURCE_INTEGRATED);
  ASSERT_TRUE(db.PutPagingCost("fp1", sd).ok());
  EXPECT_TRUE(MessageDifferencer::Equals(**db.GetPagingCost("fp1"), sd));
  sd.set_page_in_latency_s(3e-4);
  ASSERT_TRUE(db.PutPagingCost("fp1", sd).ok());  // remeasured: replaces
  EXPECT_DOUBLE_EQ((*db.GetPagingCost("fp1"))->page_in_latency_s(), 3e-4);
  EXPECT_EQ(db.Info()->row_counts.at("paging_costs"), 1);
  EXPECT_EQ(db.PutPagingCost("unknown", sd).code(), ErrorCode::kNotFound);
  EXPECT_EQ(db.PutPagingCost("fp1", v1::PagingCost()).code(), ErrorCode::kInvalidArgument);
}

TEST_P(StoreTest, SchedulesRoundTripAndSupersede) {
  CostDb db = OpenOrDie();
  const auto table_id = PutPresetTable(db, Table("net", "a72", 3));
  ASSERT_TRUE(table_id.ok());
  v1::ScheduleRequest request;
  request.set_model("net");
  request.set_device("a72");
  request.set_cost_source("poet-flops");
  request.set_activation_budget_bytes(3000000);
  request.set_runtime_budget_multiple(1.2);
  const auto id = db.PutScheduleRequest(request);
  ASSERT_TRUE(id.ok());
  EXPECT_EQ(*db.PutScheduleRequest(request), *id);  // stored once
  v1::ScheduleRequest other = request;
  other.set_device("m0");
  const auto other_id = db.PutScheduleRequest(other);
  EXPECT_NE(*other_id, *id);

  v1::Schedule schedule;
  schedule.set_status(v1::Schedule::STATUS_OPTIMAL);
  *schedule.mutable_request() = request;
  schedule.mutable_energy()->set_total_j(7.88951);
  schedule.set_peak_ram_bytes(2999000);
  schedule.add_stages();
  const auto first = db.PutSchedule(*id, *table_id, schedule);
  ASSERT_TRUE(first.ok()) << first.status().message();
  schedule.set_status(v1::Schedule::STATUS_FEASIBLE);
  const auto second = db.PutSchedule(*id, *table_id, schedule);
  ASSERT_TRUE(second.ok());
  ASSERT_TRUE(db.PutSchedule(*other_id, 0, schedule).ok());
  EXPECT_TRUE(MessageDifferencer::Equals(*db.GetSchedule(*second), schedule));

  auto list = db.ListSchedules("net", "a72");
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->size(), 2u);
  EXPECT_EQ((*list)[0].id, *first);
  EXPECT_TRUE((*list)[0].superseded);
  EXPECT_FALSE((*list)[1].superseded);
  EXPECT_EQ((*list)[1].status, v1::Schedule::STATUS_FEASIBLE);
  EXPECT_EQ((*list)[1].cost_table_id, *table_id);
  EXPECT_DOUBLE_EQ((*list)[1].energy_j, 7.88951);
  EXPECT_TRUE(MessageDifferencer::Equals((*list)[1].request, request));
  EXPECT_EQ(db.ListSchedules()->size(), 3u);
  EXPECT_EQ(db.ListSchedules("", "m0")->size(), 1u);
  EXPECT_EQ(db.ListSchedules("net", "m0")->back().cost_table_id, 0);
  EXPECT_TRUE(db.ListSchedules("vgg16")->empty());
  auto requests = db.ListScheduleRequests();
  ASSERT_EQ(requests->size(), 2u);
  EXPECT_EQ((*requests)[0].first, *id);
  EXPECT_TRUE(MessageDifferencer::Equals((*requests)[1].second, other));

  EXPECT_EQ(db.GetSchedule(999).status().code(), ErrorCode::kNotFound);
  EXPECT_EQ(db.PutSchedule(999, 0, schedule).status().code(), ErrorCode::kNotFound);
  EXPECT_EQ(db.PutSchedule(*id, 999, schedule).status().code(), ErrorCode::kNotFound);
}

TEST_P(StoreTest, ReadOnlyModeRefusesEveryWrite) {
  if (!Postgres()) {
    EXPECT_EQ(CostDb::Open(path_, OpenMode::kReadOnly).status().code(), ErrorCode::kNotFound);
    std::ofstream(path_).close();
  }
  // An empty file or schema: not yet migrated, which a read-only open cannot do.
  EXPECT_EQ(CostDb::Open(path_, OpenMode::kReadOnly).status().code(), ErrorCode::kFailedPrecondition);
  {
    CostDb db = OpenOrDie();
    ASSERT_TRUE(db.UpsertDevice(MeasuredDevice("pi4", "fp1")).ok());
    ASSERT_TRUE(PutPresetTable(db, Table("net", "a72", 3)).ok());
  }
  const std::string before = StoreState();
  {
    CostDb db = OpenOrDie(OpenMode::kReadOnly);
    EXPECT_TRUE(db.GetCostTable(kKey).ok());
    v1::PagingCost paging;
    paging.set_storage_path("/sd");
    const std::vector<Status> writes = {
        db.UpsertDevice(MeasuredDevice("pi4", "fp2")).status(),
        db.PutModelGraph(Graph("x", 1)).status(),
        PutPresetTable(db, Table("net", "a72", 3)).status(),
        db.BeginRun("fp1", "measured").status(),
        db.FinishRun(1, RunStatus::kFailed),
        db.PutOpCost("fp1", 0, Conv(1)),
        db.PutPagingCost("fp1", paging),
        db.PutScheduleRequest(v1::ScheduleRequest()).status(),
        db.PutSchedule(1, 0, v1::Schedule()).status(),
    };
    for (const Status& status : writes) {
      EXPECT_EQ(status.code(), ErrorCode::kPermissionDenied) << status.message();
      EXPECT_THAT(status.message(), HasSubstr("opened read-only"));
    }
  }
  EXPECT_EQ(StoreState(), before);
}

// 8 KB of random bytes in the middle of a database: both modes refuse it at
// open with one line of advice, before anything is written on top of it.
TEST_F(CostDbTest, DamageIsFoundWhenTheFileIsOpened) {
  {
    CostDb db = OpenOrDie();
    for (int i = 0; i < 40; ++i) ASSERT_TRUE(PutPresetTable(db, Table("net" + std::to_string(i), "a72", 50, 1)).ok());
  }
  const auto size = std::filesystem::file_size(path_);
  ASSERT_GT(size, 3 * 8192u);
  {
    std::fstream file(path_, std::ios::in | std::ios::out | std::ios::binary);
    file.seekp(static_cast<std::streamoff>(size / 2));
    std::mt19937 random(7);
    for (int i = 0; i < 8192; ++i) file.put(static_cast<char>(random()));
  }
  ExpectRefusedUntouched(ErrorCode::kDataLoss, "is damaged");
  EXPECT_THAT(CostDb::Open(path_).status().message(), HasSubstr("restore it from a backup"));
}

TEST_F(CostDbTest, RefusesFilesThatAreNotSqliteUntouched) {
  for (const std::string& contents :
       {std::string("these are my notes, not a database\n"), std::string("x"), std::string(8192, 'z')}) {
    std::ofstream(path_, std::ios::trunc) << contents;
    ExpectRefusedUntouched(ErrorCode::kInvalidArgument,
                           "is not an edgecost database (not SQLite): pass another --db or move the file away");
    EXPECT_FALSE(fs::exists(path_ + "-wal"));
    EXPECT_FALSE(fs::exists(path_ + "-journal"));
  }
  fs::remove(path_);
  fs::create_directory(path_);
  EXPECT_EQ(CostDb::Open(path_).status().code(), ErrorCode::kInvalidArgument);
}

TEST_F(CostDbTest, RefusesANewerSchemaUntouched) {
  { ASSERT_TRUE(PutPresetTable(OpenOrDie(), Table("net", "a72", 3)).ok()); }
  SetUserVersion(kSchemaVersion + 98);
  ExpectRefusedUntouched(ErrorCode::kFailedPrecondition, "was written by a newer edgecost (schema " +
                                                             std::to_string(kSchemaVersion + 98) + " > " +
                                                             std::to_string(kSchemaVersion) + "): upgrade edgecost");
}

TEST_F(CostDbTest, RefusesAnotherProgramsSqliteDatabaseUntouched) {
  {
    auto raw = Db::Open(path_, Db::Access::kReadWrite, 1000);
    ASSERT_TRUE(raw->Exec("CREATE TABLE songs (title TEXT)").ok());
  }
  ExpectRefusedUntouched(ErrorCode::kInvalidArgument, "not an edgecost one");
}

TEST_F(CostDbTest, RefusesALocationThatCannotBeCreated) {
  const auto db = CostDb::Open("/proc/edgecost-test/costs.db");  // /proc takes no new files, even from root
  ASSERT_FALSE(db.ok());
  EXPECT_EQ(db.status().code(), ErrorCode::kPermissionDenied);
  EXPECT_THAT(db.status().message(), HasSubstr("--db"));
}

// Read-only files and folders. Root may write anything, so a root test run
// drops to `nobody` in a child process; everyone else just runs the checks there.
TEST_F(CostDbTest, ReadOnlyFileAndFolder) {
  { ASSERT_TRUE(PutPresetTable(OpenOrDie(), Table("net", "a72", 3)).ok()); }  // closed: no -wal/-shm left
  const std::string path = path_;
  const std::string writable_dir = (dir_ / "open").string();
  const std::string in_writable_dir = writable_dir + "/costs.db";
  fs::create_directory(writable_dir);
  fs::copy_file(path_, in_writable_dir);
  fs::permissions(in_writable_dir, fs::perms::owner_read | fs::perms::group_read | fs::perms::others_read);
  fs::permissions(writable_dir, fs::perms::all);
  fs::permissions(path_, fs::perms::owner_read | fs::perms::group_read | fs::perms::others_read);
  fs::permissions(dir_, fs::perms::owner_read | fs::perms::owner_exec | fs::perms::group_read | fs::perms::group_exec |
                            fs::perms::others_read | fs::perms::others_exec);
  const test_support::FileSnapshot before = Snapshot(path_);
  const test_support::FileSnapshot before_writable_dir = Snapshot(in_writable_dir);

  const std::string result = InChild([&]() -> std::string {
    if (::geteuid() == 0) {
      const gid_t nobody = 65534;
      if (::setgroups(0, nullptr) != 0 || ::setgid(nobody) != 0 || ::setuid(nobody) != 0) return "skip";
    }
    const auto in_folder = CostDb::Open(path, OpenMode::kReadWrite);
    if (in_folder.ok() || in_folder.status().code() != ErrorCode::kPermissionDenied ||
        in_folder.status().message().find("is read-only") == std::string::npos) {
      return "read-only folder: " + in_folder.status().message();
    }
    const auto file = CostDb::Open(in_writable_dir, OpenMode::kReadWrite);
    if (file.ok() || file.status().code() != ErrorCode::kPermissionDenied ||
        file.status().message().find("chmod u+w") == std::string::npos) {
      return "read-only file: " + file.status().message();
    }
    // Reading still works, even where SQLite cannot create its -shm file.
    for (const std::string& readable : {path, in_writable_dir}) {
      auto reader = CostDb::Open(readable, OpenMode::kReadOnly);
      if (!reader.ok()) return "reading " + readable + ": " + reader.status().message();
      auto table = reader->GetCostTable(kKey);
      if (!table.ok() || table->costs_size() != 3) return "reading " + readable + ": " + table.status().message();
    }
    return "";
  });
  if (result == "skip") GTEST_SKIP() << "cannot drop root privileges here";
  EXPECT_EQ(result, "");
  EXPECT_TRUE(Snapshot(path_) == before);
  EXPECT_TRUE(Snapshot(in_writable_dir) == before_writable_dir);
}

TEST_F(CostDbTest, LockedDatabaseFailsClearlyAndChangesNothing) {
  { ASSERT_TRUE(PutPresetTable(OpenOrDie(), Table("net", "a72", 3)).ok()); }
  int ready[2], release[2];
  ASSERT_EQ(::pipe(ready), 0);
  ASSERT_EQ(::pipe(release), 0);
  const pid_t child = ::fork();
  if (child == 0) {  // another process holds the write lock until told to let go
    auto raw = Db::Open(path_, Db::Access::kReadWrite, 1000);
    if (!raw.ok() || !raw->Exec("BEGIN IMMEDIATE").ok()) ::_exit(1);
    char byte = 1;
    if (::write(ready[1], &byte, 1) != 1 || ::read(release[0], &byte, 1) != 1) ::_exit(1);
    ::_exit(raw->Exec("ROLLBACK").ok() ? 0 : 1);
  }
  char byte = 0;
  ASSERT_EQ(::read(ready[0], &byte, 1), 1);
  const test_support::FileSnapshot before = Snapshot(path_);
  const test_support::FileSnapshot wal_before = Snapshot(path_ + "-wal");
  {
    auto db = CostDb::Open(path_, OpenOptions{.mode = OpenMode::kReadWrite, .busy_timeout_ms = 50});
    ASSERT_TRUE(db.ok()) << db.status().message();  // already migrated: opening writes nothing
    const std::vector<Status> writes = {PutPresetTable(*db, Table("net", "a72", 3, 2)).status(),
                                        db->UpsertDevice(MeasuredDevice("pi4", "fp1")).status()};
    for (const Status& status : writes) {
      EXPECT_EQ(status.code(), ErrorCode::kUnavailable);
      EXPECT_EQ(status.message(),
                path_ + " is locked by another process (pid " + std::to_string(child) + "); retry when it finishes");
    }
    EXPECT_EQ(db->GetCostTable(kKey)->note(), "generation 0");  // reading still works
  }
  EXPECT_TRUE(Snapshot(path_) == before);
  EXPECT_TRUE(Snapshot(path_ + "-wal") == wal_before);
  ASSERT_EQ(::write(release[1], &byte, 1), 1);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

// A reader in another process always sees whole cost tables while a writer adds them.
TEST_P(StoreTest, ConcurrentReaderSeesOnlyCompleteTables) {
  constexpr int kNodes = 200;
  constexpr int kTables = 30;
  { ASSERT_TRUE(OpenOrDie().UpsertDevice(MeasuredDevice("pi4", "fp1")).ok()); }
  const pid_t child = ::fork();
  if (child == 0) {
    auto db = CostDb::Open(path_);
    if (!db.ok()) ::_exit(1);
    for (int generation = 1; generation <= kTables; ++generation) {
      if (!PutPresetTable(*db, Table("net", "a72", kNodes, generation)).ok()) ::_exit(2);
      if (!db->PutOpCost("fp1", 0, Conv(generation)).ok()) ::_exit(3);
    }
    ::_exit(0);
  }
  CostDb reader = OpenOrDie(OpenMode::kReadOnly);
  int status = 0;
  int tables_seen = 0;
  for (bool writer_done = false; !writer_done;) {
    writer_done = ::waitpid(child, &status, WNOHANG) == child;
    auto info = reader.Info();
    ASSERT_TRUE(info.ok()) << info.status().message();
    ASSERT_EQ(info->row_counts.at("node_costs"), kNodes * info->row_counts.at("cost_tables"));
    auto table = reader.GetCostTable(kKey);
    if (!table.ok()) {
      ASSERT_EQ(table.status().code(), ErrorCode::kNotFound) << table.status().message();
      continue;
    }
    ++tables_seen;
    ASSERT_EQ(table->costs_size(), kNodes);
    const int generation = std::stoi(table->note().substr(std::string("generation ").size()));
    for (const v1::NodeCost& cost : table->costs()) ASSERT_EQ(std::floor(cost.runtime_s()), generation);
  }
  ASSERT_TRUE(WIFEXITED(status)) << "writer crashed";
  EXPECT_EQ(WEXITSTATUS(status), 0) << "writer failed";
  EXPECT_GT(tables_seen, 0);
  EXPECT_EQ(reader.Info()->row_counts.at("cost_tables"), kTables);
  EXPECT_EQ(reader.GetCostTable(kKey)->note(), "generation " + std::to_string(kTables));
}

// A writer killed mid-transaction leaves only whole tables behind.
// One daemon per PostgreSQL store, as the lock file makes it for SQLite: the lock lives as long as
// the connection holding it, and another store (schema) is not affected.
TEST_P(StoreTest, APostgresStoreLockIsHeldWhileItsConnectionLives) {
  if (!Postgres()) GTEST_SKIP() << "an SQLite file's lock is daemon/db_lock's lock file, tested in the daemon suite";
  {
    auto first = LockPostgresStore(path_, "daemon");
    ASSERT_TRUE(first.ok()) << first.status().message();
    const auto second = LockPostgresStore(path_, "daemon");
    ASSERT_FALSE(second.ok());
    EXPECT_EQ(second.status().code(), ErrorCode::kFailedPrecondition);
    EXPECT_THAT(second.status().message(), HasSubstr("another edgecost daemon"));
    EXPECT_TRUE(OpenOrDie().UpsertDevice(PresetDevice("a72")).ok()) << "the lock must not stop writers";
  }
  EXPECT_TRUE(LockPostgresStore(path_, "daemon").ok()) << "released with its connection";
}

TEST_P(StoreTest, KilledWriterLeavesNothingHalfWritten) {
  constexpr int kNodes = 500;
  { ASSERT_TRUE(OpenOrDie().PutModelGraph(Graph("net", kNodes)).ok()); }
  const pid_t child = ::fork();
  if (child == 0) {
    auto db = CostDb::Open(path_);
    for (int generation = 1; db.ok(); ++generation) (void)PutPresetTable(*db, Table("net", "a72", kNodes, generation));
    ::_exit(1);
  }
  {
    CostDb reader = OpenOrDie(OpenMode::kReadOnly);
    // Wait until the writer has committed a table and is likely inside the next one.
    while (reader.Info()->row_counts.at("cost_tables") == 0) {
      ASSERT_EQ(::waitpid(child, nullptr, WNOHANG), 0) << "the writer stopped early";
    }
  }
  ASSERT_EQ(::kill(child, SIGKILL), 0);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  if (!Postgres()) {
    auto raw = Db::Open(path_, Db::Access::kReadOnly, 1000);
    auto check = raw->Prepare("PRAGMA integrity_check");
    ASSERT_TRUE(*check->Step());
    EXPECT_EQ(check->Text(0), "ok");
  }
  CostDb db = OpenOrDie();
  const auto info = db.Info();
  EXPECT_GT(info->row_counts.at("cost_tables"), 0);
  EXPECT_EQ(info->row_counts.at("node_costs"), kNodes * info->row_counts.at("cost_tables"));
  EXPECT_EQ(db.GetCostTable(kKey)->costs_size(), kNodes);
}

}  // namespace
}  // namespace edgecost::costdb

namespace edgecost::costdb {
namespace {

// A store's URL may carry a password: it never reaches a message, a log line or `db info`.
TEST(PostgresUrl, PasswordsAreNeverShown) {
  EXPECT_TRUE(IsPostgresUrl("postgresql://h/db"));
  EXPECT_TRUE(IsPostgresUrl("postgres://h/db"));
  EXPECT_FALSE(IsPostgresUrl("/var/lib/edgecost/postgresql://x.db"));
  EXPECT_EQ(RedactUrl("postgresql://u:s3cret@h:5432/db?sslmode=require"), "postgresql://u:***@h:5432/db?sslmode=require");
  EXPECT_EQ(RedactUrl("postgresql://h/db?user=u&password=s3cret&sslmode=require"),
            "postgresql://h/db?user=u&password=***&sslmode=require");
  EXPECT_EQ(RedactUrl("postgresql://u@h/db"), "postgresql://u@h/db");
  for (const std::string url : {"postgresql://u:s3cret@/db?host=/nonexistent-edgecost-dir",
                                "postgresql:///db?host=/nonexistent-edgecost-dir&password=s3cret"}) {
    const auto db = CostDb::Open(url, OpenOptions{.mode = OpenMode::kReadWrite, .busy_timeout_ms = 0});
    ASSERT_FALSE(db.ok());
    EXPECT_EQ(db.status().code(), ErrorCode::kUnavailable) << db.status().message();
    EXPECT_THAT(db.status().message(), HasSubstr("is unreachable"));
    EXPECT_THAT(db.status().message(), ::testing::Not(HasSubstr("s3cret")));
  }
}

}  // namespace
}  // namespace edgecost::costdb
