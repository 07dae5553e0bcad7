#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <iostream>

#include "base/units.h"
#include "cli/cli.h"
#include "cli/graph_flags.h"
#include "costdb/costdb.h"
#include "costdb/postgres.h"
#include "daemon/client.h"
#include "profiler/energy_model.h"
#include "profiler/power_model.h"
#include "profiler/profile.h"
#include "service/in_step.h"
#include "service/profile_job.h"
#include "service/words.h"
#include "base/subprocess.h"

namespace edgecost::cli {
namespace {


struct ProfileFlags {
  GraphFlags graph;
  int threads = 0;
  bool force = false;
  bool accept_noisy = false;
  bool calibrate = false;
  bool isolated_only = false;
  bool in_step = false;  // the default now: kept so that old command lines still run
  int in_step_steps = service::kInStepSteps;
  std::string paging_dir;
  double min_window_s = profiler::MeasureOptions{}.min_window_s;
  std::optional<double> idle_power_w;  // unset: [probes.estimate] of --probes-config, or its default
  std::optional<double> core_power_w;
  std::string probes_config;
  bool json = false;
};

// Progress of the profile. On a terminal one line, redrawn in place as each op is measured.
// Otherwise (a log, a pipe) a line every few seconds and at the end of each pass; with
// --verbose a line per op with its key.
class ProfileProgressPrinter {
 public:
  explicit ProfileProgressPrinter(bool verbose) : verbose_(verbose), tty_(::isatty(STDERR_FILENO)) {}

  void operator()(const profiler::ProfileProgress& p) {
    const std::string pass = p.round == 0 ? "op " + std::to_string(p.done) + "/" + std::to_string(p.total)
                                          : "disturbed ops measured again, round " + std::to_string(p.round) + " of " +
                                                "at most " + std::to_string(p.rounds) + ": op " +
                                                std::to_string(p.done) + "/" + std::to_string(p.total);
    const std::string times = "elapsed " + FormatSeconds(p.elapsed_s) + "  ETA " + FormatSeconds(p.eta_s);
    if (tty_) {
      constexpr int kWidth = 24;
      const int filled = p.total ? kWidth * p.done / p.total : kWidth;
      std::string key = p.op_key.size() > 60 ? p.op_key.substr(0, 57) + "..." : p.op_key;
      std::cerr << "\r[" << std::string(static_cast<size_t>(filled), '#')
                << std::string(static_cast<size_t>(kWidth - filled), ' ') << "] " << pass << "  " << times << "  "
                << key << "\033[K" << (p.done == p.total ? "\n" : "") << std::flush;
      return;
    }
    const bool first_of_pass = p.done == 1;
    if (!verbose_ && !first_of_pass && p.done != p.total && p.elapsed_s - printed_s_ < kEveryS) return;
    printed_s_ = p.elapsed_s;
    std::cerr << pass << "  " << times << (verbose_ ? "  " + p.op_key : std::string()) << "\n";
  }

