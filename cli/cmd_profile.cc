#include <omp.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <filesystem>
#include <iostream>

#include "base/units.h"
#include "cli/cli.h"
#include "cli/graph_flags.h"
#include "cli/table.h"
#include "costdb/costdb.h"
#include "profiler/fingerprint.h"
#include "profiler/paging.h"
#include "probes/registry.h"
#include "profiler/power_model.h"
#include "profiler/probe_meter.h"
#include "profiler/profile.h"

namespace edgecost::cli {
namespace {

std::atomic<bool> g_stop{false};
void OnSignal(int) { g_stop.store(true); }

struct ProfileFlags {
  GraphFlags graph;
  int threads = 0;
  bool force = false;
  std::string paging_dir;
  double min_window_s = profiler::MeasureOptions{}.min_window_s;
  double idle_power_w = profiler::PowerModel{}.idle_w;
  double core_power_w = profiler::PowerModel{}.active_w_per_core;
  std::string probes_config;
};

// One line per op, redrawn in place on a terminal.
void ShowProgress(const profiler::ProfileProgress& p) {
  const bool tty = ::isatty(STDERR_FILENO);
  constexpr int kWidth = 24;
  const int filled = p.total ? kWidth * p.done / p.total : kWidth;
  std::string key = p.op_key.size() > 60 ? p.op_key.substr(0, 57) + "..." : p.op_key;
  if (tty) {
    std::cerr << "\r[" << std::string(static_cast<size_t>(filled), '#')
              << std::string(static_cast<size_t>(kWidth - filled), ' ') << "] op " << p.done << "/" << p.total
              << "  elapsed " << FormatSeconds(p.elapsed_s) << "  ETA " << FormatSeconds(p.eta_s) << "  " << key
              << "\033[K" << (p.done == p.total ? "\n" : "") << std::flush;
  } else {
    std::cerr << "op " << p.done << "/" << p.total << " elapsed " << FormatSeconds(p.elapsed_s) << " eta "
              << FormatSeconds(p.eta_s) << " " << p.op_key << "\n";
  }
}

int RunProfile(const ProfileFlags& flags, const Context& ctx) {
  if (flags.graph.derivation.empty()) return UsageError(InvalidArgument("--derivation is empty"));
  auto spec = flags.graph.Spec();
  if (!spec.ok()) return UsageError(spec.status());
  auto graph = graph::LoadTrainingGraph(*spec);
  if (!graph.ok()) return Failure(graph.status());

  const std::string db_path = ctx.db_path.empty() ? costdb::DefaultDbPath() : ctx.db_path;
  auto db = costdb::CostDb::Open(db_path, costdb::OpenMode::kReadWrite);
  if (!db.ok()) return Failure(db.status());
  const int threads = flags.threads > 0 ? flags.threads : omp_get_num_procs();
  omp_set_num_threads(threads);

  profiler::Backend backend;
  const std::string paging_dir = flags.paging_dir.empty()
                                     ? (std::filesystem::path(db_path).parent_path() / "paging").string()
                                     : flags.paging_dir;
  std::error_code ec;
  std::filesystem::create_directories(paging_dir, ec);
  v1::Device device;
  device.set_name(profiler::ThisDeviceName());
  device.set_kind(v1::Device::KIND_MEASURED);
  *device.mutable_fingerprint() =
      profiler::ReadFingerprint(profiler::SystemRoots::FromEnvironment(), profiler::Backend::Isa(), paging_dir);
  const std::string hash = device.fingerprint().hash();
  if (auto id = db->UpsertDevice(device); !id.ok()) return Failure(id.status());

  std::cerr << "device " << device.name() << " (fingerprint " << hash << "): " << device.fingerprint().cpu_model()
            << ", " << device.fingerprint().online_cores() << " cores online, oneDNN ISA "
            << device.fingerprint().dnnl_isa() << ", " << threads << " threads\n";
  // The best source that measures energy; the power model only when there is none.
  auto probes_config = probes::LoadProbesConfig(flags.probes_config);
  if (!probes_config.ok()) return UsageError(probes_config.status());
  probes::Detected detected = probes::DetectAll(*probes_config);
  std::unique_ptr<profiler::EnergyMeter> owned_meter;
  if (!detected.probes.empty()) {
    std::cerr << "energy: measuring idle power of " << detected.probes.front()->info().name << " for 1 s ...\n";
    auto measured = profiler::ProbeMeter::Start(std::move(detected.probes.front()));
    if (!measured.ok()) return Failure(measured.status());
    owned_meter = std::move(*measured);
    std::cerr << "energy: measured by " << owned_meter->Name() << ", idle " << owned_meter->IdlePowerW() << " W\n";
  } else {
    owned_meter = std::make_unique<profiler::EstimatedMeter>(profiler::PowerModel{flags.idle_power_w, flags.core_power_w});
    std::cerr << "energy: no sensor measures energy here (see `edgecost probes`); estimated by " << owned_meter->Name()
              << " and labelled ESTIMATED\n";
  }
  profiler::EnergyMeter& meter = *owned_meter;

  auto run = db->BeginRun(hash, profiler::kMeasuredSource);
  if (!run.ok()) return Failure(run.status());
  std::signal(SIGINT, OnSignal);
  std::signal(SIGTERM, OnSignal);

  auto paging = db->GetPagingCost(hash);
  if (!paging.ok()) return Failure(paging.status());
  if (!*paging || flags.force) {
    std::cerr << "measuring paging storage in " << paging_dir << " ...\n";
    auto measured = profiler::MeasurePaging({.dir = paging_dir});
    if (!measured.ok()) return Failure(measured.status());
    v1::PagingCost cost = measured->cost;
    // Paging keeps one core busy waiting on storage: estimated power of idle plus one core.
    cost.set_page_in_power_w(flags.idle_power_w + flags.core_power_w);
    cost.set_page_out_power_w(flags.idle_power_w + flags.core_power_w);
    cost.set_energy_source(v1::ENERGY_SOURCE_ESTIMATED);
    if (auto s = db->PutPagingCost(hash, cost); !s.ok()) return Failure(s);
    std::cerr << "paging: out " << FormatSeconds(cost.page_out_latency_s()) << " + "
              << FormatBytes(cost.page_out_throughput_bytes_per_s()) << "/s, in "
              << FormatSeconds(cost.page_in_latency_s()) << " + " << FormatBytes(cost.page_in_throughput_bytes_per_s())
              << "/s" << (measured->direct_io ? " (O_DIRECT)" : " (page cache dropped; no O_DIRECT here)") << "\n";
  }

  profiler::ProfileOptions options;
  options.threads = threads;
  options.force = flags.force;
  options.measure.min_window_s = flags.min_window_s;
  options.on_progress = ShowProgress;
  options.stop = &g_stop;
  auto summary = profiler::ProfileGraph(*db, backend, *graph, hash, *run, &meter, options);
  std::signal(SIGINT, SIG_DFL);
  std::signal(SIGTERM, SIG_DFL);
  if (!summary.ok()) {
    (void)db->FinishRun(*run, costdb::RunStatus::kFailed);
    return Failure(summary.status());
  }
  if (auto s = db->FinishRun(*run, summary->interrupted ? costdb::RunStatus::kCancelled : costdb::RunStatus::kComplete, meter.IdlePowerW()); !s.ok()) return Failure(s);

  std::cout << "profiled       " << graph->model() << " (derivation " << graph->derivation() << ", "
            << graph->nodes_size() << " nodes) on " << device.name() << "\n"
            << "ops            " << summary->distinct_ops << " distinct: " << summary->measured << " measured now, "
            << summary->reused << " already stored";
  if (summary->without_work) std::cout << ", " << summary->without_work << " nodes without work";
  std::cout << "\ntime           " << FormatSeconds(summary->elapsed_s) << "\n";
  if (summary->interrupted) {
    std::cout << "interrupted    what was measured is stored; run the same command again to resume\n";
    return kExitFailure;
  }
  auto table = profiler::MeasuredCostTable(*db, *graph, device.name(), hash, threads);
  if (!table.ok()) return Failure(table.status());
  auto id = db->PutCostTable(*table);
  if (!id.ok()) return Failure(id.status());
  double runtime_s = 0, energy_j = 0;
  for (const v1::NodeCost& c : table->costs()) {
    runtime_s += c.runtime_s();
    energy_j += c.compute_j();
  }
  std::cout << "training step  " << FormatSeconds(runtime_s) << ", " << FormatJoules(energy_j)
            << " (estimated energy)\n"
            << "stored         cost table #" << *id << " (device " << device.name() << ", source measured) in "
            << db_path << "\n";
  return kExitOk;
}

}  // namespace

void RegisterProfileCommand(CLI::App& app, Context& ctx) {
  auto flags = std::make_shared<ProfileFlags>();
  flags->graph.derivation = "exact";
  CLI::App* cmd = app.add_subcommand("profile", "Measure every distinct op of a training graph on this device");
  flags->graph.AddTo(cmd, /*positional=*/false);
  cmd->add_option("--model", flags->graph.model_or_file, "Zoo model to profile")->required();
  cmd->add_option("--threads", flags->threads, "oneDNN threads (default: all cores)");
  cmd->add_flag("--force", flags->force, "Measure again ops already stored for this device");
  cmd->add_option("--paging-dir", flags->paging_dir, "Where paged tensors go (default: beside the database)");
  cmd->add_option("--min-window-s", flags->min_window_s, "Minimum timed window per op")->capture_default_str();
  cmd->add_option("--idle-power-w", flags->idle_power_w, "Power model for the energy estimate: idle power")
      ->capture_default_str();
  cmd->add_option("--core-power-w", flags->core_power_w, "Power model: extra power per busy core")
      ->capture_default_str();
  cmd->add_option("--probes-config", flags->probes_config,
                  "TOML config with a [probes] section: external meters, nested rails (see `edgecost probes`)")
      ->check(CLI::ExistingFile);
  cmd->footer(
      "Interrupting (Ctrl-C) keeps every op measured so far; the next run resumes.\n"
      "Examples:\n"
      "  edgecost profile --model resnet18_cifar\n"
      "  edgecost profile --model resnet18 --threads 2 --force");
  cmd->callback([flags, &ctx] { ctx.exit_code = RunProfile(*flags, ctx); });
}

}  // namespace edgecost::cli
