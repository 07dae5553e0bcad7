#include "service/in_step.h"

#include "base/subprocess.h"
#include "profiler/profile.h"
#include "proto/json.h"

namespace edgecost::service {
namespace {

// `edgecost train` with the steps' options; its JSON run record on stdout, its notes on stderr.
Result<TrainJobResult> RunInChild(const InStepProfileOptions& options, const std::atomic<bool>* stop,
                                  const std::function<void(const std::string&)>& log) {
  std::vector<std::string> argv = {options.edgecost_binary,
                                    "--db",
                                    options.db_path,
                                    "train",
                                    "--model",
                                    options.graph.model_or_file,
                                    "--batch-size",
                                    std::to_string(options.graph.batch_size),
                                    "--trainable",
                                    options.graph.trainable.ToString(),
                                    "--threads",
                                    std::to_string(options.threads),
                                    "--steps",
                                    std::to_string(options.steps),
                                    "--init",
                                    "random",
                                    "--cost-source",
                                    profiler::kMeasuredSource,
                                    "--json",
                                    "--accept-noisy"};  // a disturbed run's table is of robust statistics
  for (const auto& [flag, value] : {std::pair{"--paging-dir", &options.paging_dir},
                                    {"--probes-config", &options.probes_config}}) {
    if (!value->empty()) argv.insert(argv.end(), {flag, *value});
  }
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
  if (!options.edgecost_binary.empty()) return RunInChild(options, stop, log);
  TrainJobOptions train;
  train.init = "random";  // times, not weights: a model whose layers the file cannot fill profiles too
  train.db_path = options.db_path;
  train.graph = options.graph;
  train.cost_source = profiler::kMeasuredSource;  // the isolated ops' table, as the base the node times replace
  train.steps = options.steps;
  train.threads = options.threads;
  train.paging_dir = options.paging_dir;
  train.probes_config = options.probes_config;
  train.accept_noisy = true;  // a disturbed run's node times are a low percentile over all its steps
  train.watch = options.watch;
  train.store = true;
  return RunTrainJob(train, stop, nullptr, log);
}

}  // namespace edgecost::service
