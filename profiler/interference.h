// The real InterferenceWatch: the scheduler's accounting of the threads an op
// runs on (the calling thread and its OpenMP team, whose run-queue wait says
// that another task held their CPU), and the system's steal time, run queue
// and load from /proc. A kernel without schedstat falls back to counting this
// process's involuntary context switches.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

#include "probes/cpu_load.h"
#include "profiler/measure.h"

namespace edgecost::profiler {

// The thread ids of the OpenMP team oneDNN runs on at the current thread
// count, the calling thread first.
std::vector<pid_t> TeamThreadIds();

class SchedInterferenceWatch : public InterferenceWatch {
 public:
  explicit SchedInterferenceWatch(std::string proc_root = "/proc") : proc_root_(std::move(proc_root)) {}
  // Finds the team anew: the thread count may differ from the previous op's.
  Status BeginWindow() override;
  Result<double> WaitSinceLastS() override;
  Result<v1::Interference> EndWindow(double window_s) override;

  // A repetition during which this process was preempted, where the kernel
  // keeps no per-thread wait: reported as this long a wait, so that it counts
  // as disturbed.
  static constexpr double kPreemptedWaitS = 1.0;

 private:
  std::string proc_root_;
  size_t team_size_ = 1;
  std::optional<probes::ThreadSchedWatch> threads_;
  double wait_start_s_ = 0;
  double last_wait_s_ = 0;
  long involuntary_start_ = 0;
  long last_involuntary_ = 0;
  probes::SystemLoad load_start_;
  double process_cpu_start_s_ = 0;
  bool have_load_ = false;
};

}  // namespace edgecost::profiler
