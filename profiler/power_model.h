// Energy when no sensor exists: a device power model (idle power plus active
// power per busy core) applied to wall time and this process's CPU time.
// Always labelled `estimated`; never passed off as measured.
#pragma once

#include <sys/types.h>

#include <map>
#include <mutex>
#include <string>

#include "probes/registry.h"
#include "profiler/measure.h"

namespace edgecost::profiler {

class EstimatedMeter : public EnergyMeter {
 public:
  explicit EstimatedMeter(probes::EstimateModel model);
  // Idle power x wall time + per-core power x the CPU time of this process's
  // threads, each read exactly, at most every core busy between two reads.
  Result<double> EnergyJ() override;
  // The most the model allows: idle + per-core power x every online core.
  double MaxPowerW() const override;
  double UpdateIntervalS() const override { return 1e-6; }  // CPU-time clocks tick in microseconds or finer
  double IdlePowerW() const override { return model_.idle_w; }
  v1::EnergySource Source() const override { return v1::ENERGY_SOURCE_ESTIMATED; }
  std::string Name() const override;
  // The wall-clock time the last EnergyJ() covered: the idle part is exact over it.
  std::optional<double> LastReadS() const override {
    std::lock_guard<std::mutex> lock(mutex_);
    return last_wall_s_;
  }
  const probes::EstimateModel& model() const { return model_; }

 private:
  double BusyCoreSecondsLocked();  // CPU time added since the last read, over every thread

  probes::EstimateModel model_;  // [probes.estimate]
  long cores_;
  mutable std::mutex mutex_;
  std::map<pid_t, double> thread_cpu_s_;  // at the last read
  double busy_core_s_ = 0;
  double last_wall_s_ = 0;
};

}  // namespace edgecost::profiler
