#include "profiler/power_model.h"

#include <time.h>

#include <cstdio>

namespace edgecost::profiler {
namespace {

double Seconds(clockid_t clock) {
  timespec ts{};
  clock_gettime(clock, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

}  // namespace

Result<double> EstimatedMeter::EnergyJ() {
  // Busy cores x time is the process CPU time, summed over all its threads.
  return model_.idle_w * Seconds(CLOCK_MONOTONIC) + model_.active_w_per_core * Seconds(CLOCK_PROCESS_CPUTIME_ID);
}

std::string EstimatedMeter::Name() const {
  char name[96];
  std::snprintf(name, sizeof name, "estimate:power-model(idle %.2f W, %.2f W per busy core)", model_.idle_w,
                model_.active_w_per_core);
  return name;
}

}  // namespace edgecost::profiler
