// Counter groups around a window: scaling for multiplexing (scripted counts),
// and this process's software counters read for real.
#include <sys/mman.h>
#include <time.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <thread>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "probes/counter_source.h"

namespace edgecost::probes {
namespace {

const ScaledCount* Find(const std::vector<ScaledCount>& counts, const std::string& event) {
  auto it = std::find_if(counts.begin(), counts.end(), [&](const ScaledCount& c) { return c.event == event; });
  return it == counts.end() ? nullptr : &*it;
}

TEST(ScaleReadings, AMultiplexedCounterIsScaledToTheWholeWindow) {
  // cycles ran a quarter of the window: 100 counted stands for 400.
  const auto counts = ScaleReadings({{"cycles", 100, 1000, 250}, {"task-clock", 5000, 1000, 1000}});
  ASSERT_EQ(counts.size(), 2u);
  EXPECT_EQ(counts[0].event, "cycles");  // the order of the readings
  EXPECT_DOUBLE_EQ(counts[0].value, 400);
  EXPECT_DOUBLE_EQ(counts[0].running_fraction, 0.25);
  EXPECT_DOUBLE_EQ(counts[1].value, 5000);
  EXPECT_DOUBLE_EQ(counts[1].running_fraction, 1);
}

TEST(ScaleReadings, GroupsOfSeveralThreadsAreScaledEachThenSummed) {
  // Thread one ran half its window, thread two all of it.
  const auto counts = ScaleReadings({{"instructions", 50, 200, 100}, {"instructions", 30, 100, 100}});
  ASSERT_EQ(counts.size(), 1u);
  EXPECT_DOUBLE_EQ(counts[0].value, 130);
  EXPECT_DOUBLE_EQ(counts[0].running_fraction, 200.0 / 300.0);
}

TEST(ScaleReadings, ACounterThePmuNeverScheduledIsAbsentNotZero) {
  const auto counts = ScaleReadings({{"cache-misses", 0, 1000, 0}, {"page-faults", 0, 1000, 1000}});
  EXPECT_EQ(Find(counts, "cache-misses"), nullptr);
  const ScaledCount* faults = Find(counts, "page-faults");
  ASSERT_NE(faults, nullptr);  // counted, and truly zero
  EXPECT_EQ(faults->value, 0);
}

double CpuTimeS(clockid_t clock) {
  timespec ts{};
  clock_gettime(clock, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

double Spin(int n) {
  double sum = 0;
  for (int i = 1; i < n; ++i) sum += std::sqrt(static_cast<double>(i));
  return sum;
}

TEST(PerfCounterGroups, SoftwareCountersOfAWindowAreReadForReal) {
  auto source = PerfCounterGroups::Open(SoftwareCounterEvents(), {ThisThreadId()});
  if (source->Events().empty()) {
    GTEST_SKIP() << "no software counter opened here: " << source->Uncounted().front().reason;
  }
  // Every event asked for is counted or said to be uncountable, never both.
  for (const std::string& event : SoftwareCounterEvents()) {
    const std::vector<std::string> events = source->Events();
    const bool counted = std::count(events.begin(), events.end(), event) == 1;
    const bool uncounted = std::any_of(source->Uncounted().begin(), source->Uncounted().end(),
                                       [&](const UncountedEvent& u) { return u.event == event; });
    EXPECT_NE(counted, uncounted) << event;
  }
  ASSERT_TRUE(source->Start().ok());
  const double cpu_start_s = CpuTimeS(CLOCK_THREAD_CPUTIME_ID);
  volatile double sink = Spin(20'000'000);
  // Fresh anonymous pages, touched: page faults (malloc could hand back pages faulted before).
  const size_t bytes = 8 << 20;
  void* fresh = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(fresh, MAP_FAILED);
  for (size_t i = 0; i < bytes; i += 4096) static_cast<volatile char*>(fresh)[i] = 1;
  sink = sink + static_cast<volatile char*>(fresh)[4096];
  ::munmap(fresh, bytes);
  const double cpu_s = CpuTimeS(CLOCK_THREAD_CPUTIME_ID) - cpu_start_s;
  auto readings = source->Read();
  ASSERT_TRUE(readings.ok()) << readings.status().message();
  const auto counts = ScaleReadings(*readings);
  const ScaledCount* task_clock = Find(counts, "task-clock");
  ASSERT_NE(task_clock, nullptr);
  EXPECT_DOUBLE_EQ(task_clock->running_fraction, 1);  // software counters are never multiplexed
  // The window's task-clock is its CPU time in nanoseconds (sanity bounds, not timing).
  EXPECT_GT(task_clock->value, 0.5 * cpu_s * 1e9);
  EXPECT_LT(task_clock->value, 2.0 * cpu_s * 1e9 + 1e6);
  if (const ScaledCount* faults = Find(counts, "page-faults")) {
    EXPECT_GE(faults->value, 0);  // present when counted (how many faults the kernel takes is its business)
    EXPECT_DOUBLE_EQ(faults->running_fraction, 1);
  }

  // A second window starts from zero again.
  ASSERT_TRUE(source->Start().ok());
  auto quiet = source->Read();
  ASSERT_TRUE(quiet.ok());
  const ScaledCount* again = Find(ScaleReadings(*quiet), "task-clock");
  if (again) {
    EXPECT_LT(again->value, task_clock->value);
  }
}

TEST(PerfCounterGroups, ThreadsStartedByACountedThreadAreCounted) {
  auto source = PerfCounterGroups::Open({"task-clock"}, {ThisThreadId()});
  if (source->Events().empty()) GTEST_SKIP() << "task-clock cannot be opened here";
  ASSERT_TRUE(source->Start().ok());
  const double process_start_s = CpuTimeS(CLOCK_PROCESS_CPUTIME_ID);
  double child_cpu_s = 0;
  std::thread worker([&] {
    volatile double sink = Spin(20'000'000);
    (void)sink;
    child_cpu_s = CpuTimeS(CLOCK_THREAD_CPUTIME_ID);
  });
  worker.join();
  const double process_s = CpuTimeS(CLOCK_PROCESS_CPUTIME_ID) - process_start_s;
  auto readings = source->Read();
  ASSERT_TRUE(readings.ok());
  const ScaledCount* task_clock = Find(ScaleReadings(*readings), "task-clock");
  ASSERT_NE(task_clock, nullptr);
  EXPECT_GT(task_clock->value, 0.5 * child_cpu_s * 1e9);  // the worker's time is in it
  EXPECT_LT(task_clock->value, 2.0 * process_s * 1e9 + 1e6);
}

TEST(PerfCounterGroups, HardwareEventsAreCountedOrSaidToBeUncountableWithTheReason) {
  auto source = PerfCounterGroups::Open(HardwareCounterEvents(), {ThisThreadId()});
  for (const std::string& event : HardwareCounterEvents()) {
    const std::vector<std::string> events = source->Events();
    const bool counted = std::count(events.begin(), events.end(), event) == 1;
    auto it = std::find_if(source->Uncounted().begin(), source->Uncounted().end(),
                           [&](const UncountedEvent& u) { return u.event == event; });
    EXPECT_NE(counted, it != source->Uncounted().end()) << event;
    if (!counted) {
      EXPECT_FALSE(it->reason.empty()) << event;
    }
  }
  ASSERT_TRUE(source->Start().ok());
  volatile double sink = Spin(1'000'000);
  (void)sink;
  auto readings = source->Read();
  ASSERT_TRUE(readings.ok());
  for (const ScaledCount& c : ScaleReadings(*readings)) {
    EXPECT_GT(c.running_fraction, 0) << c.event;
    EXPECT_LE(c.running_fraction, 1 + 1e-9) << c.event;
  }
}

TEST(PerfCounterGroups, AnUnknownEventIsUncountedAndTheOthersStillCount) {
  auto source = PerfCounterGroups::Open({"surely-not-an-event", "task-clock"}, {ThisThreadId()});
  ASSERT_FALSE(source->Uncounted().empty());
  EXPECT_EQ(source->Uncounted().front().event, "surely-not-an-event");
  EXPECT_THAT(source->Uncounted().front().reason, ::testing::HasSubstr("libpfm4"));
  EXPECT_LE(source->Events().size(), 1u);
}

}  // namespace
}  // namespace edgecost::probes