 private:
  static constexpr double kEveryS = 3.0;
  bool verbose_;
  bool tty_;
  double printed_s_ = -1e9;
};

// "conv2d/bwd_weights (3), relu/fwd": the kinds of the unreliable ops, most first.
std::string UnreliableKinds(const std::vector<profiler::UnreliableOp>& ops) {
  std::vector<std::pair<std::string, int>> kinds;
  for (const profiler::UnreliableOp& op : ops) {
    const size_t first = op.op_key.find('/');
    const size_t second = first == std::string::npos ? first : op.op_key.find('/', first + 1);
    const std::string kind = op.op_key.substr(0, second);
    auto it = std::find_if(kinds.begin(), kinds.end(), [&](const auto& k) { return k.first == kind; });
    if (it == kinds.end()) {
      kinds.emplace_back(kind, 1);
    } else {
      ++it->second;
    }
  }
  std::stable_sort(kinds.begin(), kinds.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  std::string text;
  for (const auto& [kind, count] : kinds) {
    text += (text.empty() ? "" : ", ") + kind + (count > 1 ? " (" + std::to_string(count) + ")" : "");
  }
  return text;
}

// Profiled by a daemon as a job, followed until it ends; Ctrl-C cancels it.
int RunRemoteProfile(const ProfileFlags& flags, const Context& ctx) {
  v1::StartProfileRequest request;
  request.set_model(flags.graph.model_or_file);
  request.set_force(flags.force);
  request.set_accept_noisy(flags.accept_noisy);
  request.set_calibrate(flags.calibrate);
  request.set_isolated_only(flags.isolated_only);
  request.set_threads(static_cast<uint32_t>(std::max(0, flags.threads)));
  request.set_batch_size(static_cast<uint32_t>(flags.graph.batch_size));
  v1::Job job;
  if (Status s = daemon::CallRemote(ctx.remote, "JobService/StartProfile", request, job); !s.ok()) return Failure(s);
  std::cerr << "job " << job.id() << " on " << ctx.remote << ": " << job.message() << "\n";
  Result<v1::Job> followed = FollowJob(ctx, job, [](const v1::Job& before, const v1::Job& now) {
    if (now.message() != before.message()) {
      std::cerr << "job " << now.id() << " " << static_cast<int>(100 * now.progress()) << "%: " << now.message()
                << "\n";
    }
  });
  if (!followed.ok()) return Failure(followed.status());
  job = *followed;
  if (flags.json) {
    PrintJson(job);
  } else {
    std::cout << "job            " << job.id() << " " << service::JobStateText(job.state()) << ": " << job.message()
              << "\n";
    if (job.has_profile() && job.profile().has_calibration()) {
      const v1::EnergyCalibration& c = job.profile().calibration();
      std::cout << "calibrated     " << profiler::CalibrationLabel(c) << " from " << c.samples() << " windows\n";
    }
  }
  return job.state() == v1::Job::STATE_SUCCEEDED ? kExitOk : kExitFailure;
}

// The in-step steps: the step they measured, the table stored from them, and where the isolated
// ops disagreed with them.
void PrintInStep(const service::ProfileJobResult& result) {
  const service::TrainJobResult& steps = *result.in_step;
  const v1::TrainRun& run = steps.run;
  std::cout << "in-step        " << run.steps() << " plain steps at " << profiler::ThreadsText(run.threads())
            << ": median step " << FormatSeconds(run.runtime_s()) << " (median of " << run.median_steps()
            << "), isolated ops predicted " << FormatSeconds(run.predicted_runtime_s()) << "; process peak "
            << FormatBytes(static_cast<double>(run.peak_rss_bytes())) << "; training run #" << steps.run_id << "\n";
  for (const std::string& note : steps.notes) {
    if (!note.starts_with("the process peak is predicted without")) std::cout << "               " << note << "\n";
  }
  if (!result.disagreements.empty()) {
    std::cout << "disagree       " << result.disagreements.size() << " node"
              << (result.disagreements.size() == 1 ? "" : "s") << " took more than "
              << service::kDisagreementFactor << "x longer or shorter alone than in steps (the in-step time is "
              << "their prediction): " << result.disagreements.front()
              << (result.disagreements.size() > 1 ? ", ..." : "") << "\n";
  }
  if (result.one_thread_step_s > 0) {
    const bool fewer_faster = result.one_thread_step_s < run.runtime_s();
    std::cout << "threads        1 thread: step " << FormatSeconds(result.one_thread_step_s) << ", "
              << profiler::ThreadsText(run.threads()) << ": " << FormatSeconds(run.runtime_s())
              << (fewer_faster ? "; ONE THREAD IS FASTER for this model: train and solve with --threads 1 "
                                 "(its table is stored)"
                               : "; both tables stored (--threads picks one)")
              << "\n";
  }
  if (steps.in_step_table_id == 0) {
    std::cout << "not stored     no measured-in-step cost table (see above)\n";
    return;
  }
  std::cout << "training step  " << FormatSeconds(run.runtime_s()) << ", " << FormatJoules(run.energy_j())
            << (run.energy_source() == v1::ENERGY_SOURCE_ESTIMATED ? " ESTIMATED" : "")
            << "; cost table #" << steps.in_step_table_id
            << " (source measured-in-step: node times inside real steps plus the step's time outside them; "
               "`train` and `solve` use it by default)\n";
}

int RunProfile(const ProfileFlags& flags, const Context& ctx) {
  if (!ctx.remote.empty()) return RunRemoteProfile(flags, ctx);
  if (flags.graph.derivation.empty()) return UsageError(InvalidArgument("--derivation is empty"));
  auto spec = flags.graph.Spec();
  if (!spec.ok()) return UsageError(spec.status());
  if (flags.in_step && flags.isolated_only) return UsageError(InvalidArgument("--in-step and --isolated-only: give one"));
  service::ProfileJobOptions options;
  options.database = &ctx.Store(costdb::OpenMode::kReadWrite);
  options.graph = *spec;
  options.threads = flags.threads;
  options.force = flags.force;
  options.accept_noisy = flags.accept_noisy;
  options.calibrate = flags.calibrate;
  options.paging_dir = flags.paging_dir;
  options.min_window_s = flags.min_window_s;
  options.idle_power_w = flags.idle_power_w;
  options.core_power_w = flags.core_power_w;
  options.probes_config = flags.probes_config;
  options.in_step = !flags.isolated_only && spec->derivation == graph::Derivation::kExact;
  options.in_step_steps = flags.in_step_steps;
  options.edgecost_binary = SelfExecutable();

  ProfileProgressPrinter progress(ctx.verbose);
  auto result = [&] {
    const InterruptScope interrupt;
    return service::RunProfileJob(
        options, interrupt.stop(), [&progress](const profiler::ProfileProgress& p) { progress(p); },
        [](const std::string& line) { std::cerr << line << "\n"; });
  }();
  if (!result.ok()) return Failure(result.status());

  const profiler::ProfileSummary& summary = result->summary;
  if (flags.json) {
    PrintJson(service::ToProto(*result));  // noisy and not accepted: no cost table, exit 1 as in text
    return summary.interrupted || !result->ok() ? kExitFailure : kExitOk;
  }
  std::cout << "profiled       " << result->graph.model() << " (derivation " << result->graph.derivation() << ", "
            << result->graph.nodes_size() << " nodes) on " << result->device.name() << "\n"
            << "ops            " << summary.distinct_ops << " distinct: " << summary.measured << " measured now, "
            << summary.reused << " already stored";
  if (summary.without_work) {
    std::cout << ", " << summary.without_work << (summary.without_work == 1 ? " node" : " nodes") << " without work";
  }
  if (summary.remeasured) std::cout << "; " << summary.remeasured << " windows measured again after interference";
  std::cout << "\ntime           " << FormatSeconds(summary.elapsed_s) << "\n";
  if (summary.interrupted) {
    std::cout << "interrupted    what was measured is stored; run the same command again to resume\n";
    return kExitFailure;
  }
  if (!result->noisy_message.empty()) {
    if (ctx.verbose) {
      for (const profiler::UnreliableOp& op : summary.unreliable) {
        std::cout << "unreliable     " << op.op_key << "\n               " << op.reason << "\n";
      }
    } else {
      std::cout << "unreliable     " << UnreliableKinds(summary.unreliable)
                << "\n               each op with the reason: --verbose, or `edgecost costs " + result->graph.model() +
                       " --device this" + (flags.threads > 0 ? " --threads " + std::to_string(flags.threads) : std::string()) +
                       "`, which marks them !\n";
    }
    std::cout << "busy           " << result->noisy_message << "\n";
  }
  if (result->cost_table_id != 0) {
    std::cout << "isolated ops   step " << FormatSeconds(result->step_runtime_s) << ", "
              << FormatJoules(result->step_energy_j)
              << (result->energy_measured         ? " (measured by " + result->energy_source + ")"
                  : !result->energy_label.empty() ? " (ESTIMATED energy: " + result->energy_label + ")"
                                                  : std::string(" (ESTIMATED energy)"))
              << "; cost table #" << result->cost_table_id << " (source measured)\n";
  }
  if (result->calibration) {
    std::cout << "calibrated     " << profiler::CalibrationLabel(*result->calibration) << " from "
              << result->calibration->samples() << " windows\n";
  }
  if (!result->in_step_skipped.empty()) std::cout << "in-step        " << result->in_step_skipped << "\n";
  if (result->in_step) PrintInStep(*result);
  if (!result->ok()) {
    std::cout << "not stored     no cost table to predict from; the op costs are stored, marked unreliable\n";
    return kExitFailure;
  }
  std::cout << "stored         in " << options.database->printable_path() << " (device " << result->device.name()
            << ")\n";
  return kExitOk;
}

}  // namespace

void RegisterProfileCommand(CLI::App& app, Context& ctx) {
  auto flags = std::make_shared<ProfileFlags>();
  CLI::App* cmd = app.add_subcommand("profile", "Measure every distinct op of a training graph on this device");
  flags->graph.AddTo(cmd, /*positional=*/false);
  cmd->add_option("--model", flags->graph.model_or_file,
                  "Zoo or stored model (see `edgecost models`) or ONNX file from torch.onnx.export (.onnx)")
      ->required();
  cmd->add_option("--threads", flags->threads, "oneDNN threads (default: all cores)");
  cmd->add_flag("--force", flags->force, "Measure again ops already stored for this device");
  cmd->add_flag("--json", flags->json, "Print the result as protobuf JSON (ProfileResult); progress stays on stderr");
  cmd->add_flag("--accept-noisy", flags->accept_noisy,
                "Build the cost table even if some ops could not be measured cleanly (another task or the "
                "hypervisor took the CPU); they stay marked unreliable");
  cmd->add_flag("--calibrate", flags->calibrate,
                "Then fit the counter-based energy model against the measured energy source (microkernels plus "
                "the ops just measured), as `edgecost calibrate` does; needs a measured source");
  cmd->add_flag("--isolated-only", flags->isolated_only,
                "Measure the ops one at a time only, without the plain training steps that follow by default "
                "(their node times are the default prediction, and their process the memory's)");
  cmd->add_flag("--in-step", flags->in_step, "The default now (plain training steps after the ops); kept for old "
                                             "command lines")
      ->group("");
  cmd->add_option("--in-step-steps", flags->in_step_steps, "Plain training steps after the ops (low percentiles of 2..N)")
      ->capture_default_str()
      ->check(CLI::Range(2, 100000));
  cmd->add_option("--paging-dir", flags->paging_dir, "Where paged tensors go (default: beside the database)");
  cmd->add_option("--min-window-s", flags->min_window_s, "Minimum timed window per op")->capture_default_str();
  cmd->add_option("--idle-power-w", flags->idle_power_w,
                  "Power model for the energy estimate: idle power (default: [probes.estimate] idle_w, else 2.0)");
  cmd->add_option("--core-power-w", flags->core_power_w,
                  "Power model: extra power per busy core (default: [probes.estimate] active_w_per_core, else 1.5)");
  cmd->add_option("--probes-config", flags->probes_config,
                  "TOML config with a [probes] section: meters, nested rails, the estimate (see `edgecost probes`)")
      ->check(CLI::ExistingFile);
  cmd->footer(
      "Interrupting (Ctrl-C) keeps every op measured so far; the next run resumes.\n"
      "Every timed window is checked for interference (the op's threads waiting for a CPU, steal time,\n"
      "CPU used by other tasks);\n"
      "disturbed ops are measured again, and those never clean are stored marked unreliable. Then\n"
      "plain training steps run in a training process of their own: each node's time inside them\n"
      "(a low percentile over the steps) is the default prediction (the measured-in-step table), and\n"
      "the process's peak RSS the memory's. Without those steps (--isolated-only) a table with ops\n"
      "never measured cleanly is not built unless --accept-noisy.\n"
      "Examples:\n"
      "  edgecost profile --model resnet18_cifar\n"
      "  edgecost profile --model resnet18_cifar --threads 1 --isolated-only   # the ops one at a time only\n"
      "  edgecost profile --model resnet18 --threads 2 --force\n"
      "  edgecost profile --model my_model.onnx --batch-size 8\n"
      "  edgecost models add my_model.onnx --name mine && edgecost profile --model mine\n"
      "  edgecost profile --model linear --accept-noisy\n"
      "  edgecost profile --model resnet18_cifar --calibrate   # where RAPL, hwmon or a meter measures energy");
  cmd->callback([flags, &ctx] { ctx.exit_code = RunProfile(*flags, ctx); });
}

}  // namespace edgecost::cli
