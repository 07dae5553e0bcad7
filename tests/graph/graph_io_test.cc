#include "graph/graph_io.h"

#include <string>
#include <tuple>
#include <vector>

#include <google/protobuf/util/message_differencer.h>
#include <gtest/gtest.h>

#include "graph/cost_source.h"
#include "graph/derive.h"
#include "tests/test_paths.h"

namespace edgecost::graph {
namespace {

constexpr const char* kValid = R"({
  "format": "training-graph/v1", "model": "tiny", "platform": "a72", "cost_source": "poet-flops",
  "batch_size": 1, "param_bytes": 10,
  "nodes": [
    {"name": "a", "backward": false, "runtime_s": 1, "compute_j": 2, "ram_bytes": 100, "page_in_j": 0.1, "page_out_j": 0.2},
    {"name": "b", "backward": false, "runtime_s": 1, "compute_j": 2, "ram_bytes": 100, "page_in_j": 0.1, "page_out_j": 0.2},
    {"name": "c", "backward": true, "runtime_s": 1, "compute_j": 2, "ram_bytes": 100, "page_in_j": 0.1, "page_out_j": 0.2}
  ],
  "edges": [[0, 1], [1, 2], [0, 2]]
})";

std::string Replace(std::string text, const std::string& from, const std::string& to) {
  const size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  return text.replace(at, from.size(), to);
}

void ExpectError(const std::string& text, const std::string& fragment) {
  const Result<v1::CostTable> table = ParseCostTableJson(text, "bad.json");
  ASSERT_FALSE(table.ok()) << "accepted a file that should fail with: " << fragment;
  EXPECT_EQ(table.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(table.status().message().find(fragment), std::string::npos) << table.status().message();
  EXPECT_NE(table.status().message().find("bad.json"), std::string::npos);
}

TEST(TrainingGraphJson, ParsesNodesEdgesAndCosts) {
  const Result<v1::CostTable> table = ParseCostTableJson(kValid, "tiny.json");
  ASSERT_TRUE(table.ok()) << table.status().message();
  EXPECT_EQ(table->graph().model(), "tiny");
  EXPECT_EQ(table->device(), "a72");
  ASSERT_EQ(table->graph().nodes_size(), 3);
  EXPECT_EQ(table->graph().nodes(2).phase(), v1::PHASE_BACKWARD);
  EXPECT_EQ(table->graph().nodes(2).inputs_size(), 2);
  EXPECT_DOUBLE_EQ(table->costs(1).page_out_j(), 0.2);
}

TEST(TrainingGraphJson, RoundTripsAZooCostTable) {
  auto source = MakePoetFlopsSource("a72");
  const auto table = (*source)->CostTableFor(*ZooTrainingGraph("resnet18_cifar", 1, Derivation::kPoet));
  ASSERT_TRUE(table.ok());
  const std::string text = CostTableToTrainingGraphJson(*table);
  const Result<v1::CostTable> again = ParseCostTableJson(text, "roundtrip.json");
  ASSERT_TRUE(again.ok()) << again.status().message();
  ASSERT_EQ(again->costs_size(), table->costs_size());
  for (int i = 0; i < table->costs_size(); ++i) {
    EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(again->costs(i), table->costs(i))) << i;
    EXPECT_EQ(again->graph().nodes(i).name(), table->graph().nodes(i).name());
    EXPECT_EQ(std::vector<uint32_t>(again->graph().nodes(i).inputs().begin(), again->graph().nodes(i).inputs().end()),
              std::vector<uint32_t>(table->graph().nodes(i).inputs().begin(), table->graph().nodes(i).inputs().end()));
  }
  // Writing it again gives the same bytes.
  EXPECT_EQ(CostTableToTrainingGraphJson(*again), text);
}

TEST(TrainingGraphJson, ReadsTheReferenceFiles) {
  const Result<v1::CostTable> table = ReadCostTableFile(testing::PoetInstance("resnet18_cifar", "a72"));
  ASSERT_TRUE(table.ok()) << table.status().message();
  EXPECT_EQ(table->graph().nodes_size(), 133);
  EXPECT_EQ(table->cost_source(), "poet-flops");
}

