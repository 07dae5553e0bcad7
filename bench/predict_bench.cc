#include "bench/predict_bench.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <iomanip>
#include <optional>
#include <sstream>
#include <thread>

#include "base/subprocess.h"
#include "base/units.h"
#include "bench/bench_common.h"
#include "profiler/measure.h"
#include "proto/edgecost.pb.h"
#include "proto/json.h"

namespace edgecost::service {
namespace {

namespace fs = std::filesystem;

// "mobilenet_v3_small@16:adamw": the model, its batch and its optimizer.
struct ModelCase {
  std::string model;
  int batch_size = 2;
  std::string optimizer = "sgd";
};

Result<ModelCase> ParseCase(const std::string& text) {
  ModelCase c;
  std::string rest = text;
  if (const size_t colon = rest.rfind(':'); colon != std::string::npos) {
    c.optimizer = rest.substr(colon + 1);
    rest.resize(colon);
  }
  if (const size_t at = rest.rfind('@'); at != std::string::npos) {
    try {
      c.batch_size = std::stoi(rest.substr(at + 1));
    } catch (...) {
      return InvalidArgument("'" + text + "': the batch after @ is a number");
    }
    rest.resize(at);
  }
  c.model = rest;
  return c;
}

// One core kept busy by a spinning thread of this process, while it lives.
class BusyCore {
 public:
  BusyCore() : thread_([this] {
    volatile uint64_t spins = 0;
    while (!stop_.load(std::memory_order_relaxed)) spins = spins + 1;
  }) {}
  ~BusyCore() {
    stop_ = true;
    thread_.join();
  }

