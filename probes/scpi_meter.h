// External bench power meters speaking SCPI over TCP (port 5025 by convention).
#pragma once

#include <string>

#include "probes/probe.h"

namespace edgecost::probes {

struct MeterConfig {
  std::string name = "meter";
  std::string host = "127.0.0.1";
  int port = 5025;
  std::string power_query = "MEAS:POW?";  // watts; empty: current x voltage
  std::string current_query;              // amperes, e.g. "MEAS:CURR?"
  std::string voltage_query;              // volts, e.g. "MEAS:VOLT?"
  double timeout_s = 1.0;                 // per query: a silent meter is an error, never a hang
  double update_interval_s = 0.1;         // how often the meter refreshes
};

// Connects and asks once, so a wrong address or protocol fails at detection.
Result<std::unique_ptr<Probe>> ConnectMeter(const MeterConfig& config);

}  // namespace edgecost::probes
