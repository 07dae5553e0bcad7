// One whole profile of a training graph on this device, as `edgecost profile`
// and the daemon's JobService run it: fingerprint, energy source, paging
// storage, every distinct op, and the measured cost table, all stored in the
// cost database as they are measured.
#pragma once

#include <atomic>
#include <functional>
#include <optional>
#include <string>

#include "base/status.h"
#include "graph/resolve.h"
#include "profiler/power_model.h"
#include "profiler/profile.h"
#include "service/in_step.h"

namespace edgecost::service {

struct ProfileJobOptions {
  costdb::Store* database = nullptr;  // the cost database; required
  graph::GraphSpec graph;
  int threads = 0;  // 0: all cores
  bool force = false;
  std::string paging_dir;  // empty: "paging" beside the database
  double min_window_s = profiler::MeasureOptions{}.min_window_s;
  std::string probes_config;  // TOML with a [probes] section (meters, rails, the estimate), or empty
  // The power model for energy when no probe measures it: [probes.estimate]
  // of the config (or its defaults), each figure overridden when set here.
  std::optional<double> idle_power_w;
  std::optional<double> core_power_w;
  // Ops that interference kept from measuring cleanly are stored marked
  // unreliable either way; without this the cost table is not built from them.
  bool accept_noisy = false;
  // Also fit the counter-based energy model against the measured source
  // (microkernels plus the ops just measured) and store it for the fingerprint.
  bool calibrate = false;
  // Then plain training steps (service/in_step.h): the measured-in-step table, the default
  // prediction, and the rest of a training process's memory. Skipped, with a note, for a
  // derivation other than exact or a graph the executor cannot run.
  bool in_step = true;
  int in_step_steps = kInStepSteps;
  std::string edgecost_binary;  // runs the steps in a process of their own; empty: in this one
};

struct ProfileJobResult {
  v1::Device device;
  v1::TrainingGraph graph;
  profiler::ProfileSummary summary;
  std::string energy_source;  // the probe, or the estimate's name
  bool energy_measured = false;
  int64_t cost_table_id = 0;  // 0 when interrupted, or noisy without accept_noisy
  // Ops measured while the device was busy: "3 ops measured while the CPU was
  // busy: re-run when the device is idle, or ...", empty when every op was clean.
  std::string noisy_message;
  double step_runtime_s = 0;  // one training step, from the stored table
  double step_energy_j = 0;
  std::string energy_label;                          // the calibration that estimated energy, when one did
  std::optional<v1::EnergyCalibration> calibration;  // fitted by this run (calibrate)
  std::optional<TrainJobResult> in_step;             // the in-step steps, when they ran
  std::string in_step_skipped;                       // why they did not, when asked
  // Nodes of at least a percent of the step whose in-step time differs from their isolated op's by
  // more than kDisagreementFactor, worst first: the in-step figure is their prediction.
  std::vector<std::string> disagreements;
  // Profiling all cores by default: the plain step on one thread too (its in-step table stored),
  // which a model too small to repay a team runs faster; 0 when not measured.
  double one_thread_step_s = 0;
  bool ok() const { return in_step ? in_step->in_step_table_id != 0 : cost_table_id != 0; }
};
inline constexpr double kDisagreementFactor = 3;
// Windows an op measured alone gets when the in-step steps follow (ProfileOptions::max_attempts).
inline constexpr int kAttemptsBeforeSteps = 2;

// The result as a Job carries it over RPC.
v1::ProfileResult ToProto(const ProfileJobResult& result);

// "counters: task-clock, ... per op; not countable here: cycles, ... (why; fix)".
std::string CountersLine(const probes::CounterSource& counters);

// "paging" beside the database: where paged tensors go unless told otherwise.
std::string DefaultPagingDir(const std::string& db_path);

// This machine as a measured device, with its fingerprint read now (the storage
// part from the device behind `paging_dir`).
v1::Device ThisDevice(const std::string& paging_dir);

// `log` gets a line for each stage (device, energy source, paging); `stop` is
// checked between ops, and what was measured stays stored. `accept_hint` is
// how the caller's user accepts noisy costs ("`--accept-noisy`").
Result<ProfileJobResult> RunProfileJob(const ProfileJobOptions& options, const std::atomic<bool>* stop,
                                       const std::function<void(const profiler::ProfileProgress&)>& on_progress,
                                       const std::function<void(const std::string&)>& log,
                                       const std::string& accept_hint = "`--accept-noisy`");

}  // namespace edgecost::service
