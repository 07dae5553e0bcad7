#include "profiler/probe_meter.h"

#include <chrono>
#include <thread>

namespace edgecost::profiler {

Result<std::unique_ptr<ProbeMeter>> ProbeMeter::Start(std::unique_ptr<probes::Probe> probe, double idle_window_s,
                                                      const IdleTiming& timing) {
  std::unique_ptr<ProbeMeter> meter(new ProbeMeter(std::move(probe), timing.clock));
  EC_RETURN_IF_ERROR(meter->monitor_.Start());
  EC_ASSIGN_OR_RETURN(double before_j, meter->EnergyJ());
  const std::vector<double> before_domain_j = meter->last_domain_j_;
  const double start_s = timing.clock();
  if (timing.wait) {
    timing.wait(idle_window_s);
  } else {
    std::this_thread::sleep_for(std::chrono::duration<double>(idle_window_s));
  }
  EC_ASSIGN_OR_RETURN(double after_j, meter->EnergyJ());
  const double idle_s = timing.clock() - start_s;
  if (idle_s <= 0) return Internal("the idle window took no time: idle power cannot be measured");
  meter->idle_power_w_ = (after_j - before_j) / idle_s;
  const probes::ProbeInfo& info = meter->monitor_.info();
  for (size_t d = 0; d < meter->last_domain_j_.size() && d < before_domain_j.size(); ++d) {
    meter->domains_.push_back({.name = d < info.domains.size() ? info.domains[d] : "domain" + std::to_string(d),
                               .inside = probes::TopLevelDomain(info, d) ? "" : info.inside[d],
                               .idle_power_w = (meter->last_domain_j_[d] - before_domain_j[d]) / idle_s});
  }
  return meter;
}

Result<double> ProbeMeter::EnergyJ() {
  EC_ASSIGN_OR_RETURN(last_domain_j_, monitor_.EnergyJ());
  double total_j = 0;
  for (size_t d = 0; d < last_domain_j_.size(); ++d) {
    if (probes::TopLevelDomain(monitor_.info(), d)) total_j += last_domain_j_[d];
  }
  return total_j;
}

v1::EnergySource ProbeMeter::Source() const {
  return monitor_.info().kind == probes::ReadingKind::kEnergyCounter ? v1::ENERGY_SOURCE_COUNTER
                                                                     : v1::ENERGY_SOURCE_INTEGRATED;
}

}  // namespace edgecost::profiler
