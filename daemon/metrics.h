// Prometheus text for GET /metrics: requests, errors and latencies per route,
// and the gauges the daemon reads at each scrape (jobs by state, solves in
// flight, waiting long polls, live power and energy per probe).
#pragma once

#include <map>
#include <mutex>
#include <ostream>
#include <string>
#include <vector>

#include "probes/registry.h"
#include "proto/edgecost.pb.h"

namespace edgecost::daemon {

class RequestMetrics {
 public:
  void Record(const std::string& route, int status, double elapsed_s);
  void Write(std::ostream& out);

 private:
  struct RouteStats {
    uint64_t requests = 0;
    uint64_t errors = 0;
    std::vector<uint64_t> latency_buckets;  // cumulative counts per bucket bound
    double latency_sum_s = 0;
  };
  std::mutex mutex_;
  std::map<std::string, RouteStats> routes_;
};

struct DaemonGauges {
  std::map<std::string, int64_t> jobs_by_state;  // state name -> jobs, in memory or in the database alone
  int solves_in_flight = 0;
  size_t event_watchers = 0;
};
void WriteGauges(std::ostream& out, const DaemonGauges& gauges);

// One value of one probe's domain or rail: watts for a power source, cumulative
// joules for an energy counter. What /metrics and the web view show.
struct ProbeReading {
  std::string source, probe, domain;
  bool power = false;
  bool measured = true;  // false: the estimate, never passed off as measured
  double value = 0;
};
// Probes that fail to read are left out.
std::vector<ProbeReading> ReadProbes(const probes::Detected& probes);

// Power sources as gauges, energy counters as raw totals (a wrap looks like a
// counter reset, which rate() handles). Probes that fail to read are left out.
void WriteProbeMetrics(std::ostream& out, const probes::Detected& probes);

}  // namespace edgecost::daemon
