// The /proc readers behind interference detection, on a fake /proc tree, and
// once on the real one.
#include "probes/cpu_load.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "tests/temp_dir.h"

namespace edgecost::probes {
namespace {

class CpuLoadTest : public edgecost::testing::TempDirTest {
 protected:
  void Write(const std::string& relative, const std::string& text) {
    const std::filesystem::path path = dir_ / relative;
    std::filesystem::create_directories(path.parent_path());
    std::ofstream(path) << text;
  }
};

TEST_F(CpuLoadTest, ReadsRunQueueStealAndLoadFromAFakeProc) {
  const double hz = static_cast<double>(::sysconf(_SC_CLK_TCK));
  Write("stat",
        "cpu  100 5 50 1000 7 3 2 40 0 0\n"
        "cpu0 50 2 25 500 3 1 1 20 0 0\n"
        "cpu1 50 3 25 500 4 2 1 20 0 0\n"
        "intr 12345\nctxt 999\nprocs_running 3\nprocs_blocked 0\n");
  Write("loadavg", "1.75 0.80 0.30 3/120 4242\n");
  auto load = ReadSystemLoad(dir_.string());
  ASSERT_TRUE(load.ok()) << load.status().message();
  EXPECT_EQ(load->cpus, 2);
  EXPECT_EQ(load->procs_running, 3);
  EXPECT_DOUBLE_EQ(load->load1, 1.75);
  EXPECT_DOUBLE_EQ(load->steal_s, 40 / hz);
  EXPECT_DOUBLE_EQ(load->busy_s, (100 + 5 + 50 + 3 + 2) / hz);
}

TEST_F(CpuLoadTest, AMissingOrMalformedProcSaysWhat) {
  auto missing = ReadSystemLoad((dir_ / "nowhere").string());
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("/stat"), std::string::npos);
  Write("stat", "intr 1\nprocs_running 2\n");
  Write("loadavg", "0.1 0.1 0.1 1/1 1\n");
  auto no_cpu = ReadSystemLoad(dir_.string());
  ASSERT_FALSE(no_cpu.ok());
  EXPECT_NE(no_cpu.status().message().find("cpu line"), std::string::npos);
}

TEST_F(CpuLoadTest, SumsTheWatchedThreadsSchedStat) {
  Write("self/task/10/schedstat", "1000000000 2500000 40\n");
  Write("self/task/11/schedstat", "500000000 500000 10\n");
  Write("self/task/12/schedstat", "9 9 9\n");  // not watched
  auto watch = ThreadSchedWatch::Open(dir_.string(), 0, {10, 11});
  ASSERT_TRUE(watch.ok()) << watch.status().message();
  auto total = watch->Read();
  ASSERT_TRUE(total.ok());
  EXPECT_DOUBLE_EQ(total->on_cpu_s, 1.5);
  EXPECT_DOUBLE_EQ(total->run_queue_wait_s, 0.003);
  EXPECT_EQ(total->timeslices, 50u);
  // The files stay open and are read again: the kernel rewrites them in place.
  Write("self/task/11/schedstat", "600000000 1500000 11\n");
  EXPECT_DOUBLE_EQ(watch->Read()->run_queue_wait_s, 0.004);
}

TEST_F(CpuLoadTest, AThreadWithoutSchedStatIsAnErrorNamingTheKernelOption) {
  auto watch = ThreadSchedWatch::Open(dir_.string(), 0, {77});
  ASSERT_FALSE(watch.ok());
  EXPECT_NE(watch.status().message().find("CONFIG_SCHED_INFO"), std::string::npos);
  Write("self/task/78/schedstat", "garbage\n");
  auto bad = ThreadSchedWatch::Open(dir_.string(), 0, {78});
  ASSERT_TRUE(bad.ok());
  EXPECT_FALSE(bad->Read().ok());
}

TEST(CpuLoad, ReadsTheRealProc) {
  if (!std::filesystem::exists("/proc/self/schedstat")) GTEST_SKIP() << "this kernel keeps no schedstat";
  auto load = ReadSystemLoad("/proc");
  ASSERT_TRUE(load.ok()) << load.status().message();
  EXPECT_GE(load->cpus, 1);
  EXPECT_GE(load->procs_running, 1);  // this test is running
  const pid_t tid = static_cast<pid_t>(::syscall(SYS_gettid));
  auto watch = ThreadSchedWatch::Open("/proc", 0, {tid});
  ASSERT_TRUE(watch.ok()) << watch.status().message();
  const double before = watch->Read()->on_cpu_s;
  volatile double x = 0;
  for (int i = 0; i < 5000000; ++i) x = x + 1e-9 * i;
  EXPECT_GT(watch->Read()->on_cpu_s, before);  // the scheduler accounted this thread's work
}

}  // namespace
}  // namespace edgecost::probes
