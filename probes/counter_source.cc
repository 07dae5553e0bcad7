#include "probes/counter_source.h"

#include <linux/perf_event.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>

#include <perfmon/pfmlib_perf_event.h>

#include "probes/perf_counters.h"

namespace edgecost::probes {
namespace {

int OpenEvent(perf_event_attr& attr, pid_t tid, int group_fd) {
  return static_cast<int>(::syscall(SYS_perf_event_open, &attr, tid, -1, group_fd, PERF_FLAG_FD_CLOEXEC));
}

}  // namespace

pid_t ThisThreadId() { return static_cast<pid_t>(::syscall(SYS_gettid)); }

std::vector<std::string> HardwareCounterEvents() {
  return {"cycles", "instructions", "cache-references", "cache-misses", "LLC-load-misses", "branch-misses"};
}

std::vector<std::string> SoftwareCounterEvents() {
  return {"task-clock", "page-faults", "context-switches", "cpu-migrations"};
}

std::vector<ScaledCount> ScaleReadings(const std::vector<CounterReading>& readings) {
  struct Sum {
    double value = 0;
    double enabled = 0, running = 0;
    size_t order = 0;
  };
  std::map<std::string, Sum> sums;
  for (const CounterReading& r : readings) {
    Sum& s = sums.try_emplace(r.event, Sum{.order = sums.size()}).first->second;
    s.enabled += static_cast<double>(r.enabled_ns);
    s.running += static_cast<double>(r.running_ns);
    // A group that ran part of the time counted that part: scale it to the whole.
    if (r.running_ns > 0) {
      s.value += static_cast<double>(r.raw) * static_cast<double>(r.enabled_ns) / static_cast<double>(r.running_ns);
    }
  }
  std::vector<ScaledCount> out(sums.size());
  size_t kept = 0;
  std::vector<bool> present(sums.size(), false);
  for (const auto& [event, s] : sums) {
    if (s.running <= 0) continue;  // never on the PMU: not counted, not a zero
    out[s.order] = {.event = event, .value = s.value, .running_fraction = s.enabled > 0 ? s.running / s.enabled : 1};
    present[s.order] = true;
    ++kept;
  }
  std::vector<ScaledCount> ordered;
  ordered.reserve(kept);
  for (size_t i = 0; i < out.size(); ++i) {
    if (present[i]) ordered.push_back(std::move(out[i]));
  }
  return ordered;
}

std::unique_ptr<PerfCounterGroups> PerfCounterGroups::Open(const std::vector<std::string>& events,
                                                           const std::vector<pid_t>& tids,
                                                           const std::string& proc_root) {
  std::unique_ptr<PerfCounterGroups> source(new PerfCounterGroups());
  if (!PfmReady()) {
    for (const std::string& event : events) {
      source->uncounted_.push_back({event, "libpfm4 failed to initialise", "check that libpfm4 is installed"});
    }
    return source;
  }
  const int paranoid = PerfEventParanoid(proc_root);
  // The attributes of every event that libpfm4 can encode, split into kinds:
  // a software event never joins a hardware group, so that a PMU that cannot
  // schedule the hardware group leaves the software counts intact.
  struct Encoded {
    std::string event;
    perf_event_attr attr;
    bool hardware;
  };
  std::vector<Encoded> encoded;
  for (const std::string& event : events) {
    perf_event_attr attr{};
    attr.size = sizeof attr;
    pfm_perf_encode_arg_t arg{};
    arg.attr = &attr;
    arg.size = sizeof arg;
    if (const int rc = pfm_get_os_event_encoding(event.c_str(), PFM_PLM0 | PFM_PLM3, PFM_OS_PERF_EVENT, &arg);
        rc != PFM_SUCCESS) {
      source->uncounted_.push_back({event, "libpfm4 does not know this event here: " + std::string(pfm_strerror(rc)),
                                    "`edgecost probes` lists the counters this device has"});
      continue;
    }
    attr.size = sizeof attr;
    attr.inherit = 1;  // threads the team starts later count too
    attr.read_format = PERF_FORMAT_GROUP | PERF_FORMAT_TOTAL_TIME_ENABLED | PERF_FORMAT_TOTAL_TIME_RUNNING;
    encoded.push_back({event, attr, attr.type != PERF_TYPE_SOFTWARE});
  }
  if (tids.empty()) return source;

  for (const bool hardware : {true, false}) {
    // The first thread decides which events open; the others open the same.
    std::vector<const Encoded*> opened;
    for (size_t t = 0; t < tids.size(); ++t) {
      Group group;
      const std::vector<const Encoded*> todo = [&] {
        if (t > 0) return opened;
        std::vector<const Encoded*> all;
        for (const Encoded& e : encoded) {
          if (e.hardware == hardware) all.push_back(&e);
        }
        return all;
      }();
      for (const Encoded* e : todo) {
        perf_event_attr attr = e->attr;
        attr.disabled = group.leader < 0 ? 1 : 0;  // members follow their leader
        attr.exclude_kernel = source->user_only_ ? 1 : 0;
        int fd = OpenEvent(attr, tids[t], group.leader);
        if (fd < 0 && (errno == EACCES || errno == EPERM) && !source->user_only_) {
          // perf_event_paranoid 2 allows user mode only: count that, and say so.
          attr.exclude_kernel = 1;
          attr.exclude_hv = 1;
          fd = OpenEvent(attr, tids[t], group.leader);
          if (fd >= 0) source->user_only_ = true;
        }
        if (fd < 0) {
          const int error = errno;
          if (t == 0) {
            const PerfFailure failure = ExplainPerfError(error, paranoid, hardware);
            source->uncounted_.push_back({e->event, failure.reason, failure.fix});
            continue;
          }
          // A thread that ended meanwhile has nothing to count.
          if (error == ESRCH) break;
          continue;
        }
        if (group.leader < 0) group.leader = fd;
        group.fds.push_back(fd);
        group.events.push_back(e->event);
        if (t == 0) opened.push_back(e);
      }
      if (!group.fds.empty()) source->groups_.push_back(std::move(group));
    }
    for (const Encoded* e : opened) source->counted_.push_back(e->event);
  }
  return source;
}

PerfCounterGroups::~PerfCounterGroups() {
  for (const Group& group : groups_) {
    for (int fd : group.fds) ::close(fd);
  }
}

Status PerfCounterGroups::Start() {
  for (const Group& group : groups_) {
    if (::ioctl(group.leader, PERF_EVENT_IOC_DISABLE, PERF_IOC_FLAG_GROUP) < 0 ||
        ::ioctl(group.leader, PERF_EVENT_IOC_RESET, PERF_IOC_FLAG_GROUP) < 0) {
      return Internal(std::string("cannot reset a perf counter group: ") + std::strerror(errno));
    }
  }
  // Enabled last, one after the other: what runs between is a few syscalls.
  for (const Group& group : groups_) {
    if (::ioctl(group.leader, PERF_EVENT_IOC_ENABLE, PERF_IOC_FLAG_GROUP) < 0) {
      return Internal(std::string("cannot start a perf counter group: ") + std::strerror(errno));
    }
  }
  baseline_.clear();
  EC_ASSIGN_OR_RETURN(baseline_, ReadRaw());
  return Status::Ok();
}

Result<std::vector<CounterReading>> PerfCounterGroups::ReadRaw() const {
  std::vector<CounterReading> readings;
  for (const Group& group : groups_) {
    // PERF_FORMAT_GROUP: nr, time enabled, time running, then one value per member.
    std::vector<uint64_t> data(3 + group.fds.size());
    const ssize_t want = static_cast<ssize_t>(data.size() * sizeof(uint64_t));
    if (::read(group.leader, data.data(), static_cast<size_t>(want)) != want) {
      return Internal("cannot read the perf counter group of " + group.events.front() + ": " + std::strerror(errno));
    }
    for (size_t i = 0; i < group.events.size() && i < data[0]; ++i) {
      readings.push_back({.event = group.events[i], .raw = data[3 + i], .enabled_ns = data[1], .running_ns = data[2]});
    }
  }
  return readings;
}

Result<std::vector<CounterReading>> PerfCounterGroups::Read() {
  EC_ASSIGN_OR_RETURN(std::vector<CounterReading> now, ReadRaw());
  // RESET clears the counts but not the enabled and running times: the window
  // is the difference from what Start() read.
  if (baseline_.size() == now.size()) {
    for (size_t i = 0; i < now.size(); ++i) {
      now[i].raw -= std::min(now[i].raw, baseline_[i].raw);
      now[i].enabled_ns -= std::min(now[i].enabled_ns, baseline_[i].enabled_ns);
      now[i].running_ns -= std::min(now[i].running_ns, baseline_[i].running_ns);
    }
  }
  return now;
}

}  // namespace edgecost::probes
