#include "bench/predict_bench.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <iomanip>
#include <optional>
#include <sstream>
#include <thread>

#include "base/units.h"
#include "bench/bench_common.h"
#include "costdb/costdb.h"
#include "profiler/measure.h"
#include "service/cost_tables.h"
#include "service/in_step.h"
#include "service/profile_job.h"
#include "service/train_job.h"
#include "solver/problem.h"
#include "solver/simulator.h"

namespace edgecost::service {
namespace {

// Signed error of `predicted` against `measured`, as "-12.3%" (the prediction 12.3% short).
std::string Error(double measured, double predicted, std::vector<double>* errors = nullptr) {
  if (!(predicted > 0) || !(measured > 0)) return "-";
  const double error = (predicted - measured) / measured;
  if (errors) errors->push_back(std::abs(error));
  std::ostringstream out;
  out << std::showpos << std::fixed << std::setprecision(1) << 100 * error << "%";
  return out.str();
}

// A cost table of the bench's database at `threads`, of `source`.
Result<v1::CostTable> Table(const std::string& db_path, const graph::GraphSpec& graph, const std::string& source,
                            int threads) {
  EC_ASSIGN_OR_RETURN(costdb::CostDb db, costdb::CostDb::Open(db_path, costdb::OpenMode::kReadOnly));
  v1::GetCostTableRequest request;
  request.set_model(graph.model_or_file);
  request.set_device("this");
  request.set_cost_source(source);
  request.set_batch_size(static_cast<uint32_t>(graph.batch_size));
  request.set_derivation("exact");
  request.set_threads(static_cast<uint32_t>(threads));
  return ResolveCostTable(&db, request);
}

// The step time `table` predicts: the plain step's sum, or the schedule's replay (compute, plus
// paging when the schedule counts it), with no runtime budget to break.
double PredictedS(const v1::CostTable& table, const std::optional<v1::Schedule>& schedule) {
  if (!schedule) {
    double sum = 0;
    for (const v1::NodeCost& c : table.costs()) sum += c.runtime_s();
    return sum;
  }
  Result<solver::Problem> problem = solver::ProblemFromCostTable(table, schedule->request());
  if (!problem.ok()) return 0;
  problem->runtime_budget_s = 1e30;
  const solver::Replay replay = solver::Simulate(*problem, *schedule);
  return replay.runtime_s;
}

}  // namespace

Status RunPredictBenchmark(std::ostream& out, const PredictBenchOptions& options) {
  bench::Scratch scratch("edgecost_predict_bench");
  const std::string db_path = (scratch.dir / "bench.db").string();
  auto quiet = [](const std::string&) {};
  const double load_start = bench::LoadAverage();
  out << "predict benchmark: batch " << options.batch_size << ", " << options.steps
      << " steps per case (median of steps 2..N); " << std::thread::hardware_concurrency()
      << " cores; load average at start " << std::fixed << std::setprecision(2) << load_start
      << " (the machine may be shared: timings are noisy)\n"
      << "time predicted from isolated ops (`measured`) and from node times inside the real steps of an earlier\n"
      << "plain run (`measured-in-step`, as `profile --in-step` stores it); error = (predicted - measured) / "
         "measured\n\n";
  out << std::left << std::setw(20) << "model" << std::setw(4) << "thr" << std::setw(10) << "schedule" << std::right
      << std::setw(10) << "measured" << std::setw(10) << "isolated" << std::setw(9) << "error" << std::setw(10)
      << "in-step" << std::setw(9) << "error" << std::setw(10) << "RSS pred" << std::setw(10) << "measured"
      << std::setw(9) << "error" << std::setw(10) << "energy" << std::setw(10) << "measured" << std::setw(9) << "error"
      << std::setw(6) << "load"
      << "\n";
  std::vector<double> isolated_errors, in_step_errors, rss_errors;
  // The same over the cases neither disturbed nor paging: what the compute model predicts.
  std::vector<double> isolated_quiet, in_step_quiet;
  for (const std::string& model : options.models) {
    const Result<std::string> argument_or = bench::ModelArgument(model, options.python, scratch.dir);
    if (!argument_or.ok()) {
      out << std::left << std::setw(20) << model << argument_or.status().message() << "\n";
      continue;
    }
    const std::string& argument = *argument_or;
    for (int requested : options.threads) {
      const int threads = requested > 0 ? requested : static_cast<int>(std::thread::hardware_concurrency());
      auto fail = [&](const std::string& what, const std::string& why) {
        out << std::left << std::setw(20) << model << std::setw(4) << threads << what << ": " << why << "\n";
      };
      ProfileJobOptions profile;
      profile.db_path = db_path;
      profile.graph.model_or_file = argument;
      profile.graph.batch_size = options.batch_size;
      profile.graph.derivation = graph::Derivation::kExact;
      profile.threads = threads;
      profile.min_window_s = options.min_window_s;
      profile.accept_noisy = true;  // figures on a shared machine; the load is printed
      if (Result<ProfileJobResult> p = RunProfileJob(profile, nullptr, nullptr, quiet); !p.ok()) {
        fail("not profiled", p.status().message());
        continue;
      }
      // The in-step profile: real plain steps of their own run, not the cases' below.
      InStepProfileOptions in_step;
      in_step.db_path = db_path;
      in_step.graph = profile.graph;
      in_step.threads = threads;
      in_step.steps = options.steps;
      in_step.accept_noisy = true;
      if (Result<TrainJobResult> r = RunInStepProfile(in_step, nullptr, quiet); !r.ok() || r->in_step_table_id == 0) {
        fail("no in-step profile", r.ok() ? "not stored" : r.status().message());
        continue;
      }
      Result<v1::CostTable> isolated = Table(db_path, profile.graph, profiler::kMeasuredSource, threads);
      Result<v1::CostTable> in_step_table = Table(db_path, profile.graph, kMeasuredInStepSource, threads);
      if (!isolated.ok() || !in_step_table.ok()) {
        fail("no cost table", (isolated.ok() ? in_step_table : isolated).status().message());
        continue;
      }
      // The plain step first: its planned peak sets the budgets of the other two.
      uint64_t plain_peak_bytes = 0;
      for (const char* schedule_name : {"plain", "recompute", "paging"}) {
        const std::string which = schedule_name;
        TrainJobOptions train;
        train.init = "random";  // times and memory, not weights
        train.db_path = db_path;
        train.graph = profile.graph;
        train.steps = options.steps;
        train.threads = threads;
        train.cost_source = kMeasuredInStepSource;
        train.store = false;
        train.accept_noisy = true;
        std::optional<v1::Schedule> schedule;
        if (which != "plain") {
          if (plain_peak_bytes == 0) break;
          // Recomputation alone reaches less far than paging (resnet18_cifar: about half its peak).
          v1::ScheduleRequest request;
          request.set_model(argument);
          request.set_device("this");
          request.set_cost_source(kMeasuredInStepSource);
          request.set_compute_threads(static_cast<uint32_t>(threads));
          request.set_batch_size(static_cast<uint32_t>(options.batch_size));
          request.set_derivation("exact");
          request.set_ram_budget_bytes(plain_peak_bytes / 10 * (which == "recompute" ? 6 : 5));
          if (which == "recompute") {
            request.set_runtime_budget_multiple(2);
          } else {
            request.set_runtime_budget_s(3600);  // paging time counts: no multiple of a tiny step holds it
          }
          request.set_disable_paging(which == "recompute");
          request.set_count_paging_time(which == "paging");  // as `train` solves: overlap does not hide paging
          request.set_strategy(which == "recompute" ? "optimal" : "paging-only");
          request.set_time_limit_s(10);
          Result<costdb::CostDb> db = costdb::CostDb::Open(db_path, costdb::OpenMode::kReadWrite);
          if (!db.ok()) return db.status();
          Result<SolvedRequest> solved = SolveRequest(&*db, request, /*store=*/true);
          const bool has_schedule = solved.ok() && (solved->schedule.status() == v1::Schedule::STATUS_OPTIMAL ||
                                                    solved->schedule.status() == v1::Schedule::STATUS_FEASIBLE);
          if (!has_schedule || solved->schedule_id == 0) {
            fail(which, solved.ok() ? "no schedule: " + solved->schedule.message() : solved.status().message());
            continue;
          }
          schedule = solved->schedule;
          train.schedule_id = static_cast<uint64_t>(solved->schedule_id);
        }
        Result<TrainJobResult> trained = RunTrainJob(train, nullptr, nullptr, quiet);
        if (!trained.ok()) {
          fail(which, trained.status().message());
          continue;
        }
        const v1::TrainRun& run = trained->run;
        if (which == "plain") plain_peak_bytes = run.predicted_peak_bytes();
        const double isolated_s = PredictedS(*isolated, schedule);
        const double in_step_s = PredictedS(*in_step_table, schedule);
        if (!run.disturbed() && which != "paging") {
          Error(run.runtime_s(), isolated_s, &isolated_quiet);
          Error(run.runtime_s(), in_step_s, &in_step_quiet);
        }
        const double rss_bytes =
            static_cast<double>(run.peak_rss_bytes()) - static_cast<double>(run.unbuilt_rss_bytes());
        const double rss_predicted = static_cast<double>(run.predicted_process_bytes());
        out << std::left << std::setw(20) << model << std::setw(4) << threads << std::setw(10)
            << (which + (run.disturbed() ? "*" : "")) << std::right << std::setw(10) << FormatSeconds(run.runtime_s())
            << std::setw(10) << FormatSeconds(isolated_s) << std::setw(9)
            << Error(run.runtime_s(), isolated_s, &isolated_errors) << std::setw(10) << FormatSeconds(in_step_s)
            << std::setw(9) << Error(run.runtime_s(), in_step_s, &in_step_errors) << std::setw(10)
            << FormatBytes(rss_predicted) << std::setw(10) << FormatBytes(rss_bytes) << std::setw(9)
            << Error(rss_bytes, rss_predicted, &rss_errors) << std::setw(10) << FormatJoules(run.predicted_energy_j())
            << std::setw(10) << FormatJoules(run.energy_j()) << std::setw(9)
            << Error(run.energy_j(), run.predicted_energy_j()) << std::setw(6) << std::fixed << std::setprecision(2)
            << bench::LoadAverage() << "\n";
      }
    }
  }
  const auto percent = [](double fraction) {
    std::ostringstream text;
    text << std::fixed << std::setprecision(1) << 100 * fraction << "%";
    return text.str();
  };
  out << "\n";
  for (const auto& [name, errors] :
       {std::pair<const char*, const std::vector<double>*>{"isolated ops, all cases           ", &isolated_errors},
        {"in-step,      all cases           ", &in_step_errors},
        {"isolated ops, quiet, without paging", &isolated_quiet},
        {"in-step,      quiet, without paging", &in_step_quiet}}) {
    if (errors->empty()) continue;
    const double median = profiler::Summarize(*errors).median_s;
    const double worst = *std::max_element(errors->begin(), errors->end());
    out << "step time, " << name << ": median |error| " << percent(median) << ", max " << percent(worst) << " over "
        << errors->size()
        << " cases; target <= 5% median, <= 10% each: " << (median <= 0.05 && worst <= 0.10 ? "reached" : "NOT reached")
        << "\n";
  }
  if (!rss_errors.empty()) {
    const double rss_median = profiler::Summarize(rss_errors).median_s;
    out << "process memory: median |error| " << percent(rss_median)
        << "   target <= 5%: " << (rss_median <= 0.05 ? "reached" : "NOT reached") << "\n";
  }
  out << "load average at start " << std::fixed << std::setprecision(2) << load_start << ", at end "
      << bench::LoadAverage() << "; * marks a run most of whose steps were disturbed (another task took the CPU)\n";
  out << "RSS = peak RSS over the steps minus RSS before the executor was built; predicted = parameters, gradients,\n"
         "layer state (with the shared scratchpad) and the schedule's activation peak. Energy (predicted from the\n"
         "in-step table) without a sensor is the power model's ESTIMATE on both sides.\n";
  return Status::Ok();
}

}  // namespace edgecost::service
