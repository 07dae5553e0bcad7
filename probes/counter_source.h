// Performance counters read around a window of work: a CounterSource is
// started before the window and read after it. The real one opens perf_event_open
// groups (events named portably through libpfm4) on the threads that run the
// work; tests substitute scripted counts. Counts come back raw, with the time
// each counter was enabled and running, so that the caller scales multiplexed
// counters itself (ScaleReadings) and a counter that never ran is absent, never
// a zero.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"

namespace edgecost::probes {

// One counter of one thread group, cumulative since Start().
struct CounterReading {
  std::string event;
  uint64_t raw = 0;
  uint64_t enabled_ns = 0;  // time the counter was enabled
  uint64_t running_ns = 0;  // of which it was on the PMU (less when multiplexed)
};

// An event the source cannot count here, why, and what would make it countable.
struct UncountedEvent {
  std::string event;
  std::string reason;
  std::string fix;
};

class CounterSource {
 public:
  virtual ~CounterSource() = default;
  virtual std::vector<std::string> Events() const = 0;  // those it counts
  virtual const std::vector<UncountedEvent>& Uncounted() const = 0;
  // Resets and enables every counter.
  virtual Status Start() = 0;
  // Cumulative since Start(); an event may appear once per thread group.
  virtual Result<std::vector<CounterReading>> Read() = 0;
};

// One event over a window: scaled for multiplexing and summed over groups.
struct ScaledCount {
  std::string event;
  double value = 0;             // sum over groups of raw x enabled / running
  double running_fraction = 0;  // running / enabled over all groups (1: never multiplexed)
};

// Events in the order first seen; an event none of whose groups ever ran
// (running 0: the PMU never scheduled it) is left out, as it was not counted.
std::vector<ScaledCount> ScaleReadings(const std::vector<CounterReading>& readings);

// The events counted per op: hardware ones (cycles, instructions, cache
// references and misses, LLC load misses, branch misses) where a PMU exists,
// software ones (task-clock, page-faults, context-switches, cpu-migrations)
// always. libpfm4 maps the generic names to each PMU (x86, ARM).
std::vector<std::string> HardwareCounterEvents();
std::vector<std::string> SoftwareCounterEvents();

// perf_event_open groups, one per kind (hardware, software) and per thread:
// every counter of a group is scheduled together, so ratios within it hold even
// when the PMU multiplexes. `tids` are the threads that run the work (the
// caller's and its OpenMP team's; new threads they start are counted too).
// Events that cannot be opened are in Uncounted() with the reason; the rest
// are counted. `proc_root` is where perf_event_paranoid is read (/proc).
class PerfCounterGroups : public CounterSource {
 public:
  static std::unique_ptr<PerfCounterGroups> Open(const std::vector<std::string>& events, const std::vector<pid_t>& tids,
                                                 const std::string& proc_root = "/proc");
  ~PerfCounterGroups() override;
  PerfCounterGroups(const PerfCounterGroups&) = delete;
  PerfCounterGroups& operator=(const PerfCounterGroups&) = delete;

  std::vector<std::string> Events() const override { return counted_; }
  const std::vector<UncountedEvent>& Uncounted() const override { return uncounted_; }
  Status Start() override;
  Result<std::vector<CounterReading>> Read() override;
  // True when the kernel refused kernel-mode counting and counts are user mode only.
  bool user_only() const { return user_only_; }

 private:
  PerfCounterGroups() = default;
  Result<std::vector<CounterReading>> ReadRaw() const;
  struct Group {
    int leader = -1;
    std::vector<int> fds;  // leader first
    std::vector<std::string> events;
  };
  std::vector<Group> groups_;
  std::vector<std::string> counted_;
  std::vector<UncountedEvent> uncounted_;
  bool user_only_ = false;
  std::vector<CounterReading> baseline_;  // read by Start()
};

// The calling thread's id.
pid_t ThisThreadId();

}  // namespace edgecost::probes
