// The measurement loop: warm up, then repeat an op until the window is long
// enough both in time and in energy-sensor updates, and summarise runtime
// (median, spread, 95% interval of the median) and energy per execution.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "base/status.h"
#include "proto/edgecost.pb.h"

namespace edgecost::profiler {

// Monotonic time in seconds; tests substitute a fake.
class Clock {
 public:
  virtual ~Clock() = default;
  virtual double NowS() = 0;
};
Clock& SteadyClock();

// Cumulative energy of the best available source; tests substitute a fake.
class EnergyMeter {
 public:
  virtual ~EnergyMeter() = default;
  virtual Result<double> EnergyJ() = 0;        // cumulative since some origin
  virtual double UpdateIntervalS() const = 0;  // how often the reading changes
  virtual double IdlePowerW() const = 0;       // measured before the run
  virtual v1::EnergySource Source() const = 0;
  virtual std::string Name() const = 0;
};

struct RuntimeSummary {
  double median_s = 0;
  double stddev_s = 0;
  double ci95_low_s = 0;  // distribution-free interval of the median (order statistics)
  double ci95_high_s = 0;
  uint32_t repetitions = 0;
};
RuntimeSummary Summarize(std::vector<double> samples_s);

struct MeasureOptions {
  int warmup_runs = 2;
  double warmup_s = 0.01;  // and at least this long: caches, page faults, frequency
  int min_repetitions = 5;
  int max_repetitions = 100000;
  double min_window_s = 0.1;    // at least this much timed work per op
  double max_window_s = 1.0;    // give up extending the window after this
  int min_sensor_updates = 10;  // energy needs this many sensor updates inside the window
};

// At most this many repetitions are kept with their times, for traces.
inline constexpr size_t kMaxKeptRepetitions = 1000;

struct Repetition {
  double start_s = 0;  // from the window's start
  double runtime_s = 0;
};

struct Measurement {
  RuntimeSummary runtime;
  std::vector<Repetition> repetitions;  // the first kMaxKeptRepetitions
  double energy_j = 0;                  // per execution, total
  double dynamic_energy_j = 0;          // per execution, minus idle power x runtime
  double window_s = 0;
  double window_start_s = 0;    // on the measuring clock
  double sensor_updates = 0;    // updates the window spanned
  bool energy_precise = false;  // false: the window covered fewer updates than asked
};

// Runs `op` repeatedly and measures it. `meter` may be null (runtime only).
Result<Measurement> Measure(const std::function<void()>& op, Clock& clock, EnergyMeter* meter,
                            const MeasureOptions& options);

}  // namespace edgecost::profiler
