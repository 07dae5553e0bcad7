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

// `node_names[i]` names node i.
v1::Trace ChromeTrace(const std::vector<std::string>& node_names, const std::vector<StepTrace>& steps,
                      const std::string& title);
v1::Trace ChromeTrace(const v1::TrainingGraph& graph, const std::vector<StepTrace>& steps, const std::string& title);

// A step's events as a run record keeps them, and back.
void ToProto(const std::vector<TraceEvent>& events, google::protobuf::RepeatedPtrField<v1::StepEvent>& out);
std::vector<TraceEvent> FromProto(const google::protobuf::RepeatedPtrField<v1::StepEvent>& events);

}  // namespace edgecost::train
