#include "probes/sysfs.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace edgecost::probes {
namespace fs = std::filesystem;

Result<std::string> ReadSysfs(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    const int error = errno;
    if (error == EACCES || error == EPERM) return PermissionDenied("cannot read " + path + ": permission denied");
    return NotFound("cannot read " + path + ": " + std::strerror(error));
  }
  std::string text;
  std::getline(in, text);
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ' || text.back() == '\r')) text.pop_back();
  return text;
}

Result<double> ReadSysfsNumber(const std::string& path) {
  EC_ASSIGN_OR_RETURN(std::string text, ReadSysfs(path));
  char* end = nullptr;
  const double value = std::strtod(text.c_str(), &end);
  if (text.empty() || end == text.c_str()) return Internal(path + " holds '" + text + "', not a number");
  return value;
}

namespace {

std::vector<fs::path> Entries(const fs::path& dir, const std::string& prefix) {
  std::vector<fs::path> out;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    if (entry.path().filename().string().rfind(prefix, 0) == 0) out.push_back(entry.path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::string Text(const fs::path& path, const std::string& fallback = "") {
  Result<std::string> text = ReadSysfs(path.string());
  return text.ok() ? *text : fallback;
}

// Files read as numbers, each scaled to SI units. The files stay open and are
// re-read with pread() at offset 0, as sysfs allows: a fraction of the cost of
// opening them for every read, which matters at 1 kHz.
class SysfsProbe : public Probe {
 public:
  struct Channel {
    std::vector<std::string> files;  // product of these files' values
    double scale;                    // SI per raw unit
    double wrap_j = 0;
  };
  SysfsProbe(ProbeInfo info, std::vector<Channel> channels) : info_(std::move(info)), channels_(std::move(channels)) {
    for (const Channel& c : channels_) {
      for (const std::string& file : c.files) fds_.push_back(::open(file.c_str(), O_RDONLY | O_CLOEXEC));
    }
  }
  ~SysfsProbe() override {
    for (int fd : fds_) {
      if (fd >= 0) ::close(fd);
    }
  }
  const ProbeInfo& info() const override { return info_; }
  double WrapJ(size_t domain) const override { return domain < channels_.size() ? channels_[domain].wrap_j : 0; }
  Result<std::vector<double>> Read() override {
    std::vector<double> values;
    size_t next_fd = 0;
    for (const Channel& c : channels_) {
      double value = c.scale;
      for (const std::string& file : c.files) {
        char text[64];
        const ssize_t n = ::pread(fds_[next_fd++], text, sizeof text - 1, 0);
        if (n <= 0) return Unavailable("cannot read " + file + (n < 0 ? ": " + std::string(std::strerror(errno)) : ""));
        text[n] = '\0';
        char* end = nullptr;
        const double raw = std::strtod(text, &end);
        if (end == text)
          return Internal(file + " holds '" + std::string(text, static_cast<size_t>(n)) + "', not a number");
        value *= raw;
      }
      values.push_back(value);
    }
    return values;
  }

 private:
  ProbeInfo info_;
  std::vector<Channel> channels_;
  std::vector<int> fds_;  // one per file, in channel order
};

constexpr char kRaplFix[] =
    "grant read access, e.g. `sudo chmod o+r /sys/class/powercap/intel-rapl:*/energy_uj "
    "/sys/class/powercap/intel-rapl:*/*/energy_uj` (again after each boot, or with a udev rule), or run as root";

}  // namespace

void DetectRapl(const std::string& sys_root, Detected& out) {
  // The perf `power` PMU counts the same RAPL energy; powercap is read instead
  // since it needs no CAP_PERFMON for system-wide events.
  const fs::path power_pmu = fs::path(sys_root) / "bus/event_source/devices/power";
  if (fs::exists(power_pmu / "type")) {
    ProbeInfo info{.source = "rapl", .name = "perf power PMU"};
    for (const fs::path& event : Entries(power_pmu / "events", "energy-")) {
      if (event.extension().empty()) info.domains.push_back(event.filename().string());
    }
    info.reason = "present; edgecost reads the same counters through powercap, which needs no CAP_PERFMON";
    out.infos.push_back(info);
  }
  const fs::path powercap = fs::path(sys_root) / "class/powercap";
  std::vector<fs::path> packages;
  for (const fs::path& p : Entries(powercap, "intel-rapl:")) {
    const std::string name = p.filename().string();
    if (std::count(name.begin(), name.end(), ':') == 1) packages.push_back(p);  // intel-rapl:N, not :N:M
  }
  if (packages.empty()) {
    ProbeInfo info{.source = "rapl", .name = "RAPL (powercap)"};
    info.reason = fs::exists(powercap) ? "no intel-rapl domains under " + powercap.string()
                                       : powercap.string() +
                                             " does not exist: no RAPL on this machine (ARM boards and "
                                             "most VMs have none)";
    info.fix = "on x86, load the intel_rapl_msr module (`sudo modprobe intel_rapl_msr`)";
    out.infos.push_back(info);
    return;
  }
  for (const fs::path& package : packages) {
    ProbeInfo info{.source = "rapl", .name = package.filename().string(), .kind = ReadingKind::kEnergyCounter};
    info.resolution = 1e-6;         // energy_uj counts microjoules; the MSR unit is coarser (~15 uJ)
    info.update_interval_s = 1e-3;  // RAPL refreshes about every millisecond
    std::vector<SysfsProbe::Channel> channels;
    std::string denied;
    std::vector<fs::path> zones = {package};
    for (const fs::path& sub : Entries(package, package.filename().string() + ":")) zones.push_back(sub);
    for (const fs::path& zone : zones) {
      const std::string energy = (zone / "energy_uj").string();
      Result<double> value = ReadSysfsNumber(energy);
      if (!value.ok()) {
        if (value.status().code() == ErrorCode::kPermissionDenied) denied = energy;
        continue;
      }
      Result<double> range = ReadSysfsNumber((zone / "max_energy_range_uj").string());
      info.domains.push_back(Text(zone / "name", zone.filename().string()));
      // Subzones core (PP0) and uncore (PP1, graphics) are parts of the
      // package's energy; dram is counted apart from it.
      const bool sub = zone != package && info.domains.back() != "dram";
      info.inside.push_back(sub ? Text(package / "name", package.filename().string()) : "");
      channels.push_back({{energy}, 1e-6, range.ok() ? *range * 1e-6 : 0});
    }
    if (!denied.empty() && channels.empty()) {
      info.reason = denied + " is readable only by root since Linux 5.10 (CVE-2020-8694)";
      info.fix = kRaplFix;
      out.infos.push_back(info);
      continue;
    }
    if (channels.empty()) {
      info.reason = "no readable energy_uj under " + package.string();
      out.infos.push_back(info);
      continue;
    }
    info.available = true;
    if (!denied.empty()) info.reason = "some subdomains are root-only (CVE-2020-8694); " + std::string(kRaplFix);
    out.infos.push_back(info);
    out.probes.push_back(std::make_unique<SysfsProbe>(info, std::move(channels)));
  }
}

void DetectHwmon(const std::string& sys_root, const NestedRails& nested, Detected& out) {
  const fs::path hwmon = fs::path(sys_root) / "class/hwmon";
  bool any_power = false;
  for (const fs::path& dir : Entries(hwmon, "hwmon")) {
    const std::string chip = Text(dir / "name", dir.filename().string());
    // Power channels (power*_input, or curr*_input with in*_input) where the chip
    // has them; energy*_input counters only on chips that have nothing else.
    for (const ReadingKind kind : {ReadingKind::kPower, ReadingKind::kEnergyCounter}) {
      ProbeInfo info{.source = "hwmon", .name = chip + " (" + dir.filename().string() + ")", .kind = kind};
      info.update_interval_s = 0.01;  // INA2xx/INA3221 conversion times are a few milliseconds
      info.resolution = kind == ReadingKind::kPower ? 1e-3 : 1e-6;
      std::vector<SysfsProbe::Channel> channels;
      std::vector<std::string> skipped, inside;
      for (int i = 1; i <= 16; ++i) {
        const std::string n = std::to_string(i);
        const fs::path power = dir / ("power" + n + "_input");
        const fs::path energy = dir / ("energy" + n + "_input");
        const fs::path curr = dir / ("curr" + n + "_input");
        const fs::path volt = dir / ("in" + n + "_input");
        SysfsProbe::Channel channel;
        if (kind == ReadingKind::kEnergyCounter && fs::exists(energy)) {
          channel = {{energy.string()}, 1e-6};  // microjoules
        } else if (kind == ReadingKind::kPower && fs::exists(power)) {
          channel = {{power.string()}, 1e-6};  // microwatts
        } else if (kind == ReadingKind::kPower && fs::exists(curr) && fs::exists(volt)) {
          channel = {{curr.string(), volt.string()}, 1e-6};  // milliamperes x millivolts
        } else {
          continue;
        }
        std::string rail = Text(dir / ("power" + n + "_label"));
        if (rail.empty()) rail = Text(dir / ("in" + n + "_label"));
        if (rail.empty()) rail = Text(dir / ("curr" + n + "_label"));
        if (rail.empty()) rail = "rail" + n;
        if (!ReadSysfsNumber(channel.files.front()).ok()) {
          skipped.push_back(rail + " (unreadable)");
          continue;
        }
        // A rail another rail includes is read as a domain of its own, marked
        // inside its parent, so totals count it once.
        const auto parent = nested.find(rail);
        info.domains.push_back(rail);
        info.inside.push_back(parent != nested.end() ? parent->second : "");
        if (parent != nested.end()) inside.push_back(rail + " (inside " + parent->second + ")");
        channels.push_back(std::move(channel));
      }
      if (channels.empty() && skipped.empty()) continue;  // a temperature or fan chip, or no counters
      any_power = true;
      for (const std::string& s : skipped) info.reason += (info.reason.empty() ? "not counted: " : ", ") + s;
      if (!inside.empty()) {
        std::string list;
        for (const std::string& s : inside) list += (list.empty() ? "" : ", ") + s;
        info.reason +=
            (info.reason.empty() ? "" : "; ") + std::string("nested, shown apart and not added to the total: ") + list;
      }
      info.available =
          std::any_of(info.inside.begin(), info.inside.end(), [](const std::string& p) { return p.empty(); });
      if (!info.available) info.fix = "check the nested rails in the config ([probes] nested_rails)";
      out.infos.push_back(info);
      if (info.available) out.probes.push_back(std::make_unique<SysfsProbe>(info, std::move(channels)));
      break;
    }
  }
  if (!any_power) {
    ProbeInfo info{.source = "hwmon", .name = "hwmon power monitors"};
    info.reason = "no power, energy, or current-and-voltage channels under " + hwmon.string();
    info.fix = "boards with INA219/INA226/INA3221 monitors need their hwmon driver loaded (ina2xx, ina3221)";
    out.infos.push_back(info);
  }
}

void DetectBatteries(const std::string& sys_root, Detected& out) {
  const fs::path supplies = fs::path(sys_root) / "class/power_supply";
  bool any = false;
  for (const fs::path& dir : Entries(supplies, "")) {
    if (Text(dir / "type") != "Battery") continue;
    any = true;
    ProbeInfo info{.source = "battery", .name = dir.filename().string(), .kind = ReadingKind::kPower};
    info.domains = {"battery"};
    info.update_interval_s = 1.0;  // fuel gauges refresh every second or slower (many every 5-60 s)
    info.resolution = 1e-3;
    std::vector<std::string> counters;
    if (fs::exists(dir / "energy_now")) counters.push_back("energy_now");
    if (fs::exists(dir / "charge_now")) counters.push_back("charge_now");
    SysfsProbe::Channel channel;
    if (fs::exists(dir / "power_now")) {
      channel = {{(dir / "power_now").string()}, 1e-6};  // microwatts
    } else if (fs::exists(dir / "current_now") && fs::exists(dir / "voltage_now")) {
      channel = {{(dir / "current_now").string(), (dir / "voltage_now").string()}, 1e-12};  // uA x uV
    } else {
      info.reason = "no power_now, nor current_now with voltage_now, under " + dir.string();
      info.fix = "this gauge cannot measure a window; use another source";
      out.infos.push_back(info);
      continue;
    }
    const std::string status = Text(dir / "status", "Unknown");
    if (status != "Discharging") {
      info.reason = "the battery is " + status + " (" + (dir / "status").string() +
                    "): its readings include the charger, so they measure nothing about this device";
      info.fix = "unplug the charger while profiling";
      out.infos.push_back(info);
      continue;
    }
    info.available = true;
    if (!counters.empty()) {
      info.reason = "reads power; " + counters.front() + " also exists but updates too rarely for short windows";
    }
    out.infos.push_back(info);
    out.probes.push_back(std::make_unique<SysfsProbe>(info, std::vector<SysfsProbe::Channel>{channel}));
  }
  if (!any) {
    ProbeInfo info{.source = "battery", .name = "battery fuel gauge"};
    info.reason = "no power supply of type Battery under " + supplies.string();
    out.infos.push_back(info);
  }
}

}  // namespace edgecost::probes
