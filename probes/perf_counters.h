// CPU performance counters through libpfm4 (event names to encodings) and
// perf_event_open, for this process. Hardware events where a PMU exists,
// software events (task-clock, page faults, context switches) everywhere.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "probes/probe.h"

namespace edgecost::probes {

struct CounterValue {
  std::string event;
  double value = 0;  // scaled for multiplexing: raw x enabled / running
  double running_fraction = 1;
};

class PerfCounters {
 public:
  // Opens what it can of `events`; `infos` gets one entry per event, with the
  // reason and fix for those that could not be opened.
  static PerfCounters Open(const std::vector<std::string>& events, const std::string& proc_root,
                           std::vector<ProbeInfo>& infos);
  PerfCounters(PerfCounters&& other) noexcept;
  ~PerfCounters();

  Status Start();
  Result<std::vector<CounterValue>> Read() const;
  size_t size() const { return fds_.size(); }

 private:
  PerfCounters() = default;
  std::vector<int> fds_;
  std::vector<std::string> names_;
};

// The events `edgecost probes` looks for.
std::vector<std::string> DefaultPerfEvents();

// What perf_event_open's errno means for this event, and how to fix it.
struct PerfFailure {
  std::string reason;
  std::string fix;
};
PerfFailure ExplainPerfError(int error, int paranoid, bool hardware_event);

// libpfm4 initialised once for the process; false when it cannot be.
bool PfmReady();
// /proc/sys/kernel/perf_event_paranoid under `proc_root` (2, the kernel's default, when unreadable).
int PerfEventParanoid(const std::string& proc_root);

}  // namespace edgecost::probes
