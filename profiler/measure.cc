#include "profiler/measure.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>

namespace edgecost::profiler {
namespace {

class SteadyClockImpl : public Clock {
 public:
  double NowS() override {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
  }
};

}  // namespace

Clock& SteadyClock() {
  static SteadyClockImpl clock;
  return clock;
}

RuntimeSummary Summarize(std::vector<double> samples_s) {
  RuntimeSummary s;
  const size_t n = samples_s.size();
  s.repetitions = static_cast<uint32_t>(n);
  if (n == 0) return s;
  std::sort(samples_s.begin(), samples_s.end());
  s.median_s = n % 2 ? samples_s[n / 2] : 0.5 * (samples_s[n / 2 - 1] + samples_s[n / 2]);
  const double mean = std::accumulate(samples_s.begin(), samples_s.end(), 0.0) / static_cast<double>(n);
  double squares = 0;
  for (double x : samples_s) squares += (x - mean) * (x - mean);
  s.stddev_s = n > 1 ? std::sqrt(squares / static_cast<double>(n - 1)) : 0.0;
  // The median lies between order statistics n/2 -+ 1.96 sqrt(n)/2 with ~95% probability.
  const double half_width = 1.96 * std::sqrt(static_cast<double>(n)) / 2.0;
  const double center = static_cast<double>(n) / 2.0;
  const auto low = static_cast<size_t>(std::clamp(std::floor(center - half_width), 0.0, static_cast<double>(n - 1)));
  const auto high =
      static_cast<size_t>(std::clamp(std::ceil(center + half_width) - 1, 0.0, static_cast<double>(n - 1)));
  s.ci95_low_s = samples_s[low];
  s.ci95_high_s = samples_s[std::max(low, high)];
  return s;
}

Result<Measurement> Measure(const std::function<void()>& op, Clock& clock, EnergyMeter* meter,
                            const MeasureOptions& options) {
  const double warmup_start_s = clock.NowS();
  for (int i = 0; i < options.warmup_runs || clock.NowS() - warmup_start_s < options.warmup_s; ++i) op();
  // A window long enough for the sensor to update min_sensor_updates times, within the cap.
  double target_window_s = options.min_window_s;
  if (meter) target_window_s = std::max(target_window_s, options.min_sensor_updates * meter->UpdateIntervalS());
  target_window_s = std::min(target_window_s, options.max_window_s);

  std::vector<double> samples_s;
  Measurement m;
  double energy_start_j = 0;
  if (meter) {
    EC_ASSIGN_OR_RETURN(energy_start_j, meter->EnergyJ());
  }
  const double window_start_s = clock.NowS();
  m.window_start_s = window_start_s;
  double now_s = window_start_s;
  while (static_cast<int>(samples_s.size()) < options.max_repetitions &&
         (static_cast<int>(samples_s.size()) < options.min_repetitions || now_s - window_start_s < target_window_s)) {
    const double start_s = clock.NowS();
    op();
    now_s = clock.NowS();
    samples_s.push_back(now_s - start_s);
    if (m.repetitions.size() < kMaxKeptRepetitions)
      m.repetitions.push_back({start_s - window_start_s, now_s - start_s});
  }
  m.window_s = now_s - window_start_s;
  m.runtime = Summarize(std::move(samples_s));
  if (meter) {
    EC_ASSIGN_OR_RETURN(double energy_end_j, meter->EnergyJ());
    const double runs = static_cast<double>(m.runtime.repetitions);
    m.energy_j = (energy_end_j - energy_start_j) / runs;
    m.dynamic_energy_j = m.energy_j - meter->IdlePowerW() * (m.window_s / runs);
    m.sensor_updates = meter->UpdateIntervalS() > 0 ? m.window_s / meter->UpdateIntervalS() : 0;
    m.energy_precise = m.sensor_updates >= options.min_sensor_updates;
  }
  return m;
}

}  // namespace edgecost::profiler
