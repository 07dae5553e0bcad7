// perf_event_open: what its failures mean, and this process's software events.
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "probes/perf_counters.h"

namespace edgecost::probes {
namespace {

using ::testing::HasSubstr;

TEST(PerfExplain, PermissionErrorsNameTheSysctlAndTheCapability) {
  for (const int error : {EACCES, EPERM}) {
    for (const int paranoid : {2, 3}) {
      for (const bool hardware : {true, false}) {
        const PerfFailure failure = ExplainPerfError(error, paranoid, hardware);
        SCOPED_TRACE("errno " + std::to_string(error) + ", paranoid " + std::to_string(paranoid) +
                     (hardware ? ", hardware" : ", software"));
        EXPECT_FALSE(failure.reason.empty());
        EXPECT_THAT(failure.fix, HasSubstr("perf_event_paranoid"));
        EXPECT_THAT(failure.fix, HasSubstr("CAP_PERFMON"));
      }
    }
  }
}

TEST(PerfExplain, MissingHardwareEventBlamesThePmu) {
  const PerfFailure failure = ExplainPerfError(ENOENT, 2, true);
  EXPECT_THAT(failure.reason, HasSubstr("PMU"));
  EXPECT_FALSE(failure.fix.empty());
}

double Work() {
  std::vector<char> pages(16 << 20, 1);  // touches pages: page faults
  double sum = 0;
  for (size_t i = 0; i < pages.size(); i += 4096) sum += pages[i];
  for (int i = 1; i < 3000000; ++i) sum += std::sqrt(static_cast<double>(i));
  return sum;
}

TEST(PerfSoftware, TaskClockCountsThisProcess) {
  const std::vector<std::string> events = {"task-clock", "page-faults", "context-switches"};
  std::vector<ProbeInfo> infos;
  PerfCounters counters = PerfCounters::Open(events, "/proc", infos);
  ASSERT_EQ(infos.size(), events.size());
  size_t available = 0;
  std::string reasons;
  for (const ProbeInfo& info : infos) {
    EXPECT_EQ(info.source, "perf");
    if (info.available) {
      ++available;
    } else {
      EXPECT_FALSE(info.reason.empty());
      reasons += info.name + ": " + info.reason + "; ";
    }
  }
  EXPECT_EQ(counters.size(), available);
  if (available == 0) GTEST_SKIP() << "no software perf event could be opened here: " << reasons;

  ASSERT_TRUE(counters.Start().ok());
  volatile double sink = Work();
  (void)sink;
  auto first = counters.Read();
  ASSERT_TRUE(first.ok()) << first.status().message();
  ASSERT_EQ(first->size(), counters.size());
  const CounterValue* task_clock = nullptr;
  for (const CounterValue& v : *first) {
    EXPECT_GT(v.running_fraction, 0) << v.event;
    EXPECT_LE(v.running_fraction, 1 + 1e-9) << v.event;
    if (v.event == "task-clock") task_clock = &v;
  }
  if (task_clock == nullptr) GTEST_SKIP() << "task-clock could not be opened here: " << reasons;
  EXPECT_GT(task_clock->value, 0);

  sink = Work();
  auto second = counters.Read();
  ASSERT_TRUE(second.ok()) << second.status().message();
  for (const CounterValue& v : *second) {
    if (v.event == "task-clock") {
      EXPECT_GT(v.value, task_clock->value);  // cumulative since Start()
    }
  }
}

TEST(PerfSoftware, UnknownEventIsReportedNotFatal) {
  std::vector<ProbeInfo> infos;
  PerfCounters counters = PerfCounters::Open({"task-clock", "surely-not-an-event"}, "/proc", infos);
  ASSERT_EQ(infos.size(), 2u);
  EXPECT_FALSE(infos[1].available);
  EXPECT_FALSE(infos[1].reason.empty());
  EXPECT_LE(counters.size(), 1u);
}

TEST(PerfSoftware, DefaultEventsIncludeSoftwareOnes) {
  const std::vector<std::string> events = DefaultPerfEvents();
  EXPECT_FALSE(events.empty());
  EXPECT_NE(std::find(events.begin(), events.end(), "task-clock"), events.end());
}

}  // namespace
}  // namespace edgecost::probes
