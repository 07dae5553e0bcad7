#include "service/calibrate.h"

#include <omp.h>

#include <algorithm>
#include <memory>

#include "probes/registry.h"
#include "profiler/probe_meter.h"
#include "profiler/profile.h"
#include "service/profile_job.h"

namespace edgecost::service {

Result<CalibrateResult> FitAndStore(costdb::CostDb& db, const std::string& fingerprint_hash, const std::string& probe,
                                    std::vector<profiler::CalibrationSample> microkernels,
                                    std::vector<profiler::CalibrationSample> ops) {
  CalibrateResult result;
  result.microkernel_samples = static_cast<int>(microkernels.size());
  result.op_samples = static_cast<int>(ops.size());
  std::vector<profiler::CalibrationSample> samples = std::move(microkernels);
  samples.insert(samples.end(), std::make_move_iterator(ops.begin()), std::make_move_iterator(ops.end()));
  const std::vector<std::string> events = profiler::FittableEvents(samples);
  if (!samples.empty()) {
    for (const v1::OpCounter& c : samples.front().counts) {
      if (std::find(events.begin(), events.end(), c.event()) == events.end()) result.left_out.push_back(c.event());
    }
  }
  if (events.empty()) {
    return FailedPrecondition(
        "no counter was counted in every calibration window; `edgecost probes` lists what "
        "perf_event_open can count here");
  }
  EC_ASSIGN_OR_RETURN(result.calibration, profiler::FitCalibration(samples, events));
  result.calibration.set_fingerprint_hash(fingerprint_hash);
  result.calibration.set_probe(probe);
  EC_ASSIGN_OR_RETURN(result.id, db.PutCalibration(result.calibration));
  return result;
}

Result<CalibrateResult> RunCalibrate(const CalibrateOptions& options,
                                     const std::function<void(const std::string&)>& log) {
  EC_ASSIGN_OR_RETURN(costdb::CostDb * opened, options.database->Db());
  costdb::CostDb& db = *opened;
  const int threads = options.threads > 0 ? options.threads : omp_get_num_procs();
  const std::string paging_dir = options.paging_dir.empty() ? DefaultPagingDir(options.database->path()) : options.paging_dir;
  const v1::Device device = ThisDevice(paging_dir);
  const std::string hash = device.fingerprint().hash();
  EC_RETURN_IF_ERROR(db.UpsertDevice(device).status());

  EC_ASSIGN_OR_RETURN(probes::ProbesConfig config, probes::LoadProbesConfig(options.probes_config));
  probes::Detected detected = probes::DetectAll(config);
  if (detected.probes.empty()) {
    return FailedPrecondition(
        "no measured energy source here to calibrate against (`edgecost probes` says why each is missing); "
        "calibrate where RAPL, a hwmon power monitor or an external meter ([[probes.meter]] in --probes-config) "
        "measures energy, then `edgecost db export` there and `db import` here to estimate energy from counters on "
        "a device of the same fingerprint");
  }
  log("energy: measuring idle power of " + detected.probes.front()->info().name + " for 1 s ...");
  EC_ASSIGN_OR_RETURN(std::unique_ptr<profiler::ProbeMeter> meter,
                      profiler::ProbeMeter::Start(std::move(detected.probes.front())));
  std::unique_ptr<probes::CounterSource> counters = profiler::OpenTeamCounters(threads);
  log(CountersLine(*counters));
  if (counters->Events().empty()) {
    return FailedPrecondition("no performance counter can be opened here, so there is nothing to calibrate with; " +
                              (counters->Uncounted().empty() ? std::string() : counters->Uncounted().front().fix));
  }
  const std::vector<profiler::Workload> workloads = profiler::Microkernels(threads);
  EC_ASSIGN_OR_RETURN(
      std::vector<profiler::CalibrationSample> samples,
      profiler::RunCalibration(workloads, options.rounds, options.window_s, *counters, *meter, profiler::SteadyClock(),
                               [&](const std::string& step) { log("calibrating: " + step); }));
  EC_ASSIGN_OR_RETURN(std::vector<v1::OpCost> costs, db.ListOpCosts(hash));
  return FitAndStore(db, hash, meter->Name(), std::move(samples), profiler::SamplesFromOpCosts(costs));
}

}  // namespace edgecost::service
