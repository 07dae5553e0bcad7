#include "profiler/measure.h"

#include <time.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <tuple>
#include <cstdio>
#include <numeric>

#include "base/clock.h"
#include "base/units.h"

namespace edgecost::profiler {
namespace {

class SteadyClockImpl : public Clock {
 public:
  double NowS() override {
    return SteadyNowS();
  }
};

class ThreadCpuClockImpl : public Clock {
 public:
  double NowS() override {
    timespec ts{};
    ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
  }
};

// What two reads of `clock` in a row cost (the smallest of many): a thread's
// CPU clock is a system call, some 0.3 us in a VM, which a 4 us op must not carry.
double ReadCostS(Clock& clock) {
  double cost_s = 1e9;
  for (int i = 0; i < 64; ++i) {
    const double a = clock.NowS();
    cost_s = std::min(cost_s, clock.NowS() - a);
  }
  return std::max(0.0, cost_s);
}

// The distribution-free 95% interval of the q-quantile of sorted `x`.
std::pair<double, double> QuantileInterval(const std::vector<double>& x, double q) {
  const double n = static_cast<double>(x.size());
  const double half_width = 1.96 * std::sqrt(n * q * (1 - q));
  const auto low = static_cast<size_t>(std::clamp(std::floor(q * n - half_width), 0.0, n - 1));
  const auto high = static_cast<size_t>(std::clamp(std::ceil(q * n + half_width) - 1, 0.0, n - 1));
  return {x[low], x[std::max(low, high)]};
}

double MedianOfSorted(const std::vector<double>& x, size_t begin, size_t end) {
  const size_t n = end - begin;
  return n % 2 ? x[begin + n / 2] : 0.5 * (x[begin + n / 2 - 1] + x[begin + n / 2]);
}

}  // namespace

Clock& SteadyClock() {
  static SteadyClockImpl clock;
  return clock;
}

Clock& ThreadCpuClock() {
  static ThreadCpuClockImpl clock;
  return clock;
}

Result<EnergyMark> MarkEnergy(EnergyMeter& meter, Clock& clock) {
  EC_ASSIGN_OR_RETURN(double j, meter.EnergyJ());
  const std::optional<double> at_s = meter.LastReadS();
  return EnergyMark{.j = j, .s = at_s ? *at_s : clock.NowS()};
}

double MeanPowerW(const EnergyMeter& meter, const EnergyMark& start, const EnergyMark& end) {
  const double interval_s = end.s - start.s;
  return interval_s > 0 ? std::min(meter.MaxPowerW(), (end.j - start.j) / interval_s) : 0;
}

RuntimeSummary SummarizeWindows(const std::vector<double>& samples_s) {
  RuntimeSummary s = Summarize(samples_s);  // the spread over every repetition
  const size_t n = samples_s.size();
  if (n == 0) return s;
  // Consecutive repetitions in up to kShortWindows windows of (nearly) equal size.
  const size_t windows = std::min(n, kShortWindows);
  std::vector<double> medians;
  for (size_t w = 0; w < windows; ++w) {
    std::vector<double> part(samples_s.begin() + static_cast<ptrdiff_t>(w * n / windows),
                             samples_s.begin() + static_cast<ptrdiff_t>((w + 1) * n / windows));
    std::sort(part.begin(), part.end());
    medians.push_back(MedianOfSorted(part, 0, part.size()));
  }
  std::sort(medians.begin(), medians.end());
  s.median_s = MedianOfSorted(medians, 0, (medians.size() + 1) / 2);  // the fastest half's median
  const auto [low, high] = QuantileInterval(medians, 0.25);
  s.ci95_low_s = std::min(low, s.median_s);
  s.ci95_high_s = std::max(high, s.median_s);
  return s;
}

RuntimeSummary Summarize(std::vector<double> samples_s) {
  RuntimeSummary s;
  const size_t n = samples_s.size();
  s.repetitions = static_cast<uint32_t>(n);
  if (n == 0) return s;
  std::sort(samples_s.begin(), samples_s.end());
  s.median_s = MedianOfSorted(samples_s, 0, n);
  const double mean = std::accumulate(samples_s.begin(), samples_s.end(), 0.0) / static_cast<double>(n);
  double squares = 0;
  for (double x : samples_s) squares += (x - mean) * (x - mean);
  s.stddev_s = n > 1 ? std::sqrt(squares / static_cast<double>(n - 1)) : 0.0;
  // The median lies between order statistics n/2 -+ 1.96 sqrt(n)/2 with ~95% probability.
  std::tie(s.ci95_low_s, s.ci95_high_s) = QuantileInterval(samples_s, 0.5);
  return s;
}

Verdict JudgeInterference(const v1::Interference& interference, uint32_t clean_repetitions,
                          const MeasureOptions& options, bool cpu_time) {
  const InterferenceLimits& limits = options.interference;
  char text[256];
  std::string others;
  if (interference.other_runnable() > 0) {
    std::snprintf(text, sizeof text, "; %u other tasks runnable, load %.2f", interference.other_runnable(),
                  interference.load1());
    others = text;
  }
  const double total = interference.total_repetitions();
  const double disturbed_fraction = total > 0 ? interference.disturbed_repetitions() / total : 0;
  if (interference.steal_fraction() > limits.max_steal_fraction) {
    std::snprintf(text, sizeof text, "the hypervisor took %.0f%% of the CPUs (steal time)",
                  100 * interference.steal_fraction());
    return {false, text + others};
  }
  if (!cpu_time && disturbed_fraction > limits.max_disturbed_fraction) {
    const std::string waited =
        interference.run_queue_wait_s() > 0 ? " (" + FormatSeconds(interference.run_queue_wait_s()) + " in all)" : "";
    std::snprintf(text, sizeof text, "%.0f%% of the repetitions waited for a CPU", 100 * disturbed_fraction);
    return {false, text + waited + ": another task ran on the op's cores" + others};
  }
  if (interference.other_cpu_cores() >= limits.shared_cpu_cores && !limits.confirm_shared && !cpu_time &&
      !options.single_thread) {
    std::snprintf(text, sizeof text,
                  "other tasks used %.2f CPUs meanwhile (they share caches, memory bandwidth and perhaps the core)",
                  interference.other_cpu_cores());
    return {false, text + others};
  }
  if (static_cast<int>(clean_repetitions) < options.min_repetitions) {
    std::snprintf(text, sizeof text, "only %u undisturbed repetitions within %.2f s", clean_repetitions,
                  options.max_window_s);
    return {false, text + others};
  }
  return {};
}

void CountersPerExecution(const probes::CounterSource& source, const std::vector<probes::CounterReading>& readings,
                          double executions, std::vector<v1::OpCounter>& counters,
                          std::vector<v1::UncountedEvent>& uncounted) {
  const std::vector<probes::ScaledCount> scaled = probes::ScaleReadings(readings);
  for (const std::string& event : source.Events()) {
    auto it =
        std::find_if(scaled.begin(), scaled.end(), [&](const probes::ScaledCount& c) { return c.event == event; });
    if (it == scaled.end() || executions <= 0) {
      v1::UncountedEvent& missing = uncounted.emplace_back();
      missing.set_event(event);
      missing.set_reason("opened, but the PMU never scheduled it during the window (more events than counters)");
      missing.set_fix("count fewer hardware events at a time");
      continue;
    }
    v1::OpCounter& counter = counters.emplace_back();
    counter.set_event(event);
    counter.set_per_execution(it->value / executions);
    counter.set_running_fraction(it->running_fraction);
  }
}

Result<Measurement> Measure(const std::function<void()>& op, Clock& clock, EnergyMeter* meter,
                            const MeasureOptions& options, InterferenceWatch* watch, probes::CounterSource* counters) {
  const double warmup_start_s = clock.NowS();
  int warmup_runs = 0;
  for (; warmup_runs < options.warmup_runs || clock.NowS() - warmup_start_s < options.warmup_s; ++warmup_runs) op();
  const double warmup_run_s = warmup_runs > 0 ? (clock.NowS() - warmup_start_s) / warmup_runs : 0;
  // A window long enough for the sensor to update min_sensor_updates times, within the cap.
  double target_window_s = options.min_window_s;
  if (meter) target_window_s = std::max(target_window_s, options.min_sensor_updates * meter->UpdateIntervalS());
  target_window_s = std::min(target_window_s, options.max_window_s);

  Clock* cpu = warmup_run_s >= options.min_cpu_clock_runtime_s ? options.cpu_clock : nullptr;
  const double cpu_read_s = cpu ? ReadCostS(*cpu) : 0;
  std::vector<double> samples_s, wall_samples_s;      // in the order they ran
  std::vector<double> disturbed_s, disturbed_wall_s;  // kept only for a window with no clean repetition at all
  std::vector<Repetition> repetitions;
  uint32_t disturbed = 0;
  EnergyMark energy_start;  // power is over the interval the meter itself covered
  std::vector<double> domain_start_j;
  if (meter) {
    EC_ASSIGN_OR_RETURN(energy_start, MarkEnergy(*meter, clock));
    domain_start_j = meter->LastDomainEnergyJ();
  }
  if (watch) EC_RETURN_IF_ERROR(watch->BeginWindow());
  if (counters) EC_RETURN_IF_ERROR(counters->Start());
  const double window_start_s = clock.NowS();
  const double window_start_unix_s =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  double now_s = window_start_s;
  // Until enough undisturbed repetitions and a long enough window; a busy
  // device extends the window up to max_window_s to find clean repetitions.
  auto more = [&] {
    const int total = static_cast<int>(samples_s.size() + disturbed_s.size());
    if (total >= options.max_repetitions) return false;
    const double elapsed_s = now_s - window_start_s;
    if (static_cast<int>(samples_s.size()) < options.min_repetitions) {
      return total < options.min_repetitions || elapsed_s < options.max_window_s;
    }
    return elapsed_s < target_window_s;
  };
  while (more()) {
    const double start_s = clock.NowS();
    const double cpu_start_s = cpu ? cpu->NowS() : 0;
    op();
    const double cpu_end_s = cpu ? cpu->NowS() : 0;
    now_s = clock.NowS();
    const double wall_s = now_s - start_s;
    const double sample_s = cpu ? std::max(0.0, cpu_end_s - cpu_start_s - cpu_read_s) : wall_s;
    const bool kept = repetitions.size() < kMaxKeptRepetitions;
    if (kept) repetitions.push_back({start_s - window_start_s, wall_s, false});
    if (watch) {
      // Read after the repetition, outside its timing: a wait in the gap before
      // it counts against it too, as a thread descheduled there delays it.
      EC_ASSIGN_OR_RETURN(double wait_s, watch->WaitSinceLastS());
      if (wait_s > std::max(options.interference.min_wait_s, options.interference.wait_fraction * sample_s)) {
        ++disturbed;
        if (kept) repetitions.back().disturbed = true;
        if (!cpu) {  // the wait is in the wall time; CPU time has none of it
          disturbed_s.push_back(sample_s);
          disturbed_wall_s.push_back(wall_s);
          continue;
        }
      }
    }
    samples_s.push_back(sample_s);
    wall_samples_s.push_back(wall_s);
  }
  // Read at once: the counts cover the repetitions and the reads between them.
  std::vector<probes::CounterReading> readings;
  if (counters) {
    EC_ASSIGN_OR_RETURN(readings, counters->Read());
  }
  Measurement m;
  if (counters) {
    CountersPerExecution(*counters, readings, static_cast<double>(samples_s.size() + disturbed_s.size()), m.counters,
                         m.uncounted);
  }
  m.window_s = now_s - window_start_s;
  m.repetitions = std::move(repetitions);
  m.window_start_unix_s = window_start_unix_s;
  const uint32_t clean_repetitions = static_cast<uint32_t>(samples_s.size());
  // A window with no undisturbed repetition still reports what it saw (it is not clean): never a zero.
  m.cpu_time = cpu != nullptr;
  m.runtime = SummarizeWindows(samples_s.empty() ? disturbed_s : samples_s);
  m.wall = SummarizeWindows(samples_s.empty() ? disturbed_wall_s : wall_samples_s);
  if (watch) {
    EC_ASSIGN_OR_RETURN(m.interference, watch->EndWindow(m.window_s));
    m.interference.set_disturbed_repetitions(disturbed);
    m.interference.set_total_repetitions(static_cast<uint32_t>(samples_s.size() + disturbed_s.size()));
    const Verdict verdict = JudgeInterference(m.interference, clean_repetitions, options, m.cpu_time);
    m.clean = verdict.clean;
    m.disturbance = verdict.reason;
    m.shared = m.interference.other_cpu_cores() >= options.interference.shared_cpu_cores;
  }
  if (meter) {
    EC_ASSIGN_OR_RETURN(const EnergyMark energy_end, MarkEnergy(*meter, clock));
    // The mean power over the interval the meter itself covered, times the
    // runtime stored for the op: energy / runtime is then a power the device
    // drew, never above what its power model allows. (The mean execution,
    // with disturbed ones, can be many times the median: 1,789 W once.)
    const double interval_s = energy_end.s - energy_start.s;
    const double power_w = MeanPowerW(*meter, energy_start, energy_end);
    const double runtime_s = m.runtime.median_s;
    m.energy_j = power_w * runtime_s;
    m.dynamic_energy_j = m.energy_j - meter->IdlePowerW() * runtime_s;
    // Each domain alike, so the top-level domains add up to the totals.
    const std::vector<MeterDomain> domains = meter->Domains();
    const std::vector<double> domain_end_j = meter->LastDomainEnergyJ();
    if (!domains.empty() && domain_end_j.size() == domains.size() && domain_start_j.size() == domains.size()) {
      for (size_t d = 0; d < domains.size(); ++d) {
        const double domain_w = interval_s > 0 ? (domain_end_j[d] - domain_start_j[d]) / interval_s : 0;
        v1::DomainEnergy& domain = m.domains.emplace_back();
        domain.set_domain(domains[d].name);
        domain.set_inside(domains[d].inside);
        domain.set_idle_power_w(domains[d].idle_power_w);
        domain.set_energy_j(domain_w * runtime_s);
        domain.set_dynamic_energy_j(domain.energy_j() - domains[d].idle_power_w * runtime_s);
      }
    }
    m.sensor_updates = meter->UpdateIntervalS() > 0 ? m.window_s / meter->UpdateIntervalS() : 0;
    m.energy_precise = m.sensor_updates >= options.min_sensor_updates;
  }
  if (counters) {
    const double executions = static_cast<double>(clean_repetitions + disturbed_s.size());
    // The loop's own reads (clock, interference) between repetitions count too,
    // which for a sub-microsecond op is most of it: count them alone (after the
    // window and its energy reading) and subtract.
    const int loops = static_cast<int>(std::min(executions, 1000.0));
    if (loops > 0) {
      EC_RETURN_IF_ERROR(counters->Start());
      for (int i = 0; i < loops; ++i) {
        (void)clock.NowS();
        (void)clock.NowS();
        if (cpu) (void)cpu->NowS(), (void)cpu->NowS();
        if (watch) (void)watch->WaitSinceLastS();
      }
      EC_ASSIGN_OR_RETURN(std::vector<probes::CounterReading> overhead, counters->Read());
      std::vector<v1::OpCounter> loop;
      std::vector<v1::UncountedEvent> ignored;
      CountersPerExecution(*counters, overhead, loops, loop, ignored);
      for (v1::OpCounter& c : m.counters) {
        for (const v1::OpCounter& o : loop) {
          if (o.event() == c.event()) c.set_per_execution(std::max(0.0, c.per_execution() - o.per_execution()));
        }
      }
    }
  }
  return m;
}

}  // namespace edgecost::profiler
