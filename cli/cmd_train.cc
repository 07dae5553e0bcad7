// edgecost train: real training steps under a schedule, predicted next to measured;
// edgecost runs: the stored run records.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <optional>
#include <sstream>
#include <tuple>

#include "base/files.h"
#include "base/units.h"
#include "cli/cli.h"
#include "cli/services.h"
#include "cli/table.h"
#include "cli/train_flags.h"
#include "costdb/costdb.h"
#include "daemon/client.h"
#include "proto/json.h"
#include "profiler/profile.h"
#include "service/cost_tables.h"
#include "service/train_job.h"
#include "service/train_plot.h"
#include "service/words.h"
#include "solver/solve.h"

namespace edgecost::cli {
namespace {



// The optimizer and schedule flags as the request's messages; the service checks their values.
Status SetTrainingRule(const TrainFlags& flags, v1::TrainOptimizer& optimizer, v1::LrSchedule& schedule) {
  optimizer.set_kind(flags.optimizer);
  optimizer.set_momentum(flags.momentum);
  optimizer.set_dampening(flags.dampening);
  optimizer.set_nesterov(flags.nesterov);
  if (flags.weight_decay) optimizer.set_weight_decay(*flags.weight_decay);
  if (flags.eps) optimizer.set_eps(*flags.eps);
  if (!flags.betas.empty()) {
    std::istringstream in(flags.betas);
    double beta1 = 0, beta2 = 0;
    char comma = 0;
    if (!(in >> beta1 >> comma >> beta2) || comma != ',' || !in.eof()) {
      return InvalidArgument("--betas takes two numbers B1,B2 (0.9,0.999), not '" + flags.betas + "'");
    }
    optimizer.set_beta1(beta1);
    optimizer.set_beta2(beta2);
  }
  schedule.set_kind(flags.lr_schedule);
  schedule.set_step_size(flags.lr_step_size);
  if (flags.lr_gamma) schedule.set_gamma(*flags.lr_gamma);
  schedule.set_t_max(flags.lr_t_max);
  schedule.set_eta_min(flags.lr_min);
  schedule.set_warmup_steps(flags.warmup_steps);
  return Status::Ok();
}

}  // namespace

Result<std::vector<float>> ParseFloatList(const std::string& text, const std::string& flag) {
  std::vector<float> values;
  size_t at = 0;
  while (!text.empty() && at <= text.size()) {
    const size_t end = std::min(text.find(',', at), text.size());
    const std::string item = text.substr(at, end - at);
    char* parsed_end = nullptr;
    const float value = std::strtof(item.c_str(), &parsed_end);
    if (item.empty() || parsed_end != item.c_str() + item.size() || !std::isfinite(value)) {
      return InvalidArgument(flag + " takes numbers separated by commas (one per channel), not '" + text + "'");
    }
    values.push_back(value);
    at = end + 1;
  }
  return values;
}

Result<v1::StartTrainRequest> TrainRequestOf(const TrainFlags& flags) {
  v1::StartTrainRequest request;
  request.set_model(flags.model);
  request.set_batch_size(static_cast<uint32_t>(flags.batch_size));
  request.set_trainable(flags.trainable);
  request.set_update_in_backward(flags.update_in_backward);
  request.set_schedule_id(flags.schedule_id);
  if (!flags.ram_budget.empty() && !flags.activation_budget.empty()) {
    return InvalidArgument(
        "--ram-budget is the whole process's memory, --activation-budget the activations': give one");
  }
  if (!flags.ram_budget.empty() || !flags.activation_budget.empty()) {
    if (!flags.ram_budget.empty()) {
      EC_ASSIGN_OR_RETURN(const int64_t bytes, ParseBytes(flags.ram_budget));
      if (bytes <= 0) return InvalidArgument("--ram-budget must be positive");
      request.set_process_ram_budget_bytes(static_cast<uint64_t>(bytes));
    } else {
      EC_ASSIGN_OR_RETURN(const ActivationBudget budget, ParseActivationBudget(flags.activation_budget));
      request.set_activation_budget_bytes(budget.bytes);
      request.set_activation_budget_percent(budget.percent);
    }
    EC_ASSIGN_OR_RETURN(const RuntimeBudget runtime, ParseRuntimeBudget(flags.runtime_budget));
    if (runtime.kind == RuntimeBudget::Kind::kMultiple) {
      if (!(runtime.value >= 1)) return InvalidArgument("--runtime-budget must be at least 1x");
      request.set_runtime_budget_multiple(runtime.value);
    } else {
      request.set_runtime_budget_s(runtime.value);
    }
    request.set_strategy(flags.strategy);
    request.set_overlap_paging(!flags.count_paging_time);
    request.set_time_limit_s(flags.time_limit_s);
  }
  request.set_steps(static_cast<uint32_t>(flags.steps));
  request.set_lr(flags.lr);
  EC_RETURN_IF_ERROR(SetTrainingRule(flags, *request.mutable_optimizer(), *request.mutable_lr_schedule()));
  request.set_threads(static_cast<uint32_t>(std::max(0, flags.threads)));
  request.set_verify(flags.verify);
  request.set_cost_source(flags.cost_source);
  request.set_accept_noisy(flags.accept_noisy);
  request.set_init(flags.init);
  request.set_data(flags.data_file);
  request.set_val_data(flags.val_data);
  request.set_val_split(flags.val_split);
  request.set_epochs(static_cast<uint32_t>(std::max(0, flags.epochs)));
  for (auto [text, values, flag] : {std::tuple{&flags.mean, request.mutable_mean(), "--mean"},
                                    std::tuple{&flags.std_dev, request.mutable_std(), "--std"}}) {
    EC_ASSIGN_OR_RETURN(const std::vector<float> parsed, ParseFloatList(*text, flag));
    values->Add(parsed.begin(), parsed.end());
  }
  request.set_data_keys(flags.data_keys);
  request.set_seed(flags.seed);
  return request;
}

namespace {

std::string Percent(double measured, double predicted) {
  if (!(predicted > 0)) return "";
  std::ostringstream out;
  out.setf(std::ios::fixed);
  out.precision(1);
  out << (measured >= predicted ? "+" : "") << 100.0 * (measured - predicted) / predicted << "%";
  return out.str();
}

std::string Number(double value, int digits = 4) {
  std::ostringstream out;
  out.setf(std::ios::fixed);
  out.precision(digits);
  out << value;
  return out.str();
}

void PrintRun(const service::TrainJobResult& result, bool accepted_noisy) {
  const v1::TrainRun& run = result.run;
  if (run.disturbed()) std::cout << "WARNING        " << service::DisturbedRunWarning(run, accepted_noisy) << "\n";
  const bool predicted = !run.cost_source().empty();
  const bool estimated = run.energy_source() == v1::ENERGY_SOURCE_ESTIMATED;
  Table table({{"", Table::Align::kLeft}, {"predicted"}, {"measured"}, {"", Table::Align::kLeft}});
  std::string median = run.steps() > 1 ? "median of steps 2.." + std::to_string(run.steps()) : "one step";
  // The disturbed steps were left out when they and the median's add up to no more than the steps
  // measured (a resumed run measures fewer than it counts); else the median is of all.
  const uint32_t measured = run.steps() - (run.steps() > 1 ? 1 : 0);
  if (run.disturbed_steps() > 0 && run.median_steps() + run.disturbed_steps() <= measured) {
    median = "median of the " + std::to_string(run.median_steps()) + " undisturbed of steps " +
             (run.steps() > 1 ? "2.." : "1..") + std::to_string(run.steps());
  } else if (run.median_steps() > 0 && run.median_steps() < measured) {
    median = "median of the last " + std::to_string(run.median_steps()) + " steps of " + std::to_string(run.steps());
  }
  table.AddRow({"step time", predicted ? FormatSeconds(run.predicted_runtime_s()) : "-", FormatSeconds(run.runtime_s()),
                median + (predicted ? ", error " + Percent(run.runtime_s(), run.predicted_runtime_s()) : "")});
  table.AddRow({"peak activations", FormatBytes(static_cast<double>(run.predicted_peak_bytes())),
                FormatBytes(static_cast<double>(run.peak_activation_bytes())),
                "the arena's live bytes" +
                    std::string(run.activation_budget_bytes() > 0
                                    ? ", budget " + FormatBytes(static_cast<double>(run.activation_budget_bytes()))
                                    : "")});
  if (run.peak_rss_bytes() > 0) {
    const auto bytes = [](uint64_t b) { return FormatBytes(static_cast<double>(b)); };
    const bool rest_known = run.process_rest_from_run() != 0;
    table.AddRow({"process peak", rest_known ? bytes(run.predicted_process_bytes()) : "-", bytes(run.peak_rss_bytes()),
                  std::string(run.peak_reset_at_start() ? "VmHWM since training began" : "VmHWM since the process started") +
                      (rest_known ? ", error " + Percent(static_cast<double>(run.peak_rss_bytes()),
                                                         static_cast<double>(run.predicted_process_bytes()))
                                  : std::string(", not predicted: the rest of the process is unknown before a first run"))});
    const uint64_t tensors = run.predicted_process_bytes() - run.predicted_process_rest_bytes();
    table.AddRow({"  tensors", bytes(tensors), "",
                  "parameters and gradients " + bytes(tensors - run.optimizer_state_bytes() - run.layer_state_bytes() -
                                                      run.arena_bytes()) +
                      " + optimizer state " + bytes(run.optimizer_state_bytes()) + " + layer state " +
                      bytes(run.layer_state_bytes()) + " + arena " + bytes(run.arena_bytes()) +
                      " (the schedule's layout of its activations)"});
    table.AddRow({"  rest of process", rest_known ? bytes(run.predicted_process_rest_bytes()) : "-",
                  run.process_rest_bytes() ? bytes(run.process_rest_bytes()) : "-",
                  "binary and libraries, the imported model, kernels' code, the heap's overhead" +
                      (rest_known ? ", predicted from run #" + std::to_string(run.process_rest_from_run())
                                  : std::string())});
  }
  if (run.page_outs() + run.page_ins() > 0) {
    const int step = run.step_stats_size() > 1 ? 1 : 0;  // a job's record comes without its steps
    table.AddRow({"paging", FormatSeconds(run.predicted_paging_s()),
                  run.step_stats_size() > step
                      ? FormatSeconds(run.step_stats(step).page_out_s() + run.step_stats(step).page_in_s())
                      : "-",
                  std::to_string(run.page_outs()) + " out (" + FormatBytes(static_cast<double>(run.paged_out_bytes())) +
                      "), " + std::to_string(run.page_ins()) + " in (" +
                      FormatBytes(static_cast<double>(run.paged_in_bytes())) + ") on the I/O thread"});
    table.AddRow({"paging on path", FormatSeconds(run.predicted_paging_wait_s()), FormatSeconds(run.paging_wait_s()),
                  "time computation waited for I/O (POET assumes none; the prediction replays the I/O thread's queue)"});
  }
  table.AddRow(
      {"energy", predicted ? FormatJoules(run.predicted_energy_j()) : "-", FormatJoules(run.energy_j()),
       estimated ? "ESTIMATED by " + run.energy_probe() + " (no sensor here)" : "measured by " + run.energy_probe()});
  table.AddRow({"loss", "", Number(run.last_loss()), "from " + Number(run.first_loss()) + " at step 1"});
  table.Print(std::cout);
  if (run.has_verify()) {
    const v1::GradientCheck& v = run.verify();
    std::cout << "verify         "
              << (v.identical() ? "gradients bit-identical to the plain step's (" + std::to_string(v.parameters()) +
                                      " parameter tensors)"
                                : "gradients differ from the plain step's: largest difference " +
                                      std::to_string(v.max_abs_diff()) + " at " + v.where())
              << "\n";
  }
  for (const std::string& note : result.notes) std::cout << "note           " << note << "\n";
  if (result.run_id) {
    std::cout << "stored         training run #" << result.run_id;
    if (result.in_step_table_id) {
      std::cout << "; measured-in-step cost table #" << result.in_step_table_id
                << " (solve --cost-source measured-in-step)";
    }
    std::cout << "\n"
              << "trace          `edgecost trace --train-run " << result.run_id << "` (its last step, for Perfetto)\n";
  }
}

// The held-out part's loss and accuracy after the last epoch, when the run had one.
void PrintHeldOut(const v1::TrainRun& run) {
  if (run.epochs_size() == 0 || run.held_out_records() == 0) return;
  const v1::EpochStats& last = run.epochs(run.epochs_size() - 1);
  std::cout << "held out       " << run.held_out_records() << " records after epoch " << last.epoch() << ": loss "
            << Number(last.held_out_loss()) << ", accuracy " << Number(100 * last.held_out_accuracy(), 1) << "%\n";
}

// "step 3/10  loss 2.301  12.3 ms", over itself on a terminal. Into a file or a pipe, a line for the
// first and last steps and one every 2 s between: a log a person reads, not one line per step.
// "step 7/100  loss 2.3012  41.2 ms  elapsed 3.10 s  ETA 40.2 s", as profile's progress. The ETA is
// the wall time per step since the first step seen (a resumed run starts later), which also holds
// the data loading and the update that the step's own time leaves out.
void PrintStepLine(uint32_t step, uint32_t steps, double loss, double step_s) {
  static const bool tty = ::isatty(STDERR_FILENO);
  static auto last_line = std::chrono::steady_clock::time_point();
  static auto first_seen = std::chrono::steady_clock::time_point();
  static uint32_t first_step = 0;
  const auto now = std::chrono::steady_clock::now();
  if (first_step == 0 || step < first_step) {
    first_step = step;
    first_seen = now;
  }
  if (!tty && step != 1 && step != steps && now - last_line < std::chrono::seconds(2)) return;
  last_line = now;
  const double elapsed_s = std::chrono::duration<double>(now - first_seen).count();
  const double per_step_s = step > first_step ? elapsed_s / (step - first_step) : step_s;
  const double eta_s = per_step_s * (steps > step ? steps - step : 0);
  std::cerr << (tty ? "\r" : "") << "step " << step << "/" << steps << "  loss " << Number(loss) << "  "
            << FormatSeconds(step_s) << "  elapsed " << FormatSeconds(elapsed_s) << "  ETA " << FormatSeconds(eta_s)
            << (tty ? "\033[K" : "") << ((!tty || step == steps) ? "\n" : "") << std::flush;
}

// Trained by a daemon as a job, followed through WatchEvents until it ends; Ctrl-C cancels it.
int RunRemoteTrain(const TrainFlags& flags, const Context& ctx) {
  if (!flags.schedule_file.empty() || !flags.trace_path.empty() || !flags.svg_path.empty() ||
      !flags.checkpoint_path.empty()) {
    return UsageError(
        InvalidArgument("over --remote a schedule is --schedule-id or budgets; --schedule, --trace, --svg and "
                        "--checkpoint are files of this machine (the web view's training run page draws the plot)"));
  }
  Result<v1::StartTrainRequest> request = TrainRequestOf(flags);
  if (!request.ok()) return UsageError(request.status());
  // The data sets are the agent's files, inside its [train] data_dirs; --out fetches the trained model.
  request->set_keep_model(!flags.out_onnx.empty());
  v1::Job job;
  if (Status s = daemon::CallRemote(ctx.remote, "JobService/StartTrain", *request, job); !s.ok()) return Failure(s);
  std::cerr << "job " << job.id() << " on " << ctx.remote << ": " << job.message() << "\n";
  Result<v1::Job> followed = FollowJob(ctx, job, [](const v1::Job& before, const v1::Job& now) {
    const v1::TrainJobProgress& step = now.train_progress();
    if (step.step() != before.train_progress().step()) {  // a new step: the line a local run prints
      PrintStepLine(step.step(), step.steps(), step.loss(), step.step_runtime_s());
    } else if (now.message() != before.message()) {  // an epoch's line, the schedule, the outcome
      std::cerr << "job " << now.id() << " " << static_cast<int>(100 * now.progress()) << "%: " << now.message()
                << "\n";
    }
  });
  if (!followed.ok()) return Failure(followed.status());
  job = *followed;
  if (job.state() != v1::Job::STATE_SUCCEEDED) {
    std::cout << "job            " << job.id() << " " << service::JobStateText(job.state()) << ": " << job.message()
              << "\n";
    return kExitFailure;
  }
  if (flags.json) {
    PrintJson(job.train_run());
    return kExitOk;
  }
  service::TrainJobResult result;
  result.run = job.train_run();
  result.run_id = static_cast<int64_t>(result.run.id());
  std::cout << "trained        " << result.run.model() << " on " << ctx.remote << " (job " << job.id() << ")\n";
  PrintHeldOut(result.run);
  PrintRun(result, flags.accept_noisy);
  if (!flags.out_onnx.empty()) {
    if (result.run.trained_onnx_path().empty()) {
      return Failure(FailedPrecondition("the agent wrote no trained model: --out needs an ONNX model"));
    }
    const std::string npz = flags.out_npz.empty() ? service::NpzPathFor(flags.out_onnx) : flags.out_npz;
    for (auto [extension, path] : {std::pair{".onnx", &flags.out_onnx}, {".npz", &npz}}) {
      std::string bytes;
      const std::string target = "/trained/" + std::to_string(result.run_id) + extension;
      if (Status s = daemon::FetchRemote(ctx.remote, target, bytes); !s.ok()) return Failure(s);
      if (Status s = WriteFileAtomically(*path, bytes); !s.ok()) return Failure(s);
      std::cout << "written        " << *path << " (fetched from " << target << ")\n";
    }
  }
  return result.run.has_verify() && !result.run.verify().identical() ? kExitFailure : kExitOk;
}

int RunTrain(const TrainFlags& flags, const Context& ctx) {
  if (!ctx.remote.empty()) return RunRemoteTrain(flags, ctx);
  Result<v1::StartTrainRequest> request = TrainRequestOf(flags);
  Result<service::TrainJobOptions> mapped =
      request.ok() ? service::TrainJobOptionsOf(*request, ctx.Store(costdb::OpenMode::kReadWrite))
                   : Result<service::TrainJobOptions>(request.status());
  if (!mapped.ok()) return UsageError(mapped.status());
  service::TrainJobOptions& options = *mapped;
  // What only a run on this machine has: its files and its store.
  options.schedule_file = flags.schedule_file;
  options.out_onnx = flags.out_onnx;
  options.out_npz = flags.out_npz;
  options.checkpoint_path = flags.checkpoint_path;
  options.checkpoint_every = flags.checkpoint_every;
  options.resume = flags.resume;
  options.trace = !flags.trace_path.empty();
  options.paging_dir = flags.paging_dir;
  options.store = !flags.no_store;
  options.store_schedule = !flags.no_store_schedule;
  options.solve_in_child = true;  // no other thread here: the solver's memory stays out of the training's peak
  options.probes_config = flags.probes_config;

  auto progress = [&](const service::TrainProgress& p) {
    if (!p.epoch) PrintStepLine(p.step, p.steps, p.loss, p.runtime_s);  // the epoch's line comes by the log
  };
  auto result = [&] {
    const InterruptScope interrupt;
    return service::RunTrainJob(options, interrupt.stop(), progress,
                                [](const std::string& line) { std::cerr << line << "\n"; });
  }();
  if (!result.ok()) return Failure(result.status());
  if (!flags.trace_path.empty()) {
    std::ofstream out(flags.trace_path);
    out << result->trace_json;
    if (!out) return Failure(PermissionDenied("cannot write " + flags.trace_path));
  }
  if (!flags.svg_path.empty()) {
    v1::TrainRun run = result->run;
    run.set_id(static_cast<uint64_t>(result->run_id));
    std::ofstream out(flags.svg_path);
    out << service::TrainRunSvg(run).text();
    if (!out) return Failure(PermissionDenied("cannot write " + flags.svg_path));
  }
  if (flags.json) {
    for (const std::string& note : result->notes) std::cerr << "note: " << note << "\n";  // stdout is the record
    PrintJson(result->run);
  } else {
    const v1::TrainRun& run = result->run;
    std::cout << "trained        " << run.model() << ", batch " << run.batch_size() << ", " << run.steps()
              << " steps on " << run.device() << ", " << profiler::ThreadsText(run.threads()) << ", " << run.data()
              << "\n"
              << "optimizer      " << service::DescribeTraining(run) << "\n"
              << "schedule       " << run.strategy()
              << (run.schedule_id() ? " (#" + std::to_string(run.schedule_id()) + ")" : std::string())
              << (run.cost_source().empty() ? "" : ", predictions from " + run.cost_source() + " costs") << "\n";
    PrintHeldOut(run);
    PrintRun(*result, flags.accept_noisy);
    if (!flags.trace_path.empty()) std::cout << "written        " << flags.trace_path << " (Chrome Trace Event JSON)\n";
    if (!flags.svg_path.empty()) std::cout << "written        " << flags.svg_path << " (loss and step time)\n";
    if (!result->written_onnx.empty()) {
      std::cout << "written        " << result->written_onnx << " (the model with its trained weights)\n"
                << "written        " << result->written_npz
                << " (NumPy state dict: model.load_state_dict({k: torch.from_numpy(v) for k, v in "
                   "np.load(path).items()}))\n";
    }
  }
  if (result->run.has_verify() && !result->run.verify().identical()) return kExitFailure;
  return kExitOk;
}

// `runs --csv`: a row per run in plain SI numbers, for spreadsheets and pandas.
void PrintRunsCsv(const std::vector<v1::TrainRun>& runs) {
  const auto number = service::CsvNumber;
  std::cout << "run,model,batch_size,device,strategy,schedule_id,steps,threads,cost_source,activation_budget_bytes,"
               "process_ram_budget_bytes,activation_budget_percent,"
               "predicted_runtime_s,runtime_s,predicted_peak_bytes,peak_activation_bytes,paging_wait_s,"
               "predicted_energy_j,energy_j,energy_estimated,predicted_process_bytes,peak_rss_bytes,"
               "first_loss,last_loss,disturbed,disturbed_steps,created_at\n";
  for (const v1::TrainRun& run : runs) {
    std::cout << run.id() << ',' << service::CsvField(run.model()) << ',' << run.batch_size() << ','
              << service::CsvField(run.device()) << ',' << service::CsvField(run.strategy()) << ',' << run.schedule_id()
              << ',' << run.steps() << ',' << run.threads() << ',' << service::CsvField(run.cost_source()) << ','
              << run.activation_budget_bytes() << ',' << run.process_ram_budget_bytes() << ','
              << number(run.activation_budget_percent()) << ',' << number(run.predicted_runtime_s()) << ',' << number(run.runtime_s())
              << ',' << run.predicted_peak_bytes() << ',' << run.peak_activation_bytes() << ','
              << number(run.paging_wait_s()) << ',' << number(run.predicted_energy_j()) << ',' << number(run.energy_j())
              << ',' << (run.energy_source() == v1::ENERGY_SOURCE_ESTIMATED ? 1 : 0) << ','
              << run.predicted_process_bytes() << ',' << (run.peak_rss_bytes() ? std::to_string(run.peak_rss_bytes()) : "")
              << ','
              << number(run.first_loss()) << ',' << number(run.last_loss()) << ',' << (run.disturbed() ? 1 : 0) << ','
              << run.disturbed_steps() << ',' << service::CsvField(run.created_at()) << '\n';
  }
}

// The stored training runs, from the database or a daemon's TraceService.ListTrainRuns.
Result<std::vector<v1::TrainRun>> ListRuns(const std::string& model, int limit, const Context& ctx) {
  v1::ListTrainRunsRequest request;
  request.set_model(model);
  request.set_limit(static_cast<uint32_t>(limit));
  EC_ASSIGN_OR_RETURN(v1::ListTrainRunsResponse response, Services(ctx).ListTrainRuns(request));
  return std::vector<v1::TrainRun>(response.runs().begin(), response.runs().end());
}

int RunRuns(const std::string& model, int limit, bool json, bool csv, const Context& ctx) {
  auto runs = ListRuns(model, limit, ctx);
  if (!runs.ok()) return Failure(runs.status());
  if (csv) {
    PrintRunsCsv(*runs);
    return kExitOk;
  }
  if (json) {
    v1::ListTrainRunsResponse response;
    for (const v1::TrainRun& run : *runs) *response.add_runs() = run;
    PrintJson(response);
    return kExitOk;
  }
  if (runs->empty()) {
    std::cout << "no training runs" << (model.empty() ? "" : " of " + model) << "; run `edgecost train`\n";
    return kExitOk;
  }
  Table table({{"run"},
               {"model", Table::Align::kLeft},
               {"schedule", Table::Align::kLeft},
               {"budget"},
               {"steps"},
               {"step predicted"},
               {"measured"},
               {"error"},
               {"peak planned"},
               {"measured"},
               {"paging on path"},
               {"process predicted"},
               {"measured"},
               {"error"},
               {"energy predicted"},
               {"measured"},
               {"error"},
               {"loss", Table::Align::kLeft},
               {"gradients", Table::Align::kLeft},
               {"disturbed", Table::Align::kLeft},
               {"when", Table::Align::kLeft}});
  for (const v1::TrainRun& run : *runs) {
    const bool process_predicted = run.process_rest_from_run() != 0;
    table.AddRow(
        {std::to_string(run.id()), run.model() + " b" + std::to_string(run.batch_size()),
         run.strategy() + (run.schedule_id() ? " #" + std::to_string(run.schedule_id()) : std::string()),
         service::BudgetAsGiven(run),
         std::to_string(run.steps()), run.cost_source().empty() ? "-" : FormatSeconds(run.predicted_runtime_s()),
         FormatSeconds(run.runtime_s()), Percent(run.runtime_s(), run.predicted_runtime_s()),
         FormatBytes(static_cast<double>(run.predicted_peak_bytes())),
         FormatBytes(static_cast<double>(run.peak_activation_bytes())), FormatSeconds(run.paging_wait_s()),
         process_predicted ? FormatBytes(static_cast<double>(run.predicted_process_bytes())) : "-",
         run.peak_rss_bytes() ? FormatBytes(static_cast<double>(run.peak_rss_bytes())) : "-",
         process_predicted && run.peak_rss_bytes()
             ? Percent(static_cast<double>(run.peak_rss_bytes()), static_cast<double>(run.predicted_process_bytes()))
             : "-",
         run.cost_source().empty() ? "-" : FormatJoules(run.predicted_energy_j()),
         FormatJoules(run.energy_j()) + (run.energy_source() == v1::ENERGY_SOURCE_ESTIMATED ? " est." : ""),
         run.cost_source().empty() ? "-" : Percent(run.energy_j(), run.predicted_energy_j()),
         Number(run.first_loss(), 3) + " -> " + Number(run.last_loss(), 3),
         !run.has_verify()          ? "-"
         : run.verify().identical() ? "identical"
                                    : "DIFFER",
         run.disturbed() ? "DISTURBED " + std::to_string(run.disturbed_steps()) + "/" +
                               std::to_string(run.steps() - (run.steps() > 1))
         : run.disturbed_steps() > 0 ? std::to_string(run.disturbed_steps()) + " steps"
                                     : "-",
         run.created_at()});
  }
  table.Print(std::cout);
  for (const v1::TrainRun& run : *runs) {
    if (run.disturbed()) std::cout << "run " << run.id() << " DISTURBED: " << run.disturbance() << "\n";
  }
  return kExitOk;
}

// The nodes of one run whose time inside the steps is furthest from the cost
// table's: where the next prediction miss is to be found.
int RunRunNodes(int64_t run_id, int worst, const Context& ctx) {
  auto opened = ctx.Store(costdb::OpenMode::kReadOnly).Db();
  if (!opened.ok()) return Failure(opened.status());
  costdb::CostDb* db = *opened;
  auto run = db->GetTrainRun(run_id);
  if (!run.ok()) return Failure(run.status());
  if (run->cost_source().empty() || run->nodes_size() == 0) {
    std::cout << "run " << run_id << " has no predicted node times (no cost table of this device and model)\n";
    return kExitOk;
  }
  std::vector<v1::NodeTime> nodes(run->nodes().begin(), run->nodes().end());
  // Per step, a node's miss is (measured - predicted) x executions: what it adds to the step's error.
  auto miss_s = [](const v1::NodeTime& n) { return (n.runtime_s() - n.predicted_s()) * n.executions(); };
  double total_miss_s = 0, in_nodes_s = 0;
  for (const v1::NodeTime& n : nodes) {
    total_miss_s += miss_s(n);
    in_nodes_s += n.runtime_s() * n.executions();
  }
  std::sort(nodes.begin(), nodes.end(),
            [&](const v1::NodeTime& a, const v1::NodeTime& b) { return std::abs(miss_s(a)) > std::abs(miss_s(b)); });
  if (worst > 0 && nodes.size() > static_cast<size_t>(worst)) nodes.resize(static_cast<size_t>(worst));
  std::cout << "run " << run_id << ": " << run->model() << ", step " << FormatSeconds(run->runtime_s())
            << " measured against " << FormatSeconds(run->predicted_runtime_s()) << " predicted from "
            << run->cost_source() << " costs; the nodes miss " << FormatSeconds(total_miss_s)
            << " per step together, and the step spends " << FormatSeconds(run->runtime_s() - in_nodes_s)
            << " outside them (arena, paging waits, dispatch); worst nodes first\n";
  Table table(
      {{"node"}, {"name", Table::Align::kLeft}, {"runs/step"}, {"predicted"}, {"in step"}, {"error"}, {"miss/step"}});
  for (const v1::NodeTime& n : nodes) {
    table.AddRow({std::to_string(n.node()), n.name(), std::to_string(n.executions()), FormatSeconds(n.predicted_s()),
                  FormatSeconds(n.runtime_s()), Percent(n.runtime_s(), n.predicted_s()), FormatSeconds(miss_s(n))});
  }
  table.Print(std::cout);
  return kExitOk;
}

}  // namespace

// The agent's train job in a process of its own (`train-job`, hidden): the request as JSON in a
// file, each step's progress as "progress: <TrainJobProgress JSON>" and every other line on
// stderr, the run record's JSON on stdout. Stops at the next step on SIGINT, as `train` does.
int RunTrainWorker(const std::string& request_path, const std::string& out_onnx, const std::string& probes_config,
                   const Context& ctx) {
  std::ifstream in(request_path);
  std::stringstream text;
  text << in.rdbuf();
  v1::StartTrainRequest request;
  if (Status s = proto::FromJson(text.str(), &request); !in || !s.ok()) {
    return Failure(InvalidArgument("cannot read the train request " + request_path + ": " + s.message()));
  }
  Result<service::TrainJobOptions> mapped = service::TrainJobOptionsOf(request, ctx.Store(costdb::OpenMode::kReadWrite));
  if (!mapped.ok()) return Failure(mapped.status());
  service::TrainJobOptions& options = *mapped;
  options.out_onnx = out_onnx;
  options.probes_config = probes_config;
  options.solve_in_child = true;
  const auto progress = [](const service::TrainProgress& p) {
    v1::TrainJobProgress reported;
    reported.set_step(static_cast<uint32_t>(p.step));
    reported.set_steps(static_cast<uint32_t>(p.steps));
    reported.set_loss(p.loss);
    reported.set_step_runtime_s(p.runtime_s);
    if (p.epoch) {
      *reported.mutable_epoch() = *p.epoch;
      reported.set_held_out_records(static_cast<uint64_t>(p.held_out_records));
      reported.set_batches_per_epoch(static_cast<uint32_t>(p.batches_per_epoch));
    }
    if (Result<std::string> json = proto::ToJson(reported); json.ok()) std::cerr << "progress: " << *json << "\n";
  };
  const InterruptScope interrupt;  // the agent cancels a job with SIGTERM: the run stops between steps
  auto result =
      service::RunTrainJob(options, interrupt.stop(), progress, [](const std::string& line) { std::cerr << line << "\n"; });
  if (!result.ok()) return Failure(result.status());
  PrintJson(result->run);
  return kExitOk;
}

// What `train` and `choose-update` both take: the model, how it trains, and its data.
void AddTrainingFlags(CLI::App* cmd, const std::shared_ptr<TrainFlags>& flags) {
  cmd->add_option("--model", flags->model, "Zoo model or ONNX file")->required();
  cmd->add_option("--batch-size", flags->batch_size, "Batch size")->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_flag("--update-in-backward", flags->update_in_backward, kUpdateInBackwardHelp);
  cmd->add_option("--lr", flags->lr,
                  "Learning rate (of the batch-mean loss's gradient, as PyTorch's mean-reduced "
                  "CrossEntropyLoss)")
      ->capture_default_str();
  cmd->add_option("--optimizer", flags->optimizer,
                  "sgd, adam or adamw, as torch.optim.SGD, Adam and AdamW (PyTorch 1.13): the same update rules "
                  "and defaults")
      ->capture_default_str()
      ->check(CLI::IsMember({"sgd", "adam", "adamw"}));
  cmd->add_option("--momentum", flags->momentum, "SGD: momentum factor (0: none; one state tensor per parameter)")
      ->capture_default_str();
  cmd->add_option("--dampening", flags->dampening, "SGD: dampening of the momentum")->capture_default_str();
  cmd->add_flag("--nesterov", flags->nesterov, "SGD: Nesterov momentum (needs --momentum and --dampening 0)");
  cmd->add_option("--weight-decay", flags->weight_decay,
                  "Weight decay: SGD and Adam add it times the weight to the gradient (L2), AdamW shrinks the weight "
                  "by lr times it (decoupled); default 0, AdamW 0.01");
  cmd->add_option("--betas", flags->betas, "Adam(W): B1,B2, the moments' decay (default 0.9,0.999)");
  cmd->add_option("--eps", flags->eps, "Adam(W): added to the second moment's root (default 1e-8)");
  cmd->add_option("--threads", flags->threads, "oneDNN threads (default: all cores)");
  cmd->add_option("--seed", flags->seed, "Seed of the parameters and the synthetic data")->capture_default_str();
  cmd->add_option("--data", flags->data_file,
                  "Train on a data set instead of a synthetic batch, its format from the path: a folder with one "
                  "subfolder of PNG/JPEG images per class (resized to the model's input), an .npz with arrays x "
                  "and y, x.npy with y.npy beside it (or INPUTS.npy,LABELS.npy), or a CIFAR-10 .bin file. Shuffled "
                  "every epoch (from --seed); the last partial batch is dropped. With --remote: a path on the agent, "
                  "inside a directory of its config's [train] data_dirs");
  cmd->add_option("--mean", flags->mean,
                  "With --data: per-channel mean subtracted, e.g. 0.485,0.456,0.406 (pixels are first x/255)");
  cmd->add_option("--std", flags->std_dev,
                  "With --data: per-channel standard deviation divided by, e.g. "
                  "0.229,0.224,0.225 (default: none, pixels are x/255)");
  cmd->add_option("--data-keys", flags->data_keys, "With an .npz: the names of its inputs and labels arrays")
      ->capture_default_str();
  cmd->add_option("--val-split", flags->val_split,
                  "With --data: the fraction held out (every 1/f-th record, before shuffling) for the loss and "
                  "accuracy printed after each epoch")
      ->check(CLI::Range(0.0, 0.99));
  cmd->add_option("--val-data", flags->val_data, "With --data: a held-out data set of its own (same formats)");
  cmd->add_option("--init", flags->init,
                  "Where the parameters start: file (an ONNX model's own initializers; a zoo model has none and "
                  "draws them from --seed) or random (drawn from --seed)")
      ->capture_default_str()
      ->check(CLI::IsMember({"file", "random"}));
}

void RegisterTrainCommand(CLI::App& app, Context& ctx) {
  auto worker_request = std::make_shared<std::string>();
  auto worker_out = std::make_shared<std::string>();
  auto worker_probes = std::make_shared<std::string>();
  CLI::App* worker = app.add_subcommand("train-job", "The agent's train job in a process of its own")->group("");
  worker->add_option("--request", *worker_request, "StartTrainRequest as protobuf JSON")->required();
  worker->add_option("--out", *worker_out, "Where the trained ONNX model goes (keep_model)");
  worker->add_option("--probes-config", *worker_probes, "The agent's probes config");
  worker->callback([worker_request, worker_out, worker_probes, &ctx] {
    ctx.exit_code = RunTrainWorker(*worker_request, *worker_out, *worker_probes, ctx);
  });

  auto flags = std::make_shared<TrainFlags>();
  CLI::App* cmd = app.add_subcommand(
      "train", "Run real training steps under a schedule and hold its predictions against measurements");
  AddTrainingFlags(cmd, flags);
  AddTrainableOption(cmd, flags->trainable);
  cmd->add_option("--schedule", flags->schedule_file, "A schedule file from `edgecost solve --out` (exact derivation)");
  cmd->add_option("--schedule-id", flags->schedule_id, "A schedule stored in the cost database");
  cmd->add_option("--ram-budget", flags->ram_budget,
                  "Solve a schedule first for the RAM budget: this training process's peak RSS (VmHWM: everything it holds, "
                  "the binary, the model, parameters, gradients, optimizer state, kernels and activations): 60MB, 1GiB");
  cmd->add_option("--activation-budget", flags->activation_budget,
                  "Or the activation budget: the saved activations alone (the arena's peak): 1.2MB, 3MiB, or 50% "
                  "of the plain step's activation peak");
  cmd->add_option("--runtime-budget", flags->runtime_budget,
                  "With a budget: a multiple of a plain step or seconds; the default is solve's too")
      ->capture_default_str();
  cmd->add_option("--strategy", flags->strategy, "With a budget: " + solver::StrategyNames())->capture_default_str();
  cmd->add_option("--cost-source", flags->cost_source,
                  "Costs of the predictions and of a schedule solved here: measured (ops one at a time), "
                  "measured-in-step (node times inside real steps) or auto (measured-in-step where its table exists "
                  "at the run's thread count, else measured; the run says which)")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "measured", "measured-in-step"}));
  cmd->add_flag("--count-paging-time,!--no-count-paging-time", flags->count_paging_time,
                "With a budget: paging time counts against the runtime budget (default yes, as `solve --device`: "
                "measured steps show that overlap does not hide it; no gives POET's formulation)");
  cmd->add_option("--time-limit-s", flags->time_limit_s, "With a budget: solver time limit")->capture_default_str();
  CLI::Option* steps =
      cmd->add_option("--steps", flags->steps, "Training steps")->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--epochs", flags->epochs, "With --data: passes over its training records, instead of --steps")
      ->check(CLI::PositiveNumber)
      ->excludes(steps);
  cmd->add_option("--lr-schedule", flags->lr_schedule,
                  "The learning rate per step: none, step (StepLR: x --lr-gamma every --lr-step-size steps) or cosine "
                  "(CosineAnnealingLR: down to --lr-min over --lr-t-max steps)")
      ->capture_default_str()
      ->check(CLI::IsMember({"none", "step", "cosine"}));
  cmd->add_option("--lr-step-size", flags->lr_step_size, "--lr-schedule step: steps between decays");
  cmd->add_option("--lr-gamma", flags->lr_gamma, "--lr-schedule step: the decay factor (default 0.1)");
  cmd->add_option("--lr-t-max", flags->lr_t_max,
                  "--lr-schedule cosine: steps of the half cosine (default: the "
                  "steps after warm-up)");
  cmd->add_option("--lr-min", flags->lr_min, "--lr-schedule cosine: the lowest learning rate (eta_min)")
      ->capture_default_str();
  cmd->add_option("--warmup-steps", flags->warmup_steps,
                  "Linear warm-up before the schedule: step t < N uses lr x (t+1)/(N+1); the schedule then starts")
      ->capture_default_str();
  cmd->add_option("--out", flags->out_onnx,
                  "ONNX models: write the model with its trained weights here (.onnx), and a NumPy .npz state dict "
                  "beside it. With --remote: fetched from the agent once the job ends");
  cmd->add_option("--out-npz", flags->out_npz, "With --out: where the .npz goes (default: --out's path with .npz)");
  CLI::Option* checkpoint =
      cmd->add_option("--checkpoint", flags->checkpoint_path,
                      "Keep the run's state (weights, optimizer state, step) in FILE, replaced atomically every "
                      "--checkpoint-every steps and after the last");
  cmd->add_option("--checkpoint-every", flags->checkpoint_every, "With --checkpoint: steps between checkpoints")
      ->capture_default_str()
      ->check(CLI::PositiveNumber)
      ->needs(checkpoint);
  cmd->add_flag("--resume", flags->resume,
                "With --checkpoint: go on from the checkpoint in FILE (from step 1 while there is none) to the "
                "weights a run that was never stopped ends at, bit for bit; the settings must be the same")
      ->needs(checkpoint);
  cmd->add_flag("--verify", flags->verify,
                "Also run the plain step on one batch and compare every parameter gradient bit for bit");
  cmd->add_option("--trace", flags->trace_path, "Write per-node timings as Chrome Trace Event JSON (Perfetto)");
  cmd->add_option("--svg", flags->svg_path,
                  "Draw the loss and the step time over the steps (the web view's training run page shows the same)");
  cmd->add_option("--paging-dir", flags->paging_dir, "Where paged activations go (default: paging/ beside the db)");
  cmd->add_option("--probes-config", flags->probes_config, "TOML with a [probes] section (meters, the estimate)");
  cmd->add_flag("--no-store", flags->no_store, "Keep no run record and no measured-in-step costs");
  cmd->add_flag("--no-store-schedule", flags->no_store_schedule, "Solve for the run without storing the schedule")
      ->group("");  // for profile's paging steps
  cmd->add_flag("--accept-noisy", flags->accept_noisy,
                "Store the measured-in-step costs even when most steps were disturbed by other tasks or steal");
  cmd->add_flag("--json", flags->json, "Print the run record as protobuf JSON");
  cmd->footer(
      "Without a schedule the plain step runs (every activation kept until its last use).\n"
      "Each step is watched as profile watches an op (run-queue wait of its threads, steal, other tasks): a\n"
      "disturbed step is left out of the median when enough are not; a run with most steps disturbed is\n"
      "stored marked, and its measured-in-step costs are not stored unless --accept-noisy.\n"
      "Examples:\n"
      "  edgecost train --model resnet18_cifar --batch-size 2 --steps 50\n"
      "  edgecost train --model resnet18_cifar --activation-budget 1.2MB --runtime-budget 1.5x --verify\n"
      "  edgecost solve --model resnet18_cifar --device this --ram-budget 30MB --out s.json\n"
      "  edgecost train --model resnet18_cifar --schedule s.json --steps 20 --trace t.json\n"
      "  edgecost train --model m.onnx --data photos/ --mean 0.485,0.456,0.406 --std 0.229,0.224,0.225 \\\n"
      "      --val-split 0.1 --epochs 3 --out tuned.onnx\n"
      "  edgecost train --model resnet18_cifar --batch-size 8 --data cifar-10-batches-bin/data_batch_1.bin --lr 0.05\n"
      "  edgecost train --model mobilenet_v2.onnx --batch-size 2 --steps 50 --lr 0.05   # from torch.onnx.export\n"
      "  edgecost train --model mobilenet_v2.onnx --optimizer adamw --lr 1e-3 --lr-schedule cosine --warmup-steps 5\n"
      "  edgecost train --model resnet18_cifar --optimizer sgd --momentum 0.9 --weight-decay 5e-4 --lr-schedule step "
      "--lr-step-size 30\n"
      "  edgecost --remote unix:/run/edgecost/edgecost.sock train --model resnet18_cifar --schedule-id 3 --verify");
  cmd->callback([flags, &ctx] { ctx.exit_code = RunTrain(*flags, ctx); });

  auto model = std::make_shared<std::string>();
  auto limit = std::make_shared<int>(0);
  auto json = std::make_shared<bool>(false);
  CLI::App* runs = app.add_subcommand("runs", "List training run records: predicted against measured");
  runs->add_option("--model", *model, "Only this model's runs");
  runs->add_option("--limit", *limit, "The newest N runs (default 100)")->check(CLI::NonNegativeNumber);
  runs->add_flag("--json", *json, "Print the records as protobuf JSON");
  auto csv = std::make_shared<bool>(false);
  runs->add_flag("--csv", *csv, "Print CSV, a row per run in plain SI numbers, for spreadsheets")->excludes("--json");
  auto nodes = std::make_shared<int64_t>(0);
  runs->add_option("--nodes", *nodes, "One run's nodes, worst-predicted first (with --limit: that many)")
      ->check(CLI::PositiveNumber);
  runs->footer(
      "Examples:\n  edgecost runs\n  edgecost runs --model resnet18_cifar --limit 5 --json\n"
      "  edgecost runs --nodes 3 --limit 10     # where run 3's prediction missed");
  runs->callback([model, limit, json, csv, nodes, &ctx] {
    ctx.exit_code = *nodes > 0 ? LocalOnly(ctx, [&] { return RunRunNodes(*nodes, *limit, ctx); })
                               : RunRuns(*model, *limit, *json, *csv, ctx);
  });
}

}  // namespace edgecost::cli
