// An independent check of Chrome Trace Event JSON, as Perfetto UI and
// chrome://tracing read it: the object form with traceEvents; every event has
// its required fields for its phase; timestamps never go backwards within a
// track (a thread's slices and marks, a process's counter); slices on one
// track nest properly. Returns what is wrong, or an empty string.
#pragma once

#include <map>
#include <string>
#include <tuple>
#include <vector>

#include <nlohmann/json.hpp>

namespace edgecost::testing {

struct TraceStats {
  std::map<std::string, int> slices_by_category;  // "X" events
  std::map<std::string, int> marks_by_category;   // "i" events
  int counters = 0;
  int metadata = 0;
};

inline std::string CheckChromeTrace(const std::string& text, TraceStats* stats = nullptr) {
  nlohmann::json trace;
  try {
    trace = nlohmann::json::parse(text);
  } catch (const std::exception& e) {
    return std::string("not JSON: ") + e.what();
  }
  if (!trace.is_object() || !trace.contains("traceEvents") || !trace["traceEvents"].is_array()) {
    return "no traceEvents array";
  }
  TraceStats local;
  TraceStats& s = stats ? *stats : local;
  std::map<std::pair<int64_t, int64_t>, double> last_ts;                 // per thread track
  std::map<std::pair<int64_t, std::string>, double> last_counter_ts;     // per counter track
  std::map<std::pair<int64_t, int64_t>, std::vector<double>> open_ends;  // slice ends per thread, innermost last
  int index = 0;
  for (const nlohmann::json& e : trace["traceEvents"]) {
    const std::string where = "event " + std::to_string(index++) + " " + e.dump().substr(0, 160);
    if (!e.is_object()) return where + ": not an object";
    for (const char* field : {"name", "ph", "pid"}) {
      if (!e.contains(field)) return where + ": no " + field;
    }
    if (!e["name"].is_string() || !e["ph"].is_string() || !e["pid"].is_number_integer()) return where + ": wrong types";
    const std::string ph = e["ph"];
    if (ph == "M") {
      if (!e.contains("args") || !e["args"].is_object()) return where + ": metadata without args";
      ++s.metadata;
      continue;
    }
    if (!e.contains("ts") || !e["ts"].is_number()) return where + ": no numeric ts";
    const double ts = e["ts"];
    if (!(ts >= 0)) return where + ": negative ts";
    const int64_t pid = e["pid"];
    if (ph == "C") {
      if (!e.contains("args") || !e["args"].is_object() || e["args"].empty()) return where + ": counter without values";
      for (const auto& [key, value] : e["args"].items()) {
        if (!value.is_number()) return where + ": counter value " + key + " is not a number";
      }
      double& last = last_counter_ts[{pid, e["name"]}];
      if (ts < last) return where + ": counter goes back in time";
      last = ts;
      ++s.counters;
      continue;
    }
    if (ph != "X" && ph != "i") return where + ": unexpected phase " + ph;
    if (!e.contains("tid") || !e["tid"].is_number_integer()) return where + ": no tid";
    if (!e.contains("cat") && ph == "X") return where + ": slice without a category";
    const std::pair<int64_t, int64_t> track{pid, e["tid"].get<int64_t>()};
    auto it = last_ts.find(track);
    if (it != last_ts.end() && ts < it->second) return where + ": goes back in time on its track";
    last_ts[track] = ts;
    std::vector<double>& ends = open_ends[track];
    while (!ends.empty() && ends.back() <= ts + 1e-6) ends.pop_back();  // ends where the next begins
    const std::string category = e.value("cat", "");
    if (ph == "i") {
      ++s.marks_by_category[category];
      continue;
    }
    if (!e.contains("dur") || !e["dur"].is_number() || !(e["dur"].get<double>() >= 0)) return where + ": bad dur";
    const double end = ts + e["dur"].get<double>();
    // Allow for rounding in the microsecond conversion.
    if (!ends.empty() && end > ends.back() + 1e-3) return where + ": overlaps a slice it does not nest in";
    ends.push_back(end);
    ++s.slices_by_category[category];
  }
  return "";
}

}  // namespace edgecost::testing
