#include "profiler/profile.h"

#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <mutex>
#include <random>
#include <thread>

#include "base/units.h"
#include "profiler/cpu_speed.h"
#include "profiler/energy_model.h"
#include "profiler/interference.h"
#include "profiler/node_work.h"

namespace edgecost::profiler {
namespace {

int64_t ResidentBytes() {
  std::ifstream statm("/proc/self/statm");
  int64_t pages = 0, resident = 0;
  statm >> pages >> resident;
  return resident * ::sysconf(_SC_PAGESIZE);
}

// How disturbed an attempt was, to keep the least disturbed one.
double DisturbanceScore(const v1::Interference& i) {
  const double total = i.total_repetitions();
  return (total > 0 ? i.disturbed_repetitions() / total : 1.0) + i.steal_fraction() + 0.5 * i.other_cpu_cores() +
         std::max(0.0, i.cpu_slowdown());
}

void AnnotateNodeCost(const v1::OpCost& op, v1::NodeCost& cost) {
  *cost.mutable_runtime_stats() = op.runtime();
  cost.set_unreliable(op.unreliable());
  cost.set_unreliable_reason(op.unreliable_reason());
  *cost.mutable_counters() = op.counters();
  *cost.mutable_domains() = op.domains();
}

// What the device could not count, each event once for the whole table.
void AddUncounted(const v1::OpCost& op, v1::CostTable& table) {
  for (const v1::UncountedEvent& event : op.uncounted()) {
    const bool known = std::any_of(table.uncounted().begin(), table.uncounted().end(),
                                   [&](const v1::UncountedEvent& e) { return e.event() == event.event(); });
    if (!known) *table.add_uncounted() = event;
  }
}

// An estimated op's energy from a calibrated counter model; false when the op
// lacks a counter the model weighs (it keeps the power model's estimate).
bool ApplyCalibration(const v1::EnergyCalibration& calibration, v1::OpCost& cost) {
  const std::optional<double> energy_j = ModelEnergyJ(calibration, cost.runtime().median_s(), cost.counters());
  if (!energy_j) return false;
  cost.set_energy_j(*energy_j);
  cost.set_idle_power_w(calibration.idle_power_w());
  cost.set_dynamic_energy_j(*energy_j - calibration.idle_power_w() * cost.runtime().median_s());
  cost.set_energy_source(v1::ENERGY_SOURCE_ESTIMATED);
  cost.set_energy_probe(CalibrationLabel(calibration));
  cost.clear_domains();  // a model has no domains
  return true;
}

}  // namespace

double UsualCheckS(std::vector<double> readings_s) {
  if (readings_s.empty()) return 0;
  std::sort(readings_s.begin(), readings_s.end());
  return readings_s[(readings_s.size() - 1) / 4];
}

std::string UnreliableSummary(const ProfileSummary& summary, const std::string& accept_hint) {
  if (summary.unreliable.empty()) return "";
  const size_t n = summary.unreliable.size();
  const std::string text = std::to_string(n) + (n == 1 ? " op" : " ops") + " measured while the CPU was busy";
  return accept_hint.empty() ? text + ", stored marked unreliable"
                             : text + ": re-run when the device is idle, or " + accept_hint;
}

Result<ProfileSummary> ProfileGraph(costdb::CostDb& db, kernels::Backend& backend, const v1::TrainingGraph& graph,
                                    const std::string& fingerprint_hash, int64_t run_id, EnergyMeter* meter,
                                    const ProfileOptions& options) {
  ProfileSummary summary;
  summary.nodes = graph.nodes_size();
  // One measurement per distinct signature.
  std::map<std::string, NodeWork> distinct;
  for (int i = 0; i < graph.nodes_size(); ++i) {
    EC_ASSIGN_OR_RETURN(NodeWork work, WorkForNode(graph, i, options.threads));
    if (work.pass == Pass::kNone) {
      ++summary.without_work;
      continue;
    }
    distinct.emplace(work.signature.key(), std::move(work));
  }
  summary.distinct_ops = static_cast<int>(distinct.size());
  std::vector<const NodeWork*> todo;
  for (const auto& [key, work] : distinct) {
    if (!options.force) {
      EC_ASSIGN_OR_RETURN(std::optional<v1::OpCost> known, db.GetOpCost(fingerprint_hash, key));
      // An op stored as unreliable is measured again: the device may be quiet now.
      if (known && !known->unreliable()) {
        ++summary.reused;
        // Estimated by the power model before this device was calibrated: the model's estimate now.
        const bool estimated = known->energy_source() == v1::ENERGY_SOURCE_ESTIMATED;
        if (estimated && options.calibration && known->energy_probe() != CalibrationLabel(*options.calibration) &&
            ApplyCalibration(*options.calibration, *known)) {
          EC_RETURN_IF_ERROR(db.PutOpCost(fingerprint_hash, run_id, *known));
        }
        continue;
      }
    }
    todo.push_back(&work);
  }
  std::mt19937 shuffle(options.shuffle_seed);
  std::shuffle(todo.begin(), todo.end(), shuffle);

  std::function<std::unique_ptr<InterferenceWatch>()> make_watch = options.make_watch;
  if (!make_watch) make_watch = [] { return std::make_unique<SchedInterferenceWatch>(); };
  std::function<double(int)> cpu_check = options.cpu_check;
  if (!cpu_check && !options.make_watch) cpu_check = CpuCheckS;
  const double max_slowdown = options.measure.interference.max_cpu_slowdown;
  // By team size, the reference kernel's usual time on this device: the 25th
  // percentile of the readings stored with this fingerprint's reliable ops (as
  // they were when the profile began), or, with fewer than kMinStoredChecks of them, of
  // this profile's own. A percentile, not the fastest reading ever seen: a
  // minimum only falls, so each profile was stricter than the last (5.12, then
  // 4.20, then 4.11 us) until most ops of a quiet device were "slow". Stored,
  // not this profile's alone: a host can run a whole profile in a slow mode (a
  // neighbour guest, a power cap) that no reading within the profile reveals,
  // and a slow profile does not move the figure it is judged by.
  std::map<int, std::vector<double>> stored_checks_s, run_checks_s;
  if (cpu_check) {
    EC_ASSIGN_OR_RETURN(std::vector<v1::OpCost> stored, db.ListOpCosts(fingerprint_hash));
    for (const v1::OpCost& cost : stored) {
      // Readings of ops stored unreliable may be of a slow mode: not what is usual.
      const double check_s = cost.interference().cpu_check_s();
      if (check_s > 0 && !cost.unreliable()) stored_checks_s[static_cast<int>(cost.team_threads())].push_back(check_s);
    }
  }
  auto usual_check_s = [&](int team) {
    const std::vector<double>& stored = stored_checks_s[team];
    return UsualCheckS(stored.size() >= kMinStoredChecks ? stored : run_checks_s[team]);
  };
  auto slowdown = [&](const v1::OpCost& cost) {
    const double check_s = cost.interference().cpu_check_s();
    const double usual_s = usual_check_s(static_cast<int>(cost.team_threads()));
    return check_s > 0 && usual_s > 0 ? check_s / usual_s - 1 : 0.0;
  };
  auto slow_cpu_reason = [](const v1::OpCost& cost) {
    const double slowdown = cost.interference().cpu_slowdown(), check_s = cost.interference().cpu_check_s();
    char text[300];
    std::snprintf(text, sizeof text,
                  "the CPU ran %.2fx slower than usual on this device (a reference kernel took %s against its usual "
                  "%s): contention the OS does not see (a busy core sibling, another guest on the host's core), a "
                  "power cap or thermal throttling",
                  1 + slowdown, FormatSeconds(check_s).c_str(), FormatSeconds(check_s / (1 + slowdown)).c_str());
    return std::string(text);
  };

  // One window for one op: the cost as it would be stored.
  struct Attempt {
    v1::OpCost cost;
    bool clean = false;
    bool shared = false;
  };
  auto measure = [&](const NodeWork& work) -> Result<Attempt> {
    kernels::TeamScope team(work.team_threads);
    const int64_t resident_before = ResidentBytes();
    EC_ASSIGN_OR_RETURN(NodeRunner runner, NodeRunner::Create(backend, work));
    std::unique_ptr<InterferenceWatch> watch = make_watch();
    const double check_before_s = cpu_check ? cpu_check(work.team_threads) : 0;
    MeasureOptions measure_options = options.measure;
    // One thread: its own CPU time, which a wait for a CPU does not lengthen.
    // A team keeps wall time: its barriers wait for the slowest thread.
    measure_options.single_thread = work.team_threads == 1;
    if (work.team_threads == 1 && options.thread_cpu_time) measure_options.cpu_clock = &ThreadCpuClock();
    EC_ASSIGN_OR_RETURN(Measurement m, Measure([&runner] { runner.Run(); }, SteadyClock(), meter, measure_options,
                                               watch.get(), options.counters));
    if (cpu_check) {
      // The better of the two readings: a slowdown that lasts (the ones that
      // move an op's runtime) shows in both, one interrupt in only one.
      const double check_s = std::min(check_before_s, cpu_check(work.team_threads));
      run_checks_s[work.team_threads].push_back(check_s);
      const double usual_s = usual_check_s(work.team_threads);
      m.interference.set_cpu_check_s(check_s);
      m.interference.set_cpu_slowdown(usual_s > 0 ? check_s / usual_s - 1 : 0.0);
    }
    Attempt attempt{.clean = m.clean, .shared = m.clean && m.shared};
    v1::OpCost& cost = attempt.cost;
    *cost.mutable_signature() = work.signature;
    v1::RuntimeStats& runtime = *cost.mutable_runtime();
    runtime.set_median_s(m.runtime.median_s);
    runtime.set_stddev_s(m.runtime.stddev_s);
    runtime.set_ci95_low_s(m.runtime.ci95_low_s);
    runtime.set_ci95_high_s(m.runtime.ci95_high_s);
    runtime.set_repetitions(m.runtime.repetitions);
    runtime.set_clock(m.cpu_time ? kThreadCpuClock : kWallClock);
    runtime.set_wall_s(m.wall.median_s);
    cost.set_window_start_unix_s(m.window_start_unix_s);
    for (const Repetition& r : m.repetitions) {
      v1::Repetition* kept = cost.add_repetitions();
      kept->set_start_s(r.start_s);
      kept->set_runtime_s(r.runtime_s);
      kept->set_disturbed(r.disturbed);
    }
    if (meter) {
      cost.set_energy_j(m.energy_j);
      cost.set_dynamic_energy_j(m.dynamic_energy_j);
      cost.set_idle_power_w(meter->IdlePowerW());
      cost.set_energy_source(meter->Source());
      cost.set_energy_probe(meter->Name());
      for (v1::DomainEnergy& d : m.domains) *cost.add_domains() = std::move(d);
      if (!m.energy_precise) ++summary.imprecise_energy;
    }
    uint64_t output_elements = 1;
    for (int64_t d : work.signature.output_shape().dims()) output_elements *= static_cast<uint64_t>(d);
    cost.set_output_bytes(output_elements * sizeof(float));
    cost.set_workspace_bytes(runner.scratchpad_bytes() + runner.workspace_bytes());
    cost.set_rss_growth_bytes(ResidentBytes() - resident_before);
    *cost.mutable_interference() = m.interference;
    cost.set_team_threads(static_cast<uint32_t>(work.team_threads));
    if (options.counters) {
      for (const probes::UncountedEvent& u : options.counters->Uncounted()) {
        v1::UncountedEvent& event = *cost.add_uncounted();
        event.set_event(u.event);
        event.set_reason(u.reason);
        event.set_fix(u.fix);
      }
      for (v1::UncountedEvent& u : m.uncounted) *cost.add_uncounted() = std::move(u);
      for (v1::OpCounter& c : m.counters) *cost.add_counters() = std::move(c);
    }
    if (meter && meter->Source() == v1::ENERGY_SOURCE_ESTIMATED && options.calibration) {
      ApplyCalibration(*options.calibration, cost);
    }
    if (m.clean && m.interference.cpu_slowdown() > max_slowdown) {
      attempt.clean = attempt.shared = false;
      cost.set_unreliable(true);
      cost.set_unreliable_reason(slow_cpu_reason(cost));
    } else if (!m.clean) {
      cost.set_unreliable(true);
      cost.set_unreliable_reason(m.disturbance);
    } else if (attempt.shared) {
      char text[160];
      std::snprintf(text, sizeof text,
                    "other tasks used %.2f CPUs meanwhile (caches and memory are shared) and no second window "
                    "confirmed it",
                    m.interference.other_cpu_cores());
      cost.set_unreliable(true);  // until a second window agrees
      cost.set_unreliable_reason(text);
    }
    return attempt;
  };

  // An op not yet measured cleanly: what is stored for it, marked unreliable.
  struct Pending {
    const NodeWork* work;
    v1::OpCost best;                 // the least disturbed attempt so far, as stored
    std::vector<v1::OpCost> shared;  // clean windows taken while others used the CPUs
    uint32_t attempts = 0;
  };
  const double tolerance = options.measure.interference.confirm_tolerance;
  // Takes one attempt into account; true when the op is settled (stored clean).
  auto settle = [&](Pending& p, Attempt attempt) -> Result<bool> {
    ++p.attempts;
    bool settled = false;
    if (attempt.clean && !attempt.shared) {
      p.best = std::move(attempt.cost);
      settled = true;
    } else if (attempt.shared) {
      // Two windows at different times that agree: the load did not move the figure.
      const double median = attempt.cost.runtime().median_s();
      for (const v1::OpCost& other : p.shared) {
        const double low = std::min(median, other.runtime().median_s());
        if (low > 0 && std::fabs(median - other.runtime().median_s()) <= tolerance * low) {
          p.best = median <= other.runtime().median_s() ? attempt.cost : other;
          p.best.set_unreliable(false);
          p.best.clear_unreliable_reason();
          settled = true;
          break;
        }
      }
      if (!settled) {
        p.shared.push_back(attempt.cost);
        p.best = std::move(attempt.cost);
        if (p.shared.size() > 1) {
          double low = p.shared.front().runtime().median_s(), high = low;
          for (const v1::OpCost& c : p.shared) {
            low = std::min(low, c.runtime().median_s());
            high = std::max(high, c.runtime().median_s());
          }
          char text[200];
          std::snprintf(text, sizeof text,
                        "%zu windows disagreed by up to %.0f%% while other tasks used %.2f CPUs (caches and memory "
                        "are shared)",
                        p.shared.size(), low > 0 ? 100 * (high - low) / low : 0.0,
                        p.best.interference().other_cpu_cores());
          p.best.set_unreliable_reason(text);
        }
      }
    } else if (p.best.signature().key().empty() || (p.shared.empty() && DisturbanceScore(attempt.cost.interference()) <
                                                                            DisturbanceScore(p.best.interference()))) {
      p.best = std::move(attempt.cost);
    }
    p.best.set_attempts(p.attempts);
    EC_RETURN_IF_ERROR(db.PutOpCost(fingerprint_hash, run_id, p.best));  // committed now: nothing lost on a crash
    return settled;
  };

  std::vector<Pending> pending, settled_ops;
  Clock& clock = SteadyClock();
  const double start_s = clock.NowS();
  for (size_t i = 0; i < todo.size(); ++i) {
    if (options.stop && options.stop->load()) {
      summary.interrupted = true;
      break;
    }
    const NodeWork& work = *todo[i];
    EC_ASSIGN_OR_RETURN(Attempt attempt, measure(work));
    Pending p{.work = &work};
    EC_ASSIGN_OR_RETURN(bool settled, settle(p, std::move(attempt)));
    (settled ? settled_ops : pending).push_back(std::move(p));
    ++summary.measured;
    if (options.on_progress) {
      const double elapsed = clock.NowS() - start_s;
      const double per_op = elapsed / static_cast<double>(i + 1);
      options.on_progress({static_cast<int>(i + 1), static_cast<int>(todo.size()), work.signature.key(), elapsed,
                           per_op * static_cast<double>(todo.size() - i - 1)});
    }
  }

  // An op settled before the profile had its usual reading (no stored one, few
  // of its own yet) may have been measured slow: judged again against it.
  for (Pending& p : settled_ops) {
    if (slowdown(p.best) <= max_slowdown) continue;
    p.best.mutable_interference()->set_cpu_slowdown(slowdown(p.best));
    p.best.set_unreliable(true);
    p.best.set_unreliable_reason(slow_cpu_reason(p.best));
    EC_RETURN_IF_ERROR(db.PutOpCost(fingerprint_hash, run_id, p.best));
    pending.push_back(std::move(p));
  }

  // Unsettled ops again, interleaved: each round in a new order, within the budget.
  const double first_pass_s = clock.NowS() - start_s;
  const double budget_s = options.retry_budget_s > 0 ? options.retry_budget_s : std::max(2.0, 2 * first_pass_s);
  const double retry_start_s = clock.NowS();
  for (int round = 1; round < options.max_attempts && !pending.empty() && !summary.interrupted; ++round) {
    if (clock.NowS() - retry_start_s >= budget_s) break;
    if (options.retry_pause_s > 0) std::this_thread::sleep_for(std::chrono::duration<double>(options.retry_pause_s));
    std::shuffle(pending.begin(), pending.end(), shuffle);
    const double round_start_s = clock.NowS();
    std::vector<Pending> still;
    for (size_t k = 0; k < pending.size(); ++k) {
      const bool stopped = options.stop && options.stop->load();
      if (stopped || clock.NowS() - retry_start_s >= budget_s) {
        summary.interrupted = stopped;
        still.insert(still.end(), std::make_move_iterator(pending.begin() + static_cast<ptrdiff_t>(k)),
                     std::make_move_iterator(pending.end()));
        break;
      }
      const std::string key = pending[k].work->signature.key();
      EC_ASSIGN_OR_RETURN(Attempt attempt, measure(*pending[k].work));
      ++summary.remeasured;
      EC_ASSIGN_OR_RETURN(bool settled, settle(pending[k], std::move(attempt)));
      if (!settled) still.push_back(std::move(pending[k]));
      if (options.on_progress) {  // the rounds after the first pass can take as long as it did: shown too
        const double now_s = clock.NowS();
        const double per_op = (now_s - round_start_s) / static_cast<double>(k + 1);
        const double left_s = std::max(0.0, budget_s - (now_s - retry_start_s));
        options.on_progress({static_cast<int>(k + 1), static_cast<int>(pending.size()), key, now_s - start_s,
                             std::min(left_s, per_op * static_cast<double>(pending.size() - k - 1)), round,
                             options.max_attempts - 1});
      }
    }
    pending = std::move(still);
  }
  for (const Pending& p : pending) summary.unreliable.push_back({p.work->signature.key(), p.best.unreliable_reason()});
  summary.elapsed_s = clock.NowS() - start_s;
  return summary;
}

Result<v1::CostTable> MeasuredCostTable(costdb::CostDb& db, const v1::TrainingGraph& graph, const std::string& device,
                                        const std::string& fingerprint_hash, int threads) {
  v1::CostTable table;
  *table.mutable_graph() = graph;
  table.set_device(device);
  table.set_fingerprint_hash(fingerprint_hash);
  table.set_cost_source(kMeasuredSource);
  table.set_threads(static_cast<uint32_t>(threads));
  EC_ASSIGN_OR_RETURN(std::optional<v1::PagingCost> paging, db.GetPagingCost(fingerprint_hash));
  if (!paging) {
    return NotFound("no paging costs for fingerprint " + fingerprint_hash + "; run `edgecost profile` on the device");
  }
  *table.mutable_paging() = *paging;
  std::string sources;
  v1::EnergySource weakest = v1::ENERGY_SOURCE_UNSPECIFIED;
  for (int i = 0; i < graph.nodes_size(); ++i) {
    const v1::TrainingNode& node = graph.nodes(i);
    EC_ASSIGN_OR_RETURN(NodeWork work, WorkForNode(graph, i, threads));
    v1::NodeCost& cost = *table.add_costs();
    cost.set_node(static_cast<uint32_t>(i));
    cost.set_ram_bytes(node.output_bytes());
    const double bytes = static_cast<double>(node.output_bytes());
    cost.set_page_in_j((paging->page_in_latency_s() + bytes / paging->page_in_throughput_bytes_per_s()) *
                       paging->page_in_power_w());
    cost.set_page_out_j((paging->page_out_latency_s() + bytes / paging->page_out_throughput_bytes_per_s()) *
                        paging->page_out_power_w());
    if (work.pass == Pass::kNone) continue;
    cost.set_op_key(work.signature.key());
    EC_ASSIGN_OR_RETURN(std::optional<v1::OpCost> op, db.GetOpCost(fingerprint_hash, work.signature.key()));
    if (!op) {
      return NotFound("node " + std::to_string(i) + " ('" + node.name() + "', op " + work.signature.key() +
                      ") has not been measured on this device; run " + ProfileCommand(graph, graph.model(), threads));
    }
    cost.set_runtime_s(op->runtime().median_s());
    cost.set_compute_j(op->energy_j());
    weakest = std::max(weakest, op->energy_source());  // the enum orders sources from measured to estimated
    AnnotateNodeCost(*op, cost);
    AddUncounted(*op, table);
    if (sources.find(op->energy_probe()) == std::string::npos) {
      sources += (sources.empty() ? "" : ", ") + op->energy_probe() +
                 (op->energy_source() == v1::ENERGY_SOURCE_ESTIMATED ? " (ESTIMATED)" : "");
    }
  }
  table.set_note("measured with oneDNN on this device; energy from " + (sources.empty() ? "no source" : sources));
  table.set_energy_source(weakest);
  return table;
}

std::unique_ptr<probes::CounterSource> OpenTeamCounters(int threads) {
  std::vector<pid_t> tids;
  {
    // Every thread of the team, as oneDNN's parallel regions will use it.
    kernels::TeamScope team(threads);
    std::mutex mutex;
#pragma omp parallel
    {
      const pid_t tid = probes::ThisThreadId();
      std::lock_guard<std::mutex> lock(mutex);
      if (std::find(tids.begin(), tids.end(), tid) == tids.end()) tids.push_back(tid);
    }
  }
  const pid_t self = probes::ThisThreadId();
  if (std::find(tids.begin(), tids.end(), self) == tids.end()) tids.insert(tids.begin(), self);
  std::vector<std::string> events = probes::HardwareCounterEvents();
  for (const std::string& e : probes::SoftwareCounterEvents()) events.push_back(e);
  return probes::PerfCounterGroups::Open(events, tids);
}

std::string ProfileCommand(const v1::TrainingGraph& graph, const std::string& model_or_file, int threads) {
  std::string command = "`edgecost profile --model " + model_or_file + " --derivation " + graph.derivation();
  if (graph.batch_size() != 1) command += " --batch-size " + std::to_string(graph.batch_size());
  if (graph.trainable() != "all") command += " --trainable " + graph.trainable();
  if (threads > 0) command += " --threads " + std::to_string(threads);
  return command + "`";
}

std::string ThreadsText(uint32_t threads) {
  if (threads == 0) return "unknown threads";
  return std::to_string(threads) + (threads == 1 ? " thread" : " threads");
}

Result<uint32_t> ChooseTableThreads(costdb::CostDb& db, const costdb::CostTableKey& key, int asked_threads,
                                    bool this_device, const std::function<std::string(int)>& command,
                                    std::string* stated) {
  EC_ASSIGN_OR_RETURN(const std::vector<uint32_t> stored, db.CostTableThreads(key));
  std::string counts;
  for (uint32_t t : stored) counts += (counts.empty() ? "" : ", ") + ThreadsText(t);
  uint32_t threads = static_cast<uint32_t>(std::max(0, asked_threads));
  std::string why;
  if (threads == 0 && this_device) {
    threads = static_cast<uint32_t>(omp_get_num_procs());
    why = " (all cores of this device)";
  } else if (threads == 0 && !stored.empty()) {
    threads = stored.back();  // ascending: the most
    if (stored.size() > 1) {
      *stated = "measured at " + ThreadsText(threads) + ", the most of the tables stored (" + counts +
                "); ask for another thread count to use its table";
    }
    return threads;
  }
  if (stored.empty() || std::find(stored.begin(), stored.end(), threads) != stored.end()) return threads;
  return FailedPrecondition("no " + key.cost_source + " cost table of " + key.model + " at " + ThreadsText(threads) +
                            why + " on " + key.device + "; it has tables at " + counts + ": run " +
                            command(static_cast<int>(threads)) + " there, or ask for a thread count it has");
}

std::string ThisDeviceName() {
  char name[256] = {};
  return ::gethostname(name, sizeof name - 1) == 0 && name[0] ? name : "this-device";
}

Result<v1::CostTable> LoadMeasuredCostTable(costdb::CostDb& db, const graph::GraphSpec& spec, std::string device,
                                            int threads) {
  const bool this_device = device == "this" || device == ThisDeviceName();
  if (device == "this") device = ThisDeviceName();
  if (graph::CarriesCosts(spec)) {
    return InvalidArgument("measured costs exist for models; " + spec.model_or_file + " carries its own costs");
  }
  EC_ASSIGN_OR_RETURN(v1::TrainingGraph graph, graph::LoadTrainingGraph(spec));
  if (Result<v1::Device> known = db.GetDevice(device); known.status().code() == ErrorCode::kNotFound) {
    EC_ASSIGN_OR_RETURN(std::vector<v1::Device> devices, db.ListDevices());
    std::string names;
    for (const v1::Device& d : devices) {
      if (d.kind() == v1::Device::KIND_MEASURED) names += (names.empty() ? "" : ", ") + d.name();
    }
    return NotFound("no device '" + device + "' in " + db.path() + "; measured devices: " +
                    (names.empty() ? "none yet (run `edgecost profile` on the device)" : names) +
                    "; board presets take --platform");
  }
  costdb::CostTableKey key{graph.model(),      device,           kMeasuredSource, graph.batch_size(),
                           graph.derivation(), graph.trainable()};
  std::string stated;
  EC_ASSIGN_OR_RETURN(key.threads, ChooseTableThreads(
                                       db, key, threads, this_device,
                                       [&](int t) { return ProfileCommand(graph, spec.model_or_file, t); }, &stated));
  Result<v1::CostTable> table = db.GetCostTable(key);
  if (table.status().code() == ErrorCode::kNotFound) {
    return NotFound("no measured costs for " + graph.model() + " (derivation " + graph.derivation() + ", trainable " +
                    graph.trainable() + ", batch size " + std::to_string(graph.batch_size()) + ") on device " + device +
                    "; run " + ProfileCommand(graph, spec.model_or_file, threads) + " there");
  }
  if (!table.ok()) return table;
  if (!stated.empty()) table->set_note(table->note() + "; " + stated);
  // The stored table keeps medians; spread, interval, reliability and the energy's source are the op costs'.
  std::map<std::string, std::optional<v1::OpCost>> ops;
  v1::EnergySource weakest = v1::ENERGY_SOURCE_UNSPECIFIED;
  for (v1::NodeCost& cost : *table->mutable_costs()) {
    if (cost.op_key().empty()) continue;
    auto it = ops.find(cost.op_key());
    if (it == ops.end()) {
      EC_ASSIGN_OR_RETURN(std::optional<v1::OpCost> op, db.GetOpCost(table->fingerprint_hash(), cost.op_key()));
      it = ops.emplace(cost.op_key(), std::move(op)).first;
    }
    if (!it->second) continue;
    AnnotateNodeCost(*it->second, cost);
    AddUncounted(*it->second, *table);
    weakest = std::max(weakest, it->second->energy_source());
  }
  table->set_energy_source(weakest);
  return table;
}

}  // namespace edgecost::profiler
