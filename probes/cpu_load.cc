#include "probes/cpu_load.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

namespace edgecost::probes {
namespace {

double TicksPerSecond() {
  static const double hz = [] {
    const long ticks = ::sysconf(_SC_CLK_TCK);
    return ticks > 0 ? static_cast<double>(ticks) : 100.0;
  }();
  return hz;
}

}  // namespace

Result<SystemLoad> ReadSystemLoad(const std::string& proc_root) {
  SystemLoad load;
  const std::string stat_path = proc_root + "/stat";
  std::ifstream stat(stat_path);
  if (!stat) return NotFound("cannot read " + stat_path + ": " + std::strerror(errno) + "; is /proc mounted?");
  bool have_total = false;
  std::string line;
  while (std::getline(stat, line)) {
    std::istringstream in(line);
    std::string name;
    in >> name;
    if (name == "cpu") {
      // user nice system idle iowait irq softirq steal guest guest_nice, in USER_HZ ticks
      double user = 0, nice = 0, system = 0, idle = 0, iowait = 0, irq = 0, softirq = 0, steal = 0;
      in >> user >> nice >> system >> idle >> iowait >> irq >> softirq >> steal;
      if (!in && !in.eof()) return Internal(stat_path + " has a malformed cpu line: '" + line + "'");
      load.busy_s = (user + nice + system + irq + softirq) / TicksPerSecond();
      load.steal_s = steal / TicksPerSecond();
      have_total = true;
    } else if (name.rfind("cpu", 0) == 0) {
      ++load.cpus;
    } else if (name == "procs_running") {
      in >> load.procs_running;
    }
  }
  if (!have_total) return Internal(stat_path + " has no aggregate cpu line");
  const std::string loadavg_path = proc_root + "/loadavg";
  std::ifstream loadavg(loadavg_path);
  if (!loadavg || !(loadavg >> load.load1)) return NotFound("cannot read the load average in " + loadavg_path);
  return load;
}

Result<ThreadSchedStat> ParseSchedStat(const std::string& text) {
  // strtoull, not a stream: this runs around every repetition of an op.
  const char* p = text.c_str();
  uint64_t values[3];
  for (uint64_t& value : values) {
    char* end = nullptr;
    errno = 0;
    value = std::strtoull(p, &end, 10);
    if (end == p || errno != 0) return Internal("schedstat holds '" + text + "', not three numbers");
    p = end;
  }
  return ThreadSchedStat{.on_cpu_s = static_cast<double>(values[0]) * 1e-9,
                         .run_queue_wait_s = static_cast<double>(values[1]) * 1e-9,
                         .timeslices = values[2]};
}

Result<ThreadSchedWatch> ThreadSchedWatch::Open(const std::string& proc_root, pid_t pid,
                                                const std::vector<pid_t>& tids) {
  ThreadSchedWatch watch;
  const std::string process = proc_root + "/" + (pid == 0 ? std::string("self") : std::to_string(pid));
  for (pid_t tid : tids) {
    std::string path = process + "/task/" + std::to_string(tid) + "/schedstat";
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      const int error = errno;
      return NotFound("cannot open " + path + ": " + std::strerror(error) +
                      (error == ENOENT ? " (a kernel without CONFIG_SCHED_INFO keeps no schedstat)" : ""));
    }
    watch.fds_.push_back(fd);
    watch.paths_.push_back(std::move(path));
  }
  return watch;
}

ThreadSchedWatch::ThreadSchedWatch(ThreadSchedWatch&& other) noexcept
    : fds_(std::move(other.fds_)), paths_(std::move(other.paths_)) {
  other.fds_.clear();
}

ThreadSchedWatch& ThreadSchedWatch::operator=(ThreadSchedWatch&& other) noexcept {
  if (this != &other) {
    for (int fd : fds_) ::close(fd);
    fds_ = std::move(other.fds_);
    paths_ = std::move(other.paths_);
    other.fds_.clear();
  }
  return *this;
}

ThreadSchedWatch::~ThreadSchedWatch() {
  for (int fd : fds_) ::close(fd);
}

Result<ThreadSchedStat> ThreadSchedWatch::Read() const {
  ThreadSchedStat total;
  char buffer[128];
  for (size_t i = 0; i < fds_.size(); ++i) {
    const ssize_t n = ::pread(fds_[i], buffer, sizeof buffer - 1, 0);
    if (n <= 0) return Internal("cannot read " + paths_[i] + ": " + std::strerror(n < 0 ? errno : EIO));
    buffer[n] = '\0';
    EC_ASSIGN_OR_RETURN(ThreadSchedStat one, ParseSchedStat(buffer));
    total.on_cpu_s += one.on_cpu_s;
    total.run_queue_wait_s += one.run_queue_wait_s;
    total.timeslices += one.timeslices;
  }
  return total;
}

}  // namespace edgecost::probes
