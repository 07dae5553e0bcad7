#include "profiler/interference.h"

#include <omp.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>

namespace edgecost::profiler {
namespace {

double ProcessCpuS() {
  timespec ts{};
  ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

long InvoluntarySwitches() {
  rusage usage{};
  ::getrusage(RUSAGE_SELF, &usage);
  return usage.ru_nivcsw;
}

}  // namespace

std::vector<pid_t> TeamThreadIds() {
  const int n = std::max(1, omp_get_max_threads());
  std::vector<pid_t> tids(static_cast<size_t>(n), 0);
  // libgomp keeps its pool for a team of the same size: these are the threads
  // oneDNN's next parallel region runs on.
#pragma omp parallel num_threads(n)
  { tids[static_cast<size_t>(omp_get_thread_num())] = static_cast<pid_t>(::syscall(SYS_gettid)); }
  tids.erase(std::remove(tids.begin(), tids.end(), 0), tids.end());
  std::sort(tids.begin() + 1, tids.end());
  tids.erase(std::unique(tids.begin(), tids.end()), tids.end());
  return tids;
}

Status SchedInterferenceWatch::BeginWindow() {
  const std::vector<pid_t> team = TeamThreadIds();
  team_size_ = team.size();
  Result<probes::ThreadSchedWatch> watch = probes::ThreadSchedWatch::Open(proc_root_, 0, team);
  threads_.reset();
  if (watch.ok()) {
    EC_ASSIGN_OR_RETURN(probes::ThreadSchedStat now, watch->Read());
    wait_start_s_ = last_wait_s_ = now.run_queue_wait_s;
    threads_.emplace(std::move(*watch));
  }
  involuntary_start_ = last_involuntary_ = InvoluntarySwitches();
  Result<probes::SystemLoad> load = probes::ReadSystemLoad(proc_root_);
  have_load_ = load.ok();
  if (have_load_) load_start_ = *load;
  process_cpu_start_s_ = ProcessCpuS();
  return Status::Ok();
}

Result<double> SchedInterferenceWatch::WaitSinceLastS() {
  if (threads_) {
    EC_ASSIGN_OR_RETURN(probes::ThreadSchedStat now, threads_->Read());
    const double wait_s = now.run_queue_wait_s - last_wait_s_;
    last_wait_s_ = now.run_queue_wait_s;
    return wait_s;
  }
  const long involuntary = InvoluntarySwitches();
  const bool preempted = involuntary != last_involuntary_;
  last_involuntary_ = involuntary;
  return preempted ? kPreemptedWaitS : 0.0;
}

Result<v1::Interference> SchedInterferenceWatch::EndWindow(double window_s) {
  v1::Interference out;
  out.set_watched(threads_.has_value());
  if (threads_) out.set_run_queue_wait_s(last_wait_s_ - wait_start_s_);
  out.set_involuntary_switches(static_cast<uint64_t>(std::max(0L, InvoluntarySwitches() - involuntary_start_)));
  if (have_load_) {
    Result<probes::SystemLoad> end = probes::ReadSystemLoad(proc_root_);
    if (end.ok()) {
      // /proc/stat counts in ticks: one tick either side is quantisation, not steal.
      const long ticks = ::sysconf(_SC_CLK_TCK);
      const double tick_s = ticks > 0 ? 1.0 / static_cast<double>(ticks) : 0.01;
      const double steal_s = std::max(0.0, end->steal_s - load_start_.steal_s - tick_s);
      const double cpu_s = window_s * std::max(1, end->cpus);
      out.set_steal_fraction(cpu_s > 0 ? steal_s / cpu_s : 0);
      // procs_running counts the op's own team (spinning or running) and this reader.
      out.set_other_runnable(static_cast<uint32_t>(std::max(0, end->procs_running - static_cast<int>(team_size_))));
      out.set_load1(end->load1);
      // The CPUs' busy time (in ticks, hence the tick of slack) less this process's own.
      const double others_s = end->busy_s - load_start_.busy_s - (ProcessCpuS() - process_cpu_start_s_) - tick_s;
      out.set_other_cpu_cores(window_s > 0 ? std::max(0.0, others_s) / window_s : 0);
    }
  }
  return out;
}

}  // namespace edgecost::profiler
