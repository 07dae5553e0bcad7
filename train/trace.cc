#include "train/trace.h"

#include <nlohmann/json.hpp>

namespace edgecost::train {
namespace {

const char* KindName(TraceEvent::Kind kind) {
  switch (kind) {
    case TraceEvent::Kind::kCompute:
      return "compute";
    case TraceEvent::Kind::kRecompute:
      return "recompute";
    case TraceEvent::Kind::kPageOut:
      return "page-out";
    case TraceEvent::Kind::kPageIn:
      return "page-in";
    case TraceEvent::Kind::kWait:
      return "wait for I/O";
    case TraceEvent::Kind::kUpdate:
      return "update";
  }
  return "?";
}

bool OnIoThread(TraceEvent::Kind kind) {
  return kind == TraceEvent::Kind::kPageOut || kind == TraceEvent::Kind::kPageIn;
}

}  // namespace

std::string ChromeTrace(const v1::TrainingGraph& graph, const std::vector<StepTrace>& steps) {
  nlohmann::json events = nlohmann::json::array();
  events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", 1}, {"tid", 1}, {"args", {{"name", "compute"}}}});
  events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", 1}, {"tid", 2}, {"args", {{"name", "paging I/O"}}}});
  for (const StepTrace& step : steps) {
    for (const TraceEvent& e : step.events) {
      const bool node_event = e.kind != TraceEvent::Kind::kUpdate && e.node >= 0 && e.node < graph.nodes_size();
      const std::string name = node_event ? graph.nodes(e.node).name() : std::string("SGD update");
      events.push_back(
          {{"name", e.kind == TraceEvent::Kind::kCompute ? name : std::string(KindName(e.kind)) + " " + name},
           {"cat", KindName(e.kind)},
           {"ph", "X"},
           {"ts", e.start_s * 1e6},
           {"dur", e.duration_s * 1e6},
           {"pid", 1},
           {"tid", OnIoThread(e.kind) ? 2 : 1},
           {"args", {{"step", step.step}, {"node", e.node}}}});
    }
  }
  nlohmann::json trace = {{"traceEvents", events}, {"displayTimeUnit", "ms"}};
  return trace.dump();
}

}  // namespace edgecost::train
