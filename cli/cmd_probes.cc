#include <atomic>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <memory>
#include <thread>

#include <nlohmann/json.hpp>

#include "base/clock.h"
#include "cli/cli.h"
#include "probes/perf_counters.h"
#include "probes/registry.h"

namespace edgecost::cli {
namespace {

struct ProbesFlags {
  std::string config_path;
  std::string sysfs_root;
  bool watch = false;
  double interval_s = 1.0;
  bool json = false;
};


std::string Seconds(double s) {
  char text[32];
  if (s <= 0) return "-";
  if (s < 1e-3)
    std::snprintf(text, sizeof text, "%.0f us", s * 1e6);
  else if (s < 1)
    std::snprintf(text, sizeof text, "%.0f ms", s * 1e3);
  else
    std::snprintf(text, sizeof text, "%.1f s", s);
  return text;
}

void PrintInfo(const probes::ProbeInfo& info) {
  std::string domains;
  for (size_t i = 0; i < info.domains.size(); ++i) {
    domains += (domains.empty() ? "" : ", ") + info.domains[i];
    if (!probes::TopLevelDomain(info, i)) domains += " (inside " + info.inside[i] + ")";
  }
  const bool power = info.kind == probes::ReadingKind::kPower;
  std::printf("%-9s %-28s %-12s", info.source.c_str(), info.name.c_str(),
              !info.available ? "unavailable" : (info.measured ? "available" : "ESTIMATED"));
  if (info.available && info.source != "perf") {
    std::printf(" %s, %s", power ? "power (W), integrated" : "energy counter (J)", domains.c_str());
    if (info.resolution > 0) std::printf("; resolution %g %s", info.resolution, power ? "W" : "J");
    if (info.measured) std::printf("; updates every %s", Seconds(info.update_interval_s).c_str());
  }
  std::printf("\n");
  if (!info.reason.empty()) std::printf("%-9s   %s: %s\n", "", info.available ? "note" : "why", info.reason.c_str());
  if (!info.fix.empty() && !info.available) std::printf("%-9s   fix: %s\n", "", info.fix.c_str());
}

nlohmann::json InfoJson(const probes::ProbeInfo& info) {
  nlohmann::json out = {{"source", info.source},
                        {"name", info.name},
                        {"available", info.available},
                        {"measured", info.measured},
                        {"domains", info.domains},
                        {"reason", info.reason},
                        {"fix", info.fix}};
  out["inside"] = info.inside;  // per domain: the domain that already includes it, "" for a top-level one
  if (info.available && info.source != "perf") {
    out["reading"] = info.kind == probes::ReadingKind::kPower ? "power_w" : "energy_j";
    out["resolution"] = info.resolution;
    out["updateIntervalS"] = info.update_interval_s;
  }
  return out;
}

// Live power per source, about once per interval, until Ctrl-C: the energy each
// monitor gathered over the interval (counters differenced, power integrated) over its length.
int Watch(probes::Detected& detected, double interval_s) {
  if (detected.probes.empty()) {
    std::cout << "No source measures power here; nothing to watch (the estimate is not a measurement).\n";
    return kExitFailure;
  }
  const InterruptScope interrupt;
  std::vector<std::unique_ptr<probes::EnergyMonitor>> monitors;
  std::vector<std::vector<double>> last_j;
  for (auto& probe : detected.probes) {
    monitors.push_back(std::make_unique<probes::EnergyMonitor>(std::move(probe)));
    if (Status s = monitors.back()->Start(); !s.ok()) return Failure(s);
    last_j.emplace_back(monitors.back()->info().domains.size(), 0.0);
  }
  std::cout << "Power per source every " << interval_s << " s; Ctrl-C stops.\n";
  double previous_s = SteadyNowS();
  while (!interrupt.stop()->load()) {
    std::this_thread::sleep_for(std::chrono::duration<double>(interval_s));
    const double now_s = SteadyNowS();
    std::string line;
    for (size_t i = 0; i < monitors.size(); ++i) {
      const probes::ProbeInfo& info = monitors[i]->info();
      Result<std::vector<double>> energy = monitors[i]->EnergyJ();
      if (!energy.ok()) {
        line += "  " + info.name + ": " + energy.status().message();
        continue;
      }
      for (size_t d = 0; d < energy->size() && d < last_j[i].size(); ++d) {
        char cell[128];
        std::snprintf(cell, sizeof cell, "  %s/%s %.3f W", info.source.c_str(), info.domains[d].c_str(),
                      ((*energy)[d] - last_j[i][d]) / (now_s - previous_s));
        line += cell;
      }
      last_j[i] = *energy;
    }
    previous_s = now_s;
    std::cout << line << std::endl;
  }
  return kExitOk;
}

int RunProbes(const ProbesFlags& flags) {
  Result<probes::ProbesConfig> config = probes::LoadProbesConfig(flags.config_path);
  if (!config.ok()) return UsageError(config.status());
  if (!flags.sysfs_root.empty()) config->sys_root = flags.sysfs_root;
  probes::Detected detected = probes::DetectAll(*config);
  if (flags.watch) return Watch(detected, flags.interval_s);
  std::vector<probes::ProbeInfo> counters;
  probes::PerfCounters perf = probes::PerfCounters::Open(probes::DefaultPerfEvents(), config->proc_root, counters);
  const bool measured = !detected.probes.empty();
  if (flags.json) {
    nlohmann::json doc = {{"sysfsRoot", config->sys_root},
                          {"energySources", nlohmann::json::array()},
                          {"counters", nlohmann::json::array()},
                          {"energyMeasuredBy", measured ? detected.probes.front()->info().name : ""}};
    for (const probes::ProbeInfo& info : detected.infos) doc["energySources"].push_back(InfoJson(info));
    for (const probes::ProbeInfo& info : counters) doc["counters"].push_back(InfoJson(info));
    std::cout << doc.dump(2) << "\n";
    return kExitOk;
  }

  std::cout << "Energy sources (sysfs root " << config->sys_root << "):\n";
  for (const probes::ProbeInfo& info : detected.infos) PrintInfo(info);
  std::cout << "\nPerformance counters (perf_event_open through libpfm4, this process):\n";
  for (const probes::ProbeInfo& info : counters) PrintInfo(info);
  std::cout << "\nEnergy will be "
            << (measured ? "measured by " + detected.probes.front()->info().source + " " +
                               detected.probes.front()->info().name
                         : std::string("ESTIMATED from the device power model: no sensor measures energy here"))
            << ".\n";
  return kExitOk;
}

}  // namespace

void RegisterProbesCommand(CLI::App& app, Context& ctx) {
  auto flags = std::make_shared<ProbesFlags>();
  CLI::App* cmd =
      app.add_subcommand("probes", "List every energy and counter source, what is missing and how to fix it");
  cmd->add_option("--config", flags->config_path,
                  "TOML config with a [probes] section (meters, nested rails, estimate)")
      ->check(CLI::ExistingFile);
  cmd->add_option("--sysfs-root", flags->sysfs_root,
                  "Read sysfs from this tree instead of /sys (also $EDGECOST_SYSFS_ROOT)")
      ->check(CLI::ExistingDirectory);
  cmd->add_flag("--watch", flags->watch, "Print live power per source until interrupted");
  cmd->add_flag("--json", flags->json, "Print the sources and counters as JSON");
  cmd->add_option("--interval-s", flags->interval_s, "Seconds between --watch lines")
      ->capture_default_str()
      ->check(CLI::Range(0.05, 3600.0));
  cmd->footer("Examples:\n  edgecost probes\n  edgecost probes --watch\n  edgecost probes --sysfs-root /tmp/fake-sys");
  cmd->callback([flags, &ctx] { ctx.exit_code = LocalOnly(ctx, [&] { return RunProbes(*flags); }); });
}

}  // namespace edgecost::cli
