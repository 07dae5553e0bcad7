// IntegratePowerJ against synthetic power traces whose integrals are known in
// closed form: 1 kHz sampling with jittered timestamps, windows whose edges fall
// between samples.
#include <cmath>
#include <functional>
#include <numbers>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "probes/probe.h"

namespace edgecost::probes {
namespace {

constexpr double kStepS = 1e-3;    // 1 kHz
constexpr double kJitterS = 4e-4;  // +-0.4 ms: stamps stay in order

// Samples `watts` at 1 kHz from `from_s` to `to_s`, each stamp jittered; the
// value is the true power at the jittered stamp.
std::vector<PowerSample> Sampled(const std::function<double(double)>& watts, double from_s, double to_s,
                                 unsigned seed = 1) {
  std::mt19937 random(seed);
  std::uniform_real_distribution<double> jitter(-kJitterS, kJitterS);
  std::vector<PowerSample> trace;
  const int n = static_cast<int>(std::lround((to_s - from_s) / kStepS));
  for (int i = 0; i <= n; ++i) {
    const double t = from_s + i * kStepS + jitter(random);
    trace.push_back({t, watts(t)});
  }
  return trace;
}

double RelativeError(double got, double want) { return std::abs(got - want) / std::abs(want); }

TEST(IntegratePowerJTraces, ConstantPowerBetweenSamples) {
  const auto trace = Sampled([](double) { return 2.75; }, -0.05, 2.05);
  const double t0 = 0.1234567, t1 = 1.9876543;  // both edges between samples
  const double exact = 2.75 * (t1 - t0);
  const double energy = IntegratePowerJ(trace, t0, t1);
  EXPECT_LT(RelativeError(energy, exact), 0.005);
  // The trapezoid rule with linear edges is exact for a constant.
  EXPECT_NEAR(energy, exact, 1e-9 * exact);
}

TEST(IntegratePowerJTraces, LinearRampBetweenSamples) {
  // P(t) = 1.5 + 4 t; integral over [t0, t1] is 1.5 (t1 - t0) + 2 (t1^2 - t0^2).
  const auto trace = Sampled([](double t) { return 1.5 + 4 * t; }, -0.05, 2.05, 2);
  const double t0 = 0.3004321, t1 = 1.7771234;
  const double exact = 1.5 * (t1 - t0) + 2 * (t1 * t1 - t0 * t0);
  const double energy = IntegratePowerJ(trace, t0, t1);
  EXPECT_LT(RelativeError(energy, exact), 0.005);
  // Linear interpolation between samples reproduces a line exactly.
  EXPECT_NEAR(energy, exact, 1e-9 * exact);
}

TEST(IntegratePowerJTraces, SineOverWholePeriods) {
  const double pi = std::numbers::pi;
  for (const double hz : {1.0, 5.0, 17.0}) {
    // 6 W mean, 3 W swing, an arbitrary phase; whole periods average to the mean.
    const auto watts = [&](double t) { return 6 + 3 * std::sin(2 * pi * hz * t + 0.7); };
    const auto trace = Sampled(watts, -0.05, 2.1, 3);
    const double t0 = 0.0004713;  // between the first samples of the window
    const double t1 = t0 + std::floor(2.0 * hz) / hz;
    const double exact = 6 * (t1 - t0);
    EXPECT_LT(RelativeError(IntegratePowerJ(trace, t0, t1), exact), 0.005) << hz << " Hz";
  }
}

TEST(IntegratePowerJTraces, SineOverPartialPeriodsMatchesTheClosedForm) {
  const double pi = std::numbers::pi;
  const double hz = 3.0, mean = 4.0, swing = 2.5;
  const auto watts = [&](double t) { return mean + swing * std::sin(2 * pi * hz * t); };
  const auto exact = [&](double t0, double t1) {
    return mean * (t1 - t0) - swing / (2 * pi * hz) * (std::cos(2 * pi * hz * t1) - std::cos(2 * pi * hz * t0));
  };
  const auto trace = Sampled(watts, -0.05, 2.05, 4);
  std::mt19937 random(11);
  std::uniform_real_distribution<double> start(0.0, 1.0), length(0.05, 0.95);
  for (int i = 0; i < 200; ++i) {
    const double t0 = start(random);
    const double t1 = t0 + length(random);
    EXPECT_LT(RelativeError(IntegratePowerJ(trace, t0, t1), exact(t0, t1)), 0.005) << "[" << t0 << ", " << t1 << "]";
  }
}

TEST(IntegratePowerJTraces, PartialEdgeIntervalsAreInterpolated) {
  const std::vector<PowerSample> trace = {{0.0, 2.0}, {1.0, 4.0}, {2.0, 4.0}};
  // [0.25, 1]: from 2.5 W to 4 W; [1, 1.5]: 4 W.
  EXPECT_NEAR(IntegratePowerJ(trace, 0.25, 1.5), 0.75 * (2.5 + 4.0) / 2 + 0.5 * 4.0, 1e-12);
  // Both edges inside one interval: 2.5 W to 3.5 W over half a second.
  EXPECT_NEAR(IntegratePowerJ(trace, 0.25, 0.75), 0.5 * 3.0, 1e-12);
}

TEST(IntegratePowerJTraces, PowerIsHeldBeforeTheFirstAndAfterTheLastSample) {
  const std::vector<PowerSample> trace = {{1.0, 3.0}, {2.0, 5.0}};
  EXPECT_NEAR(IntegratePowerJ(trace, 0.0, 1.0), 3.0, 1e-12);   // held at 3 W before t = 1
  EXPECT_NEAR(IntegratePowerJ(trace, 2.0, 4.0), 10.0, 1e-12);  // held at 5 W after t = 2
  EXPECT_NEAR(IntegratePowerJ(trace, 0.0, 3.0), 3.0 + 4.0 + 5.0, 1e-12);
  const std::vector<PowerSample> single = {{1.0, 7.0}};
  EXPECT_NEAR(IntegratePowerJ(single, 0.5, 1.5), 7.0, 1e-12);
}

TEST(IntegratePowerJTraces, AdjacentWindowsAddUp) {
  const double pi = std::numbers::pi;
  const auto trace = Sampled([&](double t) { return 3 + std::sin(2 * pi * 7 * t) + t; }, -0.05, 2.05, 5);
  const double a = 0.11111, b = 0.77777, c = 1.66666;
  EXPECT_NEAR(IntegratePowerJ(trace, a, b) + IntegratePowerJ(trace, b, c), IntegratePowerJ(trace, a, c), 1e-9);
}

}  // namespace
}  // namespace edgecost::probes
