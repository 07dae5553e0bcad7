// The measurement loop with a fake clock and a fake energy meter.
#include "profiler/measure.h"

#include <cmath>
#include <vector>

#include <gtest/gtest.h>

#include "tests/fake_counters.h"

namespace edgecost::profiler {
namespace {

class FakeClock : public Clock {
 public:
  double NowS() override { return now_s; }
  double now_s = 100.0;
};

// Energy grows at `power_w` with the fake clock, in steps of the update interval.
class FakeMeter : public EnergyMeter {
 public:
  FakeMeter(FakeClock& clock, double power_w, double idle_w, double interval_s)
      : clock_(clock), power_w_(power_w), idle_w_(idle_w), interval_s_(interval_s) {}
  Result<double> EnergyJ() override {
    const double updates = std::floor(clock_.now_s / interval_s_);
    return updates * interval_s_ * power_w_;
  }
  double UpdateIntervalS() const override { return interval_s_; }
  double IdlePowerW() const override { return idle_w_; }
  v1::EnergySource Source() const override { return v1::ENERGY_SOURCE_COUNTER; }
  std::string Name() const override { return "fake"; }

 private:
  FakeClock& clock_;
  double power_w_, idle_w_, interval_s_;
};

TEST(Summarize, MedianSpreadAndInterval) {
  const RuntimeSummary s = Summarize({5, 1, 3, 2, 4});
  EXPECT_DOUBLE_EQ(s.median_s, 3);
  EXPECT_EQ(s.repetitions, 5u);
  EXPECT_NEAR(s.stddev_s, 1.5811388, 1e-6);
  EXPECT_LE(s.ci95_low_s, s.median_s);
  EXPECT_GE(s.ci95_high_s, s.median_s);
  EXPECT_DOUBLE_EQ(Summarize({1, 2, 3, 4}).median_s, 2.5);
  std::vector<double> many;
  for (int i = 0; i < 1000; ++i) many.push_back(i);
  const RuntimeSummary m = Summarize(many);
  // 1.96 sqrt(1000)/2 = 31 order statistics either side of the middle.
  EXPECT_NEAR(m.ci95_low_s, 469, 1);
  EXPECT_NEAR(m.ci95_high_s, 530, 1);
}

// A burst of load over most of a window moves its median; the short windows' fastest half does not.
TEST(SummarizeWindows, ABurstOfSlowRepetitionsDoesNotDecide) {
  std::vector<double> samples(100, 1.0);
  for (int i = 20; i < 80; ++i) samples[i] = 3.0;  // 60% of the window, in one burst
  EXPECT_DOUBLE_EQ(Summarize(samples).median_s, 3.0);
  const RuntimeSummary s = SummarizeWindows(samples);
  EXPECT_DOUBLE_EQ(s.median_s, 1.0);
  EXPECT_EQ(s.repetitions, 100u);
  EXPECT_LE(s.ci95_low_s, s.median_s);
  EXPECT_GE(s.ci95_high_s, s.median_s);
  EXPECT_GT(s.stddev_s, 0);  // over every repetition
  // Few repetitions: each its own short window, the fastest half's median.
  EXPECT_DOUBLE_EQ(SummarizeWindows({5, 1, 3, 2, 4}).median_s, 2);
  EXPECT_DOUBLE_EQ(SummarizeWindows({7}).median_s, 7);
  // Steady repetitions: the interval is as narrow as they are.
  const RuntimeSummary steady = SummarizeWindows(std::vector<double>(1000, 2.0));
  EXPECT_DOUBLE_EQ(steady.ci95_low_s, 2.0);
  EXPECT_DOUBLE_EQ(steady.ci95_high_s, 2.0);
}

TEST(Measure, RepeatsUntilTheWindowCoversEnoughSensorUpdates) {
  FakeClock clock;
  FakeMeter meter(clock, /*power_w=*/10, /*idle_w=*/2, /*interval_s=*/0.01);
  int runs = 0;
  auto op = [&] {
    clock.now_s += 0.001;  // each run takes 1 ms
    ++runs;
  };
  MeasureOptions options;
  options.warmup_runs = 3;
  options.warmup_s = 0;
  options.min_window_s = 0.005;
  options.min_sensor_updates = 10;  // 10 x 10 ms = 100 ms window
  auto m = Measure(op, clock, &meter, options);
  ASSERT_TRUE(m.ok());
  EXPECT_NEAR(m->runtime.median_s, 0.001, 1e-12);
  EXPECT_GE(m->window_s, 0.1 - 1e-9);
  EXPECT_GE(m->runtime.repetitions, 100u);
  EXPECT_EQ(runs, static_cast<int>(m->runtime.repetitions) + 3);
  EXPECT_TRUE(m->energy_precise);
  // 10 W for 1 ms = 10 mJ per run, within one sensor step over the window.
  EXPECT_NEAR(m->energy_j, 0.010, 0.0011);
  EXPECT_NEAR(m->dynamic_energy_j, m->energy_j - 2 * 0.001, 1e-9);
}

TEST(Measure, ReportsAWindowTooShortForTheSensor) {
  FakeClock clock;
  FakeMeter meter(clock, 10, 0, /*interval_s=*/1.0);  // a slow sensor
  MeasureOptions options;
  options.max_window_s = 0.05;
  auto m = Measure([&] { clock.now_s += 0.001; }, clock, &meter, options);
  ASSERT_TRUE(m.ok());
  EXPECT_FALSE(m->energy_precise);
  EXPECT_LT(m->sensor_updates, options.min_sensor_updates);
}

TEST(Measure, RuntimeOnlyWithoutAMeter) {
  FakeClock clock;
  MeasureOptions options;
  options.min_repetitions = 7;
  options.min_window_s = 0;
  auto m = Measure([&] { clock.now_s += 0.5; }, clock, nullptr, options);
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->runtime.repetitions, 7u);
  EXPECT_DOUBLE_EQ(m->energy_j, 0);
}

TEST(Measure, CountersAreScaledForMultiplexingAndDividedPerExecution) {
  FakeClock clock;
  int runs = 0, runs_at_start = 0;
  testing::FakeCounterSource counters({"cycles", "task-clock", "LLC-load-misses"},
                                      [&](int) {
                                        const auto n = static_cast<uint64_t>(runs - runs_at_start);
                                        return std::vector<probes::CounterReading>{
                                            {"cycles", 500 * n, 1000, 500},  // on the PMU half the window: 1000 per run
                                            {"task-clock", 1'000'000 * n, 1000, 1000},
                                            {"LLC-load-misses", 0, 1000, 0}};  // never scheduled
                                      },
                                      {{"branch-misses", "no PMU here", "run on bare metal"}});
  counters.on_start = [&] { runs_at_start = runs; };
  MeasureOptions options;
  options.warmup_runs = 3;
  options.warmup_s = 0;
  options.min_window_s = 0.02;
  auto m = Measure(
      [&] {
        clock.now_s += 0.001;
        ++runs;
      },
      clock, nullptr, options, nullptr, &counters);
  ASSERT_TRUE(m.ok()) << m.status().message();
  EXPECT_EQ(counters.windows(), 2);  // the op's window, then the loop's own reads alone
  ASSERT_EQ(m->counters.size(), 2u);
  EXPECT_EQ(m->counters[0].event(), "cycles");
  EXPECT_DOUBLE_EQ(m->counters[0].per_execution(), 1000);  // warm-up runs are outside the window
  EXPECT_DOUBLE_EQ(m->counters[0].running_fraction(), 0.5);
  EXPECT_EQ(m->counters[1].event(), "task-clock");
  EXPECT_DOUBLE_EQ(m->counters[1].per_execution(), 1e6);
  ASSERT_EQ(m->uncounted.size(), 1u);  // absent, not a zero
  EXPECT_EQ(m->uncounted[0].event(), "LLC-load-misses");
  EXPECT_FALSE(m->uncounted[0].reason().empty());
}

// Scripted interference: repetition i waited `waits_s[i % size]` for a CPU.
class FakeWatch : public InterferenceWatch {
 public:
  explicit FakeWatch(std::vector<double> waits_s, double steal_fraction = 0, double other_cpu_cores = 0)
      : waits_s_(std::move(waits_s)), steal_fraction_(steal_fraction), other_cpu_cores_(other_cpu_cores) {}
  Status BeginWindow() override {
    ++windows;
    return Status::Ok();
  }
  Result<double> WaitSinceLastS() override { return waits_s_[next_++ % waits_s_.size()]; }
  Result<v1::Interference> EndWindow(double) override {
    v1::Interference i;
    i.set_watched(true);
    i.set_steal_fraction(steal_fraction_);
    i.set_other_runnable(1);
    i.set_load1(1.5);
    i.set_other_cpu_cores(other_cpu_cores_);
    return i;
  }
  int windows = 0;