 private:
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// An edgecost command as a process of its own; its stdout as `message` (protobuf JSON).
Status RunEdgecost(const std::vector<std::string>& args, google::protobuf::Message* message, double* elapsed_s = nullptr) {
  std::vector<std::string> argv = {SelfExecutable()};
  argv.insert(argv.end(), args.begin(), args.end());
  std::string error, last_line;
  const auto start = std::chrono::steady_clock::now();
  EC_ASSIGN_OR_RETURN(const ProcessResult result, RunProcess(argv, [&](const std::string& line) {
                        if (line.starts_with("edgecost: error: ")) error = line.substr(17);
                        if (!line.empty()) last_line = line;
                      }));
  if (elapsed_s) *elapsed_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (result.exit_code != 0) {
    return Internal(!error.empty() ? error : "exit " + std::to_string(result.exit_code) + ": " + last_line);
  }
  return message ? proto::FromJson(result.stdout_text, message) : Status::Ok();
}

// Signed error of `predicted` against `measured`, as "-12.3%"; collected into `errors` when given.
std::string Error(double measured, double predicted, std::vector<double>* errors = nullptr) {
  if (!(predicted > 0) || !(measured > 0)) return "-";
  const double error = (predicted - measured) / measured;
  if (errors) errors->push_back(std::abs(error));
  std::ostringstream out;
  out << std::showpos << std::fixed << std::setprecision(1) << 100 * error << "%";
  return out.str();
}

std::string Percent(double fraction) {
  std::ostringstream text;
  text << std::fixed << std::setprecision(1) << 100 * fraction << "%";
  return text.str();
}

// The median and largest |error| of a set, against the targets.
void PrintSummary(std::ostream& out, const std::string& what, const std::vector<double>& errors, double median_target,
                  double each_target) {
  if (errors.empty()) return;
  const double median = profiler::Summarize(errors).median_s;
  const double worst = *std::max_element(errors.begin(), errors.end());
  out << std::left << std::setw(44) << what << "median |error| " << std::setw(7) << Percent(median) << " max "
      << std::setw(7) << Percent(worst) << " over " << errors.size() << " cases; target <= " << Percent(median_target)
      << " median" << (each_target > 0 ? ", <= " + Percent(each_target) + " each" : std::string()) << ": "
      << (median <= median_target && (each_target <= 0 || worst <= each_target) ? "reached" : "NOT reached") << "\n";
}

// |error| of step time per kind of case, for the summary: where the model holds and where it does not.
struct Errors {
  std::vector<double> time_first, time_second, rss, energy;
  std::vector<double> quiet_compute, busy_one_thread, paging, busy_all_cores;
  void AddTime(double error, bool busy, int threads, bool pages) {
    (pages ? paging : !busy ? quiet_compute : threads == 1 ? busy_one_thread : busy_all_cores).push_back(error);
  }
};

// The schedules of one profiled case: solved by `edgecost solve --out` at a share of the plain
// step's activation peak, as a user would, then trained with `--schedule`.
struct ScheduleCase {
  const char* name;
  double share;  // of the plain step's activation peak; 0: the plain step
  std::vector<std::string> solve_flags;
};
const ScheduleCase kSchedules[] = {
    {"plain", 0, {}},
    {"recompute", 0.6, {"--no-paging", "--runtime-budget", "3x"}},
    {"paging", 0.5, {"--strategy", "paging-only", "--runtime-budget", "3600s"}},
};

}  // namespace

Status RunPredictBenchmark(std::ostream& out, const PredictBenchOptions& options) {
  bench::Scratch scratch("edgecost_predict_bench");
  const double load_start = bench::LoadAverage();
  out << "predict benchmark: the user's default path, every command a process of its own: a fresh database, one\n"
      << "plain `profile`, then the first and second `train` of each schedule (" << options.steps
      << " steps, median of 2..N); " << std::thread::hardware_concurrency() << " cores; load average at start "
      << std::fixed << std::setprecision(2) << load_start << "\n"
      << "error = (predicted - measured) / measured; RSS is the training process's peak (VmHWM)\n\n";
  out << std::left << std::setw(26) << "model" << std::setw(4) << "thr" << std::setw(6) << "load" << std::setw(11)
      << "schedule" << std::setw(4) << "run" << std::right << std::setw(10) << "step" << std::setw(10) << "predicted"
      << std::setw(9) << "error" << std::setw(10) << "peak RSS" << std::setw(10) << "predicted" << std::setw(9)
      << "error" << std::setw(10) << "energy" << std::setw(10) << "predicted" << std::setw(9) << "error"
      << std::setw(6) << "load"
      << "\n";
  Errors errors;
  std::vector<double> busy_table_errors, busy_time_ratios;
  for (const std::string& spec : options.models) {
    EC_ASSIGN_OR_RETURN(const ModelCase model, ParseCase(spec));
    const std::string label = fs::path(model.model).stem().string() + " b" + std::to_string(model.batch_size) +
                              (model.optimizer == "sgd" ? "" : " " + model.optimizer);
    std::string argument = model.model;
    if (!fs::exists(model.model)) {
      Result<std::string> exported = bench::ModelArgument(model.model, options.python, scratch.dir, model.batch_size);
      if (!exported.ok()) {
        out << std::left << std::setw(26) << label << exported.status().message() << "\n";
        continue;
      }
      argument = *exported;
    }
    for (int requested : options.threads) {
      const int threads = requested > 0 ? requested : static_cast<int>(std::thread::hardware_concurrency());
      double quiet_profile_s = 0, quiet_step_s = 0;
      for (const std::string& load : options.loads) {
        // A fresh database per case: the same model at another batch is another case.
        const std::string db =
            (scratch.dir / (fs::path(argument).stem().string() + "-b" + std::to_string(model.batch_size) + "-" +
                            std::to_string(threads) + "-" + load + ".db"))
                .string();
        const std::vector<std::string> common = {"--model", argument, "--batch-size", std::to_string(model.batch_size),
                                                 "--threads", std::to_string(threads)};
        auto fail = [&](const std::string& what, const Status& why) {
          out << std::left << std::setw(26) << label << std::setw(4) << threads << std::setw(6) << load << what
              << ": " << why.message() << "\n";
        };
        std::optional<BusyCore> busy;
        if (load == "busy") busy.emplace();
        v1::ProfileResult profiled;
        double profile_s = 0;
        std::vector<std::string> profile = {"--db", db, "profile", "--json"};
        profile.insert(profile.end(), common.begin(), common.end());
        if (Status s = RunEdgecost(profile, &profiled, &profile_s); !s.ok()) {
          fail("profile", s);
          continue;
        }
        if (load == "quiet") {
          quiet_profile_s = profile_s;
        } else if (quiet_profile_s > 0) {
          busy_time_ratios.push_back(profile_s / quiet_profile_s);
        }
        out << std::left << std::setw(26) << label << std::setw(4) << threads << std::setw(6) << load << "profile "
            << FormatSeconds(profile_s) << ", its steps' median " << FormatSeconds(profiled.in_step_run().runtime_s())
            << "\n";
        uint64_t plain_peak_bytes = 0;
        for (const ScheduleCase& schedule : kSchedules) {
          std::vector<std::string> train = {"--db", db, "train", "--json", "--steps", std::to_string(options.steps),
                                            "--optimizer", model.optimizer};
          train.insert(train.end(), common.begin(), common.end());
          if (schedule.share > 0) {
            if (plain_peak_bytes == 0) break;
            const std::string file = db + "." + schedule.name + ".json";
            std::vector<std::string> solve = {"--db", db, "solve", "--device", "this", "--optimizer", model.optimizer,
                                              "--activation-budget",
                                              std::to_string(static_cast<uint64_t>(schedule.share * plain_peak_bytes)) +
                                                  "B",
                                              "--time-limit-s", "10", "--out", file, "--model", argument,
                                              "--batch-size", std::to_string(model.batch_size), "--threads",
                                              std::to_string(threads)};
            solve.insert(solve.end(), schedule.solve_flags.begin(), schedule.solve_flags.end());
            if (Status s = RunEdgecost(solve, nullptr); !s.ok()) {
              fail(schedule.name, s);
              continue;
            }
            train.insert(train.end(), {"--schedule", file});
          }
          for (int attempt = 1; attempt <= 2; ++attempt) {
            v1::TrainRun run;
            if (Status s = RunEdgecost(train, &run); !s.ok()) {
              fail(schedule.name, s);
              break;
            }
            if (schedule.share == 0 && attempt == 1) {
              plain_peak_bytes = run.predicted_peak_bytes();
              // The table's plain step, quiet against busy: what a busy device's profile stores.
              if (load == "quiet") {
                quiet_step_s = run.predicted_runtime_s();
              } else if (quiet_step_s > 0) {
                busy_table_errors.push_back(std::abs(run.predicted_runtime_s() - quiet_step_s) / quiet_step_s);
              }
            }
            if (run.predicted_runtime_s() > 0 && run.runtime_s() > 0) {
              errors.AddTime(std::abs(run.predicted_runtime_s() - run.runtime_s()) / run.runtime_s(), load == "busy",
                             threads, schedule.share > 0 && std::string(schedule.name) == "paging");
            }
            const bool rss_predicted = run.process_rest_from_run() != 0;
            out << std::left << std::setw(26) << label << std::setw(4) << threads << std::setw(6) << load
                << std::setw(11) << (schedule.name + std::string(run.disturbed() ? "*" : "")) << std::setw(4)
                << attempt << std::right << std::setw(10) << FormatSeconds(run.runtime_s()) << std::setw(10)
                << FormatSeconds(run.predicted_runtime_s()) << std::setw(9)
                << Error(run.runtime_s(), run.predicted_runtime_s(),
                         attempt == 1 ? &errors.time_first : &errors.time_second)
                << std::setw(10) << FormatBytes(static_cast<double>(run.peak_rss_bytes())) << std::setw(10)
                << (rss_predicted ? FormatBytes(static_cast<double>(run.predicted_process_bytes())) : "-")
                << std::setw(9)
                << (rss_predicted ? Error(static_cast<double>(run.peak_rss_bytes()),
                                          static_cast<double>(run.predicted_process_bytes()), &errors.rss)
                                  : "-")
                << std::setw(10) << FormatJoules(run.energy_j()) << std::setw(10)
                << FormatJoules(run.predicted_energy_j()) << std::setw(9)
                << Error(run.energy_j(), run.predicted_energy_j(), &errors.energy) << std::setw(6) << std::fixed
                << std::setprecision(2) << bench::LoadAverage() << "\n";
          }
        }
      }
    }
  }
  out << "\n";
  PrintSummary(out, "step time, first run of a schedule", errors.time_first, 0.05, 0.10);
  PrintSummary(out, "step time, second run", errors.time_second, 0.05, 0.10);
  PrintSummary(out, "  of them quiet, without paging", errors.quiet_compute, 0.05, 0.10);
  PrintSummary(out, "  busy on one thread, without paging", errors.busy_one_thread, 0.05, 0.10);
  PrintSummary(out, "  paging", errors.paging, 0.05, 0.10);
  PrintSummary(out, "  busy on all cores, without paging", errors.busy_all_cores, 0.05, 0.10);
  PrintSummary(out, "process peak RSS", errors.rss, 0.05, 0);
  PrintSummary(out, "energy", errors.energy, 0.05, 0.10);
  PrintSummary(out, "busy profile's plain step vs the quiet one", busy_table_errors, 0.10, 0.10);
  if (!busy_time_ratios.empty()) {
    out << std::left << std::setw(44) << "busy profile's time over the quiet one"
        << "median " << std::setprecision(2) << profiler::Summarize(busy_time_ratios).median_s << "x, max "
        << *std::max_element(busy_time_ratios.begin(), busy_time_ratios.end()) << "x; target <= 2x\n";
  }
  out << "load average at start " << std::fixed << std::setprecision(2) << load_start << ", at end "
      << bench::LoadAverage() << "; * marks a run most of whose steps were disturbed (another task took the CPU);\n"
      << "busy: a thread of the benchmark spins on one core throughout. Energy without a sensor is the power\n"
      << "model's ESTIMATE on both sides.\n";
  return Status::Ok();
}

}  // namespace edgecost::service
