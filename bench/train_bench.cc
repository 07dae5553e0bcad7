#include "bench/train_bench.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <map>
#include <sstream>
#include <thread>

#include "base/units.h"
#include "bench/bench_common.h"
#include "bench/roofline.h"
#include "costdb/costdb.h"
#include "graph/resolve.h"
#include "kernels/layers.h"
#include "oneapi/dnnl/dnnl.hpp"
#include "service/cost_tables.h"
#include "service/profile_job.h"
#include "service/train_job.h"
#include "solver/simulator.h"

namespace edgecost::service {
namespace {

// resnet18_cifar as the zoo builds it (every block has a 3x3 convolution shortcut), trained
// with SGD on the summed cross entropy of one fixed batch; prints the median step time.
constexpr char kTorchScript[] = R"py(
import sys, time, torch
import torch.nn as nn
threads, batch, steps, which = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
torch.set_num_threads(threads)
torch.manual_seed(1)
def cbn(i, o, s): return nn.Sequential(nn.Conv2d(i, o, 3, s, 1), nn.BatchNorm2d(o))
class Block(nn.Module):
    def __init__(self, i, o, s):
        super().__init__()
        self.a, self.b, self.short = cbn(i, o, s), cbn(o, o, 1), cbn(i, o, s)
    def forward(self, x):
        return torch.relu(torch.relu(self.b(torch.relu(self.a(x)))) + self.short(x))
if which == "resnet18_cifar":
    layers = [cbn(3, 16, 1)]
    for s, (i, o) in enumerate([(16, 16), (16, 32), (32, 64)]):
        layers += [Block(i, o, 1 if s == 0 else 2), Block(o, o, 1)]
    model = nn.Sequential(*layers, nn.AvgPool2d(8, 1), nn.Flatten(), nn.Linear(64, 10))
else:
    import torchvision
    model = torchvision.models.resnet18(num_classes=10)
x, y = torch.randn(batch, 3, 32, 32), torch.randint(0, 10, (batch,))
if len(sys.argv) > 5:  # export for edgecost; training mode keeps batch norm as its own op
    torch.onnx.export(model, x, sys.argv[5], input_names=["input"], output_names=["logits"], opset_version=13,
                      training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
loss_fn = nn.CrossEntropyLoss(reduction="sum")
times, cpu = [], []
for _ in range(steps):
    t, c = time.perf_counter(), time.thread_time()
    opt.zero_grad(set_to_none=True)
    loss = loss_fn(model(x), y)
    loss.backward()
    opt.step()
    times.append(time.perf_counter() - t)
    cpu.append(time.thread_time() - c)
times, cpu = sorted(times[1:]), sorted(cpu[1:])
print("torch", torch.__version__, "median_cpu_s", cpu[len(cpu) // 2], "median_step_s", times[len(times) // 2])
)py";

// The schedules' thread count: the first asked for (0: all cores).
int ThreadsOf(const TrainBenchOptions& options) {
  const int threads = options.threads.empty() ? 1 : options.threads.front();
  return threads > 0 ? threads : static_cast<int>(std::thread::hardware_concurrency());
}

// The schedules' batch size: the first asked for.
int BatchOf(const TrainBenchOptions& options) { return options.batch_sizes.empty() ? 2 : options.batch_sizes.front(); }

// PyTorch's median step time, or a reason it could not be measured.
// `which`: resnet18_cifar, or torchvision's resnet18 (10 classes), exported to `onnx_path` when given.
struct TorchFigures {
  std::string version;
  double step_s = 0, cpu_s = 0;  // medians of wall and of the main thread's CPU time
};

Result<TorchFigures> TorchStep(const TrainBenchOptions& options, const std::filesystem::path& dir,
                               const std::string& which, const std::string& onnx_path = "") {
  const std::filesystem::path script = dir / "torch_step.py";
  std::ofstream(script) << kTorchScript;
  EC_ASSIGN_OR_RETURN(bench::CommandOutput run,
                      bench::RunCommand(options.python + " " + script.string() + " " +
                                        std::to_string(ThreadsOf(options)) + " " + std::to_string(BatchOf(options)) +
                                        " " + std::to_string(options.steps) + " " + which + " " + onnx_path));
  const std::string& output = run.output;
  const size_t at = output.find("median_step_s ");
  if (run.exit_status != 0 || at == std::string::npos) {
    return Unavailable("PyTorch did not run (" + options.python + "; install python3-torch): " + output.substr(0, 300));
  }
  const size_t cpu_at = output.find("median_cpu_s ");
  std::istringstream version(output);
  std::string word;
  TorchFigures figures;
  version >> word >> figures.version;
  figures.step_s = std::stod(output.substr(at + 14));
  if (cpu_at != std::string::npos) figures.cpu_s = std::stod(output.substr(cpu_at + 13));
  return figures;
}

std::string Pct(double measured, double predicted) {
  if (!(predicted > 0)) return "n/a";
  std::ostringstream out;
  out << std::showpos << std::fixed << std::setprecision(1) << 100.0 * (measured - predicted) / predicted << "%";
  return out.str();
}

// The directory of Debian's libopenblas0-pthread, whose libblas.so.3 PyTorch loads when it comes
// first on LD_LIBRARY_PATH; empty when the package is not installed.
std::string OpenBlasDirectory() {
  Result<bench::CommandOutput> listed = bench::RunCommand("dpkg -L libopenblas0-pthread");
  if (!listed.ok() || listed->exit_status != 0) return "";
  std::istringstream lines(listed->output);
  for (std::string line; std::getline(lines, line);) {
    if (line.ends_with("/libblas.so.3")) return std::filesystem::path(line).parent_path().string();
  }
  return "";
}

struct StepTimes {
  double fastest_s = 0, median_s = 0;
};

// edgecost's plain step: forward, loss, backward and the SGD update, as PyTorch's step is timed,
// over the steps after `warmup_steps`.
StepTimes StepTimesOf(const v1::TrainRun& run, int warmup_steps) {
  std::vector<double> steps_s;
  for (int s = warmup_steps; s < run.step_stats_size(); ++s) {
    steps_s.push_back(run.step_stats(s).runtime_s() + run.step_stats(s).update_s());
  }
  if (steps_s.empty()) return {};
  std::sort(steps_s.begin(), steps_s.end());
  const size_t n = steps_s.size();
  return {steps_s.front(), n % 2 ? steps_s[n / 2] : (steps_s[n / 2 - 1] + steps_s[n / 2]) / 2};
}

std::string Fixed(double value, int digits) {
  std::ostringstream text;
  text << std::fixed << std::setprecision(digits) << value;
  return text.str();
}

std::string Share(double fraction) { return fraction > 0 ? Fixed(100 * fraction, 1) + "%" : "-"; }

// One row of the table: edgecost's and PyTorch's steps of one model at one batch and thread count.
void PrintVsRow(std::ostream& out, const std::string& model, const StepTimes& edgecost, const StepTimes& pytorch,
                const bench::StepWork& work, const bench::Machine& machine) {
  const auto seconds = [](double s) { return s > 0 ? FormatSeconds(s) : std::string("-"); };
  out << std::left << std::setw(20) << model << std::right << std::setw(11) << seconds(edgecost.fastest_s)
      << std::setw(10) << seconds(edgecost.median_s) << std::setw(11) << seconds(pytorch.fastest_s) << std::setw(10)
      << seconds(pytorch.median_s) << std::setw(9)
      << (edgecost.fastest_s > 0 && pytorch.fastest_s > 0 ? Fixed(pytorch.fastest_s / edgecost.fastest_s, 2) + "x"
                                                          : "-")
      << std::setw(10) << Fixed(work.flops / 1e9, 3) << std::setw(10) << Fixed(work.bytes / 1e6, 1) << std::setw(8)
      << Fixed(work.flops / work.bytes, 1) << std::setw(10) << Fixed(bench::AttainableFlopsPerS(work, machine) / 1e9, 1)
      << std::setw(9) << Share(bench::RooflineShare(work, machine, edgecost.fastest_s)) << std::setw(9)
      << Share(bench::RooflineShare(work, machine, pytorch.fastest_s)) << std::setw(6) << Fixed(bench::LoadAverage(), 2)
      << "\n";
}

// The warm-up steps before the timed ones, as export_models.py --time: the first steps build and warm up.
constexpr int kVsWarmupSteps = 2;

// edgecost's plain steps of one model, printed beside PyTorch's (`torch`).
void VsRow(std::ostream& out, const std::string& name, const std::string& argument, const bench::TorchTimes& torch,
           int batch, int threads, int steps, costdb::Store& store, const bench::Machine& machine) {
  graph::GraphSpec spec;
  spec.model_or_file = argument;
  spec.batch_size = batch;
  spec.derivation = graph::Derivation::kExact;
  Result<v1::TrainingGraph> graph = graph::LoadTrainingGraph(spec);
  if (!graph.ok()) {
    out << name << ": not imported: " << graph.status().message() << "\n";
    return;
  }
  TrainJobOptions train;
  train.database = &store;
  train.graph = spec;
  train.steps = steps + kVsWarmupSteps;
  train.threads = threads;
  train.store = false;
  train.accept_noisy = true;  // a shared machine: the fastest step is reported
  Result<TrainJobResult> trained = RunTrainJob(train, nullptr, nullptr, [](const std::string&) {});
  std::string weights_note;
  if (!trained.ok()) {  // PyTorch's weights where the executor can read them from the file, else drawn
    weights_note = "  " + name + ": edgecost's weights drawn at random, not PyTorch's (" +
                   trained.status().message() + ")\n";
    train.init = "random";
    trained = RunTrainJob(train, nullptr, nullptr, [](const std::string&) {});
  }
  StepTimes pytorch;
  for (const bench::TorchTime& time : torch.models) {
    if (time.model == name) pytorch = {time.fastest_s, time.median_s};
  }
  PrintVsRow(out, name, trained.ok() ? StepTimesOf(trained->run, kVsWarmupSteps) : StepTimes{}, pytorch,
             bench::StepWorkOf(*graph), machine);
  if (!trained.ok()) {
    out << "  edgecost did not train " << name << ": " << trained.status().message() << "\n";
  } else {
    out << weights_note;
  }
}

// PyTorch's steps of every model in one process, on OpenBLAS held to the threads compared.
bench::TorchTimes TimePyTorch(std::ostream& out, const TrainBenchOptions& options, const std::string& openblas_dir,
                              const std::string& models, int threads, int batch, int steps) {
  std::string environment = "OPENBLAS_NUM_THREADS=" + std::to_string(threads) + " ";
  if (!openblas_dir.empty()) environment += "LD_LIBRARY_PATH=" + openblas_dir + " ";
  Result<bench::CommandOutput> run =
      bench::RunCommand(environment + options.python + " tests/graph/export_models.py --time" + models +
                        " --threads " + std::to_string(threads) + " --batch " + std::to_string(batch) + " --steps " +
                        std::to_string(steps));
  if (!run.ok() || run->exit_status != 0) {
    out << "PyTorch MISSING or failed (" << options.python << "; apt-get install python3-torch "
        << "python3-torchvision): " << (run.ok() ? run->output.substr(0, 300) : "") << "\n";
    return {};
  }
  bench::TorchTimes torch = bench::ParseTorchTimes(run->output);
  out << "PyTorch " << torch.version << " loaded " << bench::DescribeBlas(torch.blas)
      << ", OPENBLAS_NUM_THREADS=" << threads << "\n";
  return torch;
}

Status RunVsPyTorch(std::ostream& out, const TrainBenchOptions& options) {
  bench::Scratch scratch("edgecost_vs_pytorch");
  costdb::Store store((scratch.dir / "bench.db").string(), costdb::OpenMode::kReadWrite);
  const int steps = options.steps;
  const unsigned cores = std::thread::hardware_concurrency();
  const dnnl::version_t* dnnl = dnnl::version();
  out << "edgecost against PyTorch: plain training steps (forward, loss, backward, SGD update), fastest and median of "
      << steps << " steps after " << kVsWarmupSteps << " warm-up steps\n"
      << "FIGURES FROM A SHARED MACHINE (" << cores << " cores, load average " << Fixed(bench::LoadAverage(), 2)
      << " at start): other tasks may slow either side; the fastest step is the least disturbed\n"
      << "edgecost: oneDNN " << dnnl->major << "." << dnnl->minor << "." << dnnl->patch << ", ISA "
      << kernels::Backend::Isa() << "\n";
  const std::string openblas_dir = OpenBlasDirectory();
  if (openblas_dir.empty()) {
    out << "OpenBLAS MISSING: libopenblas0-pthread is not installed (scripts/deps installs it); PyTorch runs on "
           "the system's default BLAS\n";
  }

  // Exported once per batch (some exports fix their batch), with the weights export_models.py --time
  // seeds PyTorch's models with. Always the export: a zoo model of the same name is not the module
  // PyTorch times.
  struct Model {
    std::string name, argument;
  };
  std::map<int, std::vector<Model>> exports;  // by batch size
  std::string models_text;
  for (const int batch : options.batch_sizes) {
    const std::filesystem::path dir = scratch.dir / ("batch" + std::to_string(batch));
    std::filesystem::create_directories(dir);
    for (const std::string& name : options.models) {
      Result<std::string> argument = bench::ExportModel(name, options.python, dir, batch);
      if (!argument.ok()) {
        out << name << " at batch " << batch << ": not measured: " << argument.status().message() << "\n";
        continue;
      }
      exports[batch].push_back({name, *argument});
    }
  }
  for (const std::string& name : options.models) models_text += " " + name;
  if (exports.empty()) {
    out << "no model to compare: exporting needs PyTorch (apt-get install python3-torch python3-torchvision)\n";
    return Status::Ok();
  }
  for (const int requested : options.threads) {
    const int threads = requested > 0 ? requested : static_cast<int>(cores);
    const bench::Machine machine{bench::MeasurePeakFlopsPerS(threads), bench::MeasureBandwidthBytesPerS(threads)};
    out << "\n"
        << threads << " thread(s): peak " << Fixed(machine.peak_flops_per_s / 1e9, 1)
        << " GFLOP/s (oneDNN f32 GEMM 1024^3, fastest of 10), memory bandwidth "
        << Fixed(machine.bandwidth_bytes_per_s / 1e9, 1) << " GB/s (triad over 3 x 128 MiB, fastest of 10)\n";
    for (const int batch : options.batch_sizes) {
      out << "batch " << batch << ", " << threads << " thread(s): ";
      const bench::TorchTimes torch = TimePyTorch(out, options, openblas_dir, models_text, threads, batch, steps);
      out << std::left << std::setw(20) << "model" << std::right << std::setw(11) << "edgecost" << std::setw(10)
          << "median" << std::setw(11) << "PyTorch" << std::setw(10) << "median" << std::setw(9) << "ec/PyT"
          << std::setw(10) << "GFLOP" << std::setw(10) << "MB moved" << std::setw(8) << "FLOP/B" << std::setw(10)
          << "roof GF/s" << std::setw(9) << "ec roof" << std::setw(9) << "PyT roof" << std::setw(6) << "load"
          << "\n";
      for (const Model& model : exports[batch]) {
        VsRow(out, model.name, model.argument, torch, batch, threads, steps, store, machine);
      }
    }
  }
  out << "\nedgecost and PyTorch: the fastest of the steps (median beside it). ec/PyT = edgecost's speed over "
         "PyTorch's\n(PyTorch's fastest step / edgecost's; above 1 edgecost is faster; issue 44 asks for 2). "
         "GFLOP and MB moved\nper step from edgecost's training graph (node FLOPs; bytes each node reads and "
         "writes, an upper bound on\nthe traffic); roof = min(peak, bandwidth x FLOP/B); ec roof, PyT roof = "
         "achieved FLOP/s (fastest step) / roof.\nA share above 100% means the peak or bandwidth was measured while "
         "other tasks held cores (compare the\n1-thread figures), or that the graph's FLOP count (POET's rules) "
         "exceeds what the kernels execute.\n";
  return Status::Ok();
}

}  // namespace

Status RunTrainBenchmark(std::ostream& out, const TrainBenchOptions& options) {
  if (options.vs_pytorch) return RunVsPyTorch(out, options);
  bench::Scratch scratch("edgecost_train_bench");
  costdb::Store store((scratch.dir / "bench.db").string(), costdb::OpenMode::kReadWrite);
  out << "train benchmark: resnet18_cifar, batch " << BatchOf(options) << ", " << ThreadsOf(options) << " thread(s), "
      << options.steps << " steps per schedule (median of steps 2..N); the machine may be shared: timings are noisy\n";

  ProfileJobOptions profile;
  profile.database = &store;
  profile.graph.model_or_file = "resnet18_cifar";
  profile.graph.batch_size = BatchOf(options);
  profile.graph.derivation = graph::Derivation::kExact;
  profile.threads = ThreadsOf(options);
  profile.min_window_s = options.min_window_s;
  profile.accept_noisy = true;  // figures on a shared machine: what interference touched is counted below
  auto quiet = [](const std::string&) {};
  out << "profiling resnet18_cifar here (isolated ops, paging storage) ..." << std::flush;
  EC_ASSIGN_OR_RETURN(ProfileJobResult profiled, RunProfileJob(profile, nullptr, nullptr, quiet));
  out << " " << profiled.summary.measured << " ops measured; isolated-op step "
      << FormatSeconds(profiled.step_runtime_s) << "\n";
  if (!profiled.noisy_message.empty()) out << profiled.noisy_message << "\n";
  out << "\n";

  struct Config {
    std::string name;
    uint64_t activation_budget_bytes = 0;
    double runtime_multiple = 0;
    std::string strategy;
  };
  // The plain step first: its node times become the measured-in-step table the others are predicted with.
  std::vector<Config> configs = {{"everything kept (plain step)", 0, 0, ""},
                                 {"1.2 MB at 1.5x (optimal)", 1'200'000, 1.5, "optimal"},
                                 {"heavy paging (paging-only)", 1ull << 40, 1000, "paging-only"}};
  EC_ASSIGN_OR_RETURN(costdb::CostDb * opened, store.Db());
  costdb::CostDb& db = *opened;
  out << std::left << std::setw(30) << "schedule" << std::right << std::setw(11) << "budget" << std::setw(11)
      << "planned" << std::setw(11) << "measured" << std::setw(12) << "peak RSS" << std::setw(11) << "step"
      << std::setw(11) << "step CPU" << std::setw(12) << "isolated" << std::setw(9) << "error" << std::setw(9)
      << "CPU err" << std::setw(11) << "in-step" << std::setw(9) << "error" << std::setw(9) << "CPU err"
      << std::setw(11) << "paging" << std::setw(11) << "on path" << std::setw(11) << "gradients"
      << "\n";
  double plain_step_s = 0, plain_cpu_s = 0;
  for (const Config& config : configs) {
    TrainJobOptions train;
    train.database = &store;
    train.graph = profile.graph;
    train.steps = options.steps;
    train.threads = ThreadsOf(options);
    train.verify = config.activation_budget_bytes > 0;
    if (config.activation_budget_bytes > 0) {
      train.solve.set_activation_budget_bytes(config.activation_budget_bytes);
      train.solve.set_runtime_budget_multiple(config.runtime_multiple);
      train.solve.set_strategy(config.strategy);
      train.solve.set_time_limit_s(30);
    }
    Result<TrainJobResult> trained = RunTrainJob(train, nullptr, nullptr, quiet);
    if (!trained.ok()) {
      out << std::left << std::setw(30) << config.name << " " << trained.status().message() << "\n";
      continue;
    }
    const v1::TrainRun& run = trained->run;
    if (config.activation_budget_bytes == 0) {
      plain_step_s = run.runtime_s();
      plain_cpu_s = trained->median_cpu_s;
    }
    // The same schedule predicted from the in-step node times.
    double in_step_s = 0;
    v1::GetCostTableRequest request;
    request.set_model("resnet18_cifar");
    request.set_cost_source(kMeasuredInStepSource);
    request.set_batch_size(static_cast<uint32_t>(BatchOf(options)));
    request.set_derivation("exact");
    Result<v1::CostTable> in_step = ResolveCostTable(&db, request);
    if (in_step.ok()) {
      if (run.schedule_id() == 0) {
        for (const v1::NodeCost& c : in_step->costs()) in_step_s += c.runtime_s();
      } else if (Result<v1::Schedule> schedule = db.GetSchedule(static_cast<int64_t>(run.schedule_id()));
                 schedule.ok()) {
        v1::ScheduleRequest budgets = schedule->request();
        budgets.set_runtime_budget_multiple(1e9);  // only the runtime is wanted here
        if (Result<solver::Problem> problem = solver::ProblemFromCostTable(*in_step, budgets); problem.ok()) {
          const solver::Replay replay = solver::Simulate(*problem, *schedule);
          if (replay.valid) in_step_s = replay.runtime_s;
        }
      }
    }
    out << std::left << std::setw(30) << config.name << std::right << std::setw(11)
        << (run.activation_budget_bytes() && run.activation_budget_bytes() < (1ull << 40)
                ? FormatBytes(static_cast<double>(run.activation_budget_bytes()))
                : "-")
        << std::setw(11) << FormatBytes(static_cast<double>(run.predicted_peak_bytes())) << std::setw(11)
        << FormatBytes(static_cast<double>(run.peak_activation_bytes())) << std::setw(12)
        << FormatBytes(static_cast<double>(run.peak_rss_bytes()))
        << std::setw(11) << FormatSeconds(run.runtime_s()) << std::setw(11) << FormatSeconds(trained->median_cpu_s)
        << std::setw(12) << FormatSeconds(run.predicted_runtime_s()) << std::setw(9)
        << Pct(run.runtime_s(), run.predicted_runtime_s()) << std::setw(9)
        << Pct(trained->median_cpu_s, run.predicted_runtime_s()) << std::setw(11)
        << (in_step_s > 0 ? FormatSeconds(in_step_s) : "-") << std::setw(9) << Pct(run.runtime_s(), in_step_s)
        << std::setw(9) << Pct(trained->median_cpu_s, in_step_s) << std::setw(11)
        << FormatSeconds(run.predicted_paging_s()) << std::setw(11) << FormatSeconds(run.paging_wait_s())
        << std::setw(11)
        << (!run.has_verify()          ? "-"
            : run.verify().identical() ? "identical"
                                       : "DIFFER")
        << "\n";
    const bool within = run.peak_activation_bytes() <= run.predicted_peak_bytes() &&
                        (run.activation_budget_bytes() == 0 || run.predicted_peak_bytes() <= run.activation_budget_bytes());
    if (!within) out << "  MEMORY TARGET NOT MET: measured peak above planned peak or budget\n";
  }
  out << "\nmemory: measured = the arena's peak live activation bytes (exact); planned = the simulator's peak.\n"
      << "isolated = the schedule's runtime from ops measured one at a time (`measured`); in-step = from the plain\n"
      << "run's node times inside real steps (`measured-in-step`; in-sample for the plain step). Targets: error <= "
         "10%\n"
      << "isolated, <= 5% in-step. paging = predicted I/O time at the measured paging costs; on path = time\n"
      << "computation waited for it. step CPU = the compute thread's CPU time per step (median): the step without\n"
      << "waiting for a core, which a loaded machine adds to wall time; CPU err compares it with the predictions.\n\n";

  Result<TorchFigures> torch = TorchStep(options, scratch.dir, "resnet18_cifar");
  if (!torch.ok()) {
    out << "PyTorch: not measured: " << torch.status().message() << "\n";
  } else if (plain_step_s > 0) {
    out << "resnet18_cifar: PyTorch " << torch->version << " (" << options.python
        << "), same model, batch and threads: " << FormatSeconds(torch->step_s) << " per step (CPU "
        << FormatSeconds(torch->cpu_s) << "); edgecost's plain step " << FormatSeconds(plain_step_s) << " (CPU "
        << FormatSeconds(plain_cpu_s) << "): " << std::fixed << std::setprecision(2) << torch->step_s / plain_step_s
        << "x PyTorch's speed by wall time, " << torch->cpu_s / plain_cpu_s
        << "x by CPU time   target >= 3x: " << (torch->cpu_s / plain_cpu_s >= 3 ? "reached" : "NOT reached")
        << " (by CPU time)\n";
  }

  // torchvision's resnet18 (10 classes, 32x32), exported by PyTorch to ONNX, profiled and trained here.
  const std::string onnx = (scratch.dir / "resnet18_tv.onnx").string();
  Result<TorchFigures> tv = TorchStep(options, scratch.dir, "torchvision", onnx);
  if (!tv.ok()) {
    out << "torchvision resnet18 through ONNX: not measured: " << tv.status().message() << "\n";
    return Status::Ok();
  }
  ProfileJobOptions tv_profile = profile;
  tv_profile.graph.model_or_file = onnx;
  if (Result<ProfileJobResult> p = RunProfileJob(tv_profile, nullptr, nullptr, quiet); !p.ok()) {
    out << "torchvision resnet18 through ONNX: not profiled: " << p.status().message() << "\n";
    return Status::Ok();
  }
  TrainJobOptions tv_train;
  tv_train.database = &store;
  tv_train.graph = tv_profile.graph;
  tv_train.steps = options.steps;
  tv_train.threads = ThreadsOf(options);
  Result<TrainJobResult> tv_run = RunTrainJob(tv_train, nullptr, nullptr, quiet);
  if (!tv_run.ok()) {
    out << "torchvision resnet18 through ONNX: not trained: " << tv_run.status().message() << "\n";
    return Status::Ok();
  }
  const v1::TrainRun& run = tv_run->run;
  out << "torchvision resnet18 through ONNX (batch " << BatchOf(options) << ", 32x32): edgecost's plain step "
      << FormatSeconds(run.runtime_s()) << " (CPU " << FormatSeconds(tv_run->median_cpu_s)
      << "; isolated-op prediction " << FormatSeconds(run.predicted_runtime_s()) << ", error "
      << Pct(run.runtime_s(), run.predicted_runtime_s()) << " by wall, "
      << Pct(tv_run->median_cpu_s, run.predicted_runtime_s()) << " by CPU), peak "
      << FormatBytes(static_cast<double>(run.peak_activation_bytes())) << "; PyTorch " << FormatSeconds(tv->step_s)
      << " (CPU " << FormatSeconds(tv->cpu_s) << "): " << std::fixed << std::setprecision(2)
      << tv->step_s / run.runtime_s() << "x PyTorch's speed by wall time, " << tv->cpu_s / tv_run->median_cpu_s
      << "x by CPU time   target >= 3x: " << (tv->cpu_s / tv_run->median_cpu_s >= 3 ? "reached" : "NOT reached")
      << " (by CPU time)\n";
  return Status::Ok();
}

}  // namespace edgecost::service
