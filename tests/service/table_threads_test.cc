// Cost tables per compute thread count (issue 27): a look-up reads the table of
// the count asked, states which one it chose when none was asked, and refuses a
// count without a table while others have one, naming them.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "costdb/costdb.h"
#include "graph/cost_source.h"
#include "graph/resolve.h"
#include "profiler/profile.h"
#include "service/cost_export.h"
#include "service/cost_tables.h"
#include "tests/service/measured_tables.h"

namespace edgecost::service {
namespace {

using ::testing::HasSubstr;

class TableThreads : public MeasuredTablesTest {
 protected:
  Result<v1::CostTable> Lookup(const std::string& device, uint32_t threads) {
    v1::GetCostTableRequest request;
    request.set_model("linear");
    request.set_device(device);
    request.set_threads(threads);
    return ResolveCostTable(&*db_, request);
  }
};

TEST_F(TableThreads, EachCountIsReadAndTheDefaultIsStated) {
  Store("board", 2);
  Store("board", 1);  // profiled at 1 thread after 2: both stay current
  auto one = Lookup("board", 1);
  ASSERT_TRUE(one.ok()) << one.status().message();
  EXPECT_EQ(one->threads(), 1u);
  EXPECT_EQ(one->note(), "t1");
  auto two = Lookup("board", 2);
  ASSERT_TRUE(two.ok()) << two.status().message();
  EXPECT_EQ(two->note(), "t2");

  // Another device, no count asked: the most, and the table says so.
  auto most = Lookup("board", 0);
  ASSERT_TRUE(most.ok()) << most.status().message();
  EXPECT_EQ(most->threads(), 2u);
  EXPECT_THAT(most->note(), HasSubstr("the most of the tables stored (1 thread, 2 threads)"));

  auto missing = Lookup("board", 4);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), ErrorCode::kFailedPrecondition);
  EXPECT_THAT(missing.status().message(), HasSubstr("at 4 threads"));
  EXPECT_THAT(missing.status().message(), HasSubstr("tables at 1 thread, 2 threads"));
  EXPECT_THAT(missing.status().message(), HasSubstr("--threads 4"));
}

TEST_F(TableThreads, TheOnlyTableOfAnotherDeviceIsItsDefault) {
  Store("board", 1);
  auto only = Lookup("board", 0);
  ASSERT_TRUE(only.ok()) << only.status().message();
  EXPECT_EQ(only->threads(), 1u);
  EXPECT_EQ(only->note(), "t1");  // nothing to choose between: nothing stated
}

// This device's default is all its cores; a table at another count is not taken silently.
TEST_F(TableThreads, ThisDeviceDefaultsToAllCoresAndRefusesAnotherCount) {
  Store(profiler::ThisDeviceName(), 1000);
  auto refused = Lookup("this", 0);
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(refused.status().message(), HasSubstr("(all cores of this device)"));
  EXPECT_THAT(refused.status().message(), HasSubstr("tables at 1000 threads"));
  EXPECT_TRUE(Lookup("this", 1000).ok());
}

TEST_F(TableThreads, SolvingRecordsTheCountOfItsTable) {
  Store("board", 1);
  Store("board", 2);
  v1::ScheduleRequest request;
  request.set_model("linear");
  request.set_device("board");
  request.set_cost_source(profiler::kMeasuredSource);
  request.set_activation_budget_bytes(1ull << 30);
  request.set_runtime_budget_multiple(2);
  request.set_time_limit_s(5);
  request.set_solver_threads(2);  // not the table's
  request.set_compute_threads(1);
  auto solved = SolveRequest(&*db_, request, /*store=*/true);
  ASSERT_TRUE(solved.ok()) << solved.status().message();
  EXPECT_EQ(solved->table.note(), "t1");
  EXPECT_EQ(solved->schedule.request().compute_threads(), 1u);
  auto view = LoadStoredSchedule(*db_, solved->schedule_id);
  ASSERT_TRUE(view.ok()) << view.status().message();
  EXPECT_EQ(view->table.threads(), 1u);

  request.set_compute_threads(0);  // as stated: the most
  solved = SolveRequest(&*db_, request, /*store=*/false);
  ASSERT_TRUE(solved.ok()) << solved.status().message();
  EXPECT_EQ(solved->schedule.request().compute_threads(), 2u);
}

TEST_F(TableThreads, ExportAndImportCarryTheCount) {
  Store("board", 1);
  Store("board", 2);
  auto exported = ExportDevice(*db_, "board");
  ASSERT_TRUE(exported.ok()) << exported.status().message();
  ASSERT_EQ(exported->cost_tables_size(), 2);
  // An export written before tables carried their count: the op keys still say it.
  v1::CostTable& old = *exported->mutable_cost_tables(1);
  ASSERT_EQ(old.threads(), 2u);
  old.clear_threads();
  for (v1::NodeCost& cost : *old.mutable_costs()) cost.set_op_key("relu/fwd/in=1/out=1/f32/onednn/t2");

  auto host = costdb::CostDb::Open((dir_ / "host.db").string());
  ASSERT_TRUE(host.ok());
  auto imported = ImportDevice(*host, *exported, {});
  ASSERT_TRUE(imported.ok()) << imported.status().message();
  EXPECT_EQ(imported->cost_tables, 2);
  auto tables = host->ListCostTables("board");
  ASSERT_TRUE(tables.ok());
  ASSERT_EQ(tables->size(), 2u);
  EXPECT_EQ((*tables)[0].key.threads, 1u);
  EXPECT_EQ((*tables)[1].key.threads, 2u);
}

// ScheduleRequest.node_runtime_s (the PyTorch bridge's times on its own kernels) replaces each node's
// runtime, its energy kept at the power the table states; a list of the wrong length is refused.
TEST(CallerRuntimes, ReplaceTheTablesAtEachNodesPower) {
  v1::ScheduleRequest request;
  request.set_model("linear");
  request.set_device("a72");
  auto table = CostTableForRequest(nullptr, request);
  ASSERT_TRUE(table.ok()) << table.status().message();
  for (int i = 0; i < table->costs_size(); ++i) request.add_node_runtime_s(0.001 * (i + 1));
  auto timed = CostTableForRequest(nullptr, request);
  ASSERT_TRUE(timed.ok()) << timed.status().message();
  for (int i = 0; i < table->costs_size(); ++i) {
    const v1::NodeCost& before = table->costs(i);
    const v1::NodeCost& after = timed->costs(i);
    EXPECT_DOUBLE_EQ(after.runtime_s(), 0.001 * (i + 1));
    if (before.runtime_s() > 0) {
      EXPECT_NEAR(after.compute_j() / after.runtime_s(), before.compute_j() / before.runtime_s(), 1e-9);
    }
    EXPECT_EQ(after.ram_bytes(), before.ram_bytes());
  }
  EXPECT_THAT(timed->note(), HasSubstr("runtimes are the caller's"));
  request.add_node_runtime_s(1.0);
  auto refused = CostTableForRequest(nullptr, request);
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(refused.status().message(), HasSubstr("one time each in node order"));
  request.mutable_node_runtime_s()->RemoveLast();
  request.set_node_runtime_s(0, -1.0);
  EXPECT_FALSE(CostTableForRequest(nullptr, request).ok());
}

}  // namespace
}  // namespace edgecost::service
