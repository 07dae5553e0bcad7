// Cost sources turn a training graph into per-node costs on one device. The
// analytic poet-flops source lives here; the profiler's measured source plugs
// into the same interface.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "proto/edgecost.pb.h"

namespace edgecost::graph {

class CostSource {
 public:
  virtual ~CostSource() = default;
  virtual std::string Name() const = 0;
  // Per-node costs of `graph`, in node order, with the device and paging costs filled in.
  virtual Result<v1::CostTable> CostTableFor(const v1::TrainingGraph& graph) const = 0;
};

// POET's board constants (poet/chipsets.py). A preset without compute constants
// (jetsontx2) has only paging costs.
struct BoardPreset {
  std::string_view name;
  std::string_view description;
  std::optional<double> flops_per_s;
  std::optional<double> flops_per_j;
  double page_in_latency_s;
  double page_in_bytes_per_s;
  double page_out_latency_s;
  double page_out_bytes_per_s;
  double memory_power_w;  // power while paging
};

const std::vector<BoardPreset>& BoardPresets();
Result<BoardPreset> FindBoardPreset(std::string_view name);

// POET's FLOP-based model: runtime = FLOPs / FLOPS, energy = FLOPs / (FLOP per joule),
// paging energy = (latency + bytes / throughput) x memory power.
Result<std::unique_ptr<CostSource>> MakePoetFlopsSource(std::string_view platform);

inline constexpr std::string_view kPoetFlopsSource = "poet-flops";

}  // namespace edgecost::graph
