#include "profiler/profile.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <map>
#include <random>

#include "profiler/node_work.h"

namespace edgecost::profiler {
namespace {

int64_t ResidentBytes() {
  std::ifstream statm("/proc/self/statm");
  int64_t pages = 0, resident = 0;
  statm >> pages >> resident;
  return resident * ::sysconf(_SC_PAGESIZE);
}

}  // namespace

Result<ProfileSummary> ProfileGraph(costdb::CostDb& db, Backend& backend, const v1::TrainingGraph& graph,
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
      if (known) {
        ++summary.reused;
        continue;
      }
    }
    todo.push_back(&work);
  }
  std::shuffle(todo.begin(), todo.end(), std::mt19937(options.shuffle_seed));

  Clock& clock = SteadyClock();
  const double start_s = clock.NowS();
  for (size_t i = 0; i < todo.size(); ++i) {
    if (options.stop && options.stop->load()) {
      summary.interrupted = true;
      break;
    }
    const NodeWork& work = *todo[i];
    const int64_t resident_before = ResidentBytes();
    EC_ASSIGN_OR_RETURN(NodeRunner runner, NodeRunner::Create(backend, work));
    // Wall time of the window's start, for traces: now, plus the measuring clock's time until then.
    const double unix_before_s =
        std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    const double clock_before_s = clock.NowS();
    EC_ASSIGN_OR_RETURN(Measurement m, Measure([&runner] { runner.Run(); }, clock, meter, options.measure));
    v1::OpCost cost;
    *cost.mutable_signature() = work.signature;
    v1::RuntimeStats& runtime = *cost.mutable_runtime();
    runtime.set_median_s(m.runtime.median_s);
    runtime.set_stddev_s(m.runtime.stddev_s);
    runtime.set_ci95_low_s(m.runtime.ci95_low_s);
    runtime.set_ci95_high_s(m.runtime.ci95_high_s);
    runtime.set_repetitions(m.runtime.repetitions);
    cost.set_window_start_unix_s(unix_before_s + (m.window_start_s - clock_before_s));
    for (const Repetition& r : m.repetitions) {
      v1::Repetition* kept = cost.add_repetitions();
      kept->set_start_s(r.start_s);
      kept->set_runtime_s(r.runtime_s);
    }
    if (meter) {
      cost.set_energy_j(m.energy_j);
      cost.set_dynamic_energy_j(m.dynamic_energy_j);
      cost.set_idle_power_w(meter->IdlePowerW());
      cost.set_energy_source(meter->Source());
      cost.set_energy_probe(meter->Name());
      if (!m.energy_precise) ++summary.imprecise_energy;
    }
    uint64_t output_elements = 1;
    for (int64_t d : work.signature.output_shape().dims()) output_elements *= static_cast<uint64_t>(d);
    cost.set_output_bytes(output_elements * sizeof(float));
    cost.set_workspace_bytes(runner.scratchpad_bytes() + runner.workspace_bytes());
    cost.set_rss_growth_bytes(ResidentBytes() - resident_before);
    EC_RETURN_IF_ERROR(db.PutOpCost(fingerprint_hash, run_id, cost));  // committed now: nothing lost on a crash
    ++summary.measured;
    if (options.on_progress) {
      const double elapsed = clock.NowS() - start_s;
      const double per_op = elapsed / static_cast<double>(i + 1);
      options.on_progress({static_cast<int>(i + 1), static_cast<int>(todo.size()), work.signature.key(), elapsed,
                           per_op * static_cast<double>(todo.size() - i - 1)});
    }
  }
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
  EC_ASSIGN_OR_RETURN(std::optional<v1::PagingCost> paging, db.GetPagingCost(fingerprint_hash));
  if (!paging) {
    return NotFound("no paging costs for fingerprint " + fingerprint_hash + "; run `edgecost profile` on the device");
  }
  *table.mutable_paging() = *paging;
  std::string sources;
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
                      ") has not been measured on this device; run `edgecost profile --model " + graph.model() + "`");
    }
    cost.set_runtime_s(op->runtime().median_s());
    cost.set_compute_j(op->energy_j());
    if (sources.find(op->energy_probe()) == std::string::npos) {
      sources +=
          (sources.empty() ? "" : ", ") + op->energy_probe() + " (" + v1::EnergySource_Name(op->energy_source()) + ")";
    }
  }
  table.set_note("measured with oneDNN on this device; energy from " + (sources.empty() ? "no source" : sources));
  return table;
}

std::string ThisDeviceName() {
  char name[256] = {};
  return ::gethostname(name, sizeof name - 1) == 0 && name[0] ? name : "this-device";
}

Result<v1::CostTable> LoadMeasuredCostTable(costdb::CostDb& db, const graph::GraphSpec& spec, std::string device) {
  if (device == "this") device = ThisDeviceName();
  if (graph::IsGraphFile(spec.model_or_file)) {
    return InvalidArgument("measured costs exist for models; " + spec.model_or_file + " carries its own costs");
  }
  EC_ASSIGN_OR_RETURN(v1::TrainingGraph graph, graph::LoadTrainingGraph(spec));
  Result<v1::CostTable> table = db.GetCostTable(
      {graph.model(), device, kMeasuredSource, graph.batch_size(), graph.derivation(), graph.trainable()});
  if (table.status().code() == ErrorCode::kNotFound) {
    return NotFound("no measured costs for " + graph.model() + " (derivation " + graph.derivation() + ", trainable " +
                    graph.trainable() + ", batch size " + std::to_string(graph.batch_size()) + ") on device " + device +
                    "; run `edgecost profile --model " + spec.model_or_file + "` there");
  }
  return table;
}

}  // namespace edgecost::profiler
