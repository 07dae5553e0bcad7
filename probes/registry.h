// Everything `edgecost probes` looks for, from a config: sysfs sources under a
// root, external meters, perf counters, and the estimate used when nothing
// measures energy.
#pragma once

#include <string>
#include <vector>

#include "probes/scpi_meter.h"
#include "probes/sysfs.h"

namespace edgecost::probes {

struct EstimateModel {
  double idle_w = 2.0;             // the board doing nothing
  double active_w_per_core = 1.5;  // extra power of one fully busy core
};

struct ProbesConfig {
  std::string sys_root = "/sys";  // --sysfs-root or $EDGECOST_SYSFS_ROOT
  std::string proc_root = "/proc";
  std::vector<MeterConfig> meters;
  NestedRails nested_rails;
  EstimateModel estimate;
};

// Reads the [probes] section of a TOML config file (absent: defaults), then
// applies $EDGECOST_SYSFS_ROOT. An empty path reads no file.
Result<ProbesConfig> LoadProbesConfig(const std::string& path);

// Detects every source; the probes that measure energy come first, best first
// (RAPL, hwmon, meter, battery), and the estimate always closes the list.
Detected DetectAll(const ProbesConfig& config);

}  // namespace edgecost::probes
