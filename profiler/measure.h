// The measurement loop: warm up, then repeat an op until the window is long
// enough both in time and in energy-sensor updates, and summarise runtime
// (median, spread, 95% interval of the median) and energy per execution.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "probes/counter_source.h"
#include "proto/edgecost.pb.h"

namespace edgecost::profiler {

// Monotonic time in seconds; tests substitute a fake.
class Clock {
 public:
  virtual ~Clock() = default;
  virtual double NowS() = 0;
};
Clock& SteadyClock();
// The calling thread's CPU time (CLOCK_THREAD_CPUTIME_ID): time the thread spends
// descheduled, waiting for a CPU another task holds, does not count. A core that
// runs slower (a busy SMT sibling, another guest, throttling) still does: the
// reference kernel (cpu_speed.h) is what sees that.
Clock& ThreadCpuClock();

// One domain a meter measures apart: a RAPL domain, a hwmon rail, a battery.
struct MeterDomain {
  std::string name;
  std::string inside;  // the domain that already includes this one; empty: top-level, in the total
  double idle_power_w = 0;
};

// Cumulative energy of the best available source; tests substitute a fake.
class EnergyMeter {
 public:
  virtual ~EnergyMeter() = default;
  virtual Result<double> EnergyJ() = 0;        // cumulative since some origin: the top-level domains' sum
  virtual double UpdateIntervalS() const = 0;  // how often the reading changes
  virtual double IdlePowerW() const = 0;       // measured before the run
  virtual v1::EnergySource Source() const = 0;
  virtual std::string Name() const = 0;
  // The most power the source can report: a power model's ceiling; a sensor has none.
  virtual double MaxPowerW() const { return std::numeric_limits<double>::infinity(); }
  // The domains the meter measures apart, with their idle power; none for an estimate.
  virtual std::vector<MeterDomain> Domains() const { return {}; }
  // Cumulative joules of each domain as read by the last EnergyJ() call.
  virtual std::vector<double> LastDomainEnergyJ() const { return {}; }
  // The time (steady clock, seconds) the last EnergyJ() covers up to, for a
  // meter that integrates on its own clock; none for one that does not say.
  virtual std::optional<double> LastReadS() const { return std::nullopt; }
};

// A meter reading and the time it covers up to. Mean power between two marks
// is over the span their energies cover: the meter's own stamps where it keeps
// them, so a read that took long or a preemption right after it (a loaded
// machine, a millisecond window) does not dilute the power.
struct EnergyMark {
  double j = 0;
  double s = 0;
};
Result<EnergyMark> MarkEnergy(EnergyMeter& meter, Clock& clock);
// Mean power between two marks (0 over no time), at most the meter's ceiling.
double MeanPowerW(const EnergyMeter& meter, const EnergyMark& start, const EnergyMark& end);

// What the scheduler and the hypervisor did to the op's threads while it was
// timed; tests substitute a fake.
class InterferenceWatch {
 public:
  virtual ~InterferenceWatch() = default;
  // After warm-up, before the first timed repetition.
  virtual Status BeginWindow() = 0;
  // Seconds the op's threads were runnable but waited for a CPU since the
  // previous call (or BeginWindow): read after every repetition.
  virtual Result<double> WaitSinceLastS() = 0;
  // The whole window: steal, run queue, load, involuntary switches.
  virtual Result<v1::Interference> EndWindow(double window_s) = 0;
};

struct InterferenceLimits {
  // A repetition is disturbed when its threads waited longer than this share
  // of its runtime, and at least min_wait_s: it is left out of the statistics.
  double wait_fraction = 0.02;
  double min_wait_s = 2e-6;
  // A window is clean when at most this share of its repetitions was
  // disturbed and the hypervisor stole at most max_steal_fraction of the CPUs.
  double max_disturbed_fraction = 0.2;
  double max_steal_fraction = 0.02;
  // Other tasks using this much CPU (in cores) share caches, memory bandwidth
  // and perhaps the core's SMT sibling with the op, which the scheduler's
  // accounting does not show: such a window is disturbed, or, with
  // confirm_shared, counts once another window agrees within confirm_tolerance
  // (which a steady load defeats: both windows are off alike).
  double shared_cpu_cores = 0.25;
  bool confirm_shared = false;
  double confirm_tolerance = 0.10;
  // A window is disturbed when the reference kernel around it ran this much
  // slower than usual on the device (see cpu_speed.h and profile.cc).
  double max_cpu_slowdown = 0.10;
};

struct RuntimeSummary {
  double median_s = 0;
  double stddev_s = 0;
  double ci95_low_s = 0;  // distribution-free interval of median_s (order statistics)
  double ci95_high_s = 0;
  uint32_t repetitions = 0;
};
// The median of the samples, with its spread and interval.
RuntimeSummary Summarize(std::vector<double> samples_s);

// At most this many short windows of consecutive repetitions per window.
inline constexpr size_t kShortWindows = 20;
// An op's runtime from its repetitions in the order they ran: cut into up to
// kShortWindows short windows of consecutive repetitions, it is the median of
// the fastest half of their medians (about their 25th percentile). A burst of
// load slows a few short windows, which then do not decide, where one window's
// median moves as soon as half its repetitions are slowed. The interval is the
// distribution-free one of that quantile of the short windows; the spread is
// over all repetitions.
RuntimeSummary SummarizeWindows(const std::vector<double>& samples_s);

struct MeasureOptions {
  int warmup_runs = 2;
  double warmup_s = 0.01;  // and at least this long: caches, page faults, frequency
  int min_repetitions = 5;
  int max_repetitions = 100000;
  double min_window_s = 0.1;    // at least this much timed work per op
  double max_window_s = 1.0;    // give up extending the window after this
  int min_sensor_updates = 10;  // energy needs this many sensor updates inside the window
  InterferenceLimits interference;
  // Set (ThreadCpuClock) for an op that runs on the calling thread alone: its
  // repetitions are timed on it as well as on the wall clock, the runtime is
  // the CPU time, and a wait for a CPU disturbs nothing (it adds no CPU time;
  // such repetitions are counted, not left out). Null: wall time, and waits
  // leave repetitions out. Other tasks' use of the CPUs then asks for a second
  // window that agrees (as confirm_shared) instead of disturbing the window.
  Clock* cpu_clock = nullptr;
  // An op shorter than this (by its warm-up) stays on the wall clock: reading
  // the CPU clock is a system call whose cost (0.3-0.7 us in a VM, more while
  // another task runs) swamps it, and a run that short is seldom preempted.
  double min_cpu_clock_runtime_s = 20e-6;
  // The op runs on the calling thread alone: others' use of the CPUs (the
  // other cores) asks for a second window that agrees instead of disturbing it.
  bool single_thread = false;
};

// At most this many repetitions are kept with their times, for traces.
inline constexpr size_t kMaxKeptRepetitions = 1000;

struct Repetition {
  double start_s = 0;      // from the window's start
  double runtime_s = 0;    // wall time: repetitions are a timeline (traces)
  bool disturbed = false;  // a thread of the op waited for a CPU: left out of a wall-clock runtime
};

struct Measurement {
  RuntimeSummary runtime;               // on the CPU clock when MeasureOptions::cpu_clock is set, else the wall clock
  RuntimeSummary wall;                  // the same repetitions on the wall clock
  bool cpu_time = false;                // runtime is the thread's CPU time
  std::vector<Repetition> repetitions;  // the first kMaxKeptRepetitions, disturbed ones included
  double window_start_unix_s = 0;       // wall time of the window's start (seconds since 1970, UTC)
  double energy_j = 0;                  // per execution, total
  double dynamic_energy_j = 0;          // per execution, minus idle power x runtime
  double window_s = 0;
  double sensor_updates = 0;    // updates the window spanned
  bool energy_precise = false;  // false: the window covered fewer updates than asked
  // With an InterferenceWatch: the runtime summarises the undisturbed
  // repetitions only, and `clean` says whether the window can be trusted.
  v1::Interference interference;
  bool clean = true;
  std::string disturbance;  // why not clean, in words
  bool shared = false;      // clean, but other tasks used the CPUs meanwhile: needs confirming
  // With a CounterSource: each counter over the window, scaled for
  // multiplexing and divided by the executions in it; events the source
  // counts but the PMU never scheduled in this window are in `uncounted`.
  std::vector<v1::OpCounter> counters;
  std::vector<v1::UncountedEvent> uncounted;
  // Per domain of the meter (none without domains), as energy_j and dynamic_energy_j are in total.
  std::vector<v1::DomainEnergy> domains;
};

// Runs `op` repeatedly and measures it. `meter` may be null (runtime only);
// `watch` may be null (nothing is checked and the window counts as clean);
// `counters` may be null (no performance counters are read).
Result<Measurement> Measure(const std::function<void()>& op, Clock& clock, EnergyMeter* meter,
                            const MeasureOptions& options, InterferenceWatch* watch = nullptr,
                            probes::CounterSource* counters = nullptr);

// Counters of a window of `executions` runs, per execution; events `source`
// counts that are missing from `readings` (never scheduled) go to `uncounted`.
void CountersPerExecution(const probes::CounterSource& source, const std::vector<probes::CounterReading>& readings,
                          double executions, std::vector<v1::OpCounter>& counters,
                          std::vector<v1::UncountedEvent>& uncounted);

// The verdict on a window's interference, and the reason in words when it is not clean.
struct Verdict {
  bool clean = true;
  std::string reason;
};
// With `cpu_time`, waits for a CPU do not disturb; with it or options.single_thread, other tasks' use of the
// CPUs asks for confirming.
Verdict JudgeInterference(const v1::Interference& interference, uint32_t clean_repetitions,
                          const MeasureOptions& options, bool cpu_time = false);

}  // namespace edgecost::profiler
