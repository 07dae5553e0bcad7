// `edgecost bench daemon`: GetCostTable throughput and latency over loopback
// TCP at 1, 16 and 256 concurrent keep-alive connections, a preset table next
// to a measured one at 64, and ListModels and GET / with a large stored model,
// printed as figures.
#pragma once

#include <ostream>
#include <string>

#include "base/status.h"

namespace edgecost::daemon {

struct DaemonBenchOptions {
  double seconds_per_level = 3;
  int worker_threads = 4;
  bool protobuf = false;     // binary bodies instead of JSON
  int chain_nodes = 110000;  // the stored ONNX chain that ListModels and GET / list
};

Status RunDaemonBenchmark(std::ostream& out, const DaemonBenchOptions& options);

// An ONNX model of `nodes` Relu after one another: a few bytes per node, a
// model that is cheap to send and slow to import (the listing tests use it too).
std::string OnnxChain(int nodes);

}  // namespace edgecost::daemon
