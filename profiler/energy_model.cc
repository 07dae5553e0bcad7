#include "profiler/energy_model.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <thread>

#include "base/time_text.h"
#include "profiler/nnls.h"

namespace edgecost::profiler {
namespace {

const v1::OpCounter* Find(const google::protobuf::RepeatedPtrField<v1::OpCounter>& counts, const std::string& e) {
  for (const v1::OpCounter& c : counts) {
    if (c.event() == e) return &c;
  }
  return nullptr;
}

const v1::OpCounter* Find(const std::vector<v1::OpCounter>& counts, const std::string& e) {
  for (const v1::OpCounter& c : counts) {
    if (c.event() == e) return &c;
  }
  return nullptr;
}

// Runs `body` on `threads` threads until `window_s` has passed.
void OnThreads(int threads, double window_s, const std::function<void(const std::atomic<bool>&)>& body) {
  std::atomic<bool> stop{false};
  std::vector<std::thread> team;
  for (int i = 0; i < threads; ++i) team.emplace_back([&] { body(stop); });
  std::this_thread::sleep_for(std::chrono::duration<double>(window_s));
  stop = true;
  for (std::thread& t : team) t.join();
}

}  // namespace

std::vector<std::string> FittableEvents(const std::vector<CalibrationSample>& samples) {
  std::vector<std::string> events;
  if (samples.empty()) return events;
  for (const v1::OpCounter& c : samples.front().counts) {
    bool everywhere = true, moved = false;
    for (const CalibrationSample& s : samples) {
      const v1::OpCounter* found = Find(s.counts, c.event());
      everywhere = everywhere && found != nullptr;
      moved = moved || (found && found->per_execution() != 0);
    }
    if (everywhere && moved) events.push_back(c.event());
  }
  return events;
}

Result<v1::EnergyCalibration> FitCalibration(const std::vector<CalibrationSample>& samples,
                                             const std::vector<std::string>& events) {
  const size_t unknowns = events.size() + 1;
  if (samples.size() < unknowns + 2) {
    return InvalidArgument("too few samples to calibrate: " + std::to_string(samples.size()) + " windows for " +
                           std::to_string(unknowns) + " unknowns (idle power and a weight per counter) need at least " +
                           std::to_string(unknowns + 2) + " for a residual; run more workloads or rounds");
  }
  std::vector<std::string> names = {"runtime (idle power)"};
  for (const std::string& e : events) names.push_back("counter " + e);
  // Rows weighed by their energy (relative residuals); columns scaled to unit
  // norm so that nanoseconds and cache misses meet on one scale.
  Matrix a(samples.size(), unknowns);
  std::vector<double> b(samples.size());
  for (size_t i = 0; i < samples.size(); ++i) {
    const CalibrationSample& s = samples[i];
    if (!(s.energy_j > 0) || !(s.runtime_s > 0)) {
      return InvalidArgument("sample " + std::to_string(i) + " (" + s.workload +
                             ") has no positive energy or runtime; the energy source did not measure it");
    }
    a(i, 0) = s.runtime_s / s.energy_j;
    for (size_t k = 0; k < events.size(); ++k) {
      const v1::OpCounter* c = Find(s.counts, events[k]);
      if (!c) {
        return InvalidArgument("sample " + std::to_string(i) + " (" + s.workload + ") has no count of " + events[k] +
                               "; fit only counters present in every window");
      }
      a(i, k + 1) = c->per_execution() / s.energy_j;
    }
    b[i] = 1;
  }
  std::vector<double> scale(unknowns, 0.0);
  for (size_t j = 0; j < unknowns; ++j) {
    for (size_t i = 0; i < a.rows; ++i) scale[j] += a(i, j) * a(i, j);
    scale[j] = std::sqrt(scale[j]);
    if (scale[j] == 0) scale[j] = 1;  // SolveNnls names the zero column
    for (size_t i = 0; i < a.rows; ++i) a(i, j) /= scale[j];
  }
  EC_ASSIGN_OR_RETURN(NnlsResult fit, SolveNnls(a, b, names));
  std::vector<double> weights(unknowns);
  for (size_t j = 0; j < unknowns; ++j) weights[j] = fit.x[j] / scale[j];

  v1::EnergyCalibration out;
  out.set_calibrated_at(NowRfc3339());
  out.set_samples(static_cast<uint32_t>(samples.size()));
  // Residuals: relative from the weighted fit, absolute in joules.
  double relative_sq = 0, absolute_sq = 0;
  for (const CalibrationSample& s : samples) {
    double predicted = weights[0] * s.runtime_s;
    for (size_t k = 0; k < events.size(); ++k) predicted += weights[k + 1] * Find(s.counts, events[k])->per_execution();
    relative_sq += std::pow((predicted - s.energy_j) / s.energy_j, 2);
    absolute_sq += std::pow(predicted - s.energy_j, 2);
  }
  const double n = static_cast<double>(samples.size());
  out.set_relative_error(std::sqrt(relative_sq / n));
  out.set_rms_residual_j(std::sqrt(absolute_sq / n));
  // 95% intervals from the least-squares covariance of the weighted design.
  const int dof = static_cast<int>(samples.size() - unknowns);
  const double sigma_sq = fit.residual_norm * fit.residual_norm / dof;
  const std::vector<double> inverse = InverseGram(a);
  const double t = StudentT975(dof);
  auto half_width = [&](size_t j) {
    return inverse.empty() ? 0.0 : t * std::sqrt(std::max(0.0, sigma_sq * inverse[j * unknowns + j])) / scale[j];
  };
  out.set_idle_power_w(weights[0]);
  out.set_idle_power_ci95_low_w(std::max(0.0, weights[0] - half_width(0)));
  out.set_idle_power_ci95_high_w(weights[0] + half_width(0));
  for (size_t k = 0; k < events.size(); ++k) {
    v1::CounterWeight& w = *out.add_weights();
    w.set_event(events[k]);
    w.set_joules_per_count(weights[k + 1]);
    w.set_ci95_low(std::max(0.0, weights[k + 1] - half_width(k + 1)));
    w.set_ci95_high(weights[k + 1] + half_width(k + 1));
  }
  for (const CalibrationSample& s : samples) {
    const std::string kind = s.workload.substr(0, s.workload.find(' '));
    bool known = false;
    for (const std::string& w : out.workloads()) known = known || w == kind;
    if (!known) out.add_workloads(kind);
  }
  return out;
}

std::optional<double> ModelEnergyJ(const v1::EnergyCalibration& calibration, double runtime_s,
                                   const google::protobuf::RepeatedPtrField<v1::OpCounter>& counters) {
  double energy_j = calibration.idle_power_w() * runtime_s;
  for (const v1::CounterWeight& w : calibration.weights()) {
    const v1::OpCounter* c = Find(counters, w.event());
    if (!c) return std::nullopt;
    energy_j += w.joules_per_count() * c->per_execution();
  }
  return energy_j;
}

std::string CalibrationLabel(const v1::EnergyCalibration& calibration) {
  char error[32];
  std::snprintf(error, sizeof error, "%.1f%%", 100 * calibration.relative_error());
  return "MODEL (calibrated against " + calibration.probe() + " on " + calibration.calibrated_at().substr(0, 10) +
         ", error " + error + ")";
}

namespace {

// A cache-line stride through `bytes` on k threads until the window ends.
std::function<void(double)> StrideWorkload(int k, size_t bytes) {
  return [k, bytes](double window_s) {
    OnThreads(k, window_s, [bytes](const std::atomic<bool>& stop) {
      std::vector<uint64_t> buffer(bytes / sizeof(uint64_t), 1);
      volatile uint64_t sink = 0;
      uint64_t sum = 0;
      while (!stop.load(std::memory_order_relaxed)) {
        for (size_t i = 0; i < buffer.size(); i += 8) sum += buffer[i]++;
      }
      sink = sum;
      (void)sink;
    });
  };
}

}  // namespace

std::vector<Workload> Microkernels(int threads) {
  std::vector<Workload> out;
  out.push_back(
      {"idle", [](double window_s) { std::this_thread::sleep_for(std::chrono::duration<double>(window_s)); }});
  for (int k = 1; k <= std::max(1, threads); ++k) {
    // Dependent multiply-adds in registers: cycles and instructions, no memory traffic.
    out.push_back({"compute x" + std::to_string(k), [k](double window_s) {
                     OnThreads(k, window_s, [](const std::atomic<bool>& stop) {
                       volatile double sink = 0;
                       double x = 1.0, y = 1.0000001;
                       while (!stop.load(std::memory_order_relaxed)) {
                         for (int i = 0; i < 100000; ++i) x = x * y + 1e-9;
                       }
                       sink = x;
                       (void)sink;
                     });
                   }});
    // The same stride through 256 KiB, which the caches hold: instructions per
    // cycle unlike the register loop's, and few last-level misses.
    out.push_back({"cache x" + std::to_string(k), StrideWorkload(k, 256u << 10)});
    // A stride through 64 MiB, beyond any last-level cache: misses and DRAM traffic.
    out.push_back({"memory x" + std::to_string(k), StrideWorkload(k, 64u << 20)});
  }
  return out;
}

Result<std::vector<CalibrationSample>> RunCalibration(const std::vector<Workload>& workloads, int rounds,
                                                      double window_s, probes::CounterSource& counters,
                                                      EnergyMeter& meter, Clock& clock,
                                                      const std::function<void(const std::string&)>& progress) {
  std::vector<CalibrationSample> samples;
  for (int round = 0; round < rounds; ++round) {
    for (const Workload& w : workloads) {
      if (progress) {
        progress("round " + std::to_string(round + 1) + "/" + std::to_string(rounds) + ": " + w.name);
      }
      EC_ASSIGN_OR_RETURN(double start_j, meter.EnergyJ());
      EC_RETURN_IF_ERROR(counters.Start());
      const double start_s = clock.NowS();
      w.run(window_s);
      EC_ASSIGN_OR_RETURN(std::vector<probes::CounterReading> readings, counters.Read());
      const double end_s = clock.NowS();
      EC_ASSIGN_OR_RETURN(double end_j, meter.EnergyJ());
      CalibrationSample s{.workload = w.name, .runtime_s = end_s - start_s, .energy_j = end_j - start_j};
      std::vector<v1::UncountedEvent> never;  // never scheduled in this window: left out of it
      CountersPerExecution(counters, readings, 1.0, s.counts, never);
      samples.push_back(std::move(s));
    }
  }
  return samples;
}

std::vector<CalibrationSample> SamplesFromOpCosts(const std::vector<v1::OpCost>& costs) {
  std::vector<CalibrationSample> samples;
  for (const v1::OpCost& c : costs) {
    const bool measured =
        c.energy_source() == v1::ENERGY_SOURCE_COUNTER || c.energy_source() == v1::ENERGY_SOURCE_INTEGRATED;
    if (!measured || c.unreliable() || c.counters_size() == 0 || !(c.energy_j() > 0)) continue;
    CalibrationSample s{
        .workload = "op " + c.signature().key(), .runtime_s = c.runtime().median_s(), .energy_j = c.energy_j()};
    s.counts.assign(c.counters().begin(), c.counters().end());
    samples.push_back(std::move(s));
  }
  return samples;
}

}  // namespace edgecost::profiler
