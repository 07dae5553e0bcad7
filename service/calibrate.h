// `edgecost calibrate` and `profile --calibrate`: fit this device's
// counter-based energy model against its measured energy source, and store it
// for its fingerprint.
#pragma once

#include <functional>
#include <string>

#include "base/status.h"
#include "costdb/costdb.h"
#include "costdb/store.h"
#include "probes/counter_source.h"
#include "profiler/energy_model.h"
#include "profiler/measure.h"
#include "proto/edgecost.pb.h"

namespace edgecost::service {

struct CalibrateOptions {
  costdb::Store* database = nullptr;  // the cost database; required
  std::string probes_config;  // TOML with a [probes] section, or empty
  std::string paging_dir;     // for the fingerprint; empty: "paging" beside the database
  int threads = 0;            // microkernels on 1..threads threads; 0: all cores
  double window_s = 0.5;      // per microkernel window
  int rounds = 2;
};

struct CalibrateResult {
  v1::EnergyCalibration calibration;
  int64_t id = 0;
  int microkernel_samples = 0;
  int op_samples = 0;                 // op costs measured with the source, on this fingerprint
  std::vector<std::string> left_out;  // counted events that never moved, or missing from some window
};

// Runs the microkernels between readings of the best measured source and the
// op counters, adds the op costs this fingerprint measured with a source, fits
// and stores. Refuses without a measured source, saying what to do instead.
Result<CalibrateResult> RunCalibrate(const CalibrateOptions& options,
                                     const std::function<void(const std::string&)>& log);

// Fits and stores from prepared samples: what RunCalibrate does once they are measured.
Result<CalibrateResult> FitAndStore(costdb::CostDb& db, const std::string& fingerprint_hash, const std::string& probe,
                                    std::vector<profiler::CalibrationSample> microkernels,
                                    std::vector<profiler::CalibrationSample> ops);

}  // namespace edgecost::service
