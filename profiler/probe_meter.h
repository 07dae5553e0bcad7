// The profiler's EnergyMeter on a measuring probe (RAPL, hwmon, meter,
// battery): the sum over its domains, with idle power measured before the run.
#pragma once

#include <memory>

#include "probes/probe.h"
#include "profiler/measure.h"

namespace edgecost::profiler {

class ProbeMeter : public EnergyMeter {
 public:
  // Starts the probe and measures idle power over `idle_window_s`.
  static Result<std::unique_ptr<ProbeMeter>> Start(std::unique_ptr<probes::Probe> probe, double idle_window_s = 1.0);

  Result<double> EnergyJ() override;
  double UpdateIntervalS() const override { return monitor_.info().update_interval_s; }
  double IdlePowerW() const override { return idle_power_w_; }
  v1::EnergySource Source() const override;
  std::string Name() const override { return monitor_.info().source + " " + monitor_.info().name; }

 private:
  explicit ProbeMeter(std::unique_ptr<probes::Probe> probe) : monitor_(std::move(probe)) {}
  probes::EnergyMonitor monitor_;
  double idle_power_w_ = 0;
};

}  // namespace edgecost::profiler
