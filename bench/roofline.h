// The roofline a training step is measured against: the work of a step from its
// training graph, the machine's measured peak (a oneDNN f32 GEMM) and memory
// bandwidth (a STREAM-like triad), and the share of the attainable FLOP/s a step
// reaches. `edgecost bench train --vs-pytorch` prints them next to each model.
#pragma once

#include <string>
#include <vector>

#include "base/status.h"
#include "proto/edgecost.pb.h"

namespace edgecost::bench {

// The work of one training step: every node executed once (the plain step).
struct StepWork {
  double flops = 0;
  // Bytes each node reads (its inputs' outputs and its parameters) and writes (its output):
  // the traffic of a step whose tensors do not stay in cache between nodes, an upper bound.
  double bytes = 0;
};
StepWork StepWorkOf(const v1::TrainingGraph& graph);

struct Machine {
  double peak_flops_per_s = 0;       // f32 GEMM, fastest of a few
  double bandwidth_bytes_per_s = 0;  // triad, fastest of a few
};

// The FLOP/s the roofline allows at `work`'s arithmetic intensity: min(peak, bandwidth x FLOPs per byte).
double AttainableFlopsPerS(const StepWork& work, const Machine& machine);
// The share of the attainable FLOP/s a step of `step_s` seconds reaches (0 when unknown).
double RooflineShare(const StepWork& work, const Machine& machine, double step_s);

// Measured here at `threads` oneDNN/OpenMP threads: a 1024^3 f32 matmul and a triad
// a[i] = b[i] + s * c[i] over arrays of `triad_bytes` each, far beyond the last-level cache.
double MeasurePeakFlopsPerS(int threads);
double MeasureBandwidthBytesPerS(int threads, size_t triad_bytes = size_t{128} << 20);

// What tests/graph/export_models.py --time prints: a `# blas PATH ...` line and `model median_s min_s` lines.
struct TorchTime {
  std::string model;
  double median_s = 0, fastest_s = 0;
};
struct TorchTimes {
  std::string version;            // from "# torch VERSION, ..."
  std::vector<std::string> blas;  // the libraries PyTorch's process mapped
  std::vector<TorchTime> models;
};
TorchTimes ParseTorchTimes(const std::string& output);
// "OpenBLAS (path)", "reference BLAS (path)", or "none" from the mapped libraries.
std::string DescribeBlas(const std::vector<std::string>& libraries);

}  // namespace edgecost::bench
