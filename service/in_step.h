// Profiling by running real steps: after `edgecost profile` has measured every op
// alone (the `measured` table), plain training steps at the profile's thread count
// give each node's time inside a real step, plus the step's time outside its nodes
// as a per-execution overhead: the `measured-in-step` table, which `train` and
// `solve` prefer by default (cost source `auto`). Run by a fresh `edgecost train`
// process, the steps also measure the rest of a training process (its binary,
// libraries, kernels' code and heap), which predicts the next run's peak RSS.
#pragma once

#include <atomic>
#include <functional>
#include <string>

#include "base/status.h"
#include "graph/resolve.h"
#include "service/train_job.h"

namespace edgecost::service {

// Enough plain steps for a low percentile of every node's time to be an undisturbed one.
inline constexpr int kInStepSteps = 20;

struct InStepProfileOptions {
  costdb::Store* database = nullptr;  // the cost database; required
  graph::GraphSpec graph;  // as profiled; run with the exact derivation
  int threads = 0;         // 0: all cores, as the profile
  int steps = kInStepSteps;
  std::string paging_dir;
  std::string probes_config;
  // The edgecost executable to run the steps in a process of their own (`edgecost train`), as a
  // user's training process will be; empty: in this process (tests), whose memory is not a
  // training process's.
  std::string edgecost_binary;
  profiler::InterferenceWatch* watch = nullptr;  // in this process only; null: the scheduler's accounting
};

// Runs the plain steps, predicted from the measured table just profiled, and
// stores the run record and the measured-in-step table (result.in_step_table_id;
// 0 with a note in result.notes when it was not stored).
Result<TrainJobResult> RunInStepProfile(const InStepProfileOptions& options, const std::atomic<bool>* stop,
                                        const std::function<void(const std::string&)>& log);

// A few steps under a paging-only schedule at `activation_budget_bytes`: the paging thread's
// requests inside real steps give the device's paging cost (latency + bytes / throughput per
// direction), stored in place of the storage benchmark's. Its node times make no table.
inline constexpr int kPagingSteps = 6;
inline constexpr double kPagingRuntimeBudgetS = 3600;  // no budget to speak of: a tiny step pages in milliseconds
inline constexpr double kPagingShare = 0.5;             // of the plain step's activation peak
Result<TrainJobResult> RunInStepPaging(const InStepProfileOptions& options, uint64_t activation_budget_bytes,
                                       const std::atomic<bool>* stop,
                                       const std::function<void(const std::string&)>& log);

}  // namespace edgecost::service
