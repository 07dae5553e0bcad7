// EnergyMonitor over fake probes: counters that wrap inside the window, and
// power probes integrated over a fake or a real monotonic clock.
#include <atomic>
#include <chrono>
#include <cmath>
#include <memory>
#include <thread>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "probes/probe.h"

namespace edgecost::probes {
namespace {

using ::testing::HasSubstr;

// Cumulative joules the test sets by hand; domain d reads its true value modulo
// wrap[d] (0: never wraps), as RAPL's energy_uj does at max_energy_range_uj.
class WrappingCounter : public Probe {
 public:
  WrappingCounter(std::vector<double>* true_j, std::vector<double> wrap) : true_j_(true_j), wrap_(std::move(wrap)) {
    info_.source = "fake";
    info_.name = "wrapping counter";
    info_.available = true;
    info_.kind = ReadingKind::kEnergyCounter;
    for (size_t d = 0; d < wrap_.size(); ++d) info_.domains.push_back("domain" + std::to_string(d));
    info_.resolution = 1e-6;
    info_.update_interval_s = 1e-3;
  }
  const ProbeInfo& info() const override { return info_; }
  Result<std::vector<double>> Read() override {
    std::vector<double> raw;
    for (size_t d = 0; d < wrap_.size(); ++d)
      raw.push_back(wrap_[d] > 0 ? std::fmod((*true_j_)[d], wrap_[d]) : (*true_j_)[d]);
    return raw;
  }
  double WrapJ(size_t domain) const override { return domain < wrap_.size() ? wrap_[domain] : 0; }

 private:
  std::vector<double>* true_j_;
  std::vector<double> wrap_;
  ProbeInfo info_;
};

TEST(EnergyMonitorFakes, CounterWrappingInsideTheWindowGivesTheTrueDifference) {
  std::vector<double> joules = {95.0};
  double now_s = 10.0;
  EnergyMonitor monitor(std::make_unique<WrappingCounter>(&joules, std::vector<double>{100.0}), 0,
                        [&now_s] { return now_s; });
  ASSERT_TRUE(monitor.Start().ok());
  joules[0] = 103.0;  // the raw value goes 95 -> 3
  now_s = 10.5;
  monitor.Stop();
  auto energy = monitor.EnergyJ();
  ASSERT_TRUE(energy.ok()) << energy.status().message();
  ASSERT_EQ(energy->size(), 1u);
  EXPECT_NEAR((*energy)[0], 8.0, 1e-9);
  EXPECT_GE((*energy)[0], 0.0);
}

TEST(EnergyMonitorFakes, CounterReadOftenAcrossSeveralWraps) {
  std::vector<double> joules = {70.0, 1000.0};  // domain 1 never wraps
  double now_s = 0;
  EnergyMonitor monitor(std::make_unique<WrappingCounter>(&joules, std::vector<double>{100.0, 0.0}), 0,
                        [&now_s] { return now_s; });
  ASSERT_TRUE(monitor.Start().ok());
  for (int step = 1; step <= 10; ++step) {  // 30 J a step: three wraps of domain 0
    joules[0] += 30;
    joules[1] += 2;
    now_s += 0.1;
    auto energy = monitor.EnergyJ();
    ASSERT_TRUE(energy.ok()) << energy.status().message();
    ASSERT_EQ(energy->size(), 2u);
    EXPECT_NEAR((*energy)[0], 30.0 * step, 1e-9) << "step " << step;
    EXPECT_NEAR((*energy)[1], 2.0 * step, 1e-9) << "step " << step;
  }
  monitor.Stop();
  joules[0] += 50;  // after Stop(): not counted
  joules[1] += 50;
  auto energy = monitor.EnergyJ();
  ASSERT_TRUE(energy.ok());
  EXPECT_NEAR((*energy)[0], 300.0, 1e-9);
  EXPECT_NEAR((*energy)[1], 20.0, 1e-9);
}

TEST(EnergyMonitorFakes, RestartBeginsANewWindow) {
  std::vector<double> joules = {10.0};
  double now_s = 0;
  EnergyMonitor monitor(std::make_unique<WrappingCounter>(&joules, std::vector<double>{100.0}), 0,
                        [&now_s] { return now_s; });
  ASSERT_TRUE(monitor.Start().ok());
  joules[0] = 40;
  monitor.Stop();
  joules[0] = 60;  // between windows
  ASSERT_TRUE(monitor.Start().ok());
  joules[0] = 65;
  monitor.Stop();
  auto energy = monitor.EnergyJ();
  ASSERT_TRUE(energy.ok());
  EXPECT_NEAR((*energy)[0], 5.0, 1e-9);
}

TEST(EnergyMonitorFakes, UpdatesSinceStartFollowsTheClock) {
  std::vector<double> joules = {0.0};
  double now_s = 100.0;
  EnergyMonitor monitor(std::make_unique<WrappingCounter>(&joules, std::vector<double>{100.0}), 0,
                        [&now_s] { return now_s; });
  ASSERT_TRUE(monitor.Start().ok());
  now_s = 100.25;  // 1 ms updates
  EXPECT_NEAR(monitor.UpdatesSinceStart(), 250, 1e-6);
  now_s = 100.5;
  monitor.Stop();
  now_s = 200;  // stopped: the window is closed
  EXPECT_NEAR(monitor.UpdatesSinceStart(), 500, 1e-6);
}

TEST(EnergyMonitorFakes, NotStartedIsAnError) {
  std::vector<double> joules = {0.0};
  EnergyMonitor monitor(std::make_unique<WrappingCounter>(&joules, std::vector<double>{100.0}));
  EXPECT_FALSE(monitor.EnergyJ().ok());
}

// Constant watts per domain; from the `fail_after`-th read on, reads fail.
class FakePower : public Probe {
 public:
  FakePower(std::vector<double> watts, double interval_s, int fail_after = -1)
      : watts_(std::move(watts)), fail_after_(fail_after) {
    info_.source = "fake";
    info_.name = "fake power";
    info_.available = true;
    info_.kind = ReadingKind::kPower;
    for (size_t d = 0; d < watts_.size(); ++d) info_.domains.push_back("rail" + std::to_string(d));
    info_.resolution = 1e-3;
    info_.update_interval_s = interval_s;
  }
  const ProbeInfo& info() const override { return info_; }
  Result<std::vector<double>> Read() override {
    if (fail_after_ >= 0 && reads_.fetch_add(1) >= fail_after_) return Unavailable("fake power: sensor unplugged");
    return watts_;
  }

