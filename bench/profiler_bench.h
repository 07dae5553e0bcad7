// `edgecost bench profiler`: total profiling time, run-to-run agreement and the
// measurement overhead; profiles taken while another process keeps one core
// busy against quiet ones. Printed as figures (a benchmark, not a test).
#pragma once

#include <ostream>

#include "base/status.h"

namespace edgecost::profiler {

struct ProfilerBenchOptions {
  int threads = 0;  // 0: all cores
  bool include_resnet18 = true;
  bool speed = true;  // profiling time, run-to-run agreement, overhead
  bool busy = true;   // quiet against one core busy, for linear and resnet18_cifar
};

Status RunProfilerBenchmark(std::ostream& out, const ProfilerBenchOptions& options);

}  // namespace edgecost::profiler
