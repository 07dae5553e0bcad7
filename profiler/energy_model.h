// A counter-based energy model: energy = P_idle x t + sum_k w_k x count_k,
// fitted by non-negative least squares against windows a measured source timed
// (microkernels that are compute-bound, memory-bound and idle, plus the
// model's own ops), then used where no source measures: an op's energy from
// its counters, labelled with the calibration it came from.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "probes/counter_source.h"
#include "profiler/measure.h"
#include "proto/edgecost.pb.h"

namespace edgecost::profiler {

// One window: its length, its counts (totals, or per execution with the
// runtime of one execution) and the energy the source measured over it.
struct CalibrationSample {
  std::string workload;  // "idle", "compute x2", "memory x1", an op key
  double runtime_s = 0;
  std::vector<v1::OpCounter> counts;  // per_execution holds the window's count
  double energy_j = 0;
};

// Fits the model over `events` (each must be counted in every sample).
// Residuals are relative (each window weighs by its own energy), so that short
// op windows count as much as long microkernel windows. Refuses fewer samples
// than unknowns plus two, and a singular design, naming the column.
Result<v1::EnergyCalibration> FitCalibration(const std::vector<CalibrationSample>& samples,
                                             const std::vector<std::string>& events);

// The events a fit can use: counted in every sample and not zero in all of them.
std::vector<std::string> FittableEvents(const std::vector<CalibrationSample>& samples);

// The energy of one execution from its runtime and counters, or nothing when
// the op lacks a counter the model weighs.
std::optional<double> ModelEnergyJ(const v1::EnergyCalibration& calibration, double runtime_s,
                                   const google::protobuf::RepeatedPtrField<v1::OpCounter>& counters);

// "MODEL (calibrated against hwmon ina3221 (hwmon2) on 2026-11-25, error 1.2%)".
std::string CalibrationLabel(const v1::EnergyCalibration& calibration);

// One calibration workload: runs for about `window_s` when called.
struct Workload {
  std::string name;
  std::function<void(double window_s)> run;
};

// Compute-bound (register arithmetic), cache-bound (a stride through 256 KiB),
// memory-bound (the same through 64 MiB, beyond the caches) and idle (sleep) windows, on 1..threads threads.
std::vector<Workload> Microkernels(int threads);

// Runs every workload `rounds` times, each in one window between two energy
// readings and a counter Start/Read: the samples a fit needs.
Result<std::vector<CalibrationSample>> RunCalibration(const std::vector<Workload>& workloads, int rounds,
                                                      double window_s, probes::CounterSource& counters,
                                                      EnergyMeter& meter, Clock& clock,
                                                      const std::function<void(const std::string&)>& progress = {});

// Samples from op costs the profiler stored with a measured energy and counters (per execution).
std::vector<CalibrationSample> SamplesFromOpCosts(const std::vector<v1::OpCost>& costs);

}  // namespace edgecost::profiler
