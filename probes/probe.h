// One interface for every energy source a device may have: RAPL, hwmon power
// monitors, battery fuel gauges, external SCPI meters. A Probe reads the
// hardware (through a root path that tests point at a fake tree); an
// EnergyMonitor turns any probe into cumulative joules per domain between
// Start() and Stop(), differencing counters or integrating sampled power.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "base/clock.h"
#include "base/status.h"

namespace edgecost::probes {

enum class ReadingKind {
  kEnergyCounter,  // cumulative joules per domain, differenced over a window
  kPower,          // instantaneous watts per domain, integrated over time
};

// What a source is, or why it is not there.
struct ProbeInfo {
  std::string source;  // "rapl", "hwmon", "battery", "meter", "perf", "estimate"
  std::string name;    // e.g. "intel-rapl:0", "ina3221 (hwmon2)", "bench meter 10.0.0.5:5025"
  bool available = false;
  ReadingKind kind = ReadingKind::kEnergyCounter;
  std::vector<std::string> domains;  // domains or rails, one value each
  double resolution = 0;             // joules (counters) or watts (power)
  double update_interval_s = 0;      // how often the hardware refreshes the value
  bool measured = true;              // false: an estimate, never passed off as measured
  std::string reason;                // why unavailable, or a caveat when available
  std::string fix;                   // what the user can do about it
  // Per domain (empty, or one entry each): the domain that already includes it,
  // e.g. RAPL's "core" inside "package-0"; "" for a top-level domain. Totals
  // sum the top-level domains only.
  std::vector<std::string> inside;
};

// Whether domain d of `info` is top-level (counted in totals).
bool TopLevelDomain(const ProbeInfo& info, size_t d);

class Probe {
 public:
  virtual ~Probe() = default;
  virtual const ProbeInfo& info() const = 0;
  // One value per domain: cumulative joules (counters) or watts (power).
  virtual Result<std::vector<double>> Read() = 0;
  // Counters only: the value at which domain d wraps to zero (0: never).
  virtual double WrapJ(size_t /*domain*/) const { return 0; }
};

// Monotonic seconds; tests substitute a fake.
using MonotonicClock = std::function<double()>;

struct PowerSample {
  double t_s;
  double watts;
};

// Energy of a power trace over [t0, t1]: the trapezoid rule on the samples'
// timestamps, with the partial intervals at both edges interpolated linearly.
// Before the first sample or after the last, power is held constant.
double IntegratePowerJ(const std::vector<PowerSample>& trace, double t0_s, double t1_s);

// Cumulative energy per domain since Start(), from any probe. Counter probes
// are read on demand with wraparound handled; power probes are sampled on a
// thread at their update interval (or `sample_interval_s`) with monotonic stamps.
class EnergyMonitor {
 public:
  EnergyMonitor(std::unique_ptr<Probe> probe, double sample_interval_s = 0, MonotonicClock clock = SteadyNowS);
  ~EnergyMonitor();
  EnergyMonitor(const EnergyMonitor&) = delete;
  EnergyMonitor& operator=(const EnergyMonitor&) = delete;

  Status Start();
  void Stop();
  // Joules per domain from Start() to now (or to Stop()).
  Result<std::vector<double>> EnergyJ();
  // The time (on the monitor's clock) the last EnergyJ() covered up to.
  double LastReadS() const { return last_read_s_; }
  // Sensor updates since Start(): fewer than needed means an imprecise window.
  double UpdatesSinceStart() const;
  const ProbeInfo& info() const { return probe_->info(); }
  // The first error the sampling thread met, if any.
  Status SamplerStatus() const;

 private:
  Result<std::vector<double>> ReadCounters();
  void SampleLoop();

  std::unique_ptr<Probe> probe_;
  double interval_s_;
  MonotonicClock clock_;
  bool started_ = false;
  double start_s_ = 0;
  double stop_s_ = -1;
  double last_read_s_ = 0;
  // Counters: last raw value and accumulated energy per domain.
  std::vector<double> last_raw_, total_j_;
  // Power: the trace per domain.
  mutable std::mutex mutex_;
  std::vector<std::vector<PowerSample>> traces_;
  Status sampler_status_;
  std::atomic<bool> running_{false};
  std::thread sampler_;
};

}  // namespace edgecost::probes
