#include "bench/profiler_bench.h"

#include <omp.h>
#include <time.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <iomanip>
#include <map>

#include "graph/derive.h"
#include "profiler/paging.h"
#include "profiler/power_model.h"
#include "profiler/profile.h"

namespace edgecost::profiler {
namespace {

struct Scratch {
  std::filesystem::path dir;
  Scratch() {
    dir = std::filesystem::temp_directory_path() / ("edgecost_bench_" + std::to_string(::getpid()));
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
  }
  ~Scratch() { std::filesystem::remove_all(dir); }
};

// Profiles `model` from an empty database (paging included) and returns the wall time.
Result<double> ProfileFromScratch(costdb::CostDb& db, Backend& backend, const std::string& model,
                                  const std::string& hash, int threads, bool force, const std::string& paging_dir) {
  const double start = SteadyClock().NowS();
  EC_ASSIGN_OR_RETURN(v1::TrainingGraph graph, graph::ZooTrainingGraph(model, 1, graph::Derivation::kExact));
  EC_ASSIGN_OR_RETURN(PagingMeasurement paging, MeasurePaging({.dir = paging_dir}));
  EC_RETURN_IF_ERROR(db.PutPagingCost(hash, paging.cost));
  EC_ASSIGN_OR_RETURN(int64_t run, db.BeginRun(hash, kMeasuredSource));
  EstimatedMeter meter{probes::EstimateModel{}};
  ProfileOptions options;
  options.threads = threads;
  options.force = force;
  EC_ASSIGN_OR_RETURN(ProfileSummary summary, ProfileGraph(db, backend, graph, hash, run, &meter, options));
  (void)summary;
  return SteadyClock().NowS() - start;
}

std::map<std::string, double> Medians(costdb::CostDb& db, const std::string& hash) {
  std::map<std::string, double> out;
  if (auto costs = db.ListOpCosts(hash); costs.ok()) {
    for (const v1::OpCost& c : *costs) out[c.signature().key()] = c.runtime().median_s();
  }
  return out;
}

}  // namespace

Status RunProfilerBenchmark(std::ostream& out, const ProfilerBenchOptions& options) {
  const int threads = options.threads > 0 ? options.threads : omp_get_num_procs();
  omp_set_num_threads(threads);
  Scratch scratch;
  EC_ASSIGN_OR_RETURN(costdb::CostDb db, costdb::CostDb::Open((scratch.dir / "bench.db").string()));
  Backend backend;
  v1::Device device;
  device.set_name("bench");
  device.set_kind(v1::Device::KIND_MEASURED);
  device.mutable_fingerprint()->set_hash("bench");
  EC_RETURN_IF_ERROR(db.UpsertDevice(device).status());
  const std::string paging_dir = (scratch.dir / "paging").string();
  out << std::fixed << std::setprecision(2);
  out << "profiler benchmark: " << threads << " threads, oneDNN ISA " << Backend::Isa() << "\n\n";

  EC_ASSIGN_OR_RETURN(double first_s,
                      ProfileFromScratch(db, backend, "resnet18_cifar", "bench", threads, false, paging_dir));
  const auto run1 = Medians(db, "bench");
  out << "resnet18_cifar, empty database (paging + " << run1.size() << " distinct ops): " << first_s
      << " s   target < 60 s: " << (first_s < 60 ? "reached" : "NOT reached") << "\n";
  EC_ASSIGN_OR_RETURN(double second_s,
                      ProfileFromScratch(db, backend, "resnet18_cifar", "bench", threads, true, paging_dir));
  const auto run2 = Medians(db, "bench");
  out << "resnet18_cifar, second run (--force): " << second_s << " s\n";

  int long_ops = 0, agreeing = 0;
  double worst = 0;
  for (const auto& [key, median] : run1) {
    if (median < 100e-6 || !run2.count(key)) continue;
    ++long_ops;
    const double difference = std::fabs(run2.at(key) - median) / median;
    worst = std::max(worst, difference);
    if (difference <= 0.05) ++agreeing;
  }
  out << "run-to-run agreement, ops > 100 us: " << agreeing << " of " << long_ops << " within 5% (worst " << worst * 100
      << "%)   target all: " << (agreeing == long_ops ? "reached" : "NOT reached") << "\n";

  if (options.include_resnet18) {
    EC_ASSIGN_OR_RETURN(double r18_s, ProfileFromScratch(db, backend, "resnet18", "bench", threads, false, paging_dir));
    out << "resnet18 (ImageNet), same database: " << r18_s << " s\n";
  }

  // Overhead: an op that does nothing, measured by the same loop, against the clock's resolution.
  timespec resolution{};
  clock_getres(CLOCK_MONOTONIC, &resolution);
  MeasureOptions trivial;
  trivial.min_window_s = 0.05;
  EC_ASSIGN_OR_RETURN(Measurement m, Measure([] {}, SteadyClock(), nullptr, trivial));
  out << std::setprecision(1) << "overhead: an empty op measures " << m.runtime.median_s * 1e9 << " ns (median of "
      << m.runtime.repetitions << "); clock resolution " << resolution.tv_nsec << " ns\n";
  return Status::Ok();
}

}  // namespace edgecost::profiler
