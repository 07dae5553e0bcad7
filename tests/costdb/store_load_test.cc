// One PostgreSQL store under a fleet: 50 agents profile-writing and reading at once for a bounded
// time, every record arriving exactly once; and PostgreSQL stopped mid-write and started again,
// writes failing clearly, resuming, nothing half-written or doubled.
//
// The load test prints the store's figures (writes/s, latency p50/p99, bytes per device);
// EDGECOST_STORE_LOAD_SECONDS runs it longer as a benchmark (default 5 s).
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "costdb/costdb.h"
#include "costdb/postgres.h"
#include "tests/costdb/test_support.h"

namespace edgecost::costdb {
namespace {

using Clock = std::chrono::steady_clock;
using test_support::MeasuredDevice;
using test_support::Table;
using ::testing::AnyOf;
using ::testing::HasSubstr;

constexpr int kAgents = 50;
constexpr int kOpsPerRun = 5;
constexpr int kTableNodes = 20;

std::string WithSchema(const std::string& url, const std::string& schema) {
  return url + (url.find('?') == std::string::npos ? "?" : "&") + "options=-csearch_path%3D" + schema;
}

v1::OpCost Op(const std::string& key, double median_s) {
  v1::OpCost cost;
  cost.mutable_signature()->set_kind("conv2d");
  cost.mutable_signature()->set_key(key);
  cost.mutable_runtime()->set_median_s(median_s);
  cost.mutable_runtime()->set_repetitions(31);
  cost.set_energy_j(median_s * 3);
  cost.set_energy_source(v1::ENERGY_SOURCE_COUNTER);
  return cost;
}

Status StatusOf(const Status& s) { return s; }
template <typename T>
Status StatusOf(const Result<T>& r) {
  return r.status();
}

// Retries what the store reports as transient (unreachable, locked, a conflict): the records are
// identified by content, so writing one again is harmless.
template <typename Write>
auto Retrying(Write write, int* retries) {
  for (int attempt = 0;; ++attempt) {
    auto result = write();
    if (result.ok() || StatusOf(result).code() != ErrorCode::kUnavailable || attempt >= 50) return result;
    ++*retries;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

class StoreLoadTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* url = std::getenv("EDGECOST_TEST_PG_URL");
    if (!url || !*url) {
      GTEST_SKIP() << "EDGECOST_TEST_PG_URL is not set: no PostgreSQL to load (scripts/test starts one with "
                      "scripts/pg_test_server)";
    }
    base_url_ = url;
    schema_ = "load" + std::to_string(::getpid());
    auto admin = OpenPostgres(base_url_, false, 5000);
    ASSERT_TRUE(admin.ok()) << admin.status().message();
    ASSERT_TRUE(admin->Exec("DROP SCHEMA IF EXISTS " + schema_ + " CASCADE; CREATE SCHEMA " + schema_).ok());
    url_ = WithSchema(base_url_, schema_);
  }
  void TearDown() override {
    if (schema_.empty()) return;
    auto admin = OpenPostgres(base_url_, false, 5000);
    if (admin.ok()) (void)admin->Exec("DROP SCHEMA IF EXISTS " + schema_ + " CASCADE");
  }

  void RunLoad(bool batched);

  std::string base_url_, schema_, url_;
};

struct AgentTally {
  int iterations = 0;  // complete profile-writes: a run with its op costs, a cost table, a schedule
  int retries = 0;
  int reads = 0;
  std::vector<double> write_latency_s;  // one per write call
  std::string error;
};

// Each agent writes its profile records one transaction each, or (`batched`) a whole profile-write
// (run, op costs, cost table, schedule) in one transaction, as CostDb::BeginWrite lets it.
void StoreLoadTest::RunLoad(bool batched) {
  const char* seconds_env = std::getenv("EDGECOST_STORE_LOAD_SECONDS");
  const double seconds = seconds_env ? std::max(1.0, std::atof(seconds_env)) : 4.0;
  int64_t empty_bytes = 0;  // the migrated, empty schema: tables and indexes before any record
  {
    auto migrated = CostDb::Open(url_);  // migrate once, not 50 times at once
    ASSERT_TRUE(migrated.ok()) << migrated.status().message();
    empty_bytes = migrated->Info()->file_size_bytes;
  }

  std::vector<AgentTally> tallies(kAgents);
  std::atomic<bool> stop{false};
  const auto started = Clock::now();
  std::vector<std::thread> agents;
  for (int a = 0; a < kAgents; ++a) {
    agents.emplace_back([&, a] {
      AgentTally& tally = tallies[a];
      auto opened = CostDb::Open(url_);
      if (!opened.ok()) {
        tally.error = opened.status().message();
        return;
      }
      CostDb& db = *opened;
      const std::string device = "agent" + std::to_string(a);
      const std::string fingerprint = "fp" + std::to_string(a);
      auto timed = [&](auto write) {
        if (batched) return write();  // inside the batch's transaction: the batch is timed and retried whole
        const auto begin = Clock::now();
        auto result = Retrying(write, &tally.retries);
        tally.write_latency_s.push_back(std::chrono::duration<double>(Clock::now() - begin).count());
        return result;
      };
      auto check = [&](const auto& result, const char* what) {
        if (StatusOf(result).ok()) return true;
        tally.error = std::string(what) + ": " + std::string(StatusOf(result).message());
        return false;
      };
      if (!check(timed([&] { return db.UpsertDevice(MeasuredDevice(device, fingerprint)); }), "device")) return;
      for (int i = 0; !stop.load(); ++i) {
        const auto batch_begin = Clock::now();
        std::optional<Transaction> batch;
        if (batched) {
          auto tx = db.BeginWrite();
          if (!check(tx, "batch")) return;
          batch.emplace(std::move(*tx));
        }
        auto run = timed([&] { return db.BeginRun(fingerprint, "measured", "net"); });
        if (!check(run, "run")) return;
        for (int k = 0; k < kOpsPerRun; ++k) {
          const std::string key = "op/" + std::to_string(i) + "/" + std::to_string(k);
          if (!check(timed([&] { return db.PutOpCost(fingerprint, *run, Op(key, 1e-3 * (k + 1))); }), "op")) return;
        }
        if (!check(timed([&] { return db.FinishRun(*run, RunStatus::kComplete); }), "finish")) return;
        const std::string model = "m" + std::to_string(i);
        const auto table = timed([&] { return db.PutCostTable(Table(model, device, kTableNodes, i, fingerprint)); });
        if (!check(table, "cost table")) return;
        v1::ScheduleRequest request;
        request.set_model(model);
        request.set_device(device);
        request.set_cost_source("measured");
        const auto request_id = timed([&] { return db.PutScheduleRequest(request); });
        if (!check(request_id, "schedule request")) return;
        v1::Schedule schedule;
        schedule.set_status(v1::Schedule::STATUS_OPTIMAL);
        schedule.mutable_energy()->set_total_j(1.0 + i);
        if (!check(timed([&] { return db.PutSchedule(*request_id, *table, schedule); }), "schedule")) return;
        if (batched) {
          if (!check(batch->Commit(), "commit")) return;
          tally.write_latency_s.push_back(std::chrono::duration<double>(Clock::now() - batch_begin).count());
        }
        ++tally.iterations;
        // Solve's side of the store: another agent's newest table and op costs, by its fingerprint.
        const int other = (a + 1 + i) % kAgents;
        CostTableKey key{"m0", "agent" + std::to_string(other), "measured", 1, "poet", "all"};
        const auto read = db.GetCostTable(key);
        if (!read.ok() && read.status().code() != ErrorCode::kNotFound) {
          tally.error = "read: " + std::string(read.status().message());
          return;
        }
        if (!db.ListOpCosts("fp" + std::to_string(other)).ok()) {
          tally.error = "read op costs";
          return;
        }
        ++tally.reads;
      }
    });
  }
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  stop = true;
  for (std::thread& t : agents) t.join();
  const double elapsed_s = std::chrono::duration<double>(Clock::now() - started).count();

  std::vector<double> latencies;
  int iterations = 0, retries = 0, reads = 0;
  for (int a = 0; a < kAgents; ++a) {
    EXPECT_EQ(tallies[a].error, "") << "agent " << a;
    EXPECT_GT(tallies[a].iterations, 0) << "agent " << a << " never completed a profile-write";
    iterations += tallies[a].iterations;
    retries += tallies[a].retries;
    reads += tallies[a].reads;
    latencies.insert(latencies.end(), tallies[a].write_latency_s.begin(), tallies[a].write_latency_s.end());
  }
  ASSERT_FALSE(latencies.empty());

  // Exactly once: every agent's records are there, none twice.
  auto db = CostDb::Open(url_, OpenMode::kReadOnly);
  ASSERT_TRUE(db.ok()) << db.status().message();
  auto info = db->Info();
  ASSERT_TRUE(info.ok()) << info.status().message();
  EXPECT_EQ(info->row_counts.at("devices"), kAgents);
  EXPECT_EQ(info->row_counts.at("fingerprints"), kAgents);
  EXPECT_EQ(info->row_counts.at("runs"), iterations);
  EXPECT_EQ(info->row_counts.at("op_costs"), iterations * kOpsPerRun);
  EXPECT_EQ(info->row_counts.at("cost_tables"), iterations);
  EXPECT_EQ(info->row_counts.at("node_costs"), iterations * kTableNodes);
  EXPECT_EQ(info->row_counts.at("schedule_requests"), iterations);
  EXPECT_EQ(info->row_counts.at("schedules"), iterations);
  for (int a = 0; a < kAgents; ++a) {
    const std::string fingerprint = "fp" + std::to_string(a);
    auto ops = db->ListOpCosts(fingerprint);
    ASSERT_TRUE(ops.ok());
    std::set<std::string> keys;
    for (const v1::OpCost& op : *ops) keys.insert(op.signature().key());
    EXPECT_EQ(keys.size(), ops->size()) << fingerprint;
    EXPECT_EQ(static_cast<int>(ops->size()), tallies[a].iterations * kOpsPerRun) << fingerprint;
    auto tables = db->ListCostTables("agent" + std::to_string(a));
    ASSERT_TRUE(tables.ok());
    EXPECT_EQ(static_cast<int>(tables->size()), tallies[a].iterations) << "one current table per model";
  }

  std::sort(latencies.begin(), latencies.end());
  const auto percentile = [&](double p) { return latencies[static_cast<size_t>(p * (latencies.size() - 1))]; };
  constexpr int kRecordsPerIteration = 2 + kOpsPerRun + 1 + 2;  // run, finish, op costs, table, request, schedule
  const int records = kAgents + iterations * kRecordsPerIteration;
  std::printf(
      "store load%s: %d agents, %.1f s: %d records written (%.0f/s) in %zu transactions (%.0f/s), %d profile-writes, "
      "%d reads, %d retries; transaction latency p50 %.1f ms, p99 %.1f ms; store %.2f MB (%.2f MB empty), "
      "%.1f KB per device, %.2f KB per profile-write\n",
      batched ? " (batched)" : "", kAgents, elapsed_s, records, records / elapsed_s, latencies.size(),
      static_cast<double>(latencies.size()) / elapsed_s, iterations, reads, retries, percentile(0.5) * 1e3,
      percentile(0.99) * 1e3, static_cast<double>(info->file_size_bytes) / 1e6, static_cast<double>(empty_bytes) / 1e6,
      static_cast<double>(info->file_size_bytes - empty_bytes) / kAgents / 1e3,
      static_cast<double>(info->file_size_bytes - empty_bytes) / std::max(1, iterations) / 1e3);
}

TEST_F(StoreLoadTest, FiftyAgentsWriteAndReadAndEveryRecordArrivesOnce) { RunLoad(/*batched=*/false); }

TEST_F(StoreLoadTest, FiftyAgentsWritingWholeProfilesPerTransaction) { RunLoad(/*batched=*/true); }

// A private cluster (stopping the shared one would fail the other tests): a writer stores cost
// tables and op costs while PostgreSQL is stopped (fast shutdown, as a crash or a failover looks to
// clients) and started again.
TEST(StoreFaultTest, PostgresStoppedMidWriteFailsClearlyResumesAndHalfWritesNothing) {
  if (!std::filesystem::exists("scripts/pg_test_server") || ::access("/usr/lib/postgresql", F_OK) != 0) {
    GTEST_SKIP() << "needs scripts/pg_test_server (run from the source root) and Debian's postgresql server";
  }
  char folder_template[] = "/tmp/edgecost-fault-XXXXXX";
  ASSERT_NE(::mkdtemp(folder_template), nullptr);
  const std::string folder = folder_template;
  std::filesystem::permissions(folder, std::filesystem::perms::owner_all | std::filesystem::perms::group_exec |
                                           std::filesystem::perms::others_exec);
  const std::string server = "scripts/pg_test_server";
  const auto run = [&](const std::string& action) {
    return std::system((server + " " + action + " " + folder + "/pg >" + folder + "/" + action + ".out 2>&1").c_str());
  };
  ASSERT_EQ(run("start"), 0) << "the test cluster did not start";
  struct Cleanup {
    std::function<void()> f;
    ~Cleanup() { f(); }
  } cleanup{[&] {
    (void)run("stop");
    std::filesystem::remove_all(folder);
  }};
  const std::string url = "postgresql://edgecost@/edgecost?host=" + folder + "/pg";
  constexpr int kNodes = 200;
  {
    auto db = CostDb::Open(url);
    ASSERT_TRUE(db.ok()) << db.status().message();
    ASSERT_TRUE(db->UpsertDevice(MeasuredDevice("pi4", "fp1")).ok());
  }

  std::atomic<bool> stop{false};
  std::atomic<int> acknowledged{0};
  std::mutex mutex;
  std::vector<std::pair<ErrorCode, std::string>> errors;
  std::set<int> stored;  // generations whose table and op cost the store acknowledged
  std::thread writer([&] {
    // A short reconnect window, so that the outage is seen as errors rather than waited out.
    std::optional<CostDb> db;
    for (int generation = 0; !stop.load();) {
      if (!db) {
        auto opened = CostDb::Open(url, OpenOptions{.mode = OpenMode::kReadWrite, .busy_timeout_ms = 200});
        if (!opened.ok()) {
          std::lock_guard lock(mutex);
          errors.emplace_back(opened.status().code(), opened.status().message());
          std::this_thread::sleep_for(std::chrono::milliseconds(50));
          continue;
        }
        db.emplace(std::move(*opened));
      }
      Status status =
          db->PutCostTable(Table("g" + std::to_string(generation), "pi4", kNodes, generation, "fp1")).status();
      if (status.ok()) status = db->PutOpCost("fp1", 0, Op("op/" + std::to_string(generation), 1e-3));
      if (!status.ok()) {
        std::lock_guard lock(mutex);
        errors.emplace_back(status.code(), status.message());
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        continue;  // the same generation again: resumed, not skipped
      }
      {
        std::lock_guard lock(mutex);
        stored.insert(generation);
      }
      ++acknowledged;
      ++generation;
    }
  });
  const auto wait_for = [&](int count) {
    const auto deadline = Clock::now() + std::chrono::seconds(20);
    while (acknowledged.load() < count && Clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
  };
  wait_for(5);
  ASSERT_GE(acknowledged.load(), 5) << "the writer made no progress";
  ASSERT_EQ(run("stop"), 0);
  const int before_outage = acknowledged.load();
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  const int during_outage = acknowledged.load() - before_outage;
  ASSERT_EQ(run("start"), 0) << "the test cluster did not start again";
  wait_for(acknowledged.load() + 5);
  stop = true;
  writer.join();

  EXPECT_EQ(during_outage, 0) << "writes acknowledged while the server was down";
  EXPECT_GE(acknowledged.load(), before_outage + 5) << "the writer did not resume";
  ASSERT_FALSE(errors.empty()) << "the outage went unnoticed";
  for (const auto& [code, error] : errors) {
    EXPECT_EQ(code, ErrorCode::kUnavailable) << error;
    EXPECT_THAT(error, AnyOf(HasSubstr("unreachable"), HasSubstr("lost"))) << error;
  }

  auto db = CostDb::Open(url, OpenMode::kReadOnly);
  ASSERT_TRUE(db.ok()) << db.status().message();
  auto info = db->Info();
  ASSERT_TRUE(info.ok());
  // Nothing half-written: every table has all its nodes.
  EXPECT_EQ(info->row_counts.at("node_costs"), kNodes * info->row_counts.at("cost_tables"));
  // Nothing doubled: one current table per generation, one op cost per key, and all acknowledged ones there.
  auto tables = db->ListCostTables("pi4");
  ASSERT_TRUE(tables.ok());
  std::map<std::string, int> current;
  for (const StoredCostTable& t : *tables) ++current[t.key.model];
  for (const auto& [model, count] : current) EXPECT_EQ(count, 1) << model;
  auto ops = db->ListOpCosts("fp1");
  ASSERT_TRUE(ops.ok());
  std::set<std::string> keys;
  for (const v1::OpCost& op : *ops) keys.insert(op.signature().key());
  EXPECT_EQ(keys.size(), ops->size());
  for (int generation : stored) {
    EXPECT_TRUE(current.count("g" + std::to_string(generation))) << generation;
    EXPECT_TRUE(keys.count("op/" + std::to_string(generation))) << generation;
  }
  // At most the one write in flight when the server stopped may be stored without its acknowledgement.
  EXPECT_LE(current.size(), stored.size() + 1);
  std::printf(
      "store fault: %d writes acknowledged, %zu failed clearly during the outage, then resumed; "
      "%zu tables, none half-written or doubled\n",
      acknowledged.load(), errors.size(), current.size());
}

}  // namespace
}  // namespace edgecost::costdb
