#include "bench/train_bench.h"

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <sstream>

#include "base/units.h"
#include "costdb/costdb.h"
#include "service/cost_tables.h"
#include "service/profile_job.h"
#include "service/train_job.h"
#include "solver/simulator.h"

namespace edgecost::service {
namespace {

struct Scratch {
  std::filesystem::path dir;
  Scratch() {
    dir = std::filesystem::temp_directory_path() / ("edgecost_train_bench_" + std::to_string(::getpid()));
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
  }
  ~Scratch() { std::filesystem::remove_all(dir); }
};

// resnet18_cifar as the zoo builds it (every block has a 3x3 convolution shortcut), trained
// with SGD on the summed cross entropy of one fixed batch; prints the median step time.
constexpr char kTorchScript[] = R"py(
import sys, time, torch
import torch.nn as nn
threads, batch, steps = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
torch.set_num_threads(threads)
torch.manual_seed(1)
def cbn(i, o, s): return nn.Sequential(nn.Conv2d(i, o, 3, s, 1), nn.BatchNorm2d(o))
class Block(nn.Module):
    def __init__(self, i, o, s):
        super().__init__()
        self.a, self.b, self.short = cbn(i, o, s), cbn(o, o, 1), cbn(i, o, s)
    def forward(self, x):
        return torch.relu(torch.relu(self.b(torch.relu(self.a(x)))) + self.short(x))
layers = [cbn(3, 16, 1)]
for s, (i, o) in enumerate([(16, 16), (16, 32), (32, 64)]):
    layers += [Block(i, o, 1 if s == 0 else 2), Block(o, o, 1)]
model = nn.Sequential(*layers, nn.AvgPool2d(8, 1), nn.Flatten(), nn.Linear(64, 10))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x, y = torch.randn(batch, 3, 32, 32), torch.randint(0, 10, (batch,))
loss_fn = nn.CrossEntropyLoss(reduction="sum")
times = []
for _ in range(steps):
    t = time.perf_counter()
    opt.zero_grad(set_to_none=True)
    loss = loss_fn(model(x), y)
    loss.backward()
    opt.step()
    times.append(time.perf_counter() - t)
times = sorted(times[1:])
print("torch", torch.__version__, "median_step_s", times[len(times) // 2])
)py";

// PyTorch's median step time, or a reason it could not be measured.
Result<std::pair<std::string, double>> TorchStep(const TrainBenchOptions& options, const std::filesystem::path& dir) {
  const std::filesystem::path script = dir / "torch_step.py";
  std::ofstream(script) << kTorchScript;
  const std::string command = options.python + " " + script.string() + " " + std::to_string(options.threads) + " " +
                              std::to_string(options.batch_size) + " " + std::to_string(options.steps) + " 2>&1";
  FILE* pipe = ::popen(command.c_str(), "r");
  if (!pipe) return Unavailable("cannot run " + options.python);
  std::string output;
  char buffer[512];
  while (std::fgets(buffer, sizeof buffer, pipe)) output += buffer;
  const int status = ::pclose(pipe);
  const size_t at = output.find("median_step_s ");
  if (status != 0 || at == std::string::npos) {
    return Unavailable("PyTorch did not run (" + options.python + "; install python3-torch): " + output.substr(0, 300));
  }
  std::istringstream version(output);
  std::string word, torch_version;
  version >> word >> torch_version;
  return std::make_pair(torch_version, std::stod(output.substr(at + 14)));
}

std::string Pct(double measured, double predicted) {
  if (!(predicted > 0)) return "n/a";
  std::ostringstream out;
  out << std::showpos << std::fixed << std::setprecision(1) << 100.0 * (measured - predicted) / predicted << "%";
  return out.str();
}

}  // namespace

Status RunTrainBenchmark(std::ostream& out, const TrainBenchOptions& options) {
  Scratch scratch;
  const std::string db_path = (scratch.dir / "bench.db").string();
  out << "train benchmark: resnet18_cifar, batch " << options.batch_size << ", " << options.threads << " thread(s), "
      << options.steps << " steps per schedule (median of steps 2..N); the machine may be shared: timings are noisy\n";

  ProfileJobOptions profile;
  profile.db_path = db_path;
  profile.graph.model_or_file = "resnet18_cifar";
  profile.graph.batch_size = options.batch_size;
  profile.graph.derivation = graph::Derivation::kExact;
  profile.threads = options.threads;
  profile.min_window_s = options.min_window_s;
  auto quiet = [](const std::string&) {};
  out << "profiling resnet18_cifar here (isolated ops, paging storage) ..." << std::flush;
  EC_ASSIGN_OR_RETURN(ProfileJobResult profiled, RunProfileJob(profile, nullptr, nullptr, quiet));
  out << " " << profiled.summary.measured << " ops measured; isolated-op step "
      << FormatSeconds(profiled.step_runtime_s) << "\n\n";

  struct Config {
    std::string name;
    uint64_t ram_budget_bytes = 0;
    double runtime_multiple = 0;
    std::string strategy;
  };
  // The plain step first: its node times become the measured-in-step table the others are predicted with.
  std::vector<Config> configs = {{"everything kept (plain step)", 0, 0, ""},
                                 {"1.2 MB at 1.5x (optimal)", 1'200'000, 1.5, "optimal"},
                                 {"heavy paging (paging-only)", 1ull << 40, 1000, "paging-only"}};
  EC_ASSIGN_OR_RETURN(costdb::CostDb db, costdb::CostDb::Open(db_path));
  out << std::left << std::setw(30) << "schedule" << std::right << std::setw(11) << "budget" << std::setw(11)
      << "planned" << std::setw(11) << "measured" << std::setw(12) << "RSS growth" << std::setw(11) << "step"
      << std::setw(12) << "isolated" << std::setw(9) << "error" << std::setw(11) << "in-step" << std::setw(9) << "error"
      << std::setw(11) << "paging" << std::setw(11) << "on path" << std::setw(11) << "gradients"
      << "\n";
  double plain_step_s = 0;
  for (const Config& config : configs) {
    TrainJobOptions train;
    train.db_path = db_path;
    train.graph = profile.graph;
    train.steps = options.steps;
    train.threads = options.threads;
    train.verify = config.ram_budget_bytes > 0;
    if (config.ram_budget_bytes > 0) {
      train.solve.set_ram_budget_bytes(config.ram_budget_bytes);
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
    if (config.ram_budget_bytes == 0) plain_step_s = run.runtime_s();
    // The same schedule predicted from the in-step node times.
    double in_step_s = 0;
    v1::GetCostTableRequest request;
    request.set_model("resnet18_cifar");
    request.set_cost_source(kMeasuredInStepSource);
    request.set_batch_size(static_cast<uint32_t>(options.batch_size));
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
        << (run.ram_budget_bytes() && run.ram_budget_bytes() < (1ull << 40)
                ? FormatBytes(static_cast<double>(run.ram_budget_bytes()))
                : "-")
        << std::setw(11) << FormatBytes(static_cast<double>(run.predicted_peak_bytes())) << std::setw(11)
        << FormatBytes(static_cast<double>(run.peak_activation_bytes())) << std::setw(12)
        << FormatBytes(static_cast<double>(run.rss_growth_bytes())) << std::setw(11) << FormatSeconds(run.runtime_s())
        << std::setw(12) << FormatSeconds(run.predicted_runtime_s()) << std::setw(9)
        << Pct(run.runtime_s(), run.predicted_runtime_s()) << std::setw(11)
        << (in_step_s > 0 ? FormatSeconds(in_step_s) : "-") << std::setw(9) << Pct(run.runtime_s(), in_step_s)
        << std::setw(11) << FormatSeconds(run.predicted_paging_s()) << std::setw(11)
        << FormatSeconds(run.paging_wait_s()) << std::setw(11)
        << (!run.has_verify()          ? "-"
            : run.verify().identical() ? "identical"
                                       : "DIFFER")
        << "\n";
    const bool within = run.peak_activation_bytes() <= run.predicted_peak_bytes() &&
                        (run.ram_budget_bytes() == 0 || run.predicted_peak_bytes() <= run.ram_budget_bytes());
    if (!within) out << "  MEMORY TARGET NOT MET: measured peak above planned peak or budget\n";
  }
  out << "\nmemory: measured = the arena's peak live activation bytes (exact); planned = the simulator's peak.\n"
      << "isolated = the schedule's runtime from ops measured one at a time (`measured`); in-step = from the plain\n"
      << "run's node times inside real steps (`measured-in-step`; in-sample for the plain step). Targets: error <= "
         "10%\n"
      << "isolated, <= 5% in-step. paging = predicted I/O time at the measured paging costs; on path = time\n"
      << "computation waited for it.\n\n";

  Result<std::pair<std::string, double>> torch = TorchStep(options, scratch.dir);
  if (!torch.ok()) {
    out << "PyTorch: not measured: " << torch.status().message() << "\n";
  } else if (plain_step_s > 0) {
    out << "PyTorch " << torch->first << " (" << options.python
        << "), same model, batch and threads: " << FormatSeconds(torch->second) << " per step; edgecost's plain step "
        << FormatSeconds(plain_step_s) << ": " << std::fixed << std::setprecision(2) << torch->second / plain_step_s
        << "x PyTorch's speed   target >= 3x: " << (torch->second / plain_step_s >= 3 ? "reached" : "NOT reached")
        << "\n";
  }
  out << "torchvision resnet18 through ONNX: not measured by this benchmark (see the closing note of issue 15)\n";
  return Status::Ok();
}

}  // namespace edgecost::service
