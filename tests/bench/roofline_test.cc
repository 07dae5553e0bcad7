// The arithmetic of `bench train --vs-pytorch`'s roofline and its reading of
// tests/graph/export_models.py --time; the measurements themselves are figures, not tested.
#include "bench/roofline.h"

#include <gtest/gtest.h>

namespace edgecost::bench {
namespace {

v1::TrainingGraph TwoNodes() {
  v1::TrainingGraph graph;
  v1::TrainingNode* input = graph.add_nodes();
  input->set_output_bytes(100);
  v1::TrainingNode* linear = graph.add_nodes();
  linear->set_output_bytes(40);
  linear->set_flops(1000);
  linear->set_param_count(10);
  linear->add_inputs(0);
  return graph;
}

TEST(StepWork, CountsWhatEachNodeReadsAndWrites) {
  const StepWork work = StepWorkOf(TwoNodes());
  EXPECT_DOUBLE_EQ(work.flops, 1000);
  // input writes 100; linear reads 100 and 10 float parameters, writes 40.
  EXPECT_DOUBLE_EQ(work.bytes, 100 + 100 + 40 + 40);
}

TEST(Roofline, MemoryBoundBelowTheRidgeComputeBoundAbove) {
  const Machine machine{/*peak_flops_per_s=*/100e9, /*bandwidth_bytes_per_s=*/10e9};  // ridge at 10 FLOP/B
  const StepWork memory_bound{/*flops=*/1e9, /*bytes=*/1e9};                          // 1 FLOP/B
  EXPECT_DOUBLE_EQ(AttainableFlopsPerS(memory_bound, machine), 10e9);
  const StepWork compute_bound{/*flops=*/100e9, /*bytes=*/1e9};  // 100 FLOP/B
  EXPECT_DOUBLE_EQ(AttainableFlopsPerS(compute_bound, machine), 100e9);
  // 1 GFLOP in 0.2 s: 5 GFLOP/s of the 10 the bandwidth allows.
  EXPECT_DOUBLE_EQ(RooflineShare(memory_bound, machine, 0.2), 0.5);
  EXPECT_EQ(RooflineShare(memory_bound, machine, 0), 0);  // not measured
  EXPECT_EQ(RooflineShare(StepWork{}, machine, 0.2), 0);
}

TEST(TorchTimes, ParsesExportModelsTimeOutput) {
  const TorchTimes times = ParseTorchTimes(
      "# torch 1.13.0a0, BLAS generic, 1 thread(s)\n"
      "# blas /usr/lib/x86_64-linux-gnu/openblas-pthread/libblas.so.3 "
      "/usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblasp-r0.3.21.so\n"
      "resnet18_tv 0.068648 0.064197\n"
      "some warning from torch\n"
      "mnasnet0_5 0.012788 0.008841\n");
  EXPECT_EQ(times.version, "1.13.0a0");
  ASSERT_EQ(times.models.size(), 2u);
  EXPECT_EQ(times.models[0].model, "resnet18_tv");
  EXPECT_DOUBLE_EQ(times.models[0].median_s, 0.068648);
  EXPECT_DOUBLE_EQ(times.models[0].fastest_s, 0.064197);
  EXPECT_EQ(times.models[1].model, "mnasnet0_5");
  EXPECT_EQ(DescribeBlas(times.blas), "OpenBLAS (/usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblasp-r0.3.21.so)");
  EXPECT_EQ(DescribeBlas({"/usr/lib/x86_64-linux-gnu/blas/libblas.so.3.11.0"}),
            "reference BLAS (/usr/lib/x86_64-linux-gnu/blas/libblas.so.3.11.0)");
  EXPECT_EQ(DescribeBlas({}), "none found");
}

}  // namespace
}  // namespace edgecost::bench
