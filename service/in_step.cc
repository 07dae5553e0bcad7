#include "service/in_step.h"

#include "base/subprocess.h"
#include "base/units.h"
#include "profiler/profile.h"
#include "proto/json.h"
#include "solver/solve.h"

namespace edgecost::service {
namespace {

// The steps' own options: predicted from the isolated ops' table, stored, and a disturbed run's
// table of robust statistics (a low percentile over all steps) stored too.
TrainJobOptions StepsOptions(const InStepProfileOptions& options, int steps) {
  TrainJobOptions train;
  train.database = options.database;
  train.graph = options.graph;
  train.cost_source = profiler::kMeasuredSource;
  train.steps = steps;
  train.threads = options.threads;
  train.paging_dir = options.paging_dir;
  train.probes_config = options.probes_config;
  train.accept_noisy = true;
  train.watch = options.watch;
  train.store = true;
  return train;
}

// The same as `edgecost train` flags, for a process of their own.
std::vector<std::string> StepsArguments(const TrainJobOptions& train, const std::string& binary) {
  std::vector<std::string> argv = {binary,       "--db",          train.database->path(),
                                    "train",      "--model",       train.graph.model_or_file,
                                    "--batch-size", std::to_string(train.graph.batch_size),
                                    "--trainable", train.graph.trainable.ToString(),
                                    "--threads",  std::to_string(train.threads),
                                    "--steps",    std::to_string(train.steps),
                                    "--init",     train.init,
                                    "--cost-source", train.cost_source,
                                    "--json",     "--accept-noisy"};
  for (const auto& [flag, value] :
       {std::pair{"--paging-dir", &train.paging_dir}, {"--probes-config", &train.probes_config}}) {
    if (!value->empty()) argv.insert(argv.end(), {flag, *value});
  }
  if (!train.store_schedule) argv.push_back("--no-store-schedule");
  if (train.solve.activation_budget_bytes() > 0) {
    argv.insert(argv.end(), {"--activation-budget", std::to_string(train.solve.activation_budget_bytes()) + "B", "--strategy",
                             train.solve.strategy(), "--runtime-budget",
                             std::to_string(train.solve.runtime_budget_s()) + "s"});
  }
  return argv;
}

// `edgecost train` with the steps' options; its JSON run record on stdout, its notes on stderr.
Result<TrainJobResult> RunInChild(const std::vector<std::string>& argv, const std::atomic<bool>* stop,
                                  const std::function<void(const std::string&)>& log) {
  TrainJobResult result;
  std::string error;
  EC_ASSIGN_OR_RETURN(const ProcessResult process, RunProcess(
                                                       argv,
                                                       [&](const std::string& line) {
                                                         if (line.starts_with("note: ")) {
                                                           result.notes.push_back(line.substr(6));
                                                         } else if (line.starts_with("edgecost: error: ")) {
                                                           error = line.substr(17);
                                                         } else if (!line.starts_with("step ")) {
                                                           log("in-step: " + line);
                                                         }
                                                       },
                                                       stop));
  if (process.exit_code != 0) {
    if (stop && stop->load()) return Status(ErrorCode::kCancelled, "in-step steps stopped: " + error);
    return Internal("the in-step training process failed (exit " + std::to_string(process.exit_code) +
                    "): " + (error.empty() ? "no message" : error));
  }
  EC_RETURN_IF_ERROR(proto::FromJson(process.stdout_text, &result.run));
  result.run_id = static_cast<int64_t>(result.run.id());
  result.in_step_table_id = static_cast<int64_t>(result.run.in_step_table_id());
  return result;
}

// With the model's own weights, as a user's `train` runs it: their copy is the process's too.
Result<TrainJobResult> Run(const InStepProfileOptions& options, const TrainJobOptions& train,
                           const std::atomic<bool>* stop, const std::function<void(const std::string&)>& log) {
  if (options.edgecost_binary.empty()) return RunTrainJob(train, stop, nullptr, log);
  return RunInChild(StepsArguments(train, options.edgecost_binary), stop, log);
}

}  // namespace

Result<TrainJobResult> RunInStepProfile(const InStepProfileOptions& options, const std::atomic<bool>* stop,
                                        const std::function<void(const std::string&)>& log) {
  if (options.graph.derivation != graph::Derivation::kExact) {
    return InvalidArgument("in-step profiling runs real gradients, the exact derivation: profile with --derivation "
                           "exact");
  }
  if (options.steps < 2) return InvalidArgument("in-step profiling needs at least 2 steps (the first warms up)");
  log("in-step: " + std::to_string(options.steps) + " plain training steps" +
      (options.edgecost_binary.empty() ? "" : " in a training process of their own") + " ...");
  return Run(options, StepsOptions(options, options.steps), stop, log);
}

Result<TrainJobResult> RunInStepPaging(const InStepProfileOptions& options, uint64_t activation_budget_bytes,
                                       const std::atomic<bool>* stop,
                                       const std::function<void(const std::string&)>& log) {
  log("in-step: " + std::to_string(kPagingSteps) + " steps paging at " +
      FormatBytes(static_cast<double>(activation_budget_bytes)) + " of activations, for the paging thread's times ...");
  TrainJobOptions train = StepsOptions(options, kPagingSteps);
  train.solve.set_activation_budget_bytes(activation_budget_bytes);
  train.solve.set_strategy("paging-only");
  train.solve.set_runtime_budget_s(kPagingRuntimeBudgetS);
  train.solve.set_count_paging_time(true);
  train.solve.set_time_limit_s(10);
  train.store_schedule = false;  // the profile's own: not a schedule its user asked for
  return Run(options, train, stop, log);
}

}  // namespace edgecost::service
