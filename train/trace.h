// Chrome Trace Event JSON of training steps (opens in Perfetto and chrome://tracing):
// one complete event ("ph": "X") per node execution on the compute thread, per
// page-out and page-in on the I/O thread, and per wait of computation for I/O.
#pragma once

#include <string>
#include <vector>

#include "proto/edgecost.pb.h"
#include "train/executor.h"

namespace edgecost::train {

struct StepTrace {
  int step = 0;
  std::vector<TraceEvent> events;
};

std::string ChromeTrace(const v1::TrainingGraph& graph, const std::vector<StepTrace>& steps);

}  // namespace edgecost::train
