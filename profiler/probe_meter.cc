#include "profiler/probe_meter.h"

#include <chrono>
#include <numeric>
#include <thread>

namespace edgecost::profiler {

Result<std::unique_ptr<ProbeMeter>> ProbeMeter::Start(std::unique_ptr<probes::Probe> probe, double idle_window_s) {
  std::unique_ptr<ProbeMeter> meter(new ProbeMeter(std::move(probe)));
  EC_RETURN_IF_ERROR(meter->monitor_.Start());
  EC_ASSIGN_OR_RETURN(double before_j, meter->EnergyJ());
  const double start_s = probes::SteadyNowS();
  std::this_thread::sleep_for(std::chrono::duration<double>(idle_window_s));
  EC_ASSIGN_OR_RETURN(double after_j, meter->EnergyJ());
  meter->idle_power_w_ = (after_j - before_j) / (probes::SteadyNowS() - start_s);
  return meter;
}

Result<double> ProbeMeter::EnergyJ() {
  EC_ASSIGN_OR_RETURN(std::vector<double> per_domain, monitor_.EnergyJ());
  return std::accumulate(per_domain.begin(), per_domain.end(), 0.0);
}

v1::EnergySource ProbeMeter::Source() const {
  return monitor_.info().kind == probes::ReadingKind::kEnergyCounter ? v1::ENERGY_SOURCE_COUNTER
                                                                     : v1::ENERGY_SOURCE_INTEGRATED;
}

}  // namespace edgecost::profiler
