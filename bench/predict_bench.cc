#include "bench/predict_bench.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <iomanip>
#include <sstream>
#include <thread>

#include "base/units.h"
#include "graph/zoo.h"
#include "profiler/measure.h"
#include "service/profile_job.h"
#include "service/train_job.h"

namespace edgecost::service {
namespace {

namespace fs = std::filesystem;

struct Scratch {
  fs::path dir = fs::temp_directory_path() / ("edgecost_predict_bench_" + std::to_string(::getpid()));
  Scratch() {
    fs::remove_all(dir);
    fs::create_directories(dir);
  }
  ~Scratch() { fs::remove_all(dir); }
};

// The model as `train` and `profile` name it: a zoo name, or an ONNX file
// exported here by tests/graph/export_models.py (run from the repository).
Result<std::string> ModelArgument(const std::string& model, const PredictBenchOptions& options, const fs::path& dir) {
  const auto& zoo = graph::ZooModels();
  if (std::any_of(zoo.begin(), zoo.end(), [&](const graph::ZooModel& z) { return z.name == model; })) return model;
  const std::string exported = (dir / (model + ".onnx")).string();
  const std::string command =
      options.python + " tests/graph/export_models.py " + dir.string() + " " + model + " >/dev/null 2>&1";
  if (std::system(command.c_str()) == 0 && fs::exists(exported)) return exported;
  return Unavailable("cannot export '" + model + "': run from the repository with " + options.python +
                     " and python3-torch installed (tests/graph/export_models.py --list names the models)");
}

// Signed error of `measured` against `predicted`, as "+12.3%".
std::string Error(double measured, double predicted, std::vector<double>* errors = nullptr) {
  if (!(predicted > 0) || !(measured > 0)) return "-";
  const double error = (measured - predicted) / predicted;
  if (errors) errors->push_back(std::abs(error));
  std::ostringstream out;
  out << std::showpos << std::fixed << std::setprecision(1) << 100 * error << "%";
  return out.str();
}

}  // namespace

Status RunPredictBenchmark(std::ostream& out, const PredictBenchOptions& options) {
  Scratch scratch;
  const std::string db_path = (scratch.dir / "bench.db").string();
  auto quiet = [](const std::string&) {};
  out << "predict benchmark: batch " << options.batch_size << ", " << options.steps
      << " steps per case (median of steps 2..N); load average at start " << std::fixed << std::setprecision(2);
  double load[1] = {0};
  out << (::getloadavg(load, 1) == 1 ? load[0] : 0.0) << " (the machine may be shared: timings are noisy)\n\n";
  out << std::left << std::setw(22) << "model" << std::setw(5) << "thr" << std::setw(13) << "schedule" << std::right
      << std::setw(11) << "step pred" << std::setw(11) << "measured" << std::setw(9) << "error" << std::setw(11)
      << "RSS pred" << std::setw(11) << "measured" << std::setw(9) << "error" << std::setw(11) << "energy"
      << std::setw(11) << "measured" << std::setw(9) << "error" << "\n";
  std::vector<double> time_errors, rss_errors;
  for (const std::string& model : options.models) {
    const Result<std::string> argument_or = ModelArgument(model, options, scratch.dir);
    if (!argument_or.ok()) {
      out << std::left << std::setw(22) << model << argument_or.status().message() << "\n";
      continue;
    }
    const std::string& argument = *argument_or;
    for (int requested : options.threads) {
      const int threads = requested > 0 ? requested : static_cast<int>(std::thread::hardware_concurrency());
      ProfileJobOptions profile;
      profile.db_path = db_path;
      profile.graph.model_or_file = argument;
      profile.graph.batch_size = options.batch_size;
      profile.graph.derivation = graph::Derivation::kExact;
      profile.threads = threads;
      profile.min_window_s = options.min_window_s;
      profile.accept_noisy = true;  // figures on a shared machine; the load is printed above
      if (Result<ProfileJobResult> p = RunProfileJob(profile, nullptr, nullptr, quiet); !p.ok()) {
        out << std::left << std::setw(22) << model << std::setw(5) << threads << "not profiled: "
            << p.status().message() << "\n";
        continue;
      }
      // The plain step first: its planned peak sets the budgets of the other two.
      uint64_t plain_peak_bytes = 0;
      for (const char* schedule : {"plain", "recompute", "paging"}) {
        TrainJobOptions train;
        train.db_path = db_path;
        train.graph = profile.graph;
        train.steps = options.steps;
        train.threads = threads;
        train.store = false;
        const std::string which = schedule;
        if (which != "plain") {
          if (plain_peak_bytes == 0) break;
          // Recomputation alone reaches less far than paging (resnet18_cifar: about half its peak).
          train.solve.set_ram_budget_bytes(plain_peak_bytes / 10 * (which == "recompute" ? 6 : 5));
          train.solve.set_runtime_budget_multiple(which == "recompute" ? 2 : 1000);
          train.solve.set_disable_paging(which == "recompute");
          train.solve.set_strategy(which == "recompute" ? "optimal" : "paging-only");
          train.solve.set_time_limit_s(10);
        }
        Result<TrainJobResult> trained = RunTrainJob(train, nullptr, nullptr, quiet);
        out << std::left << std::setw(22) << model << std::setw(5) << threads << std::setw(13) << which;
        if (!trained.ok()) {
          out << trained.status().message() << "\n";
          continue;
        }
        const v1::TrainRun& run = trained->run;
        if (which == "plain") plain_peak_bytes = run.predicted_peak_bytes();
        const double rss_bytes = static_cast<double>(run.peak_rss_bytes()) - static_cast<double>(run.unbuilt_rss_bytes());
        const double rss_predicted = static_cast<double>(run.predicted_process_bytes());
        out << std::right << std::setw(11) << FormatSeconds(run.predicted_runtime_s()) << std::setw(11)
            << FormatSeconds(run.runtime_s()) << std::setw(9)
            << Error(run.runtime_s(), run.predicted_runtime_s(), &time_errors) << std::setw(11)
            << FormatBytes(rss_predicted) << std::setw(11) << FormatBytes(rss_bytes) << std::setw(9)
            << Error(rss_bytes, rss_predicted, &rss_errors) << std::setw(11) << FormatJoules(run.predicted_energy_j())
            << std::setw(11) << FormatJoules(run.energy_j()) << std::setw(9)
            << Error(run.energy_j(), run.predicted_energy_j()) << "\n";
      }
    }
  }
  const auto percent = [](double fraction) {
    std::ostringstream text;
    text << std::fixed << std::setprecision(1) << 100 * fraction << "%";
    return text.str();
  };
  if (!time_errors.empty()) {
    const double time_median = profiler::Summarize(time_errors).median_s;
    const double time_worst = *std::max_element(time_errors.begin(), time_errors.end());
    out << "\nstep time: median |error| " << percent(time_median) << ", worst " << percent(time_worst)
        << "   target <= 5% median and <= 10% every case: "
        << (time_median <= 0.05 && time_worst <= 0.10 ? "reached" : "NOT reached") << "\n";
  }
  if (!rss_errors.empty()) {
    const double rss_median = profiler::Summarize(rss_errors).median_s;
    out << "process memory: median |error| " << percent(rss_median)
        << "   target <= 5%: " << (rss_median <= 0.05 ? "reached" : "NOT reached") << "\n";
  }
  out << "RSS = peak RSS over the steps minus RSS before the executor was built; predicted = parameters, gradients,\n"
         "layer state (with the shared scratchpad) and the schedule's activation peak. Energy without a sensor is\n"
         "the power model's ESTIMATE on both sides.\n";
  return Status::Ok();
}

}  // namespace edgecost::service
