// The counter-based energy model: NNLS, the fit against a fake hwmon energy
// counter whose joules are a known linear function of scripted counts, its
// refusals, and the label of every estimate.
#include "profiler/energy_model.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "probes/sysfs.h"
#include "profiler/nnls.h"
#include "profiler/probe_meter.h"
#include "tests/fake_counters.h"
#include "tests/temp_dir.h"

namespace edgecost::profiler {
namespace {

using ::testing::HasSubstr;

TEST(Nnls, MatchesLeastSquaresWhenTheOptimumIsPositive) {
  // b = 2 a0 + 3 a1 exactly.
  Matrix a(4, 2);
  const double rows[4][2] = {{1, 0}, {0, 1}, {1, 1}, {2, 1}};
  std::vector<double> b;
  for (int i = 0; i < 4; ++i) {
    a(i, 0) = rows[i][0];
    a(i, 1) = rows[i][1];
    b.push_back(2 * rows[i][0] + 3 * rows[i][1]);
  }
  auto fit = SolveNnls(a, b);
  ASSERT_TRUE(fit.ok()) << fit.status().message();
  EXPECT_NEAR(fit->x[0], 2, 1e-12);
  EXPECT_NEAR(fit->x[1], 3, 1e-12);
  EXPECT_NEAR(fit->residual_norm, 0, 1e-12);
}

TEST(Nnls, ANegativeUnconstrainedWeightIsHeldAtZeroAndKktHolds) {
  std::mt19937 random(7);
  std::uniform_real_distribution<double> u(0, 1);
  for (int trial = 0; trial < 50; ++trial) {
    Matrix a(12, 4);
    std::vector<double> b(12);
    for (size_t i = 0; i < 12; ++i) {
      for (size_t j = 0; j < 4; ++j) a(i, j) = u(random);
      b[i] = a(i, 0) - 2 * a(i, 1) + 0.5 * a(i, 2) + 0.1 * (u(random) - 0.5);  // column 1 pulls negative
    }
    auto fit = SolveNnls(a, b);
    ASSERT_TRUE(fit.ok());
    // Karush-Kuhn-Tucker: x >= 0; the gradient A^T (b - A x) is zero where x > 0 and <= 0 where x = 0.
    for (size_t j = 0; j < 4; ++j) {
      EXPECT_GE(fit->x[j], 0);
      double g = 0;
      for (size_t i = 0; i < 12; ++i) {
        double r = b[i];
        for (size_t k = 0; k < 4; ++k) r -= a(i, k) * fit->x[k];
        g += a(i, j) * r;
      }
      if (fit->x[j] > 0) {
        EXPECT_NEAR(g, 0, 1e-9) << "trial " << trial << " column " << j;
      } else {
        EXPECT_LE(g, 1e-9) << "trial " << trial << " column " << j;
      }
    }
  }
}

TEST(Nnls, RefusesTooFewRowsAndASingularDesign) {
  Matrix wide(1, 2);
  EXPECT_THAT(SolveNnls(wide, {1}).status().message(), HasSubstr("too few samples"));
  Matrix twice(4, 2);
  for (size_t i = 0; i < 4; ++i) {
    twice(i, 0) = static_cast<double>(i + 1);
    twice(i, 1) = 3.0 * static_cast<double>(i + 1);  // the same column, scaled
  }
  const Status singular = SolveNnls(twice, {1, 2, 3, 4}, {"time", "cycles"}).status();
  EXPECT_EQ(singular.code(), ErrorCode::kInvalidArgument);
  EXPECT_THAT(singular.message(), HasSubstr("singular"));
  EXPECT_THAT(singular.message(), HasSubstr("cycles"));
}

class FakeClock : public Clock {
 public:
  double NowS() override { return now_s; }
  double now_s = 1000.0;
};

// The true model of the fake device.
constexpr double kIdleW = 2.0;
const std::map<std::string, double> kJoulesPerCount = {
    {"cycles", 0.5e-9}, {"instructions", 0.2e-9}, {"LLC-load-misses", 20e-9}};

// A fake hwmon chip with an energy counter (uJ), and workloads that advance a
// fake clock, script the counts of their window and add the energy the true
// model gives them, with a little deterministic noise.
class Calibration : public edgecost::testing::TempDirTest {
 protected:
  void SetUp() override {
    TempDirTest::SetUp();
    std::filesystem::create_directories(dir_ / "class/hwmon/hwmon0");
    std::ofstream(dir_ / "class/hwmon/hwmon0/name") << "fakemeter\n";
    WriteEnergy();
  }
  void WriteEnergy() {
    std::ofstream(dir_ / "class/hwmon/hwmon0/energy1_input")
        << static_cast<long long>(std::llround(energy_j_ * 1e6)) << "\n";
  }
  // One window of `rates` (counts per second per thread) on `threads` threads.
  Workload Make(const std::string& name, std::map<std::string, double> rates, int threads) {
    return {name, [this, rates, threads](double window_s) {
              const double scale = 1 + 0.15 * (window_ % 4);  // windows differ: rates are not collinear with time
              window_s *= 1 + 0.1 * (window_ % 3);
              counts_.clear();
              double energy_j = kIdleW * window_s;
              for (const auto& [event, rate] : rates) {
                const double count = rate * threads * scale * window_s;
                counts_[event] = count;
                energy_j += kJoulesPerCount.at(event) * count;
              }
              const double noise = noise_ * ((window_ * 7919) % 11 - 5) / 5.0;  // within +-noise_
              energy_j_ += energy_j * (1 + noise);
              WriteEnergy();
              clock_.now_s += window_s;
              ++window_;
            }};
  }
  std::vector<Workload> Workloads() {
    return {Make("idle", {{"cycles", 1e7}, {"instructions", 5e6}, {"LLC-load-misses", 1e3}}, 1),
            Make("compute x1", {{"cycles", 2e9}, {"instructions", 3e9}, {"LLC-load-misses", 1e3}}, 1),
            Make("compute x2", {{"cycles", 2e9}, {"instructions", 3e9}, {"LLC-load-misses", 1e3}}, 2),
            Make("cache x1", {{"cycles", 2e9}, {"instructions", 1.8e9}, {"LLC-load-misses", 1e5}}, 1),
            Make("memory x1", {{"cycles", 2e9}, {"instructions", 5e8}, {"LLC-load-misses", 5e7}}, 1),
            Make("memory x2", {{"cycles", 2e9}, {"instructions", 5e8}, {"LLC-load-misses", 5e7}}, 2)};
  }
  std::unique_ptr<testing::FakeCounterSource> Counters() {
    return std::make_unique<testing::FakeCounterSource>(
        std::vector<std::string>{"cycles", "instructions", "LLC-load-misses"}, [this](int) {
          std::vector<probes::CounterReading> readings;
          for (const auto& [event, count] : counts_) {
            // cycles shares the PMU with another group: it ran 60% of the window.
            const uint64_t running = event == "cycles" ? 600 : 1000;
            readings.push_back({event, static_cast<uint64_t>(count * running / 1000.0), 1000, running});
          }
          return readings;
        });
  }
  Result<std::unique_ptr<ProbeMeter>> Meter() {
    probes::Detected detected;
    probes::DetectHwmon(dir_.string(), {}, detected);
    if (detected.probes.empty()) return NotFound("the fake hwmon chip was not detected");
    return ProbeMeter::Start(std::move(detected.probes.front()), /*idle_window_s=*/0.001);
  }