TEST(TrainingGraphJson, BadFilesNameTheFieldAndNode) {
  ExpectError(Replace(kValid, R"("ram_bytes": 100, "page_in_j": 0.1, "page_out_j": 0.2},
    {"name": "c")",
                      R"("page_in_j": 0.1, "page_out_j": 0.2},
    {"name": "c")"),
              "node 1 ('b'): missing field 'ram_bytes'");
  ExpectError(Replace(kValid, R"("name": "c", "backward": true, "runtime_s": 1, "compute_j": 2)",
                      R"("name": "c", "backward": true, "runtime_s": 1, "compute_j": -2)"),
              "node 2 ('c'): 'compute_j' is -2");
  ExpectError(Replace(kValid, "[0, 2]]", "[0, 7]]"), "node 7 does not exist");
  ExpectError(Replace(kValid, "[0, 2]]", "[2, 0]]"), "cycle");
  ExpectError(Replace(kValid, "\"training-graph/v1\"", "\"training-graph/v9\""), "unknown format");
  ExpectError("{\"format\": \"training-graph/v1\"", "not valid JSON");
  ExpectError(Replace(kValid, R"("backward": false, "runtime_s": 1)", R"("backward": "no", "runtime_s": 1)"),
              "'backward' must be true or false");
}

TEST(NodeLinkJson, ImportsCheckmateGraphsWithComputeCostOnly) {
  // Ids out of order: the importer derives a topological order.
  const char* text = R"({"directed": true, "multigraph": false, "graph": {"name": "chain"},
    "nodes": [{"id": 7, "name": "loss_grad", "backward": true, "cost_cpu": 3, "cost_ram": 8},
              {"id": 2, "name": "fwd", "backward": false, "cost_cpu": 5, "cost_ram": 16}],
    "links": [{"source": 2, "target": 7}]})";
  const Result<v1::CostTable> table = ParseCostTableJson(text, "chain.json");
  ASSERT_TRUE(table.ok()) << table.status().message();
  ASSERT_EQ(table->graph().nodes_size(), 2);
  EXPECT_EQ(table->graph().nodes(0).name(), "fwd");
  EXPECT_EQ(table->graph().nodes(1).inputs(0), 0u);
  EXPECT_DOUBLE_EQ(table->costs(0).runtime_s(), 5);
  EXPECT_DOUBLE_EQ(table->costs(0).compute_j(), 5);  // energy in proportion to compute
  EXPECT_EQ(table->costs(0).ram_bytes(), 16u);
  EXPECT_DOUBLE_EQ(table->costs(1).page_in_j(), kImportedPagingCostRatio * 3);
  EXPECT_EQ(table->cost_source(), "imported:networkx-node-link");
  EXPECT_NE(table->note().find("cost_cpu"), std::string::npos);
}

TEST(NodeLinkJson, RejectsCyclesAndUnknownIds) {
  ExpectError(R"({"nodes": [{"id": 1, "cost_cpu": 1, "cost_ram": 1}, {"id": 2, "cost_cpu": 1, "cost_ram": 1}],
                 "links": [{"source": 1, "target": 2}, {"source": 2, "target": 1}]})",
              "cycle");
  ExpectError(R"({"nodes": [{"id": 1, "cost_cpu": 1, "cost_ram": 1}], "links": [{"source": 1, "target": 9}]})",
              "target 9 is not a node id");
  ExpectError(R"({"nodes": [{"id": 1, "name": "x", "cost_ram": 1}], "links": []})",
              "node 0 ('x'): missing field 'cost_cpu'");
}

TEST(GraphIo, SizesAndNumbersAreCheckedWhereTheyEnter) {
  for (const auto& [from, to, error] : std::vector<std::tuple<std::string, std::string, std::string>>{
           {R"("ram_bytes": 100, "page_in_j": 0.1, "page_out_j": 0.2},
    {"name": "b")",
            R"("ram_bytes": 1e19, "page_in_j": 0.1, "page_out_j": 0.2},
    {"name": "b")",
            "node 0 ('a'): 'ram_bytes' is 1e+19 bytes; at most 1099511627776"},
           {R"("param_bytes": 10)", R"("param_bytes": 18446744073709551616)", "'param_bytes' is 1.84467e+19 bytes"},
           {R"("batch_size": 1)", R"("batch_size": 4294967296)", "top level: 'batch_size'"},
           {R"("compute_j": 2)", R"("compute_j": 1e400)", "number overflow parsing '1e400'"},
           {R"("compute_j": 2)", R"("compute_j": -1e400)", "number overflow"},
           {"[0, 1]", "[0, 4294967296]", "node 4294967296 does not exist"}}) {
    const auto table = ParseCostTableJson(Replace(kValid, from, to), "g.json");
    ASSERT_FALSE(table.ok()) << to;
    EXPECT_NE(table.status().message().find(error), std::string::npos) << table.status().message();
  }
  // A fractional byte count rounds up; a whole terabyte is still a tensor.
  auto rounded = ParseCostTableJson(Replace(kValid, R"("ram_bytes": 100)", R"("ram_bytes": 99.5)"), "g.json");
  ASSERT_TRUE(rounded.ok()) << rounded.status().message();
  EXPECT_EQ(rounded->costs(0).ram_bytes(), 100u);
  EXPECT_TRUE(
      ParseCostTableJson(Replace(kValid, R"("ram_bytes": 100)", R"("ram_bytes": 1099511627776)"), "g.json").ok());
}

}  // namespace
}  // namespace edgecost::graph
