// `db export` and `db import` carry each op's energy per domain: in the cost
// and in the receiving database's op_domain_energy rows, through the JSON file.
#include "service/cost_export.h"

#include <gtest/gtest.h>

#include "costdb/costdb.h"
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
  auto imported = ImportDevice(*host, read);
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

}  // namespace
}  // namespace edgecost::service
