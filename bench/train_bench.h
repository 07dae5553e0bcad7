// `edgecost bench train`: resnet18_cifar trained for real under three schedules
// (everything kept, 1.2 MB at 1.5x, heavy paging) from costs measured here:
// peak activation bytes against the plan, step time against the isolated-op
// (`measured`) and in-step (`measured-in-step`) predictions, and the same step in
// PyTorch (Debian's python3-torch) side by side. Figures, not assertions; the
// machine may be shared, so timings are noisy.
//
// With vs_pytorch instead: edgecost's plain step and PyTorch's on the same models
// (exported from the same torch modules with the same weights by
// tests/graph/export_models.py), batch and threads, fastest and median of N steps;
// PyTorch on OpenBLAS (Debian's libopenblas0-pthread, selected for its process
// alone through LD_LIBRARY_PATH, OPENBLAS_NUM_THREADS = the threads compared), with
// each step's FLOPs, bytes and share of the machine's measured roofline.
#pragma once

#include <ostream>
#include <string>
#include <vector>

#include "base/status.h"

namespace edgecost::service {

struct TrainBenchOptions {
  std::vector<int> threads = {1};  // the schedules use the first; vs_pytorch each (0: all cores)
  std::vector<int> batch_sizes = {2};  // the schedules use the first; vs_pytorch each
  int steps = 20;              // per schedule; vs_pytorch: steps timed after 2 warm-up steps (the CLI: 15 unless set)
  double min_window_s = 0.05;  // profiling window per op
  std::string python = "/usr/bin/python3";
  bool vs_pytorch = false;
  // vs_pytorch: models tests/graph/export_models.py exports (issue 32's table).
  std::vector<std::string> models = {"resnet18_tv", "mobilenet_v2", "mnasnet0_5", "efficientnet_b0",
                                     "transformer_encoder"};
};

Status RunTrainBenchmark(std::ostream& out, const TrainBenchOptions& options);

}  // namespace edgecost::service
