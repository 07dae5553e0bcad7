// `edgecost bench daemon`: GetCostTable throughput and latency over loopback
// TCP at 1, 16 and 256 concurrent keep-alive connections, printed as figures.
#pragma once

#include <ostream>

#include "base/status.h"

namespace edgecost::daemon {

struct DaemonBenchOptions {
  double seconds_per_level = 3;
  int worker_threads = 4;
  bool protobuf = false;  // binary bodies instead of JSON
};

Status RunDaemonBenchmark(std::ostream& out, const DaemonBenchOptions& options);

}  // namespace edgecost::daemon
