// The profiler's EnergyMeter on a measuring probe (RAPL, hwmon, meter,
// battery): per domain, and in total the sum over its top-level domains (a
// nested domain such as RAPL's core is already in its package), with each
// domain's idle power measured before the run.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "probes/probe.h"
#include "profiler/measure.h"

namespace edgecost::profiler {

// How the idle window is timed and waited out; tests substitute a fake clock
// and a wait that advances it (and a fake tree's counters).
struct IdleTiming {
  probes::MonotonicClock clock = SteadyNowS;
  std::function<void(double seconds)> wait;  // empty: sleep
};

class ProbeMeter : public EnergyMeter {
 public:
  // Starts the probe and measures idle power, in total and per domain, over `idle_window_s`.
  static Result<std::unique_ptr<ProbeMeter>> Start(std::unique_ptr<probes::Probe> probe, double idle_window_s = 1.0,
                                                   const IdleTiming& timing = {});

  Result<double> EnergyJ() override;
  double UpdateIntervalS() const override { return monitor_.info().update_interval_s; }
  double IdlePowerW() const override { return idle_power_w_; }
  v1::EnergySource Source() const override;
  std::string Name() const override { return monitor_.info().source + " " + monitor_.info().name; }
  std::vector<MeterDomain> Domains() const override { return domains_; }
  std::vector<double> LastDomainEnergyJ() const override { return last_domain_j_; }
  std::optional<double> LastReadS() const override { return monitor_.LastReadS(); }

 private:
  ProbeMeter(std::unique_ptr<probes::Probe> probe, probes::MonotonicClock clock)
      : monitor_(std::move(probe), /*sample_interval_s=*/0, std::move(clock)) {}
  probes::EnergyMonitor monitor_;
  double idle_power_w_ = 0;
  std::vector<MeterDomain> domains_;
  std::vector<double> last_domain_j_;
};

}  // namespace edgecost::profiler
