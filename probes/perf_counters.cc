#include "probes/perf_counters.h"

#include <linux/perf_event.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>

#include <perfmon/pfmlib_perf_event.h>

namespace edgecost::probes {

bool PfmReady() {
  static const bool ready = pfm_initialize() == PFM_SUCCESS;
  return ready;
}

int PerfEventParanoid(const std::string& proc_root) {
  std::ifstream in(proc_root + "/sys/kernel/perf_event_paranoid");
  int value = 2;  // the kernel's default
  in >> value;
  return value;
}

std::vector<std::string> DefaultPerfEvents() {
  return {"cycles",     "instructions", "cache-misses",     "branch-misses",
          "task-clock", "page-faults",  "context-switches", "cpu-migrations"};
}

PerfFailure ExplainPerfError(int error, int paranoid, bool hardware_event) {
  const std::string capability = "set `sudo sysctl kernel.perf_event_paranoid=1` (now " + std::to_string(paranoid) +
                                 "), or grant the binary CAP_PERFMON: `sudo setcap cap_perfmon+ep $(which edgecost)`";
  switch (error) {
    case EACCES:
    case EPERM:
      return {"perf_event_paranoid is " + std::to_string(paranoid) + ", which forbids this event to this user",
              capability};
    case ENOENT:
    case EOPNOTSUPP:
    case ENODEV:
      if (hardware_event) {
        return {"this CPU exposes no hardware PMU to the kernel (common in VMs without PMU passthrough)",
                "run on bare metal, or enable the virtual PMU (e.g. QEMU -cpu host with vPMU)"};
      }
      return {"the kernel does not support this event", "use a kernel built with CONFIG_PERF_EVENTS"};
    case ENOSYS:
      return {"perf_event_open is not available (seccomp or an old kernel)",
              "allow perf_event_open in the container's seccomp profile"};
    case EMFILE:
      return {"too many open files", "raise the limit with `ulimit -n`"};
    default:
      return {std::string("perf_event_open failed: ") + std::strerror(error), ""};
  }
}

PerfCounters PerfCounters::Open(const std::vector<std::string>& events, const std::string& proc_root,
                                std::vector<ProbeInfo>& infos) {
  PerfCounters counters;
  const int paranoid = PerfEventParanoid(proc_root);
  for (const std::string& event : events) {
    ProbeInfo info{.source = "perf", .name = event, .kind = ReadingKind::kEnergyCounter};
    info.domains = {event};
    info.resolution = 1;
    perf_event_attr attr{};
    attr.size = sizeof attr;
    pfm_perf_encode_arg_t arg{};
    arg.attr = &attr;
    arg.size = sizeof arg;
    if (!PfmReady()) {
      info.reason = "libpfm4 failed to initialise";
      infos.push_back(info);
      continue;
    }
    // Count this process in user and kernel mode where allowed; the kernel checks.
    if (const int rc = pfm_get_os_event_encoding(event.c_str(), PFM_PLM3, PFM_OS_PERF_EVENT, &arg); rc != PFM_SUCCESS) {
      info.reason = "libpfm4 does not know this event here: " + std::string(pfm_strerror(rc));
      info.fix = "`edgecost probes` lists the events this PMU has";
      infos.push_back(info);
      continue;
    }
    attr.disabled = 1;
    attr.inherit = 1;  // oneDNN's worker threads count too
    attr.read_format = PERF_FORMAT_TOTAL_TIME_ENABLED | PERF_FORMAT_TOTAL_TIME_RUNNING;
    const int fd = static_cast<int>(::syscall(SYS_perf_event_open, &attr, 0, -1, -1, PERF_FLAG_FD_CLOEXEC));
    if (fd < 0) {
      const PerfFailure failure = ExplainPerfError(
          errno, paranoid,
          attr.type == PERF_TYPE_HARDWARE || attr.type == PERF_TYPE_HW_CACHE || attr.type >= PERF_TYPE_MAX);
      info.reason = failure.reason;
      info.fix = failure.fix;
      infos.push_back(info);
      continue;
    }
    info.available = true;
    infos.push_back(info);
    counters.fds_.push_back(fd);
    counters.names_.push_back(event);
  }
  return counters;
}

PerfCounters::PerfCounters(PerfCounters&& other) noexcept
    : fds_(std::move(other.fds_)), names_(std::move(other.names_)) {
  other.fds_.clear();
}

PerfCounters::~PerfCounters() {
  for (int fd : fds_) ::close(fd);
}

Status PerfCounters::Start() {
  for (int fd : fds_) {
    if (::ioctl(fd, PERF_EVENT_IOC_RESET, 0) < 0 || ::ioctl(fd, PERF_EVENT_IOC_ENABLE, 0) < 0) {
      return Internal(std::string("cannot start a perf counter: ") + std::strerror(errno));
    }
  }
  return Status::Ok();
}

Result<std::vector<CounterValue>> PerfCounters::Read() const {
  std::vector<CounterValue> values;
  for (size_t i = 0; i < fds_.size(); ++i) {
    uint64_t raw[3] = {0, 0, 0};  // value, time enabled, time running
    if (::read(fds_[i], raw, sizeof raw) != static_cast<ssize_t>(sizeof raw)) {
      return Internal("cannot read perf counter " + names_[i] + ": " + std::strerror(errno));
    }
    CounterValue v{.event = names_[i]};
    // Multiplexed counters ran only part of the time: scale up to the whole.
    v.running_fraction = raw[1] > 0 ? static_cast<double>(raw[2]) / static_cast<double>(raw[1]) : 0;
    v.value = v.running_fraction > 0 ? static_cast<double>(raw[0]) / v.running_fraction : 0;
    values.push_back(v);
  }
  return values;
}

}  // namespace edgecost::probes
