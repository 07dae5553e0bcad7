#include "service/profile_job.h"

#include <omp.h>

#include <algorithm>
#include <cstdlib>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <sstream>

#include "base/units.h"
#include "costdb/costdb.h"
#include "costdb/postgres.h"
#include "probes/registry.h"
#include "profiler/energy_model.h"
#include "profiler/fingerprint.h"
#include "kernels/layers.h"
#include "profiler/paging.h"
#include "profiler/probe_meter.h"
#include "service/calibrate.h"
#include "service/models.h"

namespace edgecost::service {

std::string DefaultPagingDir(const std::string& db_path) {
  if (costdb::IsPostgresUrl(db_path)) {  // a shared store: the paging folder stays on this machine
    const char* xdg = std::getenv("XDG_DATA_HOME");
    const char* home = std::getenv("HOME");
    const std::string data = xdg && *xdg ? xdg : std::string(home && *home ? home : ".") + "/.local/share";
    return data + "/edgecost/paging";
  }
  return (std::filesystem::path(db_path).parent_path() / "paging").string();
}

v1::Device ThisDevice(const std::string& paging_dir) {
  // The fingerprint names the storage under the paging folder: create it first,
  // or a missing folder would fingerprint its parent's storage instead.
  std::error_code ec;
  std::filesystem::create_directories(paging_dir, ec);
  v1::Device device;
  device.set_name(profiler::ThisDeviceName());
  device.set_kind(v1::Device::KIND_MEASURED);
  *device.mutable_fingerprint() =
      profiler::ReadFingerprint(profiler::SystemRoots::FromEnvironment(), kernels::Backend::Isa(), paging_dir);
  return device;
}

std::string CountersLine(const probes::CounterSource& counters) {
  std::string line = "counters: ";
  const std::vector<std::string> events = counters.Events();
  for (size_t i = 0; i < events.size(); ++i) line += (i ? ", " : "") + events[i];
  if (events.empty()) line += "none";
  line += " per op";
  // Events that fail alike (no PMU) share one reason: said once for them all.
  std::vector<std::pair<std::string, std::string>> reasons;  // reason -> events
  std::vector<std::string> fixes;
  for (const probes::UncountedEvent& u : counters.Uncounted()) {
    auto it = std::find_if(reasons.begin(), reasons.end(), [&](const auto& r) { return r.first == u.reason; });
    if (it == reasons.end()) {
      reasons.emplace_back(u.reason, u.event);
      fixes.push_back(u.fix);
    } else {
      it->second += ", " + u.event;
    }
  }
  for (size_t i = 0; i < reasons.size(); ++i) {
    line += "; not countable here: " + reasons[i].second + " (" + reasons[i].first +
            (fixes[i].empty() ? "" : "; " + fixes[i]) + ")";
  }
  return line;
}

v1::ProfileResult ToProto(const ProfileJobResult& result) {
  v1::ProfileResult out;
  out.set_nodes(static_cast<uint32_t>(result.summary.nodes));
  out.set_distinct_ops(static_cast<uint32_t>(result.summary.distinct_ops));
  out.set_measured(static_cast<uint32_t>(result.summary.measured));
  out.set_reused(static_cast<uint32_t>(result.summary.reused));
  out.set_elapsed_s(result.summary.elapsed_s);
  out.set_cost_table_id(static_cast<uint64_t>(result.cost_table_id));
  out.set_fingerprint_hash(result.device.fingerprint().hash());
  out.set_energy_source(result.energy_source);
  out.set_energy_measured(result.energy_measured);
  out.set_step_runtime_s(result.step_runtime_s);
  out.set_step_energy_j(result.step_energy_j);
  out.set_unreliable_ops(static_cast<uint32_t>(result.summary.unreliable.size()));
  if (result.calibration) *out.mutable_calibration() = *result.calibration;
  if (result.in_step) {
    *out.mutable_in_step_run() = result.in_step->run;
    out.mutable_in_step_run()->clear_step_stats();  // the run record has them: GetTrainRun
    out.mutable_in_step_run()->clear_last_step();
    out.set_in_step_table_id(static_cast<uint64_t>(result.in_step->in_step_table_id));
  }
  out.set_in_step_skipped(result.in_step_skipped);
  for (const std::string& line : result.disagreements) out.add_disagreements(line);
  out.set_one_thread_step_s(result.one_thread_step_s);
  return out;
}

namespace {

// "conv2d_3/bwd_input: 60.0 ms alone, 59.4 us in steps", for nodes whose isolated and in-step
// times differ by more than kDisagreementFactor, the largest factor first.
std::vector<std::string> Disagreements(const v1::CostTable& isolated, const v1::TrainRun& run) {
  std::vector<std::pair<double, std::string>> found;
  for (const v1::NodeTime& t : run.nodes()) {
    if (static_cast<int>(t.node()) >= isolated.costs_size()) continue;
    const double alone_s = isolated.costs(static_cast<int>(t.node())).runtime_s();
    if (!(alone_s > 0) || !(t.runtime_s() > 0)) continue;
    const double factor = std::max(alone_s / t.runtime_s(), t.runtime_s() / alone_s);
    // Below a percent of the step a factor is noise (a 0.2 us reshape against 3 us of dispatch).
    if (factor <= kDisagreementFactor || std::max(alone_s, t.runtime_s()) < 0.01 * run.runtime_s()) continue;
    found.emplace_back(factor, t.name() + ": " + FormatSeconds(alone_s) + " alone, " + FormatSeconds(t.runtime_s()) +
                                   " in steps");
  }
  std::sort(found.begin(), found.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  std::vector<std::string> lines;
  for (auto& [factor, line] : found) lines.push_back(std::move(line));
  return lines;
}

}  // namespace

Result<ProfileJobResult> RunProfileJob(const ProfileJobOptions& options, const std::atomic<bool>* stop,
                                       const std::function<void(const profiler::ProfileProgress&)>& on_progress,
                                       const std::function<void(const std::string&)>& log,
                                       const std::string& accept_hint) {
  ProfileJobResult result;
  EC_ASSIGN_OR_RETURN(costdb::CostDb * opened, options.database->Db());
  costdb::CostDb& db = *opened;
  EC_ASSIGN_OR_RETURN(const graph::GraphSpec spec, ResolveModel(&db, options.graph));
  if (graph::CarriesCosts(spec)) {
    return InvalidArgument("'" + spec.model_or_file +
                           "' is a graph with its own costs and no ops to run; profile a zoo or ONNX model");
  }
  EC_ASSIGN_OR_RETURN(result.graph, graph::LoadTrainingGraph(spec));
  const int threads = options.threads > 0 ? options.threads : omp_get_num_procs();
  omp_set_num_threads(threads);

  kernels::Backend backend;
  const std::string paging_dir = options.paging_dir.empty() ? DefaultPagingDir(options.database->path()) : options.paging_dir;
  const v1::Device& device = result.device = ThisDevice(paging_dir);
  const std::string hash = device.fingerprint().hash();
  EC_RETURN_IF_ERROR(db.UpsertDevice(device).status());
  std::ostringstream line;
  line << "device " << device.name() << " (fingerprint " << hash << "): " << device.fingerprint().cpu_model() << ", "
       << device.fingerprint().online_cores() << " cores online, oneDNN ISA " << device.fingerprint().dnnl_isa() << ", "
       << profiler::ThreadsText(threads);
  log(line.str());

  // The best source that measures energy; the power model only when there is none.
  EC_ASSIGN_OR_RETURN(probes::ProbesConfig probes_config, probes::LoadProbesConfig(options.probes_config));
  probes::EstimateModel estimate = probes_config.estimate;
  if (options.idle_power_w) estimate.idle_w = *options.idle_power_w;
  if (options.core_power_w) estimate.active_w_per_core = *options.core_power_w;
  probes::Detected detected = probes::DetectAll(probes_config);
  std::unique_ptr<profiler::EnergyMeter> meter;
  if (!detected.probes.empty()) {
    log("energy: measuring idle power of " + detected.probes.front()->info().name + " for 1 s ...");
    EC_ASSIGN_OR_RETURN(meter, profiler::ProbeMeter::Start(std::move(detected.probes.front())));
    result.energy_measured = true;
    char idle[32];
    std::snprintf(idle, sizeof idle, "%.3f W", meter->IdlePowerW());
    log("energy: measured by " + meter->Name() + ", idle " + idle);
  } else if (options.calibrate) {
    return FailedPrecondition(
        "--calibrate needs a measured energy source and there is none here (`edgecost probes` says why each is "
        "missing); profile without --calibrate, or calibrate on a device with RAPL, hwmon or a meter and "
        "`edgecost db import` its export");
  } else {
    meter = std::make_unique<profiler::EstimatedMeter>(estimate);
  }
  result.energy_source = meter->Name();
  std::optional<v1::EnergyCalibration> calibration;
  if (!result.energy_measured) {
    EC_ASSIGN_OR_RETURN(calibration, db.LatestCalibration(hash));
    if (calibration) {
      result.energy_label = profiler::CalibrationLabel(*calibration);
      log("energy: no sensor measures energy here; estimated from each op's counters by " + result.energy_label);
    } else {
      log("energy: no sensor measures energy here (see `edgecost probes`) and no calibration for this "
          "fingerprint; estimated by " +
          meter->Name() + " and labelled ESTIMATED");
    }
  }

  EC_ASSIGN_OR_RETURN(int64_t run, db.BeginRun(hash, profiler::kMeasuredSource, result.graph.model()));
  EC_ASSIGN_OR_RETURN(std::optional<v1::PagingCost> paging, db.GetPagingCost(hash));
  if (!paging || options.force) {
    log("measuring paging storage in " + paging_dir + " ...");
    EC_ASSIGN_OR_RETURN(profiler::PagingMeasurement measured, profiler::MeasurePaging({.dir = paging_dir}));
    v1::PagingCost cost = measured.cost;
    // Paging keeps one core busy waiting on storage: estimated power of idle plus one core.
    cost.set_page_in_power_w(estimate.idle_w + estimate.active_w_per_core);
    cost.set_page_out_power_w(estimate.idle_w + estimate.active_w_per_core);
    cost.set_energy_source(v1::ENERGY_SOURCE_ESTIMATED);
    EC_RETURN_IF_ERROR(db.PutPagingCost(hash, cost));
    log("paging: out " + FormatSeconds(cost.page_out_latency_s()) + " + " +
        FormatBytes(cost.page_out_throughput_bytes_per_s()) + "/s, in " + FormatSeconds(cost.page_in_latency_s()) +
        " + " + FormatBytes(cost.page_in_throughput_bytes_per_s()) + "/s" +
        (measured.direct_io ? " (O_DIRECT)" : " (page cache dropped; no O_DIRECT here)"));
  }

  // Performance counters around every op's window; what cannot be counted is said once.
  std::unique_ptr<probes::CounterSource> counters = profiler::OpenTeamCounters(threads);
  log(CountersLine(*counters));

  const bool in_step = options.in_step && spec.derivation == graph::Derivation::kExact;
  profiler::ProfileOptions profile;
  // Steps that follow decide the prediction and stand a busy core: one more window for a disturbed
  // op is enough for the cross-check, where a busy device would spend rounds of them.
  if (in_step) profile.max_attempts = kAttemptsBeforeSteps;
  profile.counters = counters.get();
  profile.calibration = calibration;
  profile.threads = threads;
  profile.force = options.force;
  profile.measure.min_window_s = options.min_window_s;
  profile.on_progress = on_progress;
  profile.stop = stop;
  Result<profiler::ProfileSummary> summary =
      profiler::ProfileGraph(db, backend, result.graph, hash, run, meter.get(), profile);
  if (!summary.ok()) {
    (void)db.FinishRun(run, costdb::RunStatus::kFailed);
    return summary.status();
  }
  result.summary = *summary;
  EC_RETURN_IF_ERROR(db.FinishRun(
      run, summary->interrupted ? costdb::RunStatus::kCancelled : costdb::RunStatus::kComplete, meter->IdlePowerW()));
  if (summary->interrupted) return result;
  if (options.calibrate) {
    log("calibrating the counter energy model against " + meter->Name() + " ...");
    EC_ASSIGN_OR_RETURN(
        std::vector<profiler::CalibrationSample> samples,
        profiler::RunCalibration(profiler::Microkernels(threads), 2, 0.5, *counters, *meter, profiler::SteadyClock(),
                                 [&](const std::string& step) { log("calibrating: " + step); }));
    EC_ASSIGN_OR_RETURN(std::vector<v1::OpCost> costs, db.ListOpCosts(hash));
    EC_ASSIGN_OR_RETURN(CalibrateResult fitted,
                        FitAndStore(db, hash, meter->Name(), std::move(samples), profiler::SamplesFromOpCosts(costs)));
    log("calibrated: " + profiler::CalibrationLabel(fitted.calibration));
    result.calibration = fitted.calibration;
  }
  result.noisy_message = profiler::UnreliableSummary(result.summary, options.accept_noisy ? "" : accept_hint);
  // Each unreliable op and its reason are in result.summary (and `costs --device` marks them): not logged one by one.
  const bool noisy = !result.noisy_message.empty() && !options.accept_noisy;
  if (options.in_step && !in_step) {
    result.in_step_skipped = "no in-step steps: they run real gradients, the exact derivation (--derivation exact)";
  }
  if (noisy && !in_step) return result;  // op costs stored, marked; no table

  // Before in-step steps the isolated table is their base (the nodes' energies, what no step runs)
  // and a cross-check: built even from ops measured while busy, which the steps' own times replace.
  EC_ASSIGN_OR_RETURN(v1::CostTable table, profiler::MeasuredCostTable(db, result.graph, device.name(), hash, threads));
  if (noisy) {
    table.set_note((table.note().empty() ? "" : table.note() + "; ") + result.noisy_message +
                   " (their isolated figures are kept; the in-step table is the prediction)");
  }
  EC_ASSIGN_OR_RETURN(result.cost_table_id, db.PutCostTable(table));
  for (const v1::NodeCost& c : table.costs()) {
    result.step_runtime_s += c.runtime_s();
    result.step_energy_j += c.compute_j();
  }
  if (!in_step) return result;
  // The steps' process is a training process alone on the device: this one's counters (inherited
  // by a child) and meter end first.
  counters.reset();
  meter.reset();
  InStepProfileOptions steps;
  steps.database = options.database;
  steps.graph = spec;
  steps.threads = threads;
  steps.steps = options.in_step_steps;
  steps.paging_dir = paging_dir;
  steps.probes_config = options.probes_config;
  steps.edgecost_binary = options.edgecost_binary;
  Result<TrainJobResult> ran = RunInStepProfile(steps, stop, log);
  if (!ran.ok()) {
    if (ran.status().code() == ErrorCode::kCancelled) {
      result.summary.interrupted = true;
      return result;
    }
    result.in_step_skipped = "no in-step steps: " + ran.status().message();
    if (noisy) result.cost_table_id = 0;  // nothing clean to predict from
    return result;
  }
  result.disagreements = Disagreements(table, ran->run);
  result.in_step = std::move(*ran);
  const uint64_t paging_budget =
      static_cast<uint64_t>(kPagingShare * static_cast<double>(result.in_step->run.predicted_peak_bytes()));
  Result<TrainJobResult> paged = RunInStepPaging(steps, paging_budget, stop, log);
  if (paged.ok()) {
    for (const std::string& note : paged->notes) {
      if (note.starts_with("paging measured")) result.in_step->notes.push_back(note);
    }
  } else {
    result.in_step->notes.push_back("paging not measured inside steps (the storage benchmark's figures stay): " +
                                    paged.status().message());
  }
  // All cores asked by default: one thread's steps too, for a model too small to repay a team.
  if (options.threads == 0 && threads > 1) {
    steps.threads = 1;
    if (Result<TrainJobResult> one = RunInStepProfile(steps, stop, log); one.ok() && one->in_step_table_id != 0) {
      result.one_thread_step_s = one->run.runtime_s();
    }
  }
  return result;
}

}  // namespace edgecost::service
