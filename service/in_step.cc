#include "service/in_step.h"

#include "profiler/profile.h"

namespace edgecost::service {

Result<TrainJobResult> RunInStepProfile(const InStepProfileOptions& options, const std::atomic<bool>* stop,
                                        const std::function<void(const std::string&)>& log) {
  if (options.graph.derivation != graph::Derivation::kExact) {
    return InvalidArgument("in-step profiling runs real gradients, the exact derivation: profile with --derivation "
                           "exact");
  }
  if (options.steps < 2) return InvalidArgument("in-step profiling needs at least 2 steps (the first warms up)");
  TrainJobOptions train;
  train.init = "random";  // times, not weights: a model whose layers the file cannot fill profiles too
  train.db_path = options.db_path;
  train.graph = options.graph;
  train.cost_source = profiler::kMeasuredSource;  // the isolated ops' table, as the base the node times replace
  train.steps = options.steps;
  train.threads = options.threads;
  train.paging_dir = options.paging_dir;
  train.probes_config = options.probes_config;
  train.accept_noisy = options.accept_noisy;
  train.watch = options.watch;
  train.store = true;
  log("in-step: " + std::to_string(options.steps) + " plain training steps ...");
  return RunTrainJob(train, stop, nullptr, log);
}

}  // namespace edgecost::service
