// What else competes for this device's CPUs, read from /proc (or a fake tree):
// the run queue and steal time of the whole system, and the scheduler's
// per-thread accounting (time on a CPU, time runnable but waiting for one).
// The profiler reads these around every timed window to tell a clean
// measurement from one another task or the hypervisor disturbed.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"

namespace edgecost::probes {

struct SystemLoad {
  int cpus = 0;           // "cpuN" lines of /proc/stat
  int procs_running = 0;  // runnable tasks now, the reader included (/proc/stat)
  double load1 = 0;       // one-minute load average (/proc/loadavg)
  double steal_s = 0;     // cumulative steal time of all CPUs (/proc/stat "cpu" line)
  double busy_s = 0;      // cumulative user + nice + system + irq + softirq of all CPUs
};

// /proc/stat and /proc/loadavg under `proc_root`.
Result<SystemLoad> ReadSystemLoad(const std::string& proc_root);

// The scheduler's accounting of one thread: <proc_root>/<pid>/task/<tid>/schedstat.
struct ThreadSchedStat {
  double on_cpu_s = 0;          // time running
  double run_queue_wait_s = 0;  // time runnable but waiting for a CPU
  uint64_t timeslices = 0;
};
Result<ThreadSchedStat> ParseSchedStat(const std::string& text);

// Threads to watch, their schedstat files kept open and re-read with pread():
// a read costs a couple of microseconds, cheap enough around every repetition.
class ThreadSchedWatch {
 public:
  // `tids` of process `pid` ("self" when 0). Fails, with what to do, when the
  // kernel keeps no schedstat (CONFIG_SCHED_INFO off) or a thread is gone.
  static Result<ThreadSchedWatch> Open(const std::string& proc_root, pid_t pid, const std::vector<pid_t>& tids);
  ThreadSchedWatch(ThreadSchedWatch&& other) noexcept;
  ThreadSchedWatch& operator=(ThreadSchedWatch&& other) noexcept;
  ThreadSchedWatch(const ThreadSchedWatch&) = delete;
  ThreadSchedWatch& operator=(const ThreadSchedWatch&) = delete;
  ~ThreadSchedWatch();

  // The sum over the watched threads.
  Result<ThreadSchedStat> Read() const;
  size_t size() const { return fds_.size(); }

 private:
  ThreadSchedWatch() = default;
  std::vector<int> fds_;
  std::vector<std::string> paths_;
};

}  // namespace edgecost::probes
