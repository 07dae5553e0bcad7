// Detection of the energy sources under a sysfs root (/sys, or a fake tree):
// RAPL through powercap, hwmon power monitors, battery fuel gauges.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "probes/probe.h"

namespace edgecost::probes {

// Rails that another rail already includes (child -> parent), e.g. a board's
// input rail VDD_IN that contains VDD_CPU_GPU_CV: the children are read as
// domains marked inside their parent (ProbeInfo.inside), and totals skip them.
using NestedRails = std::map<std::string, std::string>;

struct Detected {
  std::vector<ProbeInfo> infos;                // everything looked at, available or not
  std::vector<std::unique_ptr<Probe>> probes;  // the available ones
};

// /sys/class/powercap/intel-rapl:* (Intel and AMD): one counter probe per
// package with its subdomains; energy_uj unreadable by this user is reported
// with the fix (root-only since Linux 5.10, CVE-2020-8694).
void DetectRapl(const std::string& sys_root, Detected& out);

// /sys/class/hwmon/hwmon*: power*_input (uW), energy*_input (uJ), or
// curr*_input (mA) with in*_input (mV); rails named by their *_label (INA3221).
void DetectHwmon(const std::string& sys_root, const NestedRails& nested, Detected& out);

// /sys/class/power_supply/* of type Battery: power_now, or current_now with
// voltage_now; energy_now/charge_now reported; valid only while discharging.
void DetectBatteries(const std::string& sys_root, Detected& out);

// Reads a sysfs value file; errors name the path and what errno means.
Result<std::string> ReadSysfs(const std::string& path);
Result<double> ReadSysfsNumber(const std::string& path);

}  // namespace edgecost::probes
