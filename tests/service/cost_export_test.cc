// `db export` and `db import` carry each op's energy per domain: in the cost
// and in the receiving database's op_domain_energy rows, through the JSON file.
#include "service/cost_export.h"

#include <sqlite3.h>

#include <cmath>
#include <functional>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "costdb/costdb.h"
#include "graph/cost_source.h"
#include "graph/resolve.h"
#include "proto/json.h"
#include "tests/temp_dir.h"

namespace edgecost::service {
namespace {

class CostExport : public edgecost::testing::TempDirTest {};

v1::OpCost Cost(const std::string& key) {
  v1::OpCost cost;
  cost.mutable_signature()->set_key(key);
  cost.mutable_runtime()->set_median_s(0.01);
  cost.set_energy_source(v1::ENERGY_SOURCE_COUNTER);
  cost.set_energy_probe("rapl intel-rapl:0");
  return cost;
}

void AddDomain(v1::OpCost& cost, const std::string& name, const std::string& inside, double energy_j, double idle_w) {
  v1::DomainEnergy& d = *cost.add_domains();
  d.set_domain(name);
  d.set_inside(inside);
  d.set_energy_j(energy_j);
  d.set_idle_power_w(idle_w);
  d.set_dynamic_energy_j(energy_j - idle_w * cost.runtime().median_s());
  if (inside.empty()) {
    cost.set_energy_j(cost.energy_j() + energy_j);
    cost.set_idle_power_w(cost.idle_power_w() + idle_w);
    cost.set_dynamic_energy_j(cost.dynamic_energy_j() + d.dynamic_energy_j());
  }
}

TEST_F(CostExport, DomainsRoundTripThroughTheFile) {
  auto board = costdb::CostDb::Open((dir_ / "board.db").string());
  ASSERT_TRUE(board.ok()) << board.status().message();
  v1::Device device;
  device.set_name("board");
  device.set_kind(v1::Device::KIND_MEASURED);
  device.mutable_fingerprint()->set_hash("fp-board");
  ASSERT_TRUE(board->UpsertDevice(device).ok());
  v1::OpCost measured = Cost("conv");
  AddDomain(measured, "package-0", "", 0.09, 3.0);
  AddDomain(measured, "core", "package-0", 0.05, 0.5);
  AddDomain(measured, "dram", "", 0.02, 1.0);
  ASSERT_TRUE(board->PutOpCost("fp-board", 0, measured).ok());
  v1::OpCost estimated = Cost("relu");  // an estimate has no domains
  estimated.set_energy_source(v1::ENERGY_SOURCE_ESTIMATED);
  estimated.set_energy_j(0.001);
  ASSERT_TRUE(board->PutOpCost("fp-board", 0, estimated).ok());

  auto exported = ExportDevice(*board, "board");
  ASSERT_TRUE(exported.ok()) << exported.status().message();
  auto json = proto::ToJson(*exported);
  ASSERT_TRUE(json.ok());
  v1::CostExport read;
  ASSERT_TRUE(proto::FromJson(*json, &read).ok());

  auto host = costdb::CostDb::Open((dir_ / "host.db").string());
  ASSERT_TRUE(host.ok());
  auto imported = ImportDevice(*host, read, {});
  ASSERT_TRUE(imported.ok()) << imported.status().message();
  EXPECT_EQ(imported->op_costs, 2);

  auto conv = host->GetOpCost("fp-board", "conv");
  ASSERT_TRUE(conv.ok() && conv->has_value());
  ASSERT_EQ((*conv)->domains_size(), 3);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ((*conv)->domains(i).SerializeAsString(), measured.domains(i).SerializeAsString()) << i;
  }
  EXPECT_DOUBLE_EQ((*conv)->energy_j(), 0.09 + 0.02);  // package and dram; the core is inside the package
  auto rows = host->ListOpDomainEnergy("fp-board", "conv");
  ASSERT_TRUE(rows.ok()) << rows.status().message();
  ASSERT_EQ(rows->size(), 3u);
  EXPECT_EQ((*rows)[0].domain(), "core");
  EXPECT_EQ((*rows)[0].inside(), "package-0");
  EXPECT_DOUBLE_EQ((*rows)[0].energy_j(), 0.05);
  EXPECT_EQ((*rows)[1].domain(), "dram");
  EXPECT_DOUBLE_EQ((*rows)[1].idle_power_w(), 1.0);
  EXPECT_EQ((*rows)[2].domain(), "package-0");
  EXPECT_DOUBLE_EQ((*rows)[2].dynamic_energy_j(), 0.09 - 3.0 * 0.01);
  // Nothing stored for the estimate: no rows, never zeros.
  EXPECT_TRUE(host->ListOpDomainEnergy("fp-board", "relu")->empty());
  EXPECT_EQ((*host->GetOpCost("fp-board", "relu"))->domains_size(), 0);

