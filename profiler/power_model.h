// Energy when no sensor exists: a device power model (idle power plus active
// power per busy core) applied to wall time and this process's CPU time.
// Always labelled `estimated`; never passed off as measured.
#pragma once

#include <string>

#include "probes/registry.h"
#include "profiler/measure.h"

namespace edgecost::profiler {

class EstimatedMeter : public EnergyMeter {
 public:
  explicit EstimatedMeter(probes::EstimateModel model) : model_(model) {}
  Result<double> EnergyJ() override;
  double UpdateIntervalS() const override { return 1e-6; }  // CPU-time clocks tick in microseconds or finer
  double IdlePowerW() const override { return model_.idle_w; }
  v1::EnergySource Source() const override { return v1::ENERGY_SOURCE_ESTIMATED; }
  std::string Name() const override;
  const probes::EstimateModel& model() const { return model_; }

 private:
  probes::EstimateModel model_;  // [probes.estimate]
};

}  // namespace edgecost::profiler
