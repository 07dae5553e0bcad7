// The zoo with the poet derivation and the poet-flops source must reproduce every
// reference instance that POET's own code produced: the same nodes, edges, bytes and costs.
#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>

#include "graph/cost_source.h"
#include "graph/derive.h"
#include "graph/graph_io.h"
#include "graph/zoo.h"
#include "tests/test_paths.h"

namespace edgecost::graph {
namespace {

struct Instance {
  std::string model;
  std::string platform;
  int nodes;
};

std::string Name(const ::testing::TestParamInfo<Instance>& info) {
  return info.param.model + "_" + info.param.platform;
}

std::vector<Instance> AllInstances() {
  const std::vector<std::pair<std::string, int>> models = {
      {"linear", 27},    {"vgg16", 81},           {"vgg16_cifar", 81}, {"resnet18", 127},
      {"resnet50", 335}, {"resnet18_cifar", 133}, {"bert", 195},       {"transformer", 19}};
  std::vector<Instance> out;
  for (const auto& [model, nodes] : models) {
    for (const char* platform : {"m0", "m4", "a72", "a72nocache"}) out.push_back({model, platform, nodes});
  }
  return out;
}

::testing::AssertionResult NearRelative(double expected, double actual) {
  const double scale = std::max(std::fabs(expected), std::fabs(actual));
  if (std::fabs(expected - actual) <= 1e-9 * scale) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "expected " << expected << ", got " << actual;
}

// Edges as (source name, target name) pairs, a multiset (POET lists some edges twice).
std::vector<std::pair<std::string, std::string>> NamedEdges(const v1::TrainingGraph& graph) {
  std::vector<std::pair<std::string, std::string>> edges;
  for (const v1::TrainingNode& node : graph.nodes()) {
    for (uint32_t input : node.inputs()) edges.emplace_back(graph.nodes(input).name(), node.name());
  }
  std::sort(edges.begin(), edges.end());
  return edges;
}

class ZooParity : public ::testing::TestWithParam<Instance> {};

TEST_P(ZooParity, MatchesPoetNodeForNode) {
  const Instance& instance = GetParam();
  const Result<v1::CostTable> reference = ReadCostTableFile(testing::PoetInstance(instance.model, instance.platform));
  ASSERT_TRUE(reference.ok()) << reference.status().message();

  const Result<v1::TrainingGraph> graph = ZooTrainingGraph(instance.model, 1, Derivation::kPoet);
  ASSERT_TRUE(graph.ok()) << graph.status().message();
  auto source = MakePoetFlopsSource(instance.platform);
  ASSERT_TRUE(source.ok());
  const Result<v1::CostTable> ours = (*source)->CostTableFor(*graph);
  ASSERT_TRUE(ours.ok()) << ours.status().message();

  ASSERT_EQ(ours->graph().nodes_size(), instance.nodes);
  ASSERT_EQ(reference->graph().nodes_size(), instance.nodes);
  EXPECT_EQ(ours->graph().param_bytes(), reference->graph().param_bytes());
  EXPECT_EQ(NamedEdges(ours->graph()), NamedEdges(reference->graph()));

  std::map<std::string, int> reference_index;
  for (const v1::TrainingNode& node : reference->graph().nodes()) reference_index[node.name()] = node.index();
  for (const v1::TrainingNode& node : ours->graph().nodes()) {
    SCOPED_TRACE(node.name());
    ASSERT_TRUE(reference_index.count(node.name()));
    const v1::NodeCost& want = reference->costs(reference_index[node.name()]);
    const v1::NodeCost& got = ours->costs(node.index());
    EXPECT_EQ(got.ram_bytes(), want.ram_bytes());
    EXPECT_EQ(node.phase() == v1::PHASE_BACKWARD,
              reference->graph().nodes(reference_index[node.name()]).phase() == v1::PHASE_BACKWARD);
    EXPECT_TRUE(NearRelative(want.runtime_s(), got.runtime_s()));
    EXPECT_TRUE(NearRelative(want.compute_j(), got.compute_j()));
    EXPECT_TRUE(NearRelative(want.page_in_j(), got.page_in_j()));
    EXPECT_TRUE(NearRelative(want.page_out_j(), got.page_out_j()));
  }
}

INSTANTIATE_TEST_SUITE_P(AllReferenceInstances, ZooParity, ::testing::ValuesIn(AllInstances()), Name);

TEST(PoetFlops, JetsonHasPagingConstantsOnlyAndSaysSo) {
  auto source = MakePoetFlopsSource("jetsontx2");
  ASSERT_TRUE(source.ok());
  const Result<v1::CostTable> table = (*source)->CostTableFor(*ZooTrainingGraph("linear", 1, Derivation::kPoet));
  ASSERT_FALSE(table.ok());
  EXPECT_EQ(table.status().code(), ErrorCode::kFailedPrecondition);
  EXPECT_NE(table.status().message().find("profile"), std::string::npos);
}

TEST(PoetFlops, UnknownPresetListsTheKnownOnes) {
  auto source = MakePoetFlopsSource("z80");
  ASSERT_FALSE(source.ok());
  EXPECT_NE(source.status().message().find("a72nocache"), std::string::npos);
}

TEST(Zoo, BatchSizeScalesActivations) {
  const auto one = ZooTrainingGraph("resnet18_cifar", 1, Derivation::kPoet);
  const auto eight = ZooTrainingGraph("resnet18_cifar", 8, Derivation::kPoet);
  ASSERT_TRUE(one.ok() && eight.ok());
  ASSERT_EQ(one->nodes_size(), eight->nodes_size());
  EXPECT_EQ(eight->nodes(0).output_bytes(), 8 * one->nodes(0).output_bytes());
  EXPECT_EQ(eight->param_bytes(), one->param_bytes());
  EXPECT_FALSE(ZooTrainingGraph("bert", 2, Derivation::kPoet).ok());
  EXPECT_FALSE(ZooTrainingGraph("resnet18_cifar", 0, Derivation::kPoet).ok());
  EXPECT_EQ(ZooTrainingGraph("alexnet", 1, Derivation::kPoet).status().code(), ErrorCode::kNotFound);
}

}  // namespace
}  // namespace edgecost::graph
