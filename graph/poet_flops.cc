#include <cmath>

#include "graph/cost_source.h"

namespace edgecost::graph {
namespace {

// Written exactly as poet/chipsets.py writes them, so that doubles round the same way.
const std::vector<BoardPreset> kPresets = {
    {"m0", "Cortex-M0 (Arduino MKR1000), SD card", 2000 / 0.012, 2000 / (0.012 * 0.020 * 3.3), 0.109 * 1e-3,
     4616.51 * 1e3, 0.113 * 1e-3, 4440 * 1e3, 100 * 1e-3 * 3.3},
    {"m4", "Cortex-M4F (nRF52840), SD card", (16283 * 100 * 1000) / (255.6237),
     (16283 * 100 * 1000) / (255.6237 * 0.003328 * 3.3), 0.109 * 1e-3, 4616.51 * 1e3, 0.113 * 1e-3, 4440 * 1e3,
     100 * 1e-3 * 3.3},
    {"a72", "Cortex-A72 (Raspberry Pi 4), SD card with write caching", (2.0 * 1000 * 1000 * 1000),
     (16283 * 100 * 1000) / (13.53 * 0.6 * 5), 0.00509561 * 1e-3, 45.5 * 1e6, 0.0185314 * 1e-3, 24.5 * 1e6,
     30 * 1e-3 * 5},
    {"a72nocache", "Cortex-A72 (Raspberry Pi 4), SD card without write caching", (16283 * 100 * 1000) / (13.53),
     (16283 * 100 * 1000) / (13.53 * 0.6 * 5), 0.00509561 * 1e-3, 45.5 * 1e6, 4.23532 * 1e-3, 17.1 * 1e6,
     30 * 1e-3 * 5},
    {"jetsontx2", "NVIDIA Jetson TX2 (paging constants only)", std::nullopt, std::nullopt, 0.00054, 108.5 * 1e6,
     0.002396, 94.37 * 1e6, 309 * 1e-3},
};

class PoetFlopsSource : public CostSource {
 public:
  explicit PoetFlopsSource(BoardPreset preset) : preset_(preset) {}

  std::string Name() const override { return std::string(kPoetFlopsSource); }

  Result<v1::CostTable> CostTableFor(const v1::TrainingGraph& graph) const override {
    if (!preset_.flops_per_s || !preset_.flops_per_j) {
      return FailedPrecondition("board preset '" + std::string(preset_.name) +
                                "' has paging constants only in POET; its compute costs need measuring "
                                "(edgecost profile on the device)");
    }
    v1::CostTable table;
    *table.mutable_graph() = graph;
    table.set_device(std::string(preset_.name));
    table.set_fingerprint_hash("preset:" + std::string(preset_.name));
    table.set_cost_source(Name());
    table.set_note("analytic: POET's FLOP counts and board constants; no measurement");
    table.set_energy_source(v1::ENERGY_SOURCE_ESTIMATED);
    v1::PagingCost& paging = *table.mutable_paging();
    paging.set_storage_path("preset");
    paging.set_page_in_latency_s(preset_.page_in_latency_s);
    paging.set_page_in_throughput_bytes_per_s(preset_.page_in_bytes_per_s);
    paging.set_page_out_latency_s(preset_.page_out_latency_s);
    paging.set_page_out_throughput_bytes_per_s(preset_.page_out_bytes_per_s);
    paging.set_page_in_power_w(preset_.memory_power_w);
    paging.set_page_out_power_w(preset_.memory_power_w);
    paging.set_energy_source(v1::ENERGY_SOURCE_ESTIMATED);
    for (const v1::TrainingNode& node : graph.nodes()) {
      const double bytes = static_cast<double>(node.output_bytes());
      v1::NodeCost& cost = *table.add_costs();
      cost.set_node(node.index());
      cost.set_runtime_s(node.flops() / *preset_.flops_per_s);
      cost.set_compute_j(node.flops() / *preset_.flops_per_j);
      cost.set_ram_bytes(node.output_bytes());
      cost.set_page_in_j((preset_.page_in_latency_s + bytes / preset_.page_in_bytes_per_s) * preset_.memory_power_w);
      cost.set_page_out_j((preset_.page_out_latency_s + bytes / preset_.page_out_bytes_per_s) * preset_.memory_power_w);
    }
    return table;
  }

 private:
  BoardPreset preset_;
};

}  // namespace

const std::vector<BoardPreset>& BoardPresets() { return kPresets; }

Result<BoardPreset> FindBoardPreset(std::string_view name) {
  std::string names;
  for (const BoardPreset& preset : kPresets) {
    if (preset.name == name) return preset;
    names += (names.empty() ? "" : ", ") + std::string(preset.name);
  }
  return NotFound("no board preset '" + std::string(name) + "'; choose one of " + names);
}

Result<std::unique_ptr<CostSource>> MakePoetFlopsSource(std::string_view platform) {
  EC_ASSIGN_OR_RETURN(BoardPreset preset, FindBoardPreset(platform));
  return std::unique_ptr<CostSource>(std::make_unique<PoetFlopsSource>(preset));
}

}  // namespace edgecost::graph