 private:
  std::vector<double> waits_s_;
  double steal_fraction_;
  double other_cpu_cores_;
  size_t next_ = 0;
};

// An op that takes 1 ms, or 8 ms (a scheduler quantum) when the watch will
// report that its threads waited: the disturbed repetitions are the slow ones.
struct QuantumOp {
  FakeClock& clock;
  std::vector<bool> slow;
  size_t i = 0;
  void operator()() { clock.now_s += slow[i++ % slow.size()] ? 0.008 : 0.001; }
};

MeasureOptions SmallWindow() {
  MeasureOptions options;
  options.warmup_runs = 0;
  options.warmup_s = 0;
  options.min_window_s = 0.05;
  options.max_window_s = 0.5;
  return options;
}

TEST(Measure, LeavesOutRepetitionsWhoseThreadsWaitedForACpu) {
  FakeClock clock;
  // One repetition in ten waited 7 ms for a CPU and took 8 ms.
  std::vector<double> waits(10, 0.0);
  waits[3] = 0.007;
  std::vector<bool> slow(10, false);
  slow[3] = true;
  FakeWatch watch(waits);
  auto m = Measure(QuantumOp{clock, slow}, clock, nullptr, SmallWindow(), &watch);
  ASSERT_TRUE(m.ok());
  EXPECT_TRUE(m->clean) << m->disturbance;
  EXPECT_NEAR(m->runtime.median_s, 0.001, 1e-12);
  EXPECT_NEAR(m->runtime.ci95_high_s, 0.001, 1e-12);  // no quantum left in the interval either
  // Every tenth repetition (the window may end inside a tenth).
  EXPECT_EQ(m->interference.disturbed_repetitions(), (m->interference.total_repetitions() + 6) / 10);
  EXPECT_EQ(m->runtime.repetitions, m->interference.total_repetitions() - m->interference.disturbed_repetitions());
}

TEST(Measure, AWaitShorterThanTheThresholdIsNotADisturbance) {
  FakeClock clock;
  // 10 us of waiting on a 1 ms repetition is 1%, under the 2% threshold.
  FakeWatch watch({1e-5});
  auto m = Measure([&] { clock.now_s += 0.001; }, clock, nullptr, SmallWindow(), &watch);
  ASSERT_TRUE(m.ok());
  EXPECT_TRUE(m->clean);
  EXPECT_EQ(m->interference.disturbed_repetitions(), 0u);
}

TEST(Measure, AWindowMostlyDisturbedIsNotClean) {
  FakeClock clock;
  FakeWatch watch({0.007, 0.0});  // every other repetition waited out a quantum
  auto m = Measure(QuantumOp{clock, {true, false}}, clock, nullptr, SmallWindow(), &watch);
  ASSERT_TRUE(m.ok());
  EXPECT_FALSE(m->clean);
  EXPECT_NEAR(m->interference.disturbed_repetitions(), m->interference.total_repetitions() / 2.0, 1);
  EXPECT_NE(m->disturbance.find("% of the repetitions waited for a CPU"), std::string::npos) << m->disturbance;
  EXPECT_NE(m->disturbance.find("1 other tasks runnable, load 1.50"), std::string::npos) << m->disturbance;
  // What is kept is still the undisturbed repetitions' figure, for the least-disturbed attempt.
  EXPECT_NEAR(m->runtime.median_s, 0.001, 1e-12);
}

TEST(Measure, AWindowEveryRepetitionOfWhichWasDisturbedEndsAtTheCap) {
  FakeClock clock;
  FakeWatch watch({0.007});
  MeasureOptions options = SmallWindow();
  auto m = Measure(QuantumOp{clock, {true}}, clock, nullptr, options, &watch);
  ASSERT_TRUE(m.ok());
  EXPECT_FALSE(m->clean);
  EXPECT_EQ(m->interference.disturbed_repetitions(), m->interference.total_repetitions());
  EXPECT_NEAR(m->runtime.median_s, 0.008, 1e-12);  // what it saw, never a zero
  EXPECT_GE(m->window_s, options.max_window_s);    // searched for clean repetitions up to the cap
  EXPECT_LT(m->window_s, options.max_window_s + 0.01);
}

TEST(Measure, StealTimeMakesAWindowUnclean) {
  FakeClock clock;
  FakeWatch watch({0.0}, /*steal_fraction=*/0.15);
  auto m = Measure([&] { clock.now_s += 0.001; }, clock, nullptr, SmallWindow(), &watch);
  ASSERT_TRUE(m.ok());
  EXPECT_FALSE(m->clean);
  EXPECT_NE(m->disturbance.find("hypervisor took 15%"), std::string::npos) << m->disturbance;
}

// Energy per execution is the window's mean power times the runtime stored for
// the op (its median): slow, disturbed executions do not make an op appear to
// draw more than the device can (a mean over them once implied 1,789 W from a
// power model whose ceiling is 5 W).
TEST(Measure, EnergyIsTheMeanPowerOverTheStoredRuntime) {
  FakeClock clock;
  FakeMeter meter(clock, /*power_w=*/10, /*idle_w=*/2, /*interval_s=*/0.001);
  FakeWatch watch({0.007, 0.0});
  MeasureOptions options = SmallWindow();
  options.min_sensor_updates = 1;
  auto m = Measure(QuantumOp{clock, {true, false}}, clock, &meter, options, &watch);
  ASSERT_TRUE(m.ok());
  ASSERT_GT(m->interference.disturbed_repetitions(), 0u);
  EXPECT_NEAR(m->runtime.median_s, 0.001, 1e-12);  // the clean executions
  // 10 W over the meter's interval, within a sensor step, times 1 ms.
  EXPECT_NEAR(m->energy_j, 10 * 0.001, 10 * 0.001 * 0.05);
  EXPECT_LE(m->energy_j / m->runtime.median_s, 10 * 1.05);
  EXPECT_NEAR(m->dynamic_energy_j, m->energy_j - 2 * 0.001, 1e-12);
}

// On the thread's CPU clock a repetition that waited for a CPU took no longer: it is counted, not left
// out, and does not disturb the window; others' use of the CPUs asks for confirming instead.
TEST(Measure, OnTheThreadsCpuClockAWaitForACpuDisturbsNothing) {
  FakeClock wall, cpu;
  MeasureOptions options = SmallWindow();
  options.cpu_clock = &cpu;
  options.min_cpu_clock_runtime_s = 0;
  FakeWatch watch({0.007, 0.0}, 0, /*other_cpu_cores=*/1.0);  // every other repetition waited out a quantum
  bool slow = true;
  auto op = [&] {
    wall.now_s += slow ? 0.008 : 0.001;  // the wait is in the wall time
    cpu.now_s += 0.001;                  // not in the thread's CPU time
    slow = !slow;
  };
  auto m = Measure(op, wall, nullptr, options, &watch);
  ASSERT_TRUE(m.ok());
  EXPECT_TRUE(m->cpu_time);
  EXPECT_TRUE(m->clean) << m->disturbance;
  EXPECT_TRUE(m->shared);  // to be confirmed by a second window
  EXPECT_NEAR(m->runtime.median_s, 0.001, 1e-12);
  EXPECT_NEAR(m->interference.disturbed_repetitions(), m->interference.total_repetitions() / 2.0, 1);
  EXPECT_EQ(m->runtime.repetitions, m->interference.total_repetitions());
  EXPECT_GT(m->wall.ci95_high_s, m->runtime.ci95_high_s);  // the wall clock saw the waits

  // The same on the wall clock: half the repetitions left out, the window disturbed.
  FakeWatch again({0.007, 0.0});
  options.cpu_clock = nullptr;
  slow = true;
  auto w = Measure(op, wall, nullptr, options, &again);
  ASSERT_TRUE(w.ok());
  EXPECT_FALSE(w->cpu_time);
  EXPECT_FALSE(w->clean);
}

// An op shorter than the CPU clock is worth stays on the wall clock; on one thread, others' use of the
// CPUs asks for a second window there too.
TEST(Measure, AShortOpStaysOnTheWallClock) {
  FakeClock wall, cpu;
  MeasureOptions options = SmallWindow();
  options.warmup_runs = 2;
  options.cpu_clock = &cpu;
  options.min_cpu_clock_runtime_s = 20e-6;
  options.single_thread = true;
  FakeWatch watch({0.0}, 0, /*other_cpu_cores=*/1.0);
  auto m = Measure(
      [&] {
        wall.now_s += 5e-6;
        cpu.now_s += 4e-6;
      },
      wall, nullptr, options, &watch);
  ASSERT_TRUE(m.ok());
  EXPECT_FALSE(m->cpu_time);
  EXPECT_NEAR(m->runtime.median_s, 5e-6, 1e-12);
  EXPECT_TRUE(m->clean) << m->disturbance;
  EXPECT_TRUE(m->shared);
  // A team's window is disturbed by it: its barriers wait for a thread that shares a core.
  options.single_thread = false;
  FakeWatch team({0.0}, 0, 1.0);
  auto t = Measure([&] { wall.now_s += 5e-6; }, wall, nullptr, options, &team);
  ASSERT_TRUE(t.ok());
  EXPECT_FALSE(t->clean);
  EXPECT_NE(t->disturbance.find("other tasks used 1.00 CPUs meanwhile"), std::string::npos) << t->disturbance;
}

}  // namespace
}  // namespace edgecost::profiler
