// The measurement loop with a fake clock and a fake energy meter.
#include "profiler/measure.h"

#include <cmath>

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace edgecost::profiler