  // Measured again without domains (an estimate now): the old rows go.
  v1::OpCost again = estimated;
  again.mutable_signature()->set_key("conv");
  ASSERT_TRUE(host->PutOpCost("fp-board", 0, again).ok());
  EXPECT_TRUE(host->ListOpDomainEnergy("fp-board", "conv")->empty());
}

// An export of "board" with two op costs and the cost tables of two models.
v1::CostExport BoardExport() {
  v1::CostExport exported;
  v1::Device& device = *exported.mutable_device();
  device.set_name("board");
  device.set_kind(v1::Device::KIND_MEASURED);
  device.mutable_fingerprint()->set_hash("fp-board");
  *exported.add_op_costs() = Cost("conv");
  *exported.add_op_costs() = Cost("relu");
  for (const char* model : {"linear", "resnet18_cifar"}) {
    graph::GraphSpec spec;
    spec.model_or_file = model;
    auto table = graph::LoadCostTable(spec, "a72", graph::kPoetFlopsSource);
    EXPECT_TRUE(table.ok()) << table.status().message();
    table->set_device("board");
    table->set_fingerprint_hash("fp-board");
    *exported.add_cost_tables() = *table;
  }
  return exported;
}

// Nothing of the board is in `db`: no device, no op costs, no cost table.
void ExpectNothingOfTheBoard(costdb::CostDb& db) {
  EXPECT_FALSE(db.GetDevice("board").ok());
  auto ops = db.ListOpCosts("fp-board");
  EXPECT_TRUE(!ops.ok() || ops->empty());
  auto tables = db.ListCostTables("board");
  EXPECT_TRUE(!tables.ok() || tables->empty());
}

TEST_F(CostExport, AnImportThatFailsMidWayLeavesNothing) {
  const std::string path = (dir_ / "host.db").string();
  ASSERT_TRUE(costdb::CostDb::Open(path).ok());
  // The second cost table fails as a full disk would, after the device, the op costs and one table.
  sqlite3* raw = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &raw), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(raw,
                         "CREATE TRIGGER second_table_fails BEFORE INSERT ON cost_tables "
                         "WHEN (SELECT count(*) FROM cost_tables) >= 1 BEGIN SELECT RAISE(ABORT, 'disk full'); END",
                         nullptr, nullptr, nullptr),
            SQLITE_OK);
  sqlite3_close(raw);
  auto host = costdb::CostDb::Open(path);
  ASSERT_TRUE(host.ok()) << host.status().message();
  auto imported = ImportDevice(*host, BoardExport(), {});
  ASSERT_FALSE(imported.ok());
  EXPECT_THAT(imported.status().message(), ::testing::HasSubstr("disk full"));
  ExpectNothingOfTheBoard(*host);
}

TEST_F(CostExport, AnExportWithANumberNoDeviceMeasuresIsRefusedWhole) {
  const std::vector<std::pair<std::string, std::function<void(v1::CostExport&)>>> poisons = {
      {"compute_j", [](v1::CostExport& e) { e.mutable_cost_tables(1)->mutable_costs(2)->set_compute_j(-5); }},
      {"runtime_s", [](v1::CostExport& e) { e.mutable_cost_tables(1)->mutable_costs(2)->set_runtime_s(std::nan("")); }},
      {"ram_bytes", [](v1::CostExport& e) { e.mutable_cost_tables(1)->mutable_costs(2)->set_ram_bytes(1ull << 63); }},
      {"energy_j", [](v1::CostExport& e) { e.mutable_op_costs(1)->set_energy_j(-1); }},
      {"median_s",
       [](v1::CostExport& e) { e.mutable_op_costs(1)->mutable_runtime()->set_median_s(HUGE_VAL); }},
      {"page_in_power_w",
       [](v1::CostExport& e) {
         e.mutable_paging()->set_storage_path("/mnt/sd");
         e.mutable_paging()->set_page_in_power_w(-3);
       }},
  };
  auto host = costdb::CostDb::Open((dir_ / "host.db").string());
  ASSERT_TRUE(host.ok());
  for (const auto& [field, poison] : poisons) {
    SCOPED_TRACE(field);
    v1::CostExport exported = BoardExport();
    poison(exported);
    auto imported = ImportDevice(*host, exported, {});
    ASSERT_FALSE(imported.ok());
    EXPECT_THAT(imported.status().message(), ::testing::HasSubstr(field));
    ExpectNothingOfTheBoard(*host);
  }
  EXPECT_TRUE(ImportDevice(*host, BoardExport(), {}).ok());
}

// A device with this host's name or fingerprint would pass for this host's own
// measurements (and a new fingerprint under its name for a hardware change).
TEST_F(CostExport, ThisHostsNameOrFingerprintNeedsReplace) {
  auto host = costdb::CostDb::Open((dir_ / "host.db").string());
  ASSERT_TRUE(host.ok());
  ImportOptions options;
  options.host.set_name("board");
  options.host.mutable_fingerprint()->set_hash("fp-host");
  auto by_name = ImportDevice(*host, BoardExport(), options);
  ASSERT_FALSE(by_name.ok());
  EXPECT_THAT(by_name.status().message(), ::testing::HasSubstr("has the name of this host"));
  EXPECT_THAT(by_name.status().message(), ::testing::HasSubstr("--replace"));
  options.host.set_name("this-host");
  options.host.mutable_fingerprint()->set_hash("fp-board");
  auto by_fingerprint = ImportDevice(*host, BoardExport(), options);
  ASSERT_FALSE(by_fingerprint.ok());
  EXPECT_THAT(by_fingerprint.status().message(), ::testing::HasSubstr("has this host's fingerprint"));
  ExpectNothingOfTheBoard(*host);
  options.replace = true;
  EXPECT_TRUE(ImportDevice(*host, BoardExport(), options).ok());
}

}  // namespace
}  // namespace edgecost::service
