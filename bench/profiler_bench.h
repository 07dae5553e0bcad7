// `edgecost bench profiler`: total profiling time, run-to-run agreement and the
// measurement overhead, printed as figures (a benchmark, not a test).
#pragma once

#include <ostream>

#include "base/status.h"

namespace edgecost::profiler {

struct ProfilerBenchOptions {
  int threads = 0;  // 0: all cores
  bool include_resnet18 = true;
};

Status RunProfilerBenchmark(std::ostream& out, const ProfilerBenchOptions& options);

}  // namespace edgecost::profiler
