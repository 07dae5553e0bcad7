#include <cstdio>
#include <iostream>

#include "base/units.h"
#include "cli/cli.h"
#include "cli/table.h"
#include "profiler/energy_model.h"
#include "service/calibrate.h"

namespace edgecost::cli {
namespace {

struct CalibrateFlags {
  service::CalibrateOptions options;
  bool json = false;
};

std::string Scientific(double x) {
  char text[32];
  std::snprintf(text, sizeof text, "%.4g", x);
  return text;
}

int RunCalibrate(CalibrateFlags flags, const Context& ctx) {
  if (!ctx.remote.empty()) return UsageError(InvalidArgument("calibrate runs on the device itself, not over --remote"));
  if (flags.options.window_s <= 0 || flags.options.rounds < 1) {
    return UsageError(InvalidArgument("--window-s must be positive and --rounds at least 1"));
  }
  flags.options.database = &ctx.Store(costdb::OpenMode::kReadWrite);
  auto result = service::RunCalibrate(flags.options, [](const std::string& line) { std::cerr << line << "\n"; });
  if (!result.ok()) return Failure(result.status());
  const v1::EnergyCalibration& c = result->calibration;
  if (flags.json) {
    PrintJson(c);
    return kExitOk;
  }
  Table out({{"term", Table::Align::kLeft}, {"weight"}, {"95% interval"}});
  out.AddRow({"idle power (W)", Scientific(c.idle_power_w()),
              Scientific(c.idle_power_ci95_low_w()) + " .. " + Scientific(c.idle_power_ci95_high_w())});
  for (const v1::CounterWeight& w : c.weights()) {
    out.AddRow({w.event() + (w.event() == "task-clock" ? " (J per ns of CPU)" : " (J per count)"),
                Scientific(w.joules_per_count()), Scientific(w.ci95_low()) + " .. " + Scientific(w.ci95_high())});
  }
  out.Print(std::cout);
  char error[64];
  std::snprintf(error, sizeof error, "%.2f%% RMS relative, %s RMS", 100 * c.relative_error(),
                FormatJoules(c.rms_residual_j()).c_str());
  std::cout << "samples        " << c.samples() << " windows (" << result->microkernel_samples << " microkernel, "
            << result->op_samples << " measured ops)\n"
            << "residual       " << error << "\n";
  if (!result->left_out.empty()) {
    std::cout << "left out       ";
    for (size_t i = 0; i < result->left_out.size(); ++i) std::cout << (i ? ", " : "") << result->left_out[i];
    std::cout << " (did not move, or missing from some window)\n";
  }
  std::cout << "stored         calibration #" << result->id << " for fingerprint " << c.fingerprint_hash() << ": "
            << profiler::CalibrationLabel(c) << "\n"
            << "next           without the meter, `edgecost profile` estimates each op's energy from its counters\n";
  return kExitOk;
}

}  // namespace

void RegisterCalibrateCommand(CLI::App& app, Context& ctx) {
  auto flags = std::make_shared<CalibrateFlags>();
  CLI::App* cmd = app.add_subcommand(
      "calibrate", "Fit energy = P_idle*t + sum_k w_k*counter_k against this device's measured energy source");
  cmd->add_option("--probes-config", flags->options.probes_config,
                  "TOML config with a [probes] section: meters, nested rails (see `edgecost probes`)")
      ->check(CLI::ExistingFile);
  cmd->add_option("--threads", flags->options.threads, "Microkernels on 1..N threads (default: all cores)");
  cmd->add_option("--window-s", flags->options.window_s, "Seconds per microkernel window")->capture_default_str();
  cmd->add_option("--rounds", flags->options.rounds, "Times every microkernel runs")->capture_default_str();
  cmd->add_option("--paging-dir", flags->options.paging_dir,
                  "The paging folder the device's fingerprint names (default: beside the database)");
  cmd->add_flag("--json", flags->json, "Print the fit as protobuf JSON (EnergyCalibration)");
  cmd->footer(
      "Runs compute-bound, memory-bound and idle microkernels on 1..N threads, each between two readings of\n"
      "the best measured energy source (RAPL, hwmon, a meter) and of the performance counters, adds the ops\n"
      "this device profiled with that source, and fits the weights by non-negative least squares. Needs a\n"
      "measured source; the fit is stored for the device fingerprint and travels with `db export`.\n"
      "Examples:\n"
      "  edgecost calibrate\n"
      "  edgecost calibrate --probes-config bench.toml --rounds 3 --json\n"
      "  edgecost profile --model resnet18_cifar --calibrate   # profile, then calibrate with its ops too");
  cmd->callback([flags, &ctx] { ctx.exit_code = RunCalibrate(*flags, ctx); });
}

}  // namespace edgecost::cli