  FakeClock clock_;
  std::map<std::string, double> counts_;
  double energy_j_ = 100;
  double noise_ = 0;
  int window_ = 0;
};

TEST_F(Calibration, TheFitRecoversTheWeightsOfAKnownLinearDevice) {
  for (const double noise : {0.0, 0.002}) {
    SCOPED_TRACE("noise " + std::to_string(noise));
    noise_ = noise;
    auto meter = Meter();
    ASSERT_TRUE(meter.ok()) << meter.status().message();
    auto counters = Counters();
    auto samples = RunCalibration(Workloads(), /*rounds=*/3, /*window_s=*/0.5, *counters, **meter, clock_);
    ASSERT_TRUE(samples.ok()) << samples.status().message();
    ASSERT_EQ(samples->size(), 18u);
    const std::vector<std::string> events = FittableEvents(*samples);
    ASSERT_EQ(events.size(), 3u);
    auto fit = FitCalibration(*samples, events);
    ASSERT_TRUE(fit.ok()) << fit.status().message();
    const double tolerance = noise > 0 ? 0.02 : 1e-4;
    EXPECT_NEAR(fit->idle_power_w(), kIdleW, tolerance * kIdleW);
    EXPECT_LE(fit->idle_power_ci95_low_w(), fit->idle_power_w());
    EXPECT_GE(fit->idle_power_ci95_high_w(), fit->idle_power_w());
    ASSERT_EQ(fit->weights_size(), 3);
    for (const v1::CounterWeight& w : fit->weights()) {
      const double truth = kJoulesPerCount.at(w.event());
      EXPECT_NEAR(w.joules_per_count(), truth, tolerance * truth) << w.event();
      std::printf("%-16s fitted %.6g J/count (true %.6g, %+.3f%%), 95%% interval %.6g .. %.6g\n", w.event().c_str(),
                  w.joules_per_count(), truth, 100 * (w.joules_per_count() / truth - 1), w.ci95_low(), w.ci95_high());
      EXPECT_LE(w.ci95_low(), w.joules_per_count());
      EXPECT_GE(w.ci95_high(), w.joules_per_count());
    }
    std::printf("idle power       fitted %.6g W (true %.6g), relative error %.3f%%\n", fit->idle_power_w(), kIdleW,
                100 * fit->relative_error());
    EXPECT_LE(fit->relative_error(), noise + 1e-4);
    EXPECT_EQ(fit->samples(), 18u);
    EXPECT_THAT(std::vector<std::string>(fit->workloads().begin(), fit->workloads().end()),
                ::testing::ElementsAre("idle", "compute", "cache", "memory"));
  }
}

TEST_F(Calibration, TooFewSamplesAreRefused) {
  auto meter = Meter();
  ASSERT_TRUE(meter.ok());
  auto counters = Counters();
  std::vector<Workload> two = Workloads();
  two.resize(4);
  auto samples = RunCalibration(two, 1, 0.5, *counters, **meter, clock_);
  ASSERT_TRUE(samples.ok());
  const Status refused = FitCalibration(*samples, {"cycles", "instructions", "LLC-load-misses"}).status();
  EXPECT_EQ(refused.code(), ErrorCode::kInvalidArgument);
  EXPECT_THAT(refused.message(), HasSubstr("too few samples"));
}

TEST_F(Calibration, ASingularDesignIsRefusedNamingTheCounter) {
  auto meter = Meter();
  ASSERT_TRUE(meter.ok());
  auto counters = Counters();
  // Every workload with the same mix: instructions always 1.5 x cycles.
  std::vector<Workload> same;
  for (int k = 1; k <= 6; ++k) {
    same.push_back(Make("compute x" + std::to_string(k), {{"cycles", 2e9}, {"instructions", 3e9}}, k));
  }
  auto samples = RunCalibration(same, 1, 0.5, *counters, **meter, clock_);
  ASSERT_TRUE(samples.ok());
  const Status refused = FitCalibration(*samples, {"cycles", "instructions"}).status();
  EXPECT_EQ(refused.code(), ErrorCode::kInvalidArgument);
  EXPECT_THAT(refused.message(), HasSubstr("singular"));
  EXPECT_THAT(refused.message(), HasSubstr("instructions"));
}

TEST(EnergyModel, AnEstimateNamesItsCalibrationAndNeedsEveryWeighedCounter) {
  v1::EnergyCalibration calibration;
  calibration.set_probe("hwmon fakemeter (hwmon0)");
  calibration.set_calibrated_at("2026-11-25T04:10:00Z");
  calibration.set_relative_error(0.0123);
  calibration.set_idle_power_w(2);
  v1::CounterWeight* w = calibration.add_weights();
  w->set_event("task-clock");
  w->set_joules_per_count(1.5e-9);  // 1.5 W per busy core
  EXPECT_EQ(CalibrationLabel(calibration),
            "MODEL (calibrated against hwmon fakemeter (hwmon0) on 2026-11-25, error 1.2%)");
  v1::OpCost op;
  EXPECT_FALSE(ModelEnergyJ(calibration, 0.001, op.counters()).has_value());  // no task-clock: no model estimate
  v1::OpCounter* c = op.add_counters();
  c->set_event("task-clock");
  c->set_per_execution(2e6);  // 2 ms of CPU in 1 ms: two cores
  EXPECT_DOUBLE_EQ(*ModelEnergyJ(calibration, 0.001, op.counters()), 2 * 0.001 + 1.5e-9 * 2e6);
}

}  // namespace
}  // namespace edgecost::profiler
