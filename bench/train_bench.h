// `edgecost bench train`: resnet18_cifar trained for real under three schedules
// (everything kept, 1.2 MB at 1.5x, heavy paging) from costs measured here:
// peak activation bytes against the plan, step time against the isolated-op
// (`measured`) and in-step (`measured-in-step`) predictions, and the same step in
// PyTorch (Debian's python3-torch) side by side. Figures, not assertions; the
// machine may be shared, so timings are noisy.
#pragma once

#include <ostream>
#include <string>

#include "base/status.h"

namespace edgecost::service {

struct TrainBenchOptions {
  int threads = 1;
  int batch_size = 2;
  int steps = 20;
  double min_window_s = 0.05;  // profiling window per op
  std::string python = "/usr/bin/python3";
};

Status RunTrainBenchmark(std::ostream& out, const TrainBenchOptions& options);

}  // namespace edgecost::service
