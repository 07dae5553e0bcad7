#include "daemon/metrics.h"

namespace edgecost::daemon {
namespace {

constexpr double kLatencyBucketsS[] = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 1, 5};

}  // namespace

void RequestMetrics::Record(const std::string& route, int status, double elapsed_s) {
  std::lock_guard lock(mutex_);
  RouteStats& stats = routes_[route];
  if (stats.latency_buckets.empty()) stats.latency_buckets.assign(std::size(kLatencyBucketsS), 0);
  ++stats.requests;
  if (status >= 400) ++stats.errors;
  stats.latency_sum_s += elapsed_s;
  for (size_t b = 0; b < std::size(kLatencyBucketsS); ++b) {
    if (elapsed_s <= kLatencyBucketsS[b]) ++stats.latency_buckets[b];
  }
}

void RequestMetrics::Write(std::ostream& out) {
  std::lock_guard lock(mutex_);
  out << "# HELP edgecost_requests_total Twirp requests by route.\n# TYPE edgecost_requests_total counter\n";
  for (const auto& [route, s] : routes_)
    out << "edgecost_requests_total{route=\"" << route << "\"} " << s.requests << "\n";
  out << "# HELP edgecost_request_errors_total Twirp requests answered with an error.\n"
         "# TYPE edgecost_request_errors_total counter\n";
  for (const auto& [route, s] : routes_)
    out << "edgecost_request_errors_total{route=\"" << route << "\"} " << s.errors << "\n";
  out << "# HELP edgecost_request_seconds Time to answer a request.\n# TYPE edgecost_request_seconds histogram\n";
  for (const auto& [route, s] : routes_) {
    for (size_t b = 0; b < std::size(kLatencyBucketsS); ++b) {
      out << "edgecost_request_seconds_bucket{route=\"" << route << "\",le=\"" << kLatencyBucketsS[b] << "\"} "
          << s.latency_buckets[b] << "\n";
    }
    out << "edgecost_request_seconds_bucket{route=\"" << route << "\",le=\"+Inf\"} " << s.requests << "\n"
        << "edgecost_request_seconds_sum{route=\"" << route << "\"} " << s.latency_sum_s << "\n"
        << "edgecost_request_seconds_count{route=\"" << route << "\"} " << s.requests << "\n";
  }
}

void WriteGauges(std::ostream& out, const DaemonGauges& gauges) {
  out << "# HELP edgecost_jobs Jobs by state.\n# TYPE edgecost_jobs gauge\n";
  for (const auto& [state, count] : gauges.jobs_by_state) {
    out << "edgecost_jobs{state=\"" << state << "\"} " << count << "\n";
  }
  out << "# HELP edgecost_solves_in_flight Solve calls running or waiting for a solver thread.\n"
         "# TYPE edgecost_solves_in_flight gauge\nedgecost_solves_in_flight "
      << gauges.solves_in_flight << "\n"
      << "# HELP edgecost_event_watchers WatchEvents long polls waiting for an event.\n"
         "# TYPE edgecost_event_watchers gauge\nedgecost_event_watchers "
      << gauges.event_watchers << "\n";
}

std::vector<ProbeReading> ReadProbes(const probes::Detected& probes) {
  std::vector<ProbeReading> readings;
  for (const auto& probe : probes.probes) {
    Result<std::vector<double>> values = probe->Read();
    if (!values.ok()) continue;
    const probes::ProbeInfo& info = probe->info();
    for (size_t d = 0; d < values->size() && d < info.domains.size(); ++d) {
      readings.push_back({info.source, info.name, info.domains[d], info.kind == probes::ReadingKind::kPower,
                          info.measured, (*values)[d]});
    }
  }
  return readings;
}

void WriteProbeMetrics(std::ostream& out, const probes::Detected& probes) {
  out << "# HELP edgecost_probe_power_watts Live power per probe and rail.\n# TYPE edgecost_probe_power_watts gauge\n"
         "# HELP edgecost_probe_energy_joules_total Energy counters per probe and domain.\n"
         "# TYPE edgecost_probe_energy_joules_total counter\n";
  for (const ProbeReading& r : ReadProbes(probes)) {
    out << (r.power ? "edgecost_probe_power_watts" : "edgecost_probe_energy_joules_total") << "{source=\"" << r.source
        << "\",probe=\"" << r.probe << "\",domain=\"" << r.domain << "\"} " << r.value << "\n";
  }
}

}  // namespace edgecost::daemon
