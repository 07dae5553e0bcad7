// A test database holding measured-looking cost tables of the zoo's linear model (the a72 preset's
// costs under a device's name), for the look-ups that pick a table by device, batch and threads.
#pragma once

#include <optional>
#include <string>

#include <gtest/gtest.h>

#include "costdb/costdb.h"
#include "graph/cost_source.h"
#include "graph/resolve.h"
#include "profiler/profile.h"
#include "tests/temp_dir.h"

namespace edgecost::service {

class MeasuredTablesTest : public edgecost::testing::TempDirTest {
 protected:
  void SetUp() override {
    edgecost::testing::TempDirTest::SetUp();
    auto db = costdb::CostDb::Open((dir_ / "edgecost.db").string());
    ASSERT_TRUE(db.ok()) << db.status().message();
    db_.emplace(std::move(*db));
  }

  // The linear model at `batch` with costs of `device` measured at `threads` (noted "tTHREADS").
  void Store(const std::string& device, uint32_t threads, int batch = 1) {
    v1::Device record;
    record.set_name(device);
    record.set_kind(v1::Device::KIND_MEASURED);
    record.mutable_fingerprint()->set_hash("fp-" + device);
    ASSERT_TRUE(db_->UpsertDevice(record).ok());
    graph::GraphSpec spec;
    spec.model_or_file = "linear";
    spec.batch_size = batch;
    auto table = graph::LoadCostTable(spec, "a72", graph::kPoetFlopsSource);
    ASSERT_TRUE(table.ok()) << table.status().message();
    table->set_device(device);
    table->set_fingerprint_hash("fp-" + device);
    table->set_cost_source(profiler::kMeasuredSource);
    table->set_threads(threads);
    table->set_note("t" + std::to_string(threads));
    ASSERT_TRUE(db_->PutCostTable(*table).ok());
  }

  std::optional<costdb::CostDb> db_;
};

}  // namespace edgecost::service