 private:
  std::vector<double> watts_;
  int fail_after_;
  std::atomic<int> reads_{0};
  ProbeInfo info_;
};

TEST(EnergyMonitorFakes, ConstantPowerOnAFakeClockIsWattsTimesTheWindow) {
  std::atomic<double> now_s{50.0};
  EnergyMonitor monitor(std::make_unique<FakePower>(std::vector<double>{1.5, 3.0}, 0.002), 0,
                        [&now_s] { return now_s.load(); });
  ASSERT_TRUE(monitor.Start().ok());
  now_s = 51.0;
  auto running = monitor.EnergyJ();  // to now, while sampling
  ASSERT_TRUE(running.ok()) << running.status().message();
  ASSERT_EQ(running->size(), 2u);
  EXPECT_NEAR((*running)[0], 1.5, 1e-9);
  EXPECT_NEAR((*running)[1], 3.0, 1e-9);
  std::this_thread::sleep_for(std::chrono::milliseconds(10));  // let the sampler take a few samples
  now_s = 52.5;
  monitor.Stop();
  now_s = 60.0;  // after Stop(): not counted
  auto energy = monitor.EnergyJ();
  ASSERT_TRUE(energy.ok()) << energy.status().message();
  EXPECT_NEAR((*energy)[0], 1.5 * 2.5, 1e-9);
  EXPECT_NEAR((*energy)[1], 3.0 * 2.5, 1e-9);
  EXPECT_TRUE(monitor.SamplerStatus().ok());
}

TEST(EnergyMonitorFakes, ConstantPowerOnTheRealClock) {
  const double watts = 7.0;
  EnergyMonitor monitor(std::make_unique<FakePower>(std::vector<double>{watts}, 0.002), 0.002);
  const double before_start = SteadyNowS();
  ASSERT_TRUE(monitor.Start().ok());
  const double after_start = SteadyNowS();
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  const double before_stop = SteadyNowS();
  monitor.Stop();
  const double after_stop = SteadyNowS();
  auto energy = monitor.EnergyJ();
  ASSERT_TRUE(energy.ok()) << energy.status().message();
  ASSERT_EQ(energy->size(), 1u);
  // The monitor's window lies between the stamps taken around Start() and
  // Stop(): energy / elapsed, with elapsed bounded from both sides, brackets the
  // constant power (no assumption about how long anything took).
  const double longest_s = after_stop - before_start, shortest_s = before_stop - after_start;
  ASSERT_GT(shortest_s, 0.0);
  EXPECT_GT((*energy)[0], 0.0);
  EXPECT_LE((*energy)[0] / longest_s, watts * (1 + 1e-9));
  EXPECT_GE((*energy)[0] / shortest_s, watts * (1 - 1e-9));
  EXPECT_TRUE(monitor.SamplerStatus().ok());
}

TEST(EnergyMonitorFakes, SamplerErrorsAreKept) {
  // The first read (at Start) succeeds; the sampler's reads fail.
  EnergyMonitor monitor(std::make_unique<FakePower>(std::vector<double>{2.0}, 0.001, 1), 0.001);
  ASSERT_TRUE(monitor.Start().ok());
  for (int i = 0; i < 2000 && monitor.SamplerStatus().ok(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  const Status status = monitor.SamplerStatus();
  monitor.Stop();
  ASSERT_FALSE(status.ok()) << "the sampler never reported its failing probe";
  EXPECT_THAT(status.message(), HasSubstr("sensor unplugged"));
}

TEST(EnergyMonitorFakes, StartFailsWhenTheProbeCannotBeRead) {
  EnergyMonitor monitor(std::make_unique<FakePower>(std::vector<double>{2.0}, 0.001, 0), 0.001);
  const Status status = monitor.Start();
  EXPECT_FALSE(status.ok());
  EXPECT_THAT(status.message(), HasSubstr("sensor unplugged"));
  monitor.Stop();
}

}  // namespace
}  // namespace edgecost::probes
