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

v1::Trace ChromeTrace(const std::vector<std::string>& node_names, const std::vector<StepTrace>& steps,
                      const std::string& title) {
  nlohmann::json events = nlohmann::json::array();
  events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", 1}, {"tid", 1}, {"args", {{"name", "compute"}}}});
  events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", 1}, {"tid", 2}, {"args", {{"name", "paging I/O"}}}});
  for (const StepTrace& step : steps) {
    for (const TraceEvent& e : step.events) {
      const bool node_event =
          e.kind != TraceEvent::Kind::kUpdate && e.node >= 0 && e.node < static_cast<int>(node_names.size());
      const std::string name = node_event ? node_names[static_cast<size_t>(e.node)] : std::string("SGD update");
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
  v1::Trace out;
  out.set_events(static_cast<uint32_t>(events.size()));
  out.set_title(title);
  nlohmann::json trace = {{"traceEvents", std::move(events)},
                          {"displayTimeUnit", "ms"},
                          {"otherData", {{"title", title}, {"generator", "edgecost"}}}};
  // Names come from graph files: invalid UTF-8 is replaced rather than thrown on.
  out.set_trace_json(trace.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
  return out;
}

v1::Trace ChromeTrace(const v1::TrainingGraph& graph, const std::vector<StepTrace>& steps, const std::string& title) {
  std::vector<std::string> names;
  for (const v1::TrainingNode& node : graph.nodes()) names.push_back(node.name());
  return ChromeTrace(names, steps, title);
}

// The two enums list the same kinds in the same order.
static_assert(static_cast<int>(TraceEvent::Kind::kUpdate) == v1::StepEvent::KIND_UPDATE);

void ToProto(const std::vector<TraceEvent>& events, google::protobuf::RepeatedPtrField<v1::StepEvent>& out) {
  for (const TraceEvent& e : events) {
    v1::StepEvent& event = *out.Add();
    event.set_node(e.node);
    event.set_kind(static_cast<v1::StepEvent::Kind>(e.kind));
    event.set_start_s(e.start_s);
    event.set_duration_s(e.duration_s);
  }
}

std::vector<TraceEvent> FromProto(const google::protobuf::RepeatedPtrField<v1::StepEvent>& events) {
  std::vector<TraceEvent> out;
  for (const v1::StepEvent& e : events) {
    out.push_back({e.node(), static_cast<TraceEvent::Kind>(e.kind()), e.start_s(), e.duration_s()});
  }
  return out;
}

}  // namespace edgecost::train
